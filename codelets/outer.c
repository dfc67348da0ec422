/* Outer optimizers of weight averaging (tessera/dist.h, tsr_outer_t): one
 * step on a chunk of the anchor with its momentum, from the mean of the
 * replicas; and the asynchronous variant, a rank's fold as an outer step on
 * the global copy. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct outer_args {
  bool nesterov;
  float lr, momentum, gamma;
  float scale; /* fold: 1 / P, each rank's share of the pseudo-gradient */
};

/* buffers: x RW (the anchor), u RW, mean R; d = x - mean */
static void outer_cpu(void *buffers[], void *cl_arg) {
  const struct outer_args *a = cl_arg;
  float *x = TSR_PTR(buffers[0]);
  tsr__k_outer(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), x, TSR_LD(buffers[0]),
               TSR_PTR(buffers[1]), TSR_LD(buffers[1]), x, TSR_LD(buffers[0]), TSR_PTR(buffers[2]),
               TSR_LD(buffers[2]), 1.0f, a->nesterov, a->lr, a->momentum, a->gamma);
}

/* buffers: global RW (COMMUTE), u RW (COMMUTE), snap RW, w R; d = (snap - w) / P, then snap =
 * global: the rank's next start. */
static void outer_fold_cpu(void *buffers[], void *cl_arg) {
  const struct outer_args *a = cl_arg;
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]);
  tsr__k_outer(m, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
               TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]), TSR_PTR(buffers[3]),
               TSR_LD(buffers[3]), a->scale, a->nesterov, a->lr, a->momentum, a->gamma);
  tsr__k_copy(m, n, TSR_PTR(buffers[2]), TSR_LD(buffers[2]), TSR_PTR(buffers[0]),
              TSR_LD(buffers[0]));
}

#ifdef TSR_HAVE_OPENCL
/* tsr__k_outer on buffers x, u, a, b (indexes into buffers). */
static void outer_run(void *buffers[], const struct outer_args *o, int xi, int ui, int ai, int bi,
                      float scale) {
  int m = TSR_ROWS(buffers[xi]), n = TSR_COLS(buffers[xi]), nesterov = o->nesterov;
  int ldx = TSR_LD(buffers[xi]), xo = TSR_CL_OFF(buffers[xi]);
  int ldu = TSR_LD(buffers[ui]), uo = TSR_CL_OFF(buffers[ui]);
  int lda = TSR_LD(buffers[ai]), ao = TSR_CL_OFF(buffers[ai]);
  int ldb = TSR_LD(buffers[bi]), bo = TSR_CL_OFF(buffers[bi]);
  cl_mem x = TSR_CL_MEM(buffers[xi]), u = TSR_CL_MEM(buffers[ui]);
  cl_mem a = TSR_CL_MEM(buffers[ai]), b = TSR_CL_MEM(buffers[bi]);
  float lr = o->lr, momentum = o->momentum, gamma = o->gamma;
  tsr__cl_run2d(TSR_CLK_OUTER, m, n, 19,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(x), TSR_CL_ARG(xo),
                                 TSR_CL_ARG(ldx), TSR_CL_ARG(u), TSR_CL_ARG(uo), TSR_CL_ARG(ldu),
                                 TSR_CL_ARG(a), TSR_CL_ARG(ao), TSR_CL_ARG(lda), TSR_CL_ARG(b),
                                 TSR_CL_ARG(bo), TSR_CL_ARG(ldb), TSR_CL_ARG(scale),
                                 TSR_CL_ARG(nesterov), TSR_CL_ARG(lr), TSR_CL_ARG(momentum),
                                 TSR_CL_ARG(gamma)});
}

static void outer_opencl(void *buffers[], void *cl_arg) {
  outer_run(buffers, cl_arg, 0, 1, 0, 2, 1.0f);
}

static void outer_fold_opencl(void *buffers[], void *cl_arg) {
  const struct outer_args *a = cl_arg;
  outer_run(buffers, a, 0, 1, 2, 3, a->scale);
  tsr__cl_copy(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_CL_MEM(buffers[2]),
               TSR_CL_OFF(buffers[2]), TSR_LD(buffers[2]), TSR_CL_MEM(buffers[0]),
               TSR_CL_OFF(buffers[0]), TSR_LD(buffers[0]));
}
#endif

static struct starpu_perfmodel outer_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_outer_f32",
};

static struct starpu_perfmodel outer_fold_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_outer_fold_f32",
};

struct starpu_codelet tsr_cl_outer = {
    .name = "outer",
    .cpu_funcs = {outer_cpu},
    .cpu_funcs_name = {"outer_cpu"},
    TSR_OPENCL_FUNC(outer_opencl),
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_RW, STARPU_R},
    .model = &outer_model,
};

struct starpu_codelet tsr_cl_outer_fold = {
    .name = "outer_fold",
    .cpu_funcs = {outer_fold_cpu},
    .cpu_funcs_name = {"outer_fold_cpu"},
    TSR_OPENCL_FUNC(outer_fold_opencl),
    .nbuffers = 4,
    .modes = {STARPU_RW | STARPU_COMMUTE, STARPU_RW | STARPU_COMMUTE, STARPU_RW, STARPU_R},
    .model = &outer_fold_model,
};

/* Deterministic mode: folds in submission (rank) order. */
struct starpu_codelet tsr_cl_outer_fold_ordered = {
    .name = "outer_fold",
    .cpu_funcs = {outer_fold_cpu},
    .cpu_funcs_name = {"outer_fold_cpu"},
    TSR_OPENCL_FUNC(outer_fold_opencl),
    .nbuffers = 4,
    .modes = {STARPU_RW, STARPU_RW, STARPU_RW, STARPU_R},
    .model = &outer_fold_model,
};

static bool same_shape(const starpu_data_handle_t *h, int n) {
  for (int i = 1; i < n; i++)
    if (tsr__handle_rows(h[i]) != tsr__handle_rows(h[0]) ||
        tsr__handle_cols(h[i]) != tsr__handle_cols(h[0]))
      return false;
  return true;
}

int tsr__insert_outer(const tsr_task_opts_t *o, starpu_data_handle_t x, starpu_data_handle_t u,
                      starpu_data_handle_t mean, bool nesterov, float lr, float momentum,
                      float gamma) {
  starpu_data_handle_t h[3] = {x, u, mean};
  if (!same_shape(h, 3)) return TSR_ESHAPE;
  struct outer_args args = {nesterov, lr, momentum, gamma, 1.0f};
  return tsr__submit(o, &tsr_cl_outer, &args, sizeof args, 3, h);
}

int tsr__insert_outer_fold(const tsr_task_opts_t *o, starpu_data_handle_t global,
                           starpu_data_handle_t u, starpu_data_handle_t snap,
                           starpu_data_handle_t w, float scale, bool nesterov, float lr,
                           float momentum, float gamma, bool commute) {
  starpu_data_handle_t h[4] = {global, u, snap, w};
  if (!same_shape(h, 4)) return TSR_ESHAPE;
  struct outer_args args = {nesterov, lr, momentum, gamma, scale};
  return tsr__submit(o, commute ? &tsr_cl_outer_fold : &tsr_cl_outer_fold_ordered, &args,
                     sizeof args, 4, h);
}
