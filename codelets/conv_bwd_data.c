/* Convolution input gradient on one batch-row tile, by either of two CPU implementations
 * (impls.c): oneDNN's primitive, or dy w^T into the worker's workspace (one GEMM) scattered
 * back onto the input by col2im. Submitted only where a layer below needs the gradient. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct conv_bwd_data_args {
  tsr_impl_choice_t choice; /* first: impls.c reads it */
  tsr_conv_geom_t g;
  int wb_n; /* > 0: buffers[3] holds the weights reordered for tiles of wb_n rows (conv_fwd.c) */
};

static void conv_bwd_data_blis(void *buffers[], void *cl_arg) {
  const tsr_conv_geom_t *g = &((const struct conv_bwd_data_args *)cl_arg)->g;
  int n = TSR_ROWS(buffers[0]);
  tsr__k_conv_bwd_data(g, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                       TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]),
                       tsr__workspace(tsr__k_conv_work(g, n)));
}

/* The lowered kernel where oneDNN cannot serve the tile (conv_fwd.c). */
static void conv_bwd_data_onednn(void *buffers[], void *cl_arg) {
  const struct conv_bwd_data_args *a = cl_arg;
  const tsr_conv_geom_t *g = &a->g;
  int n = TSR_ROWS(buffers[0]);
  size_t work = tsr__k_dnnl_conv_work(g, n, 1, false);
  tsr_dnnl_blocked_t wb = {a->wb_n > 0 ? TSR_PTR(buffers[3]) : NULL, a->wb_n};
  if (!work ||
      !tsr__k_dnnl_conv_bwd_data(g, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                                 TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]), &wb,
                                 tsr__workspace(work)))
    conv_bwd_data_blis(buffers, cl_arg);
}

TSR_IMPL_TASKS(conv_bwd_data)

#ifdef TSR_HAVE_OPENCL
/* dcol (n oh ow, kh kw c) = dy w^T with CLBlast (dy packed first when its
 * rows are not contiguous), then col2im gathers it into dx. */
static void conv_bwd_data_opencl(void *buffers[], void *cl_arg) {
  tsr_conv_geom_t g = ((const struct conv_bwd_data_args *)cl_arg)->g;
  int n = TSR_ROWS(buffers[0]), p = g.oh * g.ow, k = g.kh * g.kw * g.c, np = n * p, oc = g.oc;
  int lddx = TSR_LD(buffers[0]), dxo = TSR_CL_OFF(buffers[0]);
  int lddy = TSR_LD(buffers[1]), dyo = TSR_CL_OFF(buffers[1]);
  int ldw = TSR_LD(buffers[2]), wo = TSR_CL_OFF(buffers[2]);
  cl_mem dx = TSR_CL_MEM(buffers[0]), dy = TSR_CL_MEM(buffers[1]), w = TSR_CL_MEM(buffers[2]);
  if (!(n == 1 || lddy == p * oc)) {
    cl_mem packed = tsr__cl_scratch(1, (size_t)np * (size_t)oc);
    tsr__cl_copy(n, p * oc, packed, 0, p * oc, dy, dyo, lddy);
    dy = packed, dyo = 0;
  }
  cl_mem dcol = tsr__cl_scratch(0, (size_t)np * (size_t)k);
  tsr__cl_gemm(false, true, np, k, oc, 1.0f, dy, dyo, oc, w, wo, ldw, 0.0f, dcol, 0, k);
  tsr__cl_run2d(TSR_CLK_COL2IM, n, g.h * g.w * g.c, 6,
                (tsr_cl_arg_t[]){TSR_CL_ARG(g), TSR_CL_ARG(n), TSR_CL_ARG(dx), TSR_CL_ARG(dxo),
                                 TSR_CL_ARG(lddx), TSR_CL_ARG(dcol)});
}
#endif

static uint32_t conv_bwd_data_footprint(struct starpu_task *task) {
  const struct conv_bwd_data_args *a = task->cl_arg;
  return tsr__cl_footprint(task, &a->g, sizeof a->g);
}

static struct starpu_perfmodel conv_bwd_data_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_conv_bwd_data_f32",
    .footprint = conv_bwd_data_footprint,
};

#define CONV_BWD_DATA_CODELET(var, n, ...)                                                         \
  struct starpu_codelet var = {                                                                    \
      .name = "conv_bwd_data",                                                                     \
      .can_execute = tsr__cl_impl_can_execute,                                                     \
      .cpu_funcs = {[TSR_IMPL_ONEDNN] = conv_bwd_data_onednn_task,                                 \
                    [TSR_IMPL_BLIS] = conv_bwd_data_blis_task},                                    \
      .cpu_funcs_name =                                                                            \
          {[TSR_IMPL_ONEDNN] = "conv_bwd_data_onednn", [TSR_IMPL_BLIS] = "conv_bwd_data_blis"},    \
      TSR_OPENCL_FUNC(conv_bwd_data_opencl),                                                       \
      .nbuffers = n,                                                                               \
      .modes = {__VA_ARGS__},                                                                      \
      .model = &conv_bwd_data_model}

CONV_BWD_DATA_CODELET(tsr_cl_conv_bwd_data, 3, STARPU_W, STARPU_R, STARPU_R);
CONV_BWD_DATA_CODELET(tsr_cl_conv_bwd_data_wb, 4, STARPU_W, STARPU_R, STARPU_R, STARPU_R);

int tsr__insert_conv_bwd_data_wb(const tsr_task_opts_t *o, starpu_data_handle_t dx,
                                 starpu_data_handle_t dy, starpu_data_handle_t w,
                                 starpu_data_handle_t wb, int wb_n, const tsr_conv_geom_t *g) {
  int k = g->kh * g->kw * g->c;
  if (tsr__handle_rows(dx) != tsr__handle_rows(dy) || tsr__handle_cols(dx) != g->h * g->w * g->c ||
      tsr__handle_cols(dy) != g->oh * g->ow * g->oc || tsr__handle_rows(w) != k ||
      tsr__handle_cols(w) != g->oc || (wb && wb_n <= 0))
    return TSR_ESHAPE;
  tsr_conv_shape_t shape = {1, *g, tsr__handle_rows(dx), 0};
  struct conv_bwd_data_args args = {tsr__impl_choice(o, &shape, sizeof shape), *g, wb ? wb_n : 0};
  starpu_data_handle_t h[4] = {dx, dy, w, wb};
  return tsr__submit(o, wb ? &tsr_cl_conv_bwd_data_wb : &tsr_cl_conv_bwd_data, &args, sizeof args,
                     wb ? 4 : 3, h);
}

int tsr__insert_conv_bwd_data(const tsr_task_opts_t *o, starpu_data_handle_t dx,
                              starpu_data_handle_t dy, starpu_data_handle_t w,
                              const tsr_conv_geom_t *g) {
  return tsr__insert_conv_bwd_data_wb(o, dx, dy, w, NULL, 0, g);
}
