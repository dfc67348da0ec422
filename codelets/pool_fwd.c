/* Max or mean pooling forward on one batch-row tile of whole samples. Max
 * pooling keeps no argmax: the backward pass finds it again from the input
 * and the output, which costs a few comparisons and no extra tile. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct pool_args {
  tsr_conv_geom_t g;
  bool max;
};

static void pool_fwd_cpu(void *buffers[], void *cl_arg) {
  const struct pool_args *a = cl_arg;
  tsr__k_pool_fwd(&a->g, a->max, TSR_ROWS(buffers[0]), TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
                  TSR_PTR(buffers[1]), TSR_LD(buffers[1]));
}

#ifdef TSR_HAVE_OPENCL
static void pool_fwd_opencl(void *buffers[], void *cl_arg) {
  const struct pool_args *a = cl_arg;
  tsr_conv_geom_t g = a->g;
  int n = TSR_ROWS(buffers[0]), max = a->max;
  int ldy = TSR_LD(buffers[0]), yo = TSR_CL_OFF(buffers[0]);
  int ldx = TSR_LD(buffers[1]), xo = TSR_CL_OFF(buffers[1]);
  cl_mem y = TSR_CL_MEM(buffers[0]), x = TSR_CL_MEM(buffers[1]);
  tsr__cl_run2d(TSR_CLK_POOL_FWD, n, g.oh * g.ow * g.c, 9,
                (tsr_cl_arg_t[]){TSR_CL_ARG(g), TSR_CL_ARG(max), TSR_CL_ARG(n), TSR_CL_ARG(y),
                                 TSR_CL_ARG(yo), TSR_CL_ARG(ldy), TSR_CL_ARG(x), TSR_CL_ARG(xo),
                                 TSR_CL_ARG(ldx)});
}
#endif

static struct starpu_perfmodel pool_fwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_pool_fwd_f32",
};

struct starpu_codelet tsr_cl_pool_fwd = {
    .name = "pool_fwd",
    .cpu_funcs = {pool_fwd_cpu},
    .cpu_funcs_name = {"pool_fwd_cpu"},
    TSR_OPENCL_FUNC(pool_fwd_opencl),
    .nbuffers = 2,
    .modes = {STARPU_W, STARPU_R},
    .model = &pool_fwd_model,
};

int tsr__insert_pool_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x,
                         const tsr_conv_geom_t *g, bool max) {
  if (g->oc != g->c || g->ph < 0 || g->pw < 0 || g->ph > g->kh / 2 || g->pw > g->kw / 2 ||
      tsr__handle_rows(y) != tsr__handle_rows(x) || tsr__handle_cols(x) != g->h * g->w * g->c ||
      tsr__handle_cols(y) != g->oh * g->ow * g->c)
    return TSR_ESHAPE;
  struct pool_args args = {*g, max};
  starpu_data_handle_t h[2] = {y, x};
  return tsr__submit(o, &tsr_cl_pool_fwd, &args, sizeof args, 2, h);
}
