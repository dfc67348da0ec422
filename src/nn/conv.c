/* 2-D convolution layers: y = conv(x, W) + b, with a following ReLU fused
 * into the forward task. Samples are rows, channels-last (h w c columns),
 * one tile wide and cut into batch-row tiles; each tile is one task per pass
 * (src/kernels/conv.c lowers it to a GEMM). W is (kh kw c, oc): row
 * (ky, kx, ci), like the lowered input's columns, so a conv layer's weights
 * read like a dense layer's (fan-in x fan-out). */
#include "nn/net_impl.h"
#include "tile/ops.h"
#include "try.h"

static int conv_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *x, bool train,
                        const tsr_task_opts_t *o) {
  (void)net, (void)train;
  return tsr__tiles_conv_fwd(o, l->y, x, l->params[0].w, l->params[1].w, &l->geom, l->relu);
}

/* The input gradient first, at the highest priority (the layer below waits for it).
 * Each batch-row tile's weight gradient is its own task writing its own
 * partial, summed by a fixed tree: with a chain instead, the last layer's
 * gradient (the end of the step's critical path) ran on one worker only. */
static int conv_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *x, tsr_tiles_t *dx,
                         const tsr_task_opts_t *o) {
  (void)net;
  if (l->relu && !l->relu_grad_by_next) TSR_TRY(tsr__tiles_relu_bwd(o, l->dy, l->dy, l->y));
  tsr_task_opts_t critical = tsr__net_critical(o);
  if (dx) TSR_TRY(tsr__tiles_conv_bwd_data(&critical, dx, l->dy, l->params[0].w, &l->geom));
  return tsr__tiles_conv_bwd_filter(o, l->params[0].g, l->params[1].g, l->scratch[0], l->scratch[1],
                                    x, l->dy, &l->geom);
}

static const tsr_layer_ops_t conv_ops = {"conv", true, conv_forward, conv_backward};

int tsr__conv_create(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_spec_t *s, tsr_rng_t *rng,
                     tsr_errbuf_t *err) {
  tsr_conv_geom_t *g = &l->geom;
  g->kh = s->kernel_h, g->kw = s->kernel_w > 0 ? s->kernel_w : s->kernel_h;
  g->sh = s->stride_h > 0 ? s->stride_h : 1, g->sw = s->stride_w > 0 ? s->stride_w : g->sh;
  g->ph = s->pad_h, g->pw = s->pad_w;
  if (s->units <= 0 || g->kh <= 0 || g->kw <= 0 || s->stride_h < 0 || s->stride_w < 0 ||
      g->ph < 0 || g->pw < 0 || g->ph >= g->kh || g->pw >= g->kw)
    return tsr_error_set(err, TSR_EINVAL,
                         "layer %d (conv): needs filters > 0, a kernel > 0, strides >= 1 and "
                         "padding smaller than the kernel (got %d filters, kernel %dx%d, stride "
                         "%dx%d, padding %dx%d)",
                         l->index, s->units, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw);
  if (s->in_channels > 0 && s->in_channels != g->c)
    return tsr_error_set(err, TSR_ESHAPE,
                         "layer %d (conv %dx%d, %d filters): in_channels = %d, but its input is "
                         "%dx%dx%d (h x w x c) with %d channels",
                         l->index, g->kh, g->kw, s->units, s->in_channels, g->h, g->w, g->c, g->c);
  if (g->h + 2 * g->ph < g->kh || g->w + 2 * g->pw < g->kw)
    return tsr_error_set(err, TSR_ESHAPE,
                         "layer %d (conv): kernel %dx%d is larger than its input %dx%dx%d (h x w "
                         "x c) with padding %dx%d",
                         l->index, g->kh, g->kw, g->h, g->w, g->c, g->ph, g->pw);
  g->oc = s->units;
  g->oh = (g->h + 2 * g->ph - g->kh) / g->sh + 1;
  g->ow = (g->w + 2 * g->pw - g->kw) / g->sw + 1;
  l->ops = &conv_ops;
  l->fout = g->oh * g->ow * g->oc;
  l->out_nb = l->fout;
  if (l->in_nb != l->fin) return TSR_ESHAPE; /* create_layers gives whole samples */
  int fan_in = g->kh * g->kw * g->c;
  l->nparams = 2;
  TSR_TRY(tsr__net_param_create(net, &l->params[0], fan_in, g->oc, fan_in, g->oc, true));
  TSR_TRY(tsr__net_param_create(net, &l->params[1], 1, g->oc, 1, g->oc, false));
  TSR_TRY(tsr__net_activations(net, l, true));
  int mt = (net->batch + net->mb - 1) / net->mb;
  if (mt > 1) {
    TSR_TRY(tsr__net_tiles(&l->scratch[0], (int64_t)(mt - 1) * fan_in, g->oc, fan_in, g->oc));
    TSR_TRY(tsr__net_tiles(&l->scratch[1], mt - 1, g->oc, 1, g->oc));
  }
  return tsr__init_he_uniform(l->params[0].w, fan_in, g->oc, rng);
}
