/* Max, mean and global mean pooling layers over each channel, on batch-row tiles of whole
 * samples (channels-last rows). The stride defaults to the kernel (non-overlapping windows);
 * padding, at most half the kernel as PyTorch requires, never wins a max (it counts as -inf)
 * and counts as zeros in a mean (PyTorch's count_include_pad=True: the divisor is always
 * kh kw). Max pooling stores no argmax: its backward task finds each window's maximum again
 * from x and y. globalavgpool is mean pooling over the whole sample, (h, w, c) -> (1, 1, c),
 * on the same tasks. With the maxpool, avgpool and globalavgpool registry descriptors
 * (layers.h). */
#include <stdio.h>

#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

static bool is_max(const tsr_layer_t *l) {
  return l->spec.kind == TSR_LAYER_MAXPOOL;
}

static int pool_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                        const tsr_task_opts_t *o) {
  (void)train;
  if (l->domain) return tsr__domain_pool_fwd(o, l->domain, l->y, x[0], is_max(l), &net->traffic);
  return tsr__tiles_pool_fwd(o, l->y, x[0], &l->geom, is_max(l));
}

static int pool_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                         tsr_tiles_t *const *dx, const tsr_task_opts_t *o) {
  tsr_task_opts_t critical = tsr__net_critical(o);
  if (l->domain)
    return tsr__domain_pool_bwd(&critical, l->domain, dx[0], l->dy, l->y, is_max(l),
                                l->relu_grad_in, &net->traffic);
  return dx[0] ? tsr__tiles_pool_bwd(&critical, dx[0], l->dy, x[0], l->y, &l->geom, is_max(l),
                                     l->relu_grad_in)
               : 0;
}

static const tsr_layer_ops_t maxpool_ops = {"maxpool", pool_forward, pool_backward};
static const tsr_layer_ops_t avgpool_ops = {"avgpool", pool_forward, pool_backward};
static const tsr_layer_ops_t globalavgpool_ops = {"globalavgpool", pool_forward, pool_backward};

static int pool_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  const char *name = s->kind == TSR_LAYER_MAXPOOL ? "maxpool" : "avgpool";
  g->kh = s->kernel_h, g->kw = s->kernel_w > 0 ? s->kernel_w : s->kernel_h;
  g->sh = s->stride_h > 0 ? s->stride_h : g->kh;
  g->sw = s->stride_w > 0 ? s->stride_w : s->stride_h > 0 ? g->sh : g->kw;
  g->ph = s->pad_h, g->pw = s->pad_w;
  if (g->kh <= 0 || g->kw <= 0 || s->stride_h < 0 || s->stride_w < 0 || g->ph < 0 || g->pw < 0 ||
      g->ph > g->kh / 2 || g->pw > g->kw / 2)
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d (%s): needs a kernel > 0, strides >= 1 and padding at most "
                         "half the kernel (got kernel %dx%d, stride %dx%d, padding %dx%d)",
                         at->index, name, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw);
  if (g->h + 2 * g->ph < g->kh || g->w + 2 * g->pw < g->kw)
    return tsr_error_set(at->err, TSR_ESHAPE,
                         "layer %d (%s): kernel %dx%d is larger than its input %dx%dx%d (h x w x "
                         "c)%s",
                         at->index, name, g->kh, g->kw, g->h, g->w, g->c,
                         g->ph || g->pw ? " with its padding" : "");
  g->oc = g->c;
  g->oh = (g->h + 2 * g->ph - g->kh) / g->sh + 1;
  g->ow = (g->w + 2 * g->pw - g->kw) / g->sw + 1;
  return 0;
}

/* After a layer with a fused ReLU that lets its reader apply the ReLU's backward (a
 * convolution) and that only this max pooling reads, the pooling's backward task applies it:
 * one pass over the convolution's output fewer. */
static void pool_layout(tsr_net_layout_t *lay, tsr_layout_layer_t *l) {
  const tsr_layout_layer_t *in = l->in[0].from >= 0 ? &lay->layers[l->in[0].from] : NULL;
  if (l->kind == TSR_LAYER_MAXPOOL && in && in->type->defers_relu_grad && in->relu &&
      in->consumers == 1)
    l->relu_grad_in = true; /* the layout sets the input's relu_grad_by_next */
}

/* Each batch-row tile's forward and backward task (the backward's input gradient where the
 * layer has one), priced by the planner's sink on the tile's shape: under --domain rows, band
 * 0's with its halo. */
