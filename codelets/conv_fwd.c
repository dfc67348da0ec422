/* Convolution forward on one batch-row tile: im2col into the worker's
 * workspace, one BLIS GEMM for the whole tile, then the bias and a following
 * ReLU fused in while the output is hot in cache. */
#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct conv_fwd_args {
  tsr_conv_geom_t g;
  bool relu;
};

static void conv_fwd_cpu(void *buffers[], void *cl_arg) {
  const struct conv_fwd_args *a = cl_arg;
  int n = TSR_ROWS(buffers[0]);
  tsr__k_conv_fwd(&a->g, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                  TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]), TSR_PTR(buffers[3]),
                  a->relu, tsr__workspace(tsr__k_conv_work(&a->g, n)));
}

static struct starpu_perfmodel conv_fwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_conv_fwd_f32",
};

struct starpu_codelet tsr_cl_conv_fwd = {
    .name = "conv_fwd",
    .cpu_funcs = {conv_fwd_cpu},
    .cpu_funcs_name = {"conv_fwd_cpu"},
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_R, STARPU_R, STARPU_R},
    .model = &conv_fwd_model,
};

int tsr__insert_conv_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x,
                         starpu_data_handle_t w, starpu_data_handle_t b, const tsr_conv_geom_t *g,
                         bool relu) {
  int k = g->kh * g->kw * g->c;
  if (tsr__handle_rows(y) != tsr__handle_rows(x) || tsr__handle_cols(x) != g->h * g->w * g->c ||
      tsr__handle_cols(y) != g->oh * g->ow * g->oc || tsr__handle_rows(w) != k ||
      tsr__handle_cols(w) != g->oc || tsr__handle_rows(b) != 1 || tsr__handle_cols(b) != g->oc)
    return TSR_ESHAPE;
  struct conv_fwd_args args = {*g, relu};
  starpu_data_handle_t h[4] = {y, x, w, b};
  return tsr__submit(o, &tsr_cl_conv_fwd, &args, sizeof args, 4, h);
}
