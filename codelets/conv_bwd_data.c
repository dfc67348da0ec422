/* Convolution input gradient on one batch-row tile: dy w^T into the
 * worker's workspace (one GEMM), scattered back onto the input by col2im.
 * Submitted only where a layer below needs the gradient. */
#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

static void conv_bwd_data_cpu(void *buffers[], void *cl_arg) {
  const tsr_conv_geom_t *g = cl_arg;
  int n = TSR_ROWS(buffers[0]);
  tsr__k_conv_bwd_data(g, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                       TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]),
                       tsr__workspace(tsr__k_conv_work(g, n)));
}

static struct starpu_perfmodel conv_bwd_data_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_conv_bwd_data_f32",
};

struct starpu_codelet tsr_cl_conv_bwd_data = {
    .name = "conv_bwd_data",
    .cpu_funcs = {conv_bwd_data_cpu},
    .cpu_funcs_name = {"conv_bwd_data_cpu"},
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
