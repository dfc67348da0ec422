/* Dense layers (y = x W + b, with a following ReLU fused into the bias add)
 * and standalone ReLU layers, as tiled operations, with their registry
 * descriptors (layers.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

/* Under a grid (l->split) each rank of the column computes its own column
 * tiles, from the input tiles it gathers once per step (src/tile/ops.h). */
static int dense_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *x, bool train,
                         const tsr_task_opts_t *o) {
  (void)train;
  if (l->split) {
    int n = net->grid_rows;
    TSR_TRY(tsr__tiles_spread_gather(o, x, l->gathered, n, l->params[0].w, &net->traffic));
    TSR_TRY(tsr__tiles_spread_gemm(o, x, l->gathered, n, l->params[0].w, l->y));
    return tsr__tiles_bias_add(o, l->y, l->params[1].w, l->relu);
  }
  TSR_TRY(tsr__tiles_gemm(o, false, false, 1.0f, x, l->params[0].w, 0.0f, l->y));
  return tsr__tiles_bias_add(o, l->y, l->params[1].w, l->relu);
}

/* The input gradient goes first (at the highest priority): the layer below
 * waits for it, while the weight gradient has slack until the update. */
static int dense_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *x, tsr_tiles_t *dx,
                          const tsr_task_opts_t *o) {
  if (l->relu) TSR_TRY(tsr__tiles_relu_bwd(o, l->dy, l->dy, l->y));
  tsr_task_opts_t critical = tsr__net_critical(o);
  if (l->split) {
    int n = net->grid_rows;
    if (dx)
      TSR_TRY(tsr__tiles_spread_gemm_nt(&critical, l->dy, l->params[0].w, l->partials, n, dx,
                                        l->dx_sums, &net->traffic));
    TSR_TRY(tsr__tiles_spread_gemm_tn(o, x, l->gathered, n, l->dy, l->params[0].g));
    return tsr__tiles_bias_grad(o, l->params[1].g, l->dy);
  }
  if (dx) TSR_TRY(tsr__tiles_gemm(&critical, false, true, 1.0f, l->dy, l->params[0].w, 0.0f, dx));
  TSR_TRY(tsr__tiles_gemm(o, true, false, 1.0f, x, l->dy, 0.0f, l->params[0].g));
  return tsr__tiles_bias_grad(o, l->params[1].g, l->dy);
}

static const tsr_layer_ops_t dense_ops = {"dense", true, dense_forward, dense_backward};

/* He-uniform weights for ReLU networks (biases stay zero). */
int tsr__init_he_uniform(tsr_tiles_t *w, int fin, int fout, tsr_rng_t *rng) {
  size_t n = (size_t)fin * (size_t)fout;
  float *v = malloc(n * sizeof *v);
  if (!v) return TSR_ENOMEM;
  double bound = sqrt(6.0 / fin);
  for (size_t k = 0; k < n; k++)
    v[k] = (float)((2.0 * tsr__rng_uniform(rng) - 1.0) * bound);
  int rc = tsr_tiles_write_owned(w, v); /* under a grid, this rank's tiles */
  free(v);
  return rc;
}

/* Any input shape is seen as its c h w features; the output is 1 x 1 x units. */
static int dense_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  int fin = g->c * g->h * g->w;
  if (s->units <= 0)
    return tsr_error_set(at->err, TSR_EINVAL, "layer %d: dense units must be positive (got %d)",
                         at->index, s->units);
  if (s->in_features > 0 && s->in_features != fin)
    return tsr_error_set(at->err, TSR_ESHAPE,
                         "layer %d (dense %d): in_features = %d, but its input has %d "
                         "features (%dx%dx%d, h x w x c); set in_features = %d or fix the "
                         "layers before it",
                         at->index, s->units, s->in_features, fin, at->shown.h, at->shown.w,
                         at->shown.c, fin);
  g->oc = s->units, g->oh = 1, g->ow = 1;
  return 0;
}

/* W's rows are tiled like the input's columns (l->in_nb: the feature tile,
 * or whole samples after a convolution); its columns like the output's. With
 * at->whole_out (the logits, or a layer feeding a convolution) the output is
 * one tile wide. */
static int dense_create(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_site_t *at) {
  bool whole = at->whole_out;
  l->ops = &dense_ops;
  l->fout = l->spec.units;
  l->out_nb = whole ? l->fout : net->nb;
  l->nparams = 2;
  TSR_TRY(tsr__net_param_create(net, &l->params[0], l->fin, l->fout, l->in_nb, l->out_nb, true));
  TSR_TRY(tsr__net_param_create(net, &l->params[1], 1, l->fout, 1, l->out_nb, false));
  TSR_TRY(tsr__net_activations(net, l, whole));
  return tsr__init_he_uniform(l->params[0].w, l->fin, l->fout, at->rng);
}

static int dense_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  return snprintf(buf, size, "%d", s->units);
}

static const tsr_layer_key_t dense_keys[] = {
    {"units", NULL, TSR_KEY_COUNT, TSR_SPEC_FIELD(units), 0,
     "is a dense layer without 'units'; add units = N"},
    {"activation", NULL, TSR_KEY_ACTIVATION, 0, 0, NULL},
    {"in_features", NULL, TSR_KEY_COUNT, TSR_SPEC_FIELD(in_features), 0, NULL},
    {0},
};

const tsr_layer_type_t tsr__dense_type = {
    .kind = TSR_LAYER_DENSE,
    .name = "dense",
    .keys = dense_keys,
    .output = true,
    .cuts_features = true,
    .shape = dense_shape,
    .create = dense_create,
    .describe = dense_describe,
};

static int relu_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *x, bool train,
                        const tsr_task_opts_t *o) {
  (void)net, (void)train;
  return tsr__tiles_relu_fwd(o, l->y, x);
}

static int relu_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *x, tsr_tiles_t *dx,
                         const tsr_task_opts_t *o) {
  (void)net, (void)x;
  return dx ? tsr__tiles_relu_bwd(o, dx, l->dy, l->y) : 0;
}

static const tsr_layer_ops_t relu_ops = {"relu", false, relu_forward, relu_backward};

static int relu_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  (void)s, (void)at;
  g->oc = g->c, g->oh = g->h, g->ow = g->w;
  return 0;
}

static int relu_create(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_site_t *at) {
  l->ops = &relu_ops;
  l->fout = l->fin;
  l->out_nb = l->in_nb;
  return tsr__net_activations(net, l, at->last);
}

const tsr_layer_type_t tsr__relu_type = {
    .kind = TSR_LAYER_RELU,
    .name = "relu",
    .elementwise = true,
    .is_relu = true,
    .shape = relu_shape,
    .create = relu_create,
};
