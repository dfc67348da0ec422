/* Language-model heads: the logits of every position of a sample, y (T x 1 x vocab) = x (T x 1 x
 * D) times the transposed token table of the network's embedding layer (tied: the head has no
 * parameter of its own; l->shared borrows the embedding's params[0]). As the last layer it
 * predicts at every position (per_position: labels (batch, T), the loss averaged over the
 * tokens). Its backward runs before the embedding's (the embedding runs first), writes the
 * table's gradient (dy^T x over the batch: per-tile partials and a fixed tree, as conv's filter
 * gradient) and leaves the embedding's backward to add its own, so the optimizer, checkpoints,
 * averaging and the planner see one table whose gradient sums both uses. With the lmhead type's
 * registry descriptor (layers.h). */
#include <stdio.h>

#include "nn/embedding.h"
#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

/* Positions per sample (T x 1, or h x w). */
static int head_positions(const tsr_conv_geom_t *g) {
  return g->h * g->w;
}

static int head_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                        const tsr_task_opts_t *o) {
  (void)net, (void)train;
  return tsr__tiles_lmhead_fwd(o, l->y, x[0], l->shared->w, head_positions(&l->geom));
}

/* The input gradient first, at the highest priority; then the table's gradient, written. */
static int head_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                         tsr_tiles_t *const *dx, const tsr_task_opts_t *o) {
  (void)net;
  int t = head_positions(&l->geom);
  tsr_task_opts_t critical = tsr__net_critical(o);
  if (dx[0]) TSR_TRY(tsr__tiles_lmhead_bwd_data(&critical, dx[0], l->dy, l->shared->w, t));
  return tsr__tiles_lmhead_bwd_table(o, l->shared->g, l->lay->nscratch ? l->scratch[0] : NULL,
                                     l->dy, x[0], t);
}

static const tsr_layer_ops_t head_ops = {"lmhead", head_forward, head_backward};

/* h x w x D -> h x w x units, per position. That units is the embedding's vocab and D its width
 * is checked when the network is built (head_create), which sees the whole network. */
static int head_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  if (s->units <= 0)
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d (lmhead): needs units = the vocabulary of the network's "
                         "embedding layer (got %d); add units = V (or units = classes)",
                         at->index, s->units);
  g->oc = s->units, g->oh = g->h, g->ow = g->w;
  return 0;
}

/* No parameters; with more than one batch-row tile, the table gradient's partials of tiles
 * 1.. ((mt - 1) V, D) in (V, D) tiles. */
static void head_layout(tsr_net_layout_t *lay, tsr_layout_layer_t *l) {
  int v = l->geom.oc, d = l->geom.c, mt = (lay->batch + lay->mb - 1) / lay->mb;
  l->nparams = 0;
  l->nscratch = mt > 1 ? 1 : 0;
  l->scratch[0] = (tsr_layout_matrix_t){(int64_t)(mt - 1) * v, d, v, d, false};
}

/* Per batch-row tile the forward GEMM (m T, V, D), the input gradient's (m T, D, V) when
 * computed, the table gradient's (V, D, m T); the tree's mt - 1 adds. No update (the embedding
 * updates the table). The chain: tile 0's forward, then its input gradient (or its table
 * gradient). */
static double head_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l,
                        tsr_cost_sink_t *c, double *bwd) {
  (void)lay;
  int mb = c->mb, mt = tsr__cost_ntiles(c->batch, mb), t = head_positions(&l->geom);
  int v = l->geom.oc, d = l->geom.c;
  double fwd = 0, bchain = 0;
  for (int i = 0; i < mt; i++) {
    int rows = tsr__cost_tsize(c->batch, mb, i) * t;
    double f = tsr__cost_gemm(c, rows, v, d, c->gemm_rate(c, false, true, rows, v, d));
    if (i == 0) fwd = f;
  }
  double before = c->work(c);
  for (int i = 0; i < mt; i++) {
    int rows = tsr__cost_tsize(c->batch, mb, i) * t;
    double b =
        l->has_dx ? tsr__cost_gemm(c, rows, d, v, c->gemm_rate(c, false, false, rows, d, v)) : 0;
    double g = tsr__cost_gemm(c, v, d, rows, c->gemm_rate(c, true, false, v, d, rows));
    if (i == 0) bchain = l->has_dx ? b : g;
  }
  for (int i = 1; i < mt; i++)
    c->task(c, 0, 1, 4.0 * 3 * (double)v * d);
  *bwd = c->work(c) - before;
  return fwd + bchain;
}

/* Per position and token: D multiply-adds. */
static double head_flops(const tsr_layout_layer_t *l) {
  return 2.0 * head_positions(&l->geom) * l->geom.oc * l->geom.c;
}

/* Ties the head to the network's one embedding layer, which must run before it (its backward
 * then runs after the head's) and agree with it: units = its vocab, the input's width = its
 * units. */
static int head_create(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_site_t *at) {
  int count, e = tsr__embedding_index(&net->layout, &count);
  int self = (int)(l - net->layers);
  if (count != 1)
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d (lmhead): it shares the token table of the network's embedding "
                         "layer, but the network has %d; %s",
                         at->index, count,
                         count ? "keep one embedding layer"
                               : "add one (type = embedding) reading "
                                 "the token ids");
  const tsr_layer_t *emb = &net->layers[e];
  if (e >= self)
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d (lmhead): the embedding layer %d runs after it; the head must "
                         "read what the embedding's output leads to",
                         at->index, emb->index);
  if (l->geom.oc != emb->spec.vocab || l->geom.c != emb->geom.oc)
    return tsr_error_set(at->err, TSR_ESHAPE,
                         "layer %d (lmhead): units = %d over inputs of %d channels, but the "
                         "embedding layer %d's token table is vocab %d x units %d; set units = %d "
                         "and give the head inputs of %d channels",
                         at->index, l->geom.oc, l->geom.c, emb->index, emb->spec.vocab,
                         emb->geom.oc, emb->spec.vocab, emb->geom.oc);
  l->shared = &net->layers[e].params[0];
  net->layers[e].shared_grad_written = true;
  return 0;
}

static int head_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  return snprintf(buf, size, "lmhead/v%d", s->units);
}

static const tsr_layer_key_t head_keys[] = {
    {"units", NULL, TSR_KEY_UNITS, TSR_SPEC_FIELD(units), 0,
     "is an lmhead layer without 'units'; add units = V (the embedding's vocab) or units = "
     "classes"},
    {0},
};

const tsr_layer_type_t tsr__lmhead_type = {
    .kind = TSR_LAYER_LMHEAD,
    .name = "lmhead",
    .no_grid = true,
    .keys = head_keys,
    .output = true,
    .whole_samples = true,
    .per_position = true,
    .shape = head_shape,
    .layout = head_layout,
    .cost = head_cost,
    .flops = head_flops,
    .ops = &head_ops,
    .create = head_create,
    .describe = head_describe,
};
