/* Pooling backward on one batch-row tile: dx is rewritten whole (zero, then
 * each output's gradient routed to its window), so overlapping windows and
 * inputs no window covers both come out right. Max pooling reads the forward
 * input and output to find each window's maximum again, and can apply the
 * backward pass of a ReLU before it on the way (relu). */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct pool_bwd_args {
  tsr_conv_geom_t g;
  bool max, relu;
};

static void pool_bwd_max_cpu(void *buffers[], void *cl_arg) {
  const struct pool_bwd_args *a = cl_arg;
  tsr__k_pool_bwd(&a->g, true, a->relu, TSR_ROWS(buffers[0]), TSR_PTR(buffers[0]),
                  TSR_LD(buffers[0]), TSR_PTR(buffers[1]), TSR_LD(buffers[1]), TSR_PTR(buffers[2]),
                  TSR_LD(buffers[2]), TSR_PTR(buffers[3]), TSR_LD(buffers[3]));
}

static void pool_bwd_avg_cpu(void *buffers[], void *cl_arg) {
  const struct pool_bwd_args *a = cl_arg;
  tsr__k_pool_bwd(&a->g, false, false, TSR_ROWS(buffers[0]), TSR_PTR(buffers[0]),
                  TSR_LD(buffers[0]), TSR_PTR(buffers[1]), TSR_LD(buffers[1]), NULL, 0, NULL, 0);
}

#ifdef TSR_HAVE_OPENCL
/* Mean pooling passes dy as the unused x and y. */
static void pool_bwd_run(void *buffers[], const struct pool_bwd_args *a, bool max) {
  tsr_conv_geom_t g = a->g;
  int n = TSR_ROWS(buffers[0]), imax = max, relu = max && a->relu;
  void *xb = buffers[max ? 2 : 1], *yb = buffers[max ? 3 : 1];
  int lddx = TSR_LD(buffers[0]), dxo = TSR_CL_OFF(buffers[0]);
  int lddy = TSR_LD(buffers[1]), dyo = TSR_CL_OFF(buffers[1]);
  int ldx = TSR_LD(xb), xo = TSR_CL_OFF(xb), ldy = TSR_LD(yb), yo = TSR_CL_OFF(yb);
  cl_mem dx = TSR_CL_MEM(buffers[0]), dy = TSR_CL_MEM(buffers[1]);
  cl_mem x = TSR_CL_MEM(xb), y = TSR_CL_MEM(yb);
  tsr__cl_run2d(TSR_CLK_POOL_BWD, n, g.h * g.w * g.c, 16,
                (tsr_cl_arg_t[]){TSR_CL_ARG(g), TSR_CL_ARG(imax), TSR_CL_ARG(relu), TSR_CL_ARG(n),
                                 TSR_CL_ARG(dx), TSR_CL_ARG(dxo), TSR_CL_ARG(lddx), TSR_CL_ARG(dy),
                                 TSR_CL_ARG(dyo), TSR_CL_ARG(lddy), TSR_CL_ARG(x), TSR_CL_ARG(xo),
                                 TSR_CL_ARG(ldx), TSR_CL_ARG(y), TSR_CL_ARG(yo), TSR_CL_ARG(ldy)});
}

static void pool_bwd_max_opencl(void *buffers[], void *cl_arg) {
  pool_bwd_run(buffers, cl_arg, true);
}

static void pool_bwd_avg_opencl(void *buffers[], void *cl_arg) {
  pool_bwd_run(buffers, cl_arg, false);
}
#endif

static struct starpu_perfmodel pool_bwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_pool_bwd_f32",
};

struct starpu_codelet tsr_cl_pool_bwd_max = {
    .name = "pool_bwd",
    .cpu_funcs = {pool_bwd_max_cpu},
    .cpu_funcs_name = {"pool_bwd_max_cpu"},
    TSR_OPENCL_FUNC(pool_bwd_max_opencl),
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_R, STARPU_R, STARPU_R},
    .model = &pool_bwd_model,
};

struct starpu_codelet tsr_cl_pool_bwd_avg = {
    .name = "pool_bwd",
    .cpu_funcs = {pool_bwd_avg_cpu},
    .cpu_funcs_name = {"pool_bwd_avg_cpu"},
    TSR_OPENCL_FUNC(pool_bwd_avg_opencl),
    .nbuffers = 2,
    .modes = {STARPU_W, STARPU_R},
    .model = &pool_bwd_model,
};

int tsr__insert_pool_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dx, starpu_data_handle_t dy,
                         starpu_data_handle_t x, starpu_data_handle_t y, const tsr_conv_geom_t *g,
                         bool max, bool relu) {
  int m = tsr__handle_rows(dx), in = g->h * g->w * g->c, out = g->oh * g->ow * g->c;
  if (g->oc != g->c || g->ph < 0 || g->pw < 0 || g->ph > g->kh / 2 || g->pw > g->kw / 2 ||
      tsr__handle_rows(dy) != m || tsr__handle_cols(dx) != in || tsr__handle_cols(dy) != out)
    return TSR_ESHAPE;
  if (max && (!x || !y || tsr__handle_rows(x) != m || tsr__handle_cols(x) != in ||
              tsr__handle_rows(y) != m || tsr__handle_cols(y) != out))
    return TSR_ESHAPE;
  if (relu && !max) return TSR_EINVAL;
  struct pool_bwd_args args = {*g, max, relu};
  starpu_data_handle_t h[4] = {dx, dy, x, y};
  return tsr__submit(o, max ? &tsr_cl_pool_bwd_max : &tsr_cl_pool_bwd_avg, &args, sizeof args,
                     max ? 4 : 2, h);
}
