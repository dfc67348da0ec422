/* Layer normalization layers: per position of a sample (each pixel of h x w x c, each token of
 * a T x 1 x D sequence), its c values normalized by their own mean and biased variance (eps
 * 1e-5 or the spec's), then scaled and shifted by learnable (1, c) parameters (init 1 and 0,
 * PyTorch's nn.LayerNorm). No batch statistics: training and evaluation are the same. The
 * forward keeps each position's mean and 1 / std (scratch) for the backward; the parameters'
 * gradients are per-tile partials summed by a fixed tree. Whole samples, cut into batch-row
 * tiles. With the layernorm type's registry descriptor (layers.h). */
#include <stdio.h>
#include <stdlib.h>

#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

/* The spec's eps or PyTorch's default. */
static float ln_eps(const tsr_layer_t *l) {
  return l->spec.eps > 0.0f ? l->spec.eps : 1e-5f;
}

static int ln_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                      const tsr_task_opts_t *o) {
  (void)net, (void)train;
  return tsr__tiles_layernorm_fwd(o, l->y, l->scratch[0], x[0], l->params[0].w, l->params[1].w,
                                  ln_eps(l));
}

/* The input gradient and the tile's partials are one task: at the input gradient's priority. */
static int ln_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                       tsr_tiles_t *const *dx, const tsr_task_opts_t *o) {
  (void)net;
  tsr_task_opts_t critical = tsr__net_critical(o);
  return tsr__tiles_layernorm_bwd(dx[0] ? &critical : o, dx[0], l->scratch[1], l->params[0].g,
                                  l->params[1].g, l->dy, x[0], l->params[0].w, l->scratch[0]);
}

static const tsr_layer_ops_t ln_ops = {"layernorm", ln_forward, ln_backward};

/* Any sample shape: per position (h w of them) over its c channels; the output has the input's
 * shape. */
static int ln_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  if (!(s->eps >= 0.0f && s->eps <= 1.0f))
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d (layernorm): eps must be in (0, 1] (got %g); leave it out for "
                         "PyTorch's 1e-5",
                         at->index, (double)s->eps);
  g->oc = g->c, g->oh = g->h, g->ow = g->w;
  return 0;
}

/* scale and shift (1, C), one tile each, without weight decay; scratch: each position's [mean,
 * 1 / std] (batch, 2 P) tiled as the batch's rows, and the gradient partials (mt 2, C) in one
 * (2, C) tile per batch-row tile. */
static void ln_layout(tsr_net_layout_t *lay, tsr_layout_layer_t *l) {
  int c = l->geom.c, p = l->geom.h * l->geom.w, mt = (lay->batch + lay->mb - 1) / lay->mb;
  l->nparams = 2;
  l->params[0] = (tsr_layout_matrix_t){1, c, 1, c, false};
  l->params[1] = (tsr_layout_matrix_t){1, c, 1, c, false};
  l->nscratch = 2;
  l->scratch[0] = (tsr_layout_matrix_t){lay->batch, 2 * (int64_t)p, lay->mb, 2 * p, false};
  l->scratch[1] = (tsr_layout_matrix_t){2 * (int64_t)mt, c, 2, c, false};
}

/* Per batch-row tile a forward task (x in, y and the statistics out) and a backward task (dy, x,
 * the statistics in; dx when computed and the partial out); the tree's mt - 1 adds, the two
 * bands out of the sum, two updates. The chain: tile 0's forward and backward, then (without an
 * input gradient) the tree's depth, the bands and an update. */
static double ln_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l, tsr_cost_sink_t *c,
                      double *bwd) {
  (void)lay;
  int mb = c->mb, mt = tsr__cost_ntiles(c->batch, mb), depth = 0, p = l->geom.h * l->geom.w;
  double ch = l->geom.c, fwd = 0, bchain = 0, add = 0;
  for (int s = 1; s < mt; s *= 2)
    depth++;
  for (int i = 0; i < mt; i++) {
    double m = tsr__cost_tsize(c->batch, mb, i), n = m * l->fin;
    double t = c->task(c, 0, 1, 4.0 * (2 * n + 2 * m * p + 2 * ch));
    if (i == 0) fwd = t;
  }
  double before = c->work(c);
  for (int i = 0; i < mt; i++) {
    double m = tsr__cost_tsize(c->batch, mb, i), n = m * l->fin;
    double t = c->task(c, 0, 1, 4.0 * ((l->has_dx ? 3 : 2) * n + 2 * m * p + 3 * ch));
    if (i == 0) bchain = t;
  }
  for (int i = 1; i < mt; i++)
    add = c->task(c, 0, 1, 4.0 * 6 * ch);
  double bands = c->task(c, 0, 1, 4.0 * 3 * ch);
  bands += c->task(c, 0, 1, 4.0 * 3 * ch);
  c->update(c, ch);
  double upd = c->update(c, ch);
  *bwd = c->work(c) - before;
  return fwd + bchain + (l->has_dx ? 0 : depth * add + bands + upd);
}

/* Per value: the mean's add, the variance's subtract, multiply and add, the normalization's
 * subtract and multiply, the scale and the shift. */
static double ln_flops(const tsr_layout_layer_t *l) {
  return 8.0 * l->fout;
}

/* scale 1, shift 0 (the net made it zero), whatever the initialization. */
static int ln_create(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_site_t *at) {
  (void)net, (void)at;
  int c = l->geom.c;
  float *ones = malloc(sizeof *ones * (size_t)c);
  if (!ones) return TSR_ENOMEM;
  for (int k = 0; k < c; k++)
    ones[k] = 1.0f;
  int rc = tsr_tiles_write_owned(l->params[0].w, ones);
  free(ones);
  return rc;
}

/* "layernorm", then "/eps0.001" where it is not the default. */
static int ln_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  char e[32] = "";
  if (s->eps != 0.0f) snprintf(e, sizeof e, "/eps%g", (double)s->eps);
  return snprintf(buf, size, "layernorm%s", e);
}

static const tsr_layer_key_t ln_keys[] = {
    {"eps", NULL, TSR_KEY_FRACTION, TSR_SPEC_FIELD(eps), 0, NULL},
    {0},
};

const tsr_layer_type_t tsr__layernorm_type = {
    .kind = TSR_LAYER_LAYERNORM,
    .name = "layernorm",
    .param_names = tsr__weight_bias,
    .no_grid = true,
    .keys = ln_keys,
    .whole_samples = true,
    .shape = ln_shape,
    .layout = ln_layout,
    .cost = ln_cost,
    .flops = ln_flops,
    .ops = &ln_ops,
    .create = ln_create,
    .describe = ln_describe,
};
