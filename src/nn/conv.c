/* 2-D convolution layers: y = conv(x, W) + b, with a following ReLU fused
 * into the forward task. Samples are rows, channels-last (h w c columns),
 * one tile wide and cut into batch-row tiles; each tile is one task per pass
 * (src/kernels/conv.c lowers it to a GEMM). W is (kh kw c, oc): row
 * (ky, kx, ci), like the lowered input's columns, so a conv layer's weights
 * read like a dense layer's (fan-in x fan-out). With the conv type's
 * registry descriptor (layers.h). */
#include <stdio.h>

#include "nn/layers.h"
#include "tessera/runtime.h"
#include "tile/ops.h"
#include "try.h"

/* The layer's scratch matrices (conv_layout): the per-tile weight and bias gradient partials,
 * and the weights reordered once a step into oneDNN's layout for the forward pass and for the
 * input gradient (none where oneDNN is not used or takes the weights as they are). */
enum { PARTIAL_W, PARTIAL_B, WB_FWD, WB_BWD };

static int conv_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                        const tsr_task_opts_t *o) {
  if (!train && l->lay->folds_bn) { /* evaluation: the batchnorm after it, in the same task */
    tsr_layer_t *bn = &net->layers[l->lay->folds_bn - 1];
    const tsr_tiles_t *stats[4] = {bn->buffers[0], bn->buffers[1], bn->params[0].w,
                                   bn->params[1].w};
    return tsr__tiles_conv_bn_fwd(o, bn->y, x[0], l->params[0].w, l->params[1].w, stats, &l->geom,
                                  tsr__bn_eps(bn), bn->relu);
  }
  if (l->domain)
    return tsr__domain_conv_fwd(o, l->domain, l->y, x[0], l->params[0].w, l->params[1].w, l->relu,
                                &net->traffic);
  tsr_tiles_t *wb = l->scratch[WB_FWD]; /* the weights reordered for oneDNN, once a step */
  if (wb)
    TSR_TRY(tsr__tiles_conv_wreorder(o, l->params[0].w, wb, &l->geom, tsr_tiles_tile_rows(l->y, 0),
                                     0, l->relu));
  if (l->lay->folds_bn) /* training: the batchnorm's statistics in the same tasks */
    return tsr__tiles_conv_fwd_stats(o, l->y, x[0], l->params[0].w, l->params[1].w, wb, &l->geom,
                                     net->layers[l->lay->folds_bn - 1].scratch[0], net->valid);
  return tsr__tiles_conv_fwd(o, l->y, x[0], l->params[0].w, l->params[1].w, wb, &l->geom, l->relu);
}

/* The input gradient first, at the highest priority (the layer below waits for it).
 * Each batch-row tile's weight gradient is its own task writing its own
 * partial, summed by a fixed tree: with a chain instead, the last layer's
 * gradient (the end of the step's critical path) ran on one worker only. */
static int conv_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *xs,
                         tsr_tiles_t *const *dxs, const tsr_task_opts_t *o) {
  const tsr_tiles_t *x = xs[0];
  tsr_tiles_t *dx = dxs[0];
  if (l->relu && !l->relu_grad_by_next) TSR_TRY(tsr__tiles_relu_bwd(o, l->dy, l->dy, l->y));
  tsr_task_opts_t critical = tsr__net_critical(o);
  if (l->domain)
    return tsr__domain_conv_bwd(o, &critical, l->domain, dx, l->dy, l->params[0].w, l->params[0].g,
                                l->params[1].g, &net->traffic);
  tsr_tiles_t *wb = l->scratch[WB_BWD];
  if (dx && wb)
    TSR_TRY(tsr__tiles_conv_wreorder(&critical, l->params[0].w, wb, &l->geom,
                                     tsr_tiles_tile_rows(dx, 0), 1, false));
  if (dx) TSR_TRY(tsr__tiles_conv_bwd_data(&critical, dx, l->dy, l->params[0].w, wb, &l->geom));
  return tsr__tiles_conv_bwd_filter(o, l->params[0].g, l->params[1].g, l->scratch[PARTIAL_W],
                                    l->scratch[PARTIAL_B], x, l->dy, &l->geom);
}

static const tsr_layer_ops_t conv_ops = {"conv", conv_forward, conv_backward};

