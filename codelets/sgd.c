/* SGD update of one parameter tile, or of a band of its rows (the chunk of a
 * tile that --sync batch updates on its home): momentum and weight decay as
 * in PyTorch, plain or Nesterov. Plain SGD (momentum 0) has no velocity tile,
 * hence a second codelet; Nesterov's is a third, so that traces name it. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

void tsr__sgd_cpu(void *w, void *v, void *g, const tsr_sgd_args_t *a) {
  bool mom = a->momentum != 0.0f;
  long off_w = (long)a->r0 * TSR_LD(w);
  long off_v = mom ? (long)a->r0 * TSR_LD(v) : 0;
  (a->nesterov ? tsr__k_sgd_nesterov : tsr__k_sgd)(
      TSR_ROWS(g), TSR_COLS(g), TSR_PTR(w) + off_w, TSR_LD(w), mom ? TSR_PTR(v) + off_v : NULL,
      mom ? TSR_LD(v) : 0, TSR_PTR(g), TSR_LD(g), a->lr, a->momentum, a->wd);
}

/* buffers: w RW, g R, v RW (momentum only) */
static void sgd_cpu(void *buffers[], void *cl_arg) {
  const tsr_sgd_args_t *a = cl_arg;
  tsr__sgd_cpu(buffers[0], a->momentum != 0.0f ? buffers[2] : NULL, buffers[1], a);
}

#ifdef TSR_HAVE_OPENCL
void tsr__sgd_opencl(void *wb, void *vb, void *gb, const tsr_sgd_args_t *a) {
  if (!vb) vb = wb; /* unused without momentum */
  int m = TSR_ROWS(gb), n = TSR_COLS(gb);
  int ldw = TSR_LD(wb), wo = TSR_CL_OFF(wb) + a->r0 * ldw;
  int ldv = TSR_LD(vb), vo = TSR_CL_OFF(vb) + a->r0 * ldv;
  int ldg = TSR_LD(gb), go = TSR_CL_OFF(gb);
  cl_mem w = TSR_CL_MEM(wb), v = TSR_CL_MEM(vb), g = TSR_CL_MEM(gb);
  float lr = a->lr, momentum = a->momentum, wd = a->wd;
  tsr__cl_run2d(a->nesterov ? TSR_CLK_SGD_NESTEROV : TSR_CLK_SGD, m, n, 14,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(w), TSR_CL_ARG(wo),
                                 TSR_CL_ARG(ldw), TSR_CL_ARG(v), TSR_CL_ARG(vo), TSR_CL_ARG(ldv),
                                 TSR_CL_ARG(g), TSR_CL_ARG(go), TSR_CL_ARG(ldg), TSR_CL_ARG(lr),
                                 TSR_CL_ARG(momentum), TSR_CL_ARG(wd)});
}

static void sgd_opencl(void *buffers[], void *cl_arg) {
  const tsr_sgd_args_t *a = cl_arg;
  tsr__sgd_opencl(buffers[0], a->momentum != 0.0f ? buffers[2] : NULL, buffers[1], a);
}
#endif

static struct starpu_perfmodel sgd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_sgd_f32",
};

struct starpu_codelet tsr_cl_sgd = {
    .name = "sgd",
    .cpu_funcs = {sgd_cpu},
    .cpu_funcs_name = {"sgd_cpu"},
    TSR_OPENCL_FUNC(sgd_opencl),
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &sgd_model,
};

struct starpu_codelet tsr_cl_sgd_momentum = {
    .name = "sgd",
    .cpu_funcs = {sgd_cpu},
    .cpu_funcs_name = {"sgd_cpu"},
    TSR_OPENCL_FUNC(sgd_opencl),
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_R, STARPU_RW},
    .model = &sgd_model,
};

/* The same cost as momentum SGD: one more multiply-add per element. */
struct starpu_codelet tsr_cl_sgd_nesterov = {
    .name = "sgd_nesterov",
    .cpu_funcs = {sgd_cpu},
    .cpu_funcs_name = {"sgd_cpu"},
    TSR_OPENCL_FUNC(sgd_opencl),
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_R, STARPU_RW},
    .model = &sgd_model,
};

int tsr__insert_sgd(const tsr_task_opts_t *o, starpu_data_handle_t w, starpu_data_handle_t v,
                    starpu_data_handle_t g, int r0, float lr, float momentum, float wd,
                    bool nesterov) {
  int m = tsr__handle_rows(w), n = tsr__handle_cols(w);
  if (tsr__handle_cols(g) != n || r0 < 0 || r0 + tsr__handle_rows(g) > m) return TSR_ESHAPE;
  if ((momentum != 0.0f) != (v != NULL) || (nesterov && !v)) return TSR_EINVAL;
  if (v && (tsr__handle_rows(v) != m || tsr__handle_cols(v) != n)) return TSR_ESHAPE;
  tsr_sgd_args_t args = {lr, momentum, wd, r0, nesterov};
  starpu_data_handle_t h[3] = {w, g, v};
  struct starpu_codelet *cl = nesterov ? &tsr_cl_sgd_nesterov
                              : v      ? &tsr_cl_sgd_momentum
                                       : &tsr_cl_sgd;
  return tsr__submit(o, cl, &args, sizeof args, v ? 3 : 2, h);
}
