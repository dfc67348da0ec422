/* Dense layers (y = x W + b, with a following ReLU fused into the bias add)
 * and standalone ReLU layers, as tiled operations, with their registry
 * descriptors (layers.h): shapes, parameters, the tasks' costs, forward and backward.
 * Outside a grid the element-wise passes ride on the GEMM tasks (codelets/gemm_ep.c): the
 * bias and ReLU on the forward GEMM, the bias gradient on the weight gradient's, and the
 * backward of the ReLU before a dense layer on that layer's input-gradient GEMM (the producer
 * lets it: defers_relu_grad), so a dense layer is GEMM tasks and its updates alone; and where the
 * update is an SGD step that nothing else waits to see (tsr__net_fused_step), the last GEMM task
 * of each weight gradient tile takes it (gemm_sgd), so a dense layer is GEMM tasks alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

/* Under a grid (l->split) each rank of the column computes its own column
 * tiles, from the input tiles it gathers once per step (src/tile/ops.h). */
static int dense_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *xs, bool train,
                         const tsr_task_opts_t *o) {
  (void)train;
  const tsr_tiles_t *x = xs[0];
  if (l->split) {
    int n = net->grid_rows;
    TSR_TRY(tsr__tiles_spread_gather(o, x, l->gathered, n, l->params[0].w, &net->traffic));
    TSR_TRY(tsr__tiles_spread_gemm(o, x, l->gathered, n, l->params[0].w, l->y));
    return tsr__tiles_bias_add(o, l->y, l->params[1].w, l->relu);
  }
  return tsr__tiles_gemm_bias(o, x, l->params[0].w, l->params[1].w, l->relu, l->y);
}

/* The input gradient goes first (at the highest priority): the layer below
 * waits for it, while the weight gradient has slack until the update. */
static int dense_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *xs,
                          tsr_tiles_t *const *dxs, const tsr_task_opts_t *o) {
  const tsr_tiles_t *x = xs[0];
  tsr_tiles_t *dx = dxs[0];
  if (l->relu && !l->relu_grad_by_next) TSR_TRY(tsr__tiles_relu_bwd(o, l->dy, l->dy, l->y));
  tsr_task_opts_t critical = tsr__net_critical(o);
  if (l->split) {
    int n = net->grid_rows;
    if (dx)
      TSR_TRY(tsr__tiles_spread_gemm_nt(&critical, l->dy, l->params[0].w, l->partials, n, dx,
                                        l->dx_sums, &net->traffic));
    TSR_TRY(tsr__tiles_spread_gemm_tn(o, x, l->gathered, n, l->dy, l->params[0].g));
    return tsr__tiles_bias_grad(o, l->params[1].g, l->dy);
  }
  /* The input's ReLU (its producer's, fused there) gated on the input gradient's GEMM. */
  if (dx && l->relu_grad_in)
    TSR_TRY(tsr__tiles_gemm_gate(&critical, l->dy, l->params[0].w, x, dx));
  else if (dx)
    TSR_TRY(tsr__tiles_gemm(&critical, false, true, 1.0f, l->dy, l->params[0].w, 0.0f, dx));
  /* The update, where it may, in the tasks that complete each gradient tile. */
  tsr_sgd_step_t step;
  bool fused = tsr__net_fused_step(net, l, o, &step);
  return tsr__tiles_gemm_dbias(o, x, l->dy, l->params[0].g, l->params[1].g, fused ? &step : NULL);
}

static const tsr_layer_ops_t dense_ops = {"dense", dense_forward, dense_backward};

/* n values U(-bound, bound) from rng into t (under a grid, this rank's tiles). */
static int init_uniform(tsr_tiles_t *t, size_t n, double bound, tsr_rng_t *rng) {
  float *v = malloc(n * sizeof *v);
  if (!v) return TSR_ENOMEM;
  for (size_t k = 0; k < n; k++)
    v[k] = (float)((2.0 * tsr__rng_uniform(rng) - 1.0) * bound);
  int rc = tsr_tiles_write_owned(t, v);
  free(v);
  return rc;
}

int tsr__init_normal(tsr_tiles_t *t, size_t n, double std, tsr_rng_t *rng) {
  float *v = malloc(n * sizeof *v);
  if (!v) return TSR_ENOMEM;
  for (size_t k = 0; k < n; k++)
    v[k] = (float)(std * tsr__rng_normal(rng));
  int rc = tsr_tiles_write_owned(t, v);
  free(v);
  return rc;
}

/* TSR_INIT_HE: He-uniform weights for ReLU networks, biases left zero (the draws of tessera
 * before --init). TSR_INIT_PYTORCH: nn.Linear's and nn.Conv2d's reset_parameters, weights
 * and then biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)). TSR_INIT_GPT2: weights normal(0, std),
 * biases left zero. */