/* Strides default to 1, kernel_w to kernel_h (square), padding to 0. */
static int conv_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  g->kh = s->kernel_h, g->kw = s->kernel_w > 0 ? s->kernel_w : s->kernel_h;
  g->sh = s->stride_h > 0 ? s->stride_h : 1, g->sw = s->stride_w > 0 ? s->stride_w : g->sh;
  g->ph = s->pad_h, g->pw = s->pad_w;
  if (s->units <= 0 || g->kh <= 0 || g->kw <= 0 || s->stride_h < 0 || s->stride_w < 0 ||
      g->ph < 0 || g->pw < 0 || g->ph >= g->kh || g->pw >= g->kw)
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d (conv): needs filters > 0, a kernel > 0, strides >= 1 and "
                         "padding smaller than the kernel (got %d filters, kernel %dx%d, stride "
                         "%dx%d, padding %dx%d)",
                         at->index, s->units, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw);
  if (s->in_channels > 0 && s->in_channels != g->c)
    return tsr_error_set(at->err, TSR_ESHAPE,
                         "layer %d (conv %dx%d, %d filters): in_channels = %d, but its input is "
                         "%dx%dx%d (h x w x c) with %d channels",
                         at->index, g->kh, g->kw, s->units, s->in_channels, g->h, g->w, g->c, g->c);
  if (g->h + 2 * g->ph < g->kh || g->w + 2 * g->pw < g->kw)
    return tsr_error_set(at->err, TSR_ESHAPE,
                         "layer %d (conv): kernel %dx%d is larger than its input %dx%dx%d (h x w "
                         "x c) with padding %dx%d",
                         at->index, g->kh, g->kw, g->h, g->w, g->c, g->ph, g->pw);
  g->oc = s->units;
  g->oh = (g->h + 2 * g->ph - g->kh) / g->sh + 1;
  g->ow = (g->w + 2 * g->pw - g->kw) / g->sw + 1;
  return 0;
}

/* W (kh kw c, oc) and b (1, oc), one tile each; with more than one batch-row tile, the
 * per-tile gradient partials of tiles 1.. (tsr__tiles_conv_bwd_filter); the weights in the
 * layout oneDNN's primitive for a full batch-row tile takes, forward and for the input gradient,
 * where the kernels may be oneDNN's and it wants its own (a pass over the weights once a step
 * instead of once a tile); the lowered input of one batch-row tile as each worker's workspace.
 * Bands (--domain rows) keep their own (src/tile/domain.h). */
static void conv_layout(tsr_net_layout_t *lay, tsr_layout_layer_t *l) {
  const tsr_conv_geom_t *g = &l->geom;
  int fan_in = g->kh * g->kw * g->c, mt = (lay->batch + lay->mb - 1) / lay->mb;
  int rows = lay->mb < lay->batch ? lay->mb : lay->batch;
  l->nparams = 2;
  l->params[0] = (tsr_layout_matrix_t){fan_in, g->oc, fan_in, g->oc, true};
  l->params[1] = (tsr_layout_matrix_t){1, g->oc, 1, g->oc, false};
  bool partials = mt > 1 && !l->domain;
  l->scratch[PARTIAL_W] =
      (tsr_layout_matrix_t){partials ? (int64_t)(mt - 1) * fan_in : 0, g->oc, fan_in, g->oc, false};
  l->scratch[PARTIAL_B] = (tsr_layout_matrix_t){partials ? mt - 1 : 0, g->oc, 1, g->oc, false};
  int64_t fwd = 0, bwd = 0;
  if (!l->domain && tsr_runtime_kernels() != TSR_KERNELS_BLIS) {
    fwd = (int64_t)tsr__k_dnnl_conv_wfloats(g, rows, 0, l->relu);
    if (l->has_dx) bwd = (int64_t)tsr__k_dnnl_conv_wfloats(g, rows, 1, false);
  }
  l->scratch[WB_FWD] = (tsr_layout_matrix_t){fwd ? 1 : 0, fwd, 1, fwd, false};
  l->scratch[WB_BWD] = (tsr_layout_matrix_t){bwd ? 1 : 0, bwd, 1, bwd, false};
  l->nscratch = 4;
  l->workspace = (int64_t)tsr__k_conv_work(g, lay->mb);
  if (l->folds_bn) { /* evaluation's folded task (conv_bn_fwd) */
    int64_t folded = (int64_t)tsr__k_conv_bn_work(g, lay->mb, lay->layers[l->folds_bn - 1].relu);
    if (folded > l->workspace) l->workspace = folded;
  }
}

/* One task per batch-row tile and pass (forward, input gradient when computed, filter
 * gradient), the pairwise tree of the per-tile gradients and the update. The chain: tile 0's
 * forward, then its input gradient (or filter gradient). */
