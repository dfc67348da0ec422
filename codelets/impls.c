/* What the codelets with several CPU implementations share: the convolutions' three passes have
 * oneDNN's primitives (cpu_funcs[TSR_IMPL_ONEDNN]) and the input lowered to BLIS GEMMs
 * (cpu_funcs[TSR_IMPL_BLIS]); the tile GEMMs (gemm.c, gemm_ep.c) oneDNN's dnnl_sgemm and BLIS.
 * StarPU keeps a history per implementation in the codelet's performance model, so its model-based
 * policies (dmda, dmdas) choose between them task by task, shape by shape; the others run the first
 * one a worker can. can_execute is where the choice is narrowed: to what this build has, to what
 * the task's options force (--kernels), and under --kernels tuned to the implementation the shape's
 * table gives the task (timing both on its first tasks, then the faster: codelets/tuned.c), read
 * from and kept in the task's argument struct, which starts with tsr_impl_choice_t. The names go to
 * the runtime's observer, so that statistics and traces say which one ran. */
#include <time.h>

#include "codelets.h"
#include "tuned.h"
#include "tessera/runtime.h"

tsr_impl_choice_t tsr__impl_choice(const tsr_task_opts_t *o, const void *shape, size_t size) {
  bool tuned = o->kernels == TSR_KERNELS_TUNED && tsr__k_dnnl_built();
  return (tsr_impl_choice_t){o->kernels, 0, tuned ? tsr__tuned_key(shape, size) : 0};
}

/* The implementation the table gives task, once: the first caller asks, the others read it. */
static int tuned_pick(struct starpu_task *task) {
  tsr_impl_choice_t *c = task->cl_arg;
  int pick = __atomic_load_n(&c->pick, __ATOMIC_ACQUIRE);
  if (pick) return pick - 1;
  int want = 1 + tsr__tuned_pick(c->key), none = 0;
  if (__atomic_compare_exchange_n(&c->pick, &none, want, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return want - 1;
  return none - 1; /* another worker asked first */
}

int tsr__cl_impl_can_execute(unsigned workerid, struct starpu_task *task, unsigned nimpl) {
  if (starpu_worker_get_type((int)workerid) != STARPU_CPU_WORKER) return 1;
  const tsr_impl_choice_t *c = task->cl_arg;
  int kernels = c ? c->kernels : TSR_KERNELS_AUTO;
  if (c && c->key) return (int)nimpl == tuned_pick(task);
  if (nimpl == TSR_IMPL_ONEDNN) return tsr__k_dnnl_built() && kernels != TSR_KERNELS_BLIS;
  if (nimpl == TSR_IMPL_BLIS) return kernels != TSR_KERNELS_ONEDNN || !tsr__k_dnnl_built();
  return 0;
}

void tsr__impl_run(void *buffers[], void *cl_arg, int impl, void (*fn)(void *[], void *)) {
  const tsr_impl_choice_t *c = cl_arg;
  if (!c->key) {
    fn(buffers, cl_arg);
    return;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  fn(buffers, cl_arg);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  tsr__tuned_record(c->key, impl,
                    (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
}

static const struct starpu_codelet *const with_impls[] = {
    &tsr_cl_conv_fwd,        &tsr_cl_conv_fwd_wb,       &tsr_cl_conv_fwd_st,
    &tsr_cl_conv_fwd_wb_st,  &tsr_cl_conv_bwd_data,     &tsr_cl_conv_bwd_data_wb,
    &tsr_cl_conv_bwd_filter, &tsr_cl_conv_bwd_filter_w, &tsr_cl_gemm,
    &tsr_cl_gemm_w,          &tsr_cl_gemm_ep,           &tsr_cl_gemm_ep_w,
    &tsr_cl_gemm_dbias,      &tsr_cl_gemm_dbias_w,      &tsr_cl_gemm_sgd};

/* "onednn" or "blis" for the codelets above, NULL for every other (one implementation). */
static const char *impl_name(const void *cl, unsigned nimpl) {
  for (size_t i = 0; i < sizeof with_impls / sizeof *with_impls; i++)
    if (cl == with_impls[i]) return nimpl == TSR_IMPL_ONEDNN ? "onednn" : "blis";
  return NULL;
}

uint32_t tsr__cl_footprint(struct starpu_task *task, const void *key, size_t size) {
  return starpu_hash_crc32c_be_n(key, size, starpu_task_data_footprint(task));
}

__attribute__((constructor)) static void register_names(void) {
  tsr__runtime_impl_names(impl_name);
}
