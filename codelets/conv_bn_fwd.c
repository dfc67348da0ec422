/* Evaluation's convolution with the batchnorm after it folded in, on one batch-row tile: the
 * weights and bias folded with the running statistics into the worker's workspace
 * (tsr__k_bn_fold), then the convolution with them and the batchnorm's fused ReLU, by oneDNN's
 * primitive unless --kernels blis (or oneDNN cannot serve the tile), else the lowered kernel.
 * One pass over the activations instead of two, and no convolution output written. Folding
 * costs fan_in x oc multiplications a tile, next to the convolution's n oh ow times as many.
 * CPU only: a model on OpenCL devices runs it on a CPU worker. */
#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"
#include "tessera/runtime.h"

struct conv_bn_fwd_args {
  tsr_conv_geom_t g;
  float eps;
  bool relu;
  int kernels; /* tsr_kernels_t */
};

/* buffers: y, x, w, b, running mean, running variance, scale, shift. */
static void conv_bn_fwd_cpu(void *buffers[], void *cl_arg) {
  const struct conv_bn_fwd_args *a = cl_arg;
  const tsr_conv_geom_t *g = &a->g;
  int n = TSR_ROWS(buffers[0]), fan_in = g->kh * g->kw * g->c;
  float *ws = tsr__workspace(tsr__k_conv_bn_work(g, n, a->relu));
  float *w2 = ws, *b2 = ws + (size_t)fan_in * g->oc, *work = ws + tsr__k_bn_folded_floats(g);
  tsr__k_bn_fold(fan_in, g->oc, TSR_PTR(buffers[2]), TSR_LD(buffers[2]), TSR_PTR(buffers[3]),
                 TSR_PTR(buffers[4]), TSR_PTR(buffers[5]), TSR_PTR(buffers[6]), TSR_PTR(buffers[7]),
                 a->eps, w2, b2);
  float *y = TSR_PTR(buffers[0]), *x = TSR_PTR(buffers[1]);
  int ldy = TSR_LD(buffers[0]), ldx = TSR_LD(buffers[1]);
  tsr_dnnl_blocked_t none = {NULL, 0};
  if (a->kernels == TSR_KERNELS_BLIS ||
      !tsr__k_dnnl_conv_fwd(g, n, y, ldy, x, ldx, w2, g->oc, b2, a->relu, &none, work))
    tsr__k_conv_fwd(g, n, y, ldy, x, ldx, w2, g->oc, b2, a->relu, work);
}

static uint32_t conv_bn_fwd_footprint(struct starpu_task *task) {
  const struct conv_bn_fwd_args *a = task->cl_arg;
  return tsr__cl_footprint(task, &a->g, sizeof a->g);
}

static struct starpu_perfmodel conv_bn_fwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_conv_bn_fwd_f32",
    .footprint = conv_bn_fwd_footprint,
};

struct starpu_codelet tsr_cl_conv_bn_fwd = {
    .name = "conv_bn_fwd",
    .cpu_funcs = {conv_bn_fwd_cpu},
    .cpu_funcs_name = {"conv_bn_fwd_cpu"},
    .nbuffers = 8,
    .modes = {STARPU_W, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R},
    .model = &conv_bn_fwd_model,
};

int tsr__insert_conv_bn_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y,
                            starpu_data_handle_t x, starpu_data_handle_t w, starpu_data_handle_t b,
                            starpu_data_handle_t const bn[4], const tsr_conv_geom_t *g, float eps,
                            bool relu) {
  int k = g->kh * g->kw * g->c;
  if (tsr__handle_rows(y) != tsr__handle_rows(x) || tsr__handle_cols(x) != g->h * g->w * g->c ||
      tsr__handle_cols(y) != g->oh * g->ow * g->oc || tsr__handle_rows(w) != k ||
      tsr__handle_cols(w) != g->oc || tsr__handle_rows(b) != 1 || tsr__handle_cols(b) != g->oc)
    return TSR_ESHAPE;
  for (int i = 0; i < 4; i++)
    if (tsr__handle_rows(bn[i]) != 1 || tsr__handle_cols(bn[i]) != g->oc) return TSR_ESHAPE;
  struct conv_bn_fwd_args args = {*g, eps, relu, o->kernels};
  starpu_data_handle_t h[8] = {y, x, w, b, bn[0], bn[1], bn[2], bn[3]};
  return tsr__submit(o, &tsr_cl_conv_bn_fwd, &args, sizeof args, 8, h);
}