static double pool_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l,
                        tsr_cost_sink_t *k, double *bwd) {
  bool max = l->kind == TSR_LAYER_MAXPOOL;
  tsr_conv_geom_t g = l->geom;
  if (l->place == TSR_PLACE_BANDS) {
    int r0, r1, a0, a1;
    tsr__k_band(l->geom.oh, lay->grid_rows, 0, &r0, &r1);
    g = tsr__k_band_window(&l->geom, r0, r1, &a0, &a1);
  }
  double in = (double)g.h * g.w * g.c, out = (double)g.oh * g.ow * g.c, chain = 0;
  *bwd = 0;
  for (int i = 0; i < tsr__cost_ntiles(k->batch, k->mb); i++) {
    int m = tsr__cost_tsize(k->batch, k->mb, i);
    double t = k->pool_task(k, &g, m, max, 0, 4.0 * m * (in + out));
    double b = l->has_dx ? k->pool_task(k, &g, m, max, 1, 4.0 * m * (2 * in + 2 * out)) : 0;
    *bwd += b;
    if (i == 0) chain += t + b;
  }
  return chain;
}

/* Per output: a compare (max) or an add (mean) per element of its window. */
static double pool_flops(const tsr_layout_layer_t *l) {
  const tsr_conv_geom_t *g = &l->geom;
  return (double)g->oh * g->ow * g->oc * g->kh * g->kw;
}

/* (h, w, c) -> (1, 1, c): one window over the whole sample. */
static int globalavgpool_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g,
                               const tsr_layer_site_t *at) {
  (void)s, (void)at;
  g->kh = g->sh = g->h, g->kw = g->sw = g->w, g->ph = g->pw = 0;
  g->oc = g->c, g->oh = g->ow = 1;
  return 0;
}

/* "maxpool2x2", then the strides when they are not the kernel's and the padding when not 0. */
static int pool_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  const char *name = s->kind == TSR_LAYER_MAXPOOL ? "maxpool" : "avgpool";
  int kw = s->kernel_w > 0 ? s->kernel_w : s->kernel_h;
  int sh = s->stride_h, sw = s->stride_w > 0 ? s->stride_w : s->stride_h;
  char stride[32] = "", pad[32] = "";
  if (sh > 0 && (sh != s->kernel_h || sw != kw)) snprintf(stride, sizeof stride, "s%dx%d", sh, sw);
  if (s->pad_h || s->pad_w) snprintf(pad, sizeof pad, "p%dx%d", s->pad_h, s->pad_w);
  return snprintf(buf, size, "%s%dx%d%s%s", name, s->kernel_h, kw, stride, pad);
}

static const tsr_layer_key_t pool_keys[] = {
    {"kernel", NULL, TSR_KEY_SIZE, TSR_SPEC_FIELD(kernel_h), TSR_SPEC_FIELD(kernel_w),
     "has no 'kernel'; add kernel = K or kernel = KHxKW"},
    {"stride", NULL, TSR_KEY_SIZE, TSR_SPEC_FIELD(stride_h), TSR_SPEC_FIELD(stride_w), NULL},
    {"padding", NULL, TSR_KEY_PADDING, TSR_SPEC_FIELD(pad_h), TSR_SPEC_FIELD(pad_w), NULL},
    {0},
};

const tsr_layer_type_t tsr__maxpool_type = {
    .kind = TSR_LAYER_MAXPOOL,
    .name = "maxpool",
    .keys = pool_keys,
    .whole_samples = true,
    .splits_rows = true,
    .shape = pool_shape,
    .layout = pool_layout,
    .cost = pool_cost,
    .flops = pool_flops,
    .ops = &maxpool_ops,
    .describe = pool_describe,
};

const tsr_layer_type_t tsr__avgpool_type = {
    .kind = TSR_LAYER_AVGPOOL,
    .name = "avgpool",
    .keys = pool_keys,
    .whole_samples = true,
    .splits_rows = true,
    .shape = pool_shape,
    .layout = pool_layout,
    .cost = pool_cost,
    .flops = pool_flops,
    .ops = &avgpool_ops,
    .describe = pool_describe,
};

const tsr_layer_type_t tsr__globalavgpool_type = {
    .kind = TSR_LAYER_GLOBALAVGPOOL,
    .name = "globalavgpool",
    .whole_samples = true,
    .splits_rows = true,
    .shape = globalavgpool_shape,
    .cost = tsr__cost_pass,
    .flops = pool_flops, /* an add per input element */
    .ops = &globalavgpool_ops,
};
