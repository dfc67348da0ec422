/* Convolution input gradient on one batch-row tile: dy w^T into the
 * worker's workspace (one GEMM), scattered back onto the input by col2im.
 * Submitted only where a layer below needs the gradient. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

static void conv_bwd_data_cpu(void *buffers[], void *cl_arg) {
  const tsr_conv_geom_t *g = cl_arg;
  int n = TSR_ROWS(buffers[0]);
  tsr__k_conv_bwd_data(g, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                       TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]),
                       tsr__workspace(tsr__k_conv_work(g, n)));
}

#ifdef TSR_HAVE_OPENCL
/* dcol (n oh ow, kh kw c) = dy w^T with CLBlast (dy packed first when its
 * rows are not contiguous), then col2im gathers it into dx. */
static void conv_bwd_data_opencl(void *buffers[], void *cl_arg) {
  tsr_conv_geom_t g = *(const tsr_conv_geom_t *)cl_arg;
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

static struct starpu_perfmodel conv_bwd_data_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_conv_bwd_data_f32",
};

struct starpu_codelet tsr_cl_conv_bwd_data = {
    .name = "conv_bwd_data",
    .cpu_funcs = {conv_bwd_data_cpu},
    .cpu_funcs_name = {"conv_bwd_data_cpu"},
    TSR_OPENCL_FUNC(conv_bwd_data_opencl),
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
    .model = &conv_bwd_data_model,
};

int tsr__insert_conv_bwd_data(const tsr_task_opts_t *o, starpu_data_handle_t dx,
                              starpu_data_handle_t dy, starpu_data_handle_t w,
                              const tsr_conv_geom_t *g) {
  int k = g->kh * g->kw * g->c;
  if (tsr__handle_rows(dx) != tsr__handle_rows(dy) || tsr__handle_cols(dx) != g->h * g->w * g->c ||
      tsr__handle_cols(dy) != g->oh * g->ow * g->oc || tsr__handle_rows(w) != k ||
      tsr__handle_cols(w) != g->oc)
    return TSR_ESHAPE;
  starpu_data_handle_t h[3] = {dx, dy, w};
  return tsr__submit(o, &tsr_cl_conv_bwd_data, g, sizeof *g, 3, h);
}