int tsr__init_params(tsr_param_t *params, int fin, int fout, tsr_init_t init, double std,
                     tsr_rng_t *rng) {
  size_t n = (size_t)fin * (size_t)fout;
  if (init == TSR_INIT_HE) return init_uniform(params[0].w, n, sqrt(6.0 / fin), rng);
  if (init == TSR_INIT_GPT2) return tsr__init_normal(params[0].w, n, std, rng);
  double bound = 1.0 / sqrt((double)fin);
  TSR_TRY(init_uniform(params[0].w, n, bound, rng));
  return init_uniform(params[1].w, (size_t)fout, bound, rng);
}

/* Any input shape is seen as its c h w features; the output is 1 x 1 x units. */
static int dense_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  int fin = g->c * g->h * g->w;
  if (s->units == TSR_UNITS_CLASSES)
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d: dense units = classes, but the classes were not given "
                         "(tsr_model_bind_classes)",
                         at->index);
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

/* W (fin, fout), its rows tiled like the input's columns (l->in_nb: the feature tile, or whole
 * samples after a convolution), its columns like the output's; b (1, fout). */
static void dense_layout(tsr_net_layout_t *lay, tsr_layout_layer_t *l) {
  /* After a layer with a fused ReLU that lets its reader apply the ReLU's backward, and that
   * this layer alone reads, outside a grid: the input gradient's GEMM gates it. */
  const tsr_layout_layer_t *in = l->in[0].from >= 0 ? &lay->layers[l->in[0].from] : NULL;
  if (in && in->type->defers_relu_grad && in->relu && in->consumers == 1 &&
      l->place == TSR_PLACE_WHOLE && in->place == TSR_PLACE_WHOLE && l->has_dx)
    l->relu_grad_in = true; /* the layout sets the input's relu_grad_by_next */
  l->nparams = 2;
  l->params[0] = (tsr_layout_matrix_t){l->fin, l->fout, l->in_nb, l->out_nb, true};
  l->params[1] = (tsr_layout_matrix_t){1, l->fout, 1, l->out_nb, false};
}

static int imin(int a, int b) {
  return a < b ? a : b;
}

/* Per output tile column j (row 0's under a grid): the forward GEMMs over the input tiles and
 * the bias add; backward the fused ReLU, the input gradient's GEMMs (when computed), the
 * weight gradient's, the bias gradient and the updates. Outside a grid the bias add, the bias
 * gradient and a ReLU gated by the next layer are epilogues of GEMM tasks, priced as nothing
 * (a pass over a tile still in cache, no task of its own). The chain: the slowest forward output
 * tile, the ReLU, then the input gradient (or, for the first layer, the weight gradient and an
 * update). */
