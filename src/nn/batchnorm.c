/* Batch normalization layers: per channel of h x w x c samples (channels-last rows), per
 * feature of 1 x 1 x F ones, with a learnable scale (init 1) and shift (init 0) of C values
 * each, and a following ReLU fused into the normalize task. Training normalizes with the
 * batch's statistics (biased variance) and updates running mean and unbiased running variance
 * with PyTorch's momentum; evaluation normalizes with the running statistics. Whole samples,
 * cut into batch-row tiles. With the batchnorm type's registry descriptor (layers.h). */
#include <stdio.h>
#include <stdlib.h>

#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

/* Any sample shape: C = its channels (its features when it is 1 x 1 x F); the output has the
 * input's shape. */
static int bn_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  if (!(s->momentum >= 0.0f && s->momentum <= 1.0f) || !(s->eps >= 0.0f && s->eps <= 1.0f))
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d (batchnorm): momentum and eps must be in (0, 1] (got %g, %g)",
                         at->index, (double)s->momentum, (double)s->eps);
  g->oc = g->c, g->oh = g->h, g->ow = g->w;
  return 0;
}

/* scale (1, C) and shift (1, C), one tile each, without weight decay; the buffers running
 * mean and running variance (1, C); scratch: the partials (mt 3, C), one (3, C) tile per
 * batch-row tile, and the statistics (3, C); workspace: 2 C doubles. */
static void bn_layout(tsr_net_layout_t *lay, tsr_layout_layer_t *l) {
  int c = l->geom.c, mt = (lay->batch + lay->mb - 1) / lay->mb;
  l->nparams = 2;
  l->params[0] = (tsr_layout_matrix_t){1, c, 1, c, false};
  l->params[1] = (tsr_layout_matrix_t){1, c, 1, c, false};
  l->nbuffers = 2;
  l->buffers[0] = (tsr_layout_matrix_t){1, c, 1, c, false};
  l->buffers[1] = (tsr_layout_matrix_t){1, c, 1, c, false};
  l->nscratch = 2;
  l->scratch[0] = (tsr_layout_matrix_t){3 * (int64_t)mt, c, 3, c, false};
  l->scratch[1] = (tsr_layout_matrix_t){3, c, 3, c, false};
  l->workspace = 4 * (int64_t)c;
}

/* The tasks as bn_forward and bn_backward submit them, each memory-bound (bytes read and
 * written). Forward: per batch-row tile the statistics (x and its partial) and normalize (x,
 * y, the statistics, scale and shift), the tree's mt - 1 combines, one finalize. Backward: per
 * tile the sums (dy, x, y with a fused ReLU, the statistics, the partial) and, when computed,
 * the input gradient (dx, dy, x, y with a ReLU, the statistics, scale, the sums); the tree; the
 * parameters' gradients; two updates. The chain: tile 0's statistics, the tree's depth, the
 * finalize and tile 0's normalize; then tile 0's sums, the depth, and the input gradient (or
 * the gradients and an update). */
static double bn_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l, tsr_cost_sink_t *c,
                      double *bwd) {
  int mb = c->mb, mt = tsr__cost_ntiles(c->batch, mb), depth = 0;
  double share = tsr__cost_rows_share(lay, l); /* row 0's band under --domain rows */
  double ch = l->geom.c, relu = l->relu ? 1 : 0;
  for (int s = 1; s < mt; s *= 2)
    depth++;
  double fwd = 0, bchain = 0, tree = 0;
  for (int i = 0; i < mt; i++) {
    double n = share * tsr__cost_tsize(c->batch, mb, i) * l->fin;
    double t = c->task(c, 0, 1, 4.0 * (n + 3 * ch));
    double u = c->task(c, 0, 1, 4.0 * (2 * n + 5 * ch));
    if (i == 0) fwd = t + u;
  }
  for (int i = 1; i < mt; i++)
    tree = c->task(c, 0, 1, 4.0 * 9 * ch);
  fwd += depth * tree + c->task(c, 0, 1, 4.0 * 10 * ch);
  double before = c->work(c);
  for (int i = 0; i < mt; i++) {
    double n = share * tsr__cost_tsize(c->batch, mb, i) * l->fin;
    double t = c->task(c, 0, 1, 4.0 * ((2 + relu) * n + 6 * ch));
    if (l->has_dx) t += c->task(c, 0, 1, 4.0 * ((3 + relu) * n + 7 * ch));
    if (i == 0) bchain = t;
  }
  for (int i = 1; i < mt; i++)
    tree = c->task(c, 0, 1, 4.0 * 9 * ch);
  double grads = c->task(c, 0, 1, 4.0 * 5 * ch);
  c->update(c, ch);
  double upd = c->update(c, ch);
  *bwd = c->work(c) - before;
  return fwd + bchain + depth * tree + (l->has_dx ? 0 : grads + upd);
}