static double conv_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l,
                        tsr_cost_sink_t *c, double *bwd) {
  const tsr_conv_geom_t *g = &l->geom;
  int mb = c->mb, mt = tsr__cost_ntiles(c->batch, mb);
  double share = tsr__cost_rows_share(lay, l); /* row 0's band under --domain rows */
  double per_sample =
      share * tsr__gemm_flops((int64_t)g->oh * g->ow, g->oc, (int64_t)g->kh * g->kw * g->c);
  double r_fwd = c->conv_rate(c, g, mb, 0), r_dx = c->conv_rate(c, g, mb, 1),
         r_dw = c->conv_rate(c, g, mb, 2);
  double chain = 0, before = c->work(c);
  for (int i = 0; i < mt; i++) {
    int m = tsr__cost_tsize(c->batch, mb, i);
    double bytes = 4.0 * m * share * ((double)l->fin + l->fout);
    double t = c->task(c, per_sample * m, r_fwd, bytes);
    if (i == 0) chain += t;
  }
  before = c->work(c);
  double bchain = 0;
  for (int i = 0; i < mt; i++) {
    int m = tsr__cost_tsize(c->batch, mb, i);
    double bytes = 4.0 * m * share * ((double)l->fin + l->fout);
    double t = 0;
    if (l->has_dx) t = c->task(c, per_sample * m, r_dx, bytes);
    double f = c->task(c, per_sample * m, r_dw, bytes);
    if (i == 0) bchain = l->has_dx ? t : f;
  }
  double fan = (double)g->kh * g->kw * g->c * g->oc + g->oc;
  for (int i = 1; i < mt; i++) /* the pairwise tree of per-tile gradients */
    c->task(c, 0, 1, 4.0 * 3 * fan);
  c->update(c, fan);
  *bwd = c->work(c) - before;
  return chain + bchain;
}

/* Per output pixel and channel: kh kw c multiply-adds and the bias. */
static double conv_flops(const tsr_layout_layer_t *l) {
  const tsr_conv_geom_t *g = &l->geom;
  return (double)g->oh * g->ow * g->oc * (2.0 * g->kh * g->kw * g->c + 1);
}

/* The parameters and partials exist (layout): initialized as net->opts.init says, with a
 * fan-in of kh kw c. */
static int conv_create(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_site_t *at) {
  const tsr_conv_geom_t *g = &l->geom;
  return tsr__init_params(l->params, g->kh * g->kw * g->c, g->oc, net->opts.init, at->init_std,
                          at->rng);
}

/* "conv3x3/32", then the strides when not 1 and the padding when not 0. */
static int conv_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  int kw = s->kernel_w > 0 ? s->kernel_w : s->kernel_h;
  int sh = s->stride_h, sw = s->stride_w > 0 ? s->stride_w : s->stride_h;
  char stride[32] = "", pad[32] = "";
  if (sh > 1) snprintf(stride, sizeof stride, "s%dx%d", sh, sw);
  if (s->pad_h || s->pad_w) snprintf(pad, sizeof pad, "p%dx%d", s->pad_h, s->pad_w);
  return snprintf(buf, size, "conv%dx%d/%d%s%s", s->kernel_h, kw, s->units, stride, pad);
}

static const tsr_layer_key_t conv_keys[] = {
    {"filters", "units", TSR_KEY_COUNT, TSR_SPEC_FIELD(units), 0,
     "is a conv layer without 'filters'; add filters = N"},
    {"kernel", NULL, TSR_KEY_SIZE, TSR_SPEC_FIELD(kernel_h), TSR_SPEC_FIELD(kernel_w),
     "has no 'kernel'; add kernel = K or kernel = KHxKW"},
    {"stride", NULL, TSR_KEY_SIZE, TSR_SPEC_FIELD(stride_h), TSR_SPEC_FIELD(stride_w), NULL},
    {"padding", NULL, TSR_KEY_PADDING, TSR_SPEC_FIELD(pad_h), TSR_SPEC_FIELD(pad_w), NULL},
    {"activation", NULL, TSR_KEY_ACTIVATION, 0, 0, NULL},
    {"in_channels", NULL, TSR_KEY_COUNT, TSR_SPEC_FIELD(in_channels), 0, NULL},
    {0},
};

const tsr_layer_type_t tsr__conv_type = {
    .kind = TSR_LAYER_CONV,
    .name = "conv",
    .alias = "conv2d",
    .param_names = tsr__weight_bias,
    .keys = conv_keys,
    .whole_samples = true,
    .splits_rows = true,
    .fuses_relu = true,
    .defers_relu_grad = true,
    .folds_in = true,
    .shape = conv_shape,
    .layout = conv_layout,
    .cost = conv_cost,
    .flops = conv_flops,
    .ops = &conv_ops,
    .create = conv_create,
    .describe = conv_describe,
};
