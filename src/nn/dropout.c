/* Dropout layers: in training, each feature of each sample is zeroed with
 * probability `rate` and the rest scaled by 1 / (1 - rate); in evaluation
 * the layer passes its input through. The mask is a hash of (net seed, layer,
 * training step, sample row, feature): reproducible from the seed, the same
 * for every tiling, and recomputed by the backward pass instead of stored.
 * With the dropout type's registry descriptor (layers.h). */
#include <stdio.h>

#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

uint64_t tsr__dropout_seed(uint64_t net_seed, int layer_index, uint64_t step) {
  tsr_rng_t r = {net_seed ^ (0x6a09e667f3bcc909ULL * (uint64_t)layer_index)};
  return tsr__rng_next(&r) + 0x9e3779b97f4a7c15ULL * step;
}

static int dropout_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *xs, bool train,
                           const tsr_task_opts_t *o) {
  const tsr_tiles_t *x = xs[0];
  if (!train || l->spec.rate == 0.0f) return tsr__tiles_copy(o, l->y, x);
  l->calls++;
  return tsr__tiles_dropout(o, l->y, x, tsr__dropout_seed(net->opts.seed, l->index, l->calls),
                            l->spec.rate);
}

/* Uses the mask of the latest training forward pass (this step's: forward
 * and backward of a step are submitted one after the other). */
static int dropout_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                            tsr_tiles_t *const *dxs, const tsr_task_opts_t *o) {
  (void)x;
  tsr_tiles_t *dx = dxs[0];
  if (!dx) return 0;
  if (l->spec.rate == 0.0f) return tsr__tiles_copy(o, dx, l->dy);
  return tsr__tiles_dropout(o, dx, l->dy, tsr__dropout_seed(net->opts.seed, l->index, l->calls),
                            l->spec.rate);
}

static const tsr_layer_ops_t dropout_ops = {"dropout", dropout_forward, dropout_backward};

static int dropout_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g,
                         const tsr_layer_site_t *at) {
  if (!(s->rate >= 0.0f && s->rate < 1.0f))
    return tsr_error_set(at->err, TSR_EINVAL, "layer %d (dropout): rate must be in [0, 1) (got %g)",
                         at->index, (double)s->rate);
  g->oc = g->c, g->oh = g->h, g->ow = g->w;
  return 0;
}

/* A multiply per feature in training (the mask and the scale; none in evaluation). */
static double dropout_flops(const tsr_layout_layer_t *l) {
  return l->fout;
}

static int dropout_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  return snprintf(buf, size, "dropout%g", (double)s->rate);
}

static const tsr_layer_key_t dropout_keys[] = {
    {"rate", NULL, TSR_KEY_PROBABILITY, TSR_SPEC_FIELD(rate), 0,
     "is a dropout layer without 'rate'; add rate = P (0 <= P < 1)"},
    {0},
};

const tsr_layer_type_t tsr__dropout_type = {
    .kind = TSR_LAYER_DROPOUT,
    .name = "dropout",
    .keys = dropout_keys,
    .elementwise = true,
    .shape = dropout_shape,
    .cost = tsr__cost_pass,
    .flops = dropout_flops,
    .ops = &dropout_ops,
    .describe = dropout_describe,
};