/* The spec's momentum and eps, or PyTorch's defaults; tsr_net_stats_step's for its pass. */
static float bn_momentum(const tsr_net_t *net, const tsr_layer_t *l) {
  if (net->bn_momentum > 0.0f) return net->bn_momentum;
  return l->spec.momentum > 0.0f ? l->spec.momentum : 0.1f;
}
float tsr__bn_eps(const tsr_layer_t *l) {
  return l->spec.eps > 0.0f ? l->spec.eps : 1e-5f;
}

/* Training: the partials of the batch's real rows (net->valid), their tree, the hook
 * (--sync-bn: every rank's batch), then mean and 1 / std (moving the running statistics) and
 * normalize. Evaluation: 1 / std from the running statistics, then normalize. A batch whose
 * channels see fewer than 2 values (one sample of 1 x 1 x F) keeps the running statistics as
 * they were and is not counted. */
static int bn_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *xs, bool train,
                      const tsr_task_opts_t *o) {
  const tsr_tiles_t *x = xs[0];
  int hw = l->geom.h * l->geom.w;
  tsr_tiles_t *p = l->scratch[0], *s = l->scratch[1], *mean = l->buffers[0], *var = l->buffers[1];
  if (!train && l->lay->folded) return 0; /* its convolution's task computed y (conv.c) */
  if (l->domain) { /* --domain rows: x in bands of image rows, the statistics the column's */
    if (!train) {
      TSR_TRY(tsr__tiles_bn_finalize(o, s, NULL, mean, var, 0.0f, tsr__bn_eps(l), false));
    } else {
      TSR_TRY(tsr__domain_bn_reduce(o, l->domain, p, x, NULL, NULL, NULL, net->valid, false,
                                    &net->traffic));
      if (net->on_stats.fn) TSR_TRY(net->on_stats.fn(net, p, false, o, net->on_stats.ctx));
      TSR_TRY(
          tsr__tiles_bn_finalize(o, s, p, mean, var, bn_momentum(net, l), tsr__bn_eps(l), true));
      if (net->on_stats.fn || (int64_t)net->valid * hw >= 2) l->batches_tracked++;
    }
    return tsr__domain_bn_normalize(o, l->domain, l->y, x, s, l->params[0].w, l->params[1].w,
                                    l->relu);
  }
  if (!train) {
    TSR_TRY(tsr__tiles_bn_finalize(o, s, NULL, mean, var, 0.0f, tsr__bn_eps(l), false));
  } else {
    /* folded: the convolution's tasks computed the partials (conv.c) */
    if (!l->lay->folded) TSR_TRY(tsr__tiles_bn_stats(o, p, x, hw, net->valid));
    if (net->on_stats.fn) TSR_TRY(net->on_stats.fn(net, p, false, o, net->on_stats.ctx));
    TSR_TRY(tsr__tiles_bn_finalize(o, s, p, mean, var, bn_momentum(net, l), tsr__bn_eps(l), true));
    if (net->on_stats.fn || (int64_t)net->valid * hw >= 2) l->batches_tracked++;
  }
  return tsr__tiles_bn_normalize(o, l->y, x, s, l->params[0].w, l->params[1].w, hw, l->relu);
}

/* The sums of dy and dy xhat over the batch's real rows by the same tree, the parameters'
 * gradients from this rank's sums, the hook (--sync-bn: the sums of every rank's batch), then
 * the input gradient at the highest priority. A fused ReLU's backward is inside the sums and
 * the input gradient (they read y). */
