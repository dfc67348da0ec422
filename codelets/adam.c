/* Adam update of one parameter tile with its two moment tiles, or of a band
 * of their rows (the chunk of a tile that --sync batch updates on its home):
 * PyTorch's Adam (L2 weight decay), or AdamW (decoupled), a second codelet so
 * that traces name it. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct adam_args {
  float lr, beta1, beta2, eps, wd;
  int t;
  int r0; /* the band's first row in w, m1, m2; g holds the band */
  bool decoupled;
};

/* buffers: w RW, m1 RW, m2 RW, g R */
static void adam_cpu(void *buffers[], void *cl_arg) {
  const struct adam_args *a = cl_arg;
  float *w = TSR_PTR(buffers[0]) + (long)a->r0 * TSR_LD(buffers[0]);
  float *m1 = TSR_PTR(buffers[1]) + (long)a->r0 * TSR_LD(buffers[1]);
  float *m2 = TSR_PTR(buffers[2]) + (long)a->r0 * TSR_LD(buffers[2]);
  (a->decoupled ? tsr__k_adamw
                : tsr__k_adam)(TSR_ROWS(buffers[3]), TSR_COLS(buffers[3]), w, TSR_LD(buffers[0]),
                               m1, TSR_LD(buffers[1]), m2, TSR_LD(buffers[2]), TSR_PTR(buffers[3]),
                               TSR_LD(buffers[3]), a->lr, a->beta1, a->beta2, a->eps, a->wd, a->t);
}

#ifdef TSR_HAVE_OPENCL
static void adam_opencl(void *buffers[], void *cl_arg) {
  const struct adam_args *a = cl_arg;
  int m = TSR_ROWS(buffers[3]), n = TSR_COLS(buffers[3]);
  int ldw = TSR_LD(buffers[0]), wo = TSR_CL_OFF(buffers[0]) + a->r0 * ldw;
  int ld1 = TSR_LD(buffers[1]), o1 = TSR_CL_OFF(buffers[1]) + a->r0 * ld1;
  int ld2 = TSR_LD(buffers[2]), o2 = TSR_CL_OFF(buffers[2]) + a->r0 * ld2;
  int ldg = TSR_LD(buffers[3]), go = TSR_CL_OFF(buffers[3]);
  cl_mem w = TSR_CL_MEM(buffers[0]), m1 = TSR_CL_MEM(buffers[1]), m2 = TSR_CL_MEM(buffers[2]);
  cl_mem g = TSR_CL_MEM(buffers[3]);
  /* The bias corrections exactly as tsr__k_adam computes them. */
  float c1, c2;
  tsr__k_adam_corrections(a->beta1, a->beta2, a->t, &c1, &c2);
  float lr = a->lr, beta1 = a->beta1, beta2 = a->beta2, eps = a->eps, wd = a->wd;
  tsr__cl_run2d(a->decoupled ? TSR_CLK_ADAMW : TSR_CLK_ADAM, m, n, 21,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m),     TSR_CL_ARG(n),     TSR_CL_ARG(w),
                                 TSR_CL_ARG(wo),    TSR_CL_ARG(ldw),   TSR_CL_ARG(m1),
                                 TSR_CL_ARG(o1),    TSR_CL_ARG(ld1),   TSR_CL_ARG(m2),
                                 TSR_CL_ARG(o2),    TSR_CL_ARG(ld2),   TSR_CL_ARG(g),
                                 TSR_CL_ARG(go),    TSR_CL_ARG(ldg),   TSR_CL_ARG(lr),
                                 TSR_CL_ARG(beta1), TSR_CL_ARG(beta2), TSR_CL_ARG(eps),
                                 TSR_CL_ARG(wd),    TSR_CL_ARG(c1),    TSR_CL_ARG(c2)});
}
#endif

static struct starpu_perfmodel adam_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_adam_f32",
};

struct starpu_codelet tsr_cl_adam = {
    .name = "adam",
    .cpu_funcs = {adam_cpu},
    .cpu_funcs_name = {"adam_cpu"},
    TSR_OPENCL_FUNC(adam_opencl),
    .nbuffers = 4,
    .modes = {STARPU_RW, STARPU_RW, STARPU_RW, STARPU_R},
    .model = &adam_model,
};

/* The same cost as Adam's: one more multiply per element. */
struct starpu_codelet tsr_cl_adamw = {
    .name = "adamw",
    .cpu_funcs = {adam_cpu},
    .cpu_funcs_name = {"adam_cpu"},
    TSR_OPENCL_FUNC(adam_opencl),
    .nbuffers = 4,
    .modes = {STARPU_RW, STARPU_RW, STARPU_RW, STARPU_R},
    .model = &adam_model,
};

int tsr__insert_adam(const tsr_task_opts_t *o, starpu_data_handle_t w, starpu_data_handle_t m1,
                     starpu_data_handle_t m2, starpu_data_handle_t g, int r0, float lr, float beta1,
                     float beta2, float eps, float wd, int t, bool decoupled) {
  int m = tsr__handle_rows(w), n = tsr__handle_cols(w);
  for (int i = 1; i < 3; i++) {
    starpu_data_handle_t s = i == 1 ? m1 : m2;
    if (tsr__handle_rows(s) != m || tsr__handle_cols(s) != n) return TSR_ESHAPE;
  }
  if (tsr__handle_cols(g) != n || r0 < 0 || r0 + tsr__handle_rows(g) > m) return TSR_ESHAPE;
  if (t < 1) return TSR_EINVAL;
  struct adam_args args = {lr, beta1, beta2, eps, wd, t, r0, decoupled};
  starpu_data_handle_t h[4] = {w, m1, m2, g};
  return tsr__submit(o, decoupled ? &tsr_cl_adamw : &tsr_cl_adam, &args, sizeof args, 4, h);
}