static double dense_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l,
                         tsr_cost_sink_t *c, double *bwd) {
  (void)lay;
  int kb = imin(l->in_nb, l->fin), nb = imin(l->out_nb, l->fout), mb = c->mb;
  int mt = tsr__cost_ntiles(c->batch, mb), kt = tsr__cost_ntiles(l->fin, kb),
      nt = tsr__cost_ntiles(l->fout, nb);
  double r_fwd = c->gemm_rate(c, false, false, mb, nb, kb);
  double r_dx = c->gemm_rate(c, false, true, mb, kb, nb);
  double r_dw = c->gemm_rate(c, true, false, kb, nb, mb);
  bool fused = l->place == TSR_PLACE_WHOLE; /* the epilogues (gemm_ep) */
  double fwd_chain = 0;
  for (int i = 0; i < mt; i++)
    for (int j = 0; j < nt; j++) {
      if (!tsr__cost_row0(l->place, j, c->pr)) continue; /* row 0's tile columns */
      int m = tsr__cost_tsize(c->batch, mb, i), n = tsr__cost_tsize(l->fout, nb, j);
      double ch = 0;
      for (int k = 0; k < kt; k++)
        ch += tsr__cost_gemm(c, m, n, tsr__cost_tsize(l->fin, kb, k), r_fwd);
      if (!fused) /* bias (and ReLU) as a task; an epilogue's pass over the tile is in cache */
        ch += c->task(c, 0, 1, 4.0 * (2.0 * m * n + n));
      if (ch > fwd_chain) fwd_chain = ch;
    }
  double before = c->work(c);
  double relu_chain = 0, dx_chain = 0, dw_chain = 0;
  for (int i = 0; i < mt; i++)
    for (int j = 0; j < nt; j++) {
      if (!tsr__cost_row0(l->place, j, c->pr)) continue;
      int m = tsr__cost_tsize(c->batch, mb, i), n = tsr__cost_tsize(l->fout, nb, j);
      if (l->relu && !l->relu_grad_by_next) relu_chain = c->task(c, 0, 1, 4.0 * 3 * m * n);
    }
  if (l->has_dx)
    for (int i = 0; i < mt; i++)
      for (int k = 0; k < kt; k++) {
        double ch = 0;
        for (int j = 0; j < nt; j++) {
          if (!tsr__cost_row0(l->place, j, c->pr)) continue;
          ch += tsr__cost_gemm(c, tsr__cost_tsize(c->batch, mb, i), tsr__cost_tsize(l->fin, kb, k),
                               tsr__cost_tsize(l->fout, nb, j), r_dx);
        }
        if (ch > dx_chain) dx_chain = ch;
      }
  for (int k = 0; k < kt; k++)
    for (int j = 0; j < nt; j++) {
      if (!tsr__cost_row0(l->place, j, c->pr)) continue;
      double ch = 0;
      for (int i = 0; i < mt; i++)
        ch += tsr__cost_gemm(c, tsr__cost_tsize(l->fin, kb, k), tsr__cost_tsize(l->fout, nb, j),
                             tsr__cost_tsize(c->batch, mb, i), r_dw);
      if (ch > dw_chain) dw_chain = ch;
    }
  double upd = 0;
  for (int j = 0; j < nt; j++) {
    if (!tsr__cost_row0(l->place, j, c->pr)) continue;
    for (int i = 0; i < mt && !fused; i++) /* bias gradient, where not an epilogue */
      c->task(c, 0, 1, 4.0 * tsr__cost_tsize(c->batch, mb, i) * tsr__cost_tsize(l->fout, nb, j));
    for (int k = 0; k < kt; k++)
      upd = c->update(c, (double)tsr__cost_tsize(l->fin, kb, k) * tsr__cost_tsize(l->fout, nb, j));
    c->update(c, tsr__cost_tsize(l->fout, nb, j));
  }
  *bwd = c->work(c) - before;
  return fwd_chain + relu_chain + (l->has_dx ? dx_chain : dw_chain + upd);
}

/* Per output: fin multiply-adds and the bias. */
static double dense_flops(const tsr_layout_layer_t *l) {
  return (double)l->fout * (2.0 * l->fin + 1);
}

/* The parameters exist (layout): initialized as net->opts.init says. */
static int dense_create(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_site_t *at) {
  return tsr__init_params(l->params, l->fin, l->fout, net->opts.init, at->init_std, at->rng);
}

static int dense_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  if (s->units == TSR_UNITS_CLASSES) return snprintf(buf, size, "classes");
  return snprintf(buf, size, "%d", s->units);
}

static const tsr_layer_key_t dense_keys[] = {
    {"units", NULL, TSR_KEY_UNITS, TSR_SPEC_FIELD(units), 0,
     "is a dense layer without 'units'; add units = N (or units = classes)"},
    {"activation", NULL, TSR_KEY_ACTIVATION, 0, 0, NULL},
    {"in_features", NULL, TSR_KEY_COUNT, TSR_SPEC_FIELD(in_features), 0, NULL},
    {0},
};

const tsr_layer_type_t tsr__dense_type = {
    .kind = TSR_LAYER_DENSE,
    .name = "dense",
    .param_names = tsr__weight_bias,
    .keys = dense_keys,
    .output = true,
    .cuts_features = true,
    .fuses_relu = true,
    .defers_relu_grad = true,
    .shape = dense_shape,
    .layout = dense_layout,
    .cost = dense_cost,
    .flops = dense_flops,
    .ops = &dense_ops,
    .create = dense_create,
    .describe = dense_describe,
};

static int relu_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                        const tsr_task_opts_t *o) {
  (void)net, (void)train;
  return tsr__tiles_relu_fwd(o, l->y, x[0]);
}

static int relu_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                         tsr_tiles_t *const *dx, const tsr_task_opts_t *o) {
  (void)net, (void)x;
  return dx[0] ? tsr__tiles_relu_bwd(o, dx[0], l->dy, l->y) : 0;
}

static const tsr_layer_ops_t relu_ops = {"relu", relu_forward, relu_backward};

static int relu_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  (void)s, (void)at;
  g->oc = g->c, g->oh = g->h, g->ow = g->w;
  return 0;
}

/* One max per feature. */
static double relu_flops(const tsr_layout_layer_t *l) {
  return l->fout;
}

const tsr_layer_type_t tsr__relu_type = {
    .kind = TSR_LAYER_RELU,
    .name = "relu",
    .elementwise = true,
    .is_relu = true,
    .shape = relu_shape,
    .cost = tsr__cost_pass,
    .flops = relu_flops,
    .ops = &relu_ops,
};