static int bn_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *xs,
                       tsr_tiles_t *const *dxs, const tsr_task_opts_t *o) {
  const tsr_tiles_t *x = xs[0];
  tsr_tiles_t *dx = dxs[0], *p = l->scratch[0], *s = l->scratch[1];
  int hw = l->geom.h * l->geom.w;
  tsr_task_opts_t critical = tsr__net_critical(o);
  if (l->domain) {
    TSR_TRY(tsr__domain_bn_reduce(o, l->domain, p, x, l->dy, l->y, s, net->valid, l->relu,
                                  &net->traffic));
    TSR_TRY(tsr__tiles_bn_params_grad(o, l->params[0].g, l->params[1].g, p));
    if (!dx) return 0;
    if (net->on_stats.fn) TSR_TRY(net->on_stats.fn(net, p, true, o, net->on_stats.ctx));
    return tsr__domain_bn_dx(&critical, l->domain, dx, l->dy, x, l->y, s, l->params[0].w, p,
                             net->valid, l->relu);
  }
  TSR_TRY(tsr__tiles_bn_sums(o, p, l->dy, x, l->y, s, hw, net->valid, l->relu));
  TSR_TRY(tsr__tiles_bn_params_grad(o, l->params[0].g, l->params[1].g, p));
  if (!dx) return 0;
  if (net->on_stats.fn) TSR_TRY(net->on_stats.fn(net, p, true, o, net->on_stats.ctx));
  return tsr__tiles_bn_dx(&critical, dx, l->dy, x, l->y, s, l->params[0].w, p, hw, net->valid,
                          l->relu);
}

static const tsr_layer_ops_t bn_ops = {"batchnorm", bn_forward, bn_backward};

/* A batch of one sample has no statistics per feature (1 x 1 x F inputs): refused, as PyTorch
 * refuses it. */
static int bn_check_batch(const tsr_layout_layer_t *l, int batch, tsr_errbuf_t *err) {
  if (batch >= 2 || l->geom.h * l->geom.w > 1) return 0;
  return tsr_error_set(err, TSR_EINVAL,
                       "layer %d (batchnorm over %d features): a batch of 1 sample has no "
                       "statistics per feature to normalize with (PyTorch refuses it too); "
                       "train with a batch of 2 or more samples per rank",
                       l->index, l->geom.c);
}

/* scale 1, shift 0, running mean 0, running variance 1 (the net made them zero), after
 * bn_check_batch. */
static int bn_create(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_site_t *at) {
  int c = l->geom.c;
  TSR_TRY(bn_check_batch(l->lay, net->batch, at->err));
  float *ones = malloc(sizeof *ones * (size_t)c);
  if (!ones) return TSR_ENOMEM;
  for (int k = 0; k < c; k++)
    ones[k] = 1.0f;
  int rc = tsr_tiles_write_owned(l->params[0].w, ones);
  if (rc == 0) rc = tsr_tiles_write_owned(l->buffers[1], ones);
  free(ones);
  return rc;
}

/* "batchnorm", then "/momentum0.2" and "/eps0.001" where they are not the defaults. */
static int bn_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  char m[32] = "", e[32] = "";
  if (s->momentum != 0.0f) snprintf(m, sizeof m, "/momentum%g", (double)s->momentum);
  if (s->eps != 0.0f) snprintf(e, sizeof e, "/eps%g", (double)s->eps);
  return snprintf(buf, size, "batchnorm%s%s", m, e);
}

static const char *const bn_buffers[] = {"running_mean", "running_var", NULL};

static const tsr_layer_key_t bn_keys[] = {
    {"activation", NULL, TSR_KEY_ACTIVATION, 0, 0, NULL},
    {"momentum", NULL, TSR_KEY_FRACTION, TSR_SPEC_FIELD(momentum), 0, NULL},
    {"eps", NULL, TSR_KEY_FRACTION, TSR_SPEC_FIELD(eps), 0, NULL},
    {0},
};

/* tessera summary: per element, the mean subtracted, the inverse deviation, the scale and the
 * shift applied (evaluation's 4; training's batch statistics add about 3 more). */
static double bn_flops(const tsr_layout_layer_t *l) {
  return 4.0 * l->fout;
}

const tsr_layer_type_t tsr__batchnorm_type = {
    .kind = TSR_LAYER_BATCHNORM,
    .name = "batchnorm",
    .param_names = tsr__weight_bias,
    .keys = bn_keys,
    .whole_samples = true,
    .fuses_relu = true,
    .buffer_names = bn_buffers,
    .counter_name = "num_batches_tracked",
    .batch_stats = true,
    .folds_out = true,
    .check_batch = bn_check_batch,
    .shape = bn_shape,
    .layout = bn_layout,
    .cost = bn_cost,
    .flops = bn_flops,
    .ops = &bn_ops,
    .create = bn_create,
    .describe = bn_describe,
};
