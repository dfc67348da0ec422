/* y = alpha x + beta y on tiles: the building block of averaging and of
 * gradient accumulation. With beta 0 y is only written (W); contributions
 * whose order does not matter use the commutative variant (RW|COMMUTE), so
 * StarPU applies them as they arrive. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct axpby_args {
  float alpha, beta;
};

/* buffers: x R, y RW */
static void axpby_cpu(void *buffers[], void *cl_arg) {
  const struct axpby_args *a = cl_arg;
  tsr__k_axpby(TSR_ROWS(buffers[1]), TSR_COLS(buffers[1]), a->alpha, TSR_PTR(buffers[0]),
               TSR_LD(buffers[0]), a->beta, TSR_PTR(buffers[1]), TSR_LD(buffers[1]));
}

#ifdef TSR_HAVE_OPENCL
static void axpby_opencl(void *buffers[], void *cl_arg) {
  const struct axpby_args *a = cl_arg;
  int m = TSR_ROWS(buffers[1]), n = TSR_COLS(buffers[1]);
  int ldx = TSR_LD(buffers[0]), xo = TSR_CL_OFF(buffers[0]);
  int ldy = TSR_LD(buffers[1]), yo = TSR_CL_OFF(buffers[1]);
  cl_mem x = TSR_CL_MEM(buffers[0]), y = TSR_CL_MEM(buffers[1]);
  float alpha = a->alpha, beta = a->beta;
  tsr__cl_run2d(TSR_CLK_AXPBY, m, n, 10,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(alpha), TSR_CL_ARG(x),
                                 TSR_CL_ARG(xo), TSR_CL_ARG(ldx), TSR_CL_ARG(beta), TSR_CL_ARG(y),
                                 TSR_CL_ARG(yo), TSR_CL_ARG(ldy)});
}
#endif

static struct starpu_perfmodel axpby_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_axpby_f32",
};

struct starpu_codelet tsr_cl_axpby = {
    .name = "axpby",
    .cpu_funcs = {axpby_cpu},
    .cpu_funcs_name = {"axpby_cpu"},
    TSR_OPENCL_FUNC(axpby_opencl),
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_RW},
    .model = &axpby_model,
};

struct starpu_codelet tsr_cl_axpby_w = {
    .name = "axpby",
    .cpu_funcs = {axpby_cpu},
    .cpu_funcs_name = {"axpby_cpu"},
    TSR_OPENCL_FUNC(axpby_opencl),
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_W},
    .model = &axpby_model,
};

struct starpu_codelet tsr_cl_axpby_commute = {
    .name = "axpby",
    .cpu_funcs = {axpby_cpu},
    .cpu_funcs_name = {"axpby_cpu"},
    TSR_OPENCL_FUNC(axpby_opencl),
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_RW | STARPU_COMMUTE},
    .model = &axpby_model,
};

int tsr__insert_axpby_mode(const tsr_task_opts_t *o, float alpha, starpu_data_handle_t x,
                           float beta, starpu_data_handle_t y, bool commute) {
  if (tsr__handle_rows(x) != tsr__handle_rows(y) || tsr__handle_cols(x) != tsr__handle_cols(y))
    return TSR_ESHAPE;
  if (commute && beta != 1.0f) return TSR_EINVAL; /* only pure accumulations commute */
  struct axpby_args args = {alpha, beta};
  starpu_data_handle_t h[2] = {x, y};
  struct starpu_codelet *cl = commute        ? &tsr_cl_axpby_commute
                              : beta == 0.0f ? &tsr_cl_axpby_w
                                             : &tsr_cl_axpby;
  return tsr__submit(o, cl, &args, sizeof args, 2, h);
}

int tsr__insert_axpby(const tsr_task_opts_t *o, float alpha, starpu_data_handle_t x, float beta,
                      starpu_data_handle_t y) {
  return tsr__insert_axpby_mode(o, alpha, x, beta, y, false);
}
