/* Token embedding layers: a sample is a window of T token ids (T x 1 x 1, exact integers in
 * float, each below vocab: the text loader guarantees it), the output T x 1 x D holds row
 * tok[p] of the token table wte (vocab, D) plus, when context > 0, row p of the learned position
 * table wpe (context, D) at each position p (GPT-2's wte and wpe). The backward scatters the
 * output's gradient into the rows the batch used, in a chain of the batch-row tiles (the same
 * bits for any tiling); when a tied head (lmhead.c) wrote the token table's gradient first this
 * step, it adds to it, so the optimizer sees the sum of both uses. No input gradient (token
 * ids). With the embedding type's registry descriptor (layers.h). */
#include <stdio.h>

#include "nn/embedding.h"
#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

extern const tsr_layer_type_t tsr__embedding_type;

int tsr__embedding_index(const tsr_net_layout_t *lay, int *count) {
  int first = -1;
  *count = 0;
  for (int j = 0; j < lay->n_layers; j++)
    if (lay->layers[j].type == &tsr__embedding_type) {
      if (first < 0) first = j;
      (*count)++;
    }
  return first;
}

static int embed_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                         const tsr_task_opts_t *o) {
  (void)net, (void)train;
  return tsr__tiles_embed_fwd(o, l->y, x[0], l->params[0].w,
                              l->nparams > 1 ? l->params[1].w : NULL);
}

/* The token ids' gradient, where one is kept, is 0 (the output is piecewise constant in them). */
static int embed_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                          tsr_tiles_t *const *dx, const tsr_task_opts_t *o) {
  (void)net;
  if (dx[0]) TSR_TRY(tsr__tiles_fill(o, dx[0], 0.0f));
  return tsr__tiles_embed_bwd(o, l->params[0].g, l->nparams > 1 ? l->params[1].g : NULL, x[0],
                              l->dy, l->shared_grad_written);
}

static const tsr_layer_ops_t embed_ops = {"embedding", embed_forward, embed_backward};

/* T x 1 x 1 token ids -> T x 1 x units. The type has no window: the geometry's window fields
 * carry its tables' rows to the layout hook, which sees the geometry and not the spec (kh: vocab,
 * kw: context). */
static int embed_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  if (s->vocab <= 0 || s->units <= 0 || s->context < 0)
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d (embedding): needs vocab > 0 and units > 0 (got vocab %d, "
                         "units %d, context %d); add vocab = V (token ids below V) and units = D",
                         at->index, s->vocab, s->units, s->context);
  if (g->c != 1 || g->w != 1)
    return tsr_error_set(at->err, TSR_ESHAPE,
                         "layer %d (embedding): its input must be a sequence of T token ids, T x "
                         "1 x 1 (h x w x c), but it is %dx%dx%d; read the input batch of a text "
                         "dataset (in_height T, in_width 1, in_channels 1)",
                         at->index, at->shown.h, at->shown.w, at->shown.c);
  if (s->context > 0 && s->context < g->h)
    return tsr_error_set(at->err, TSR_ESHAPE,
                         "layer %d (embedding): context = %d positions, but its input has %d; set "
                         "context >= %d (or use shorter windows)",
                         at->index, s->context, g->h, g->h);
  g->oc = s->units, g->oh = g->h, g->ow = 1;
  g->kh = s->vocab, g->kw = s->context;
  return 0;
}

/* The token table (vocab, D) and the position table (context, D), one tile each, both with
 * weight decay (GPT-2's matrices). */
static void embed_layout(tsr_net_layout_t *lay, tsr_layout_layer_t *l) {
  (void)lay;
  int d = l->geom.oc, vocab = l->geom.kh, context = l->geom.kw;
  l->nparams = context > 0 ? 2 : 1;
  l->params[0] = (tsr_layout_matrix_t){vocab, d, vocab, d, true};
  l->params[1] = (tsr_layout_matrix_t){context, d, context, d, true};
}

/* Per batch-row tile: the forward (reads the ids, writes the output, reads as many rows of the
 * tables), then the backward chain (reads the ids and the gradient, adds into the tables' rows;
 * the first task also clears the tables) and the updates, which end the step's chain of this
 * layer (no input gradient). */
static double embed_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l,
                         tsr_cost_sink_t *c, double *bwd) {
  (void)lay;
  int mb = c->mb, mt = tsr__cost_ntiles(c->batch, mb), t = l->geom.h;
  double d = l->geom.oc, tables = (double)(l->geom.kh + l->geom.kw) * d, fwd = 0, chain = 0;
  for (int i = 0; i < mt; i++) {
    double m = tsr__cost_tsize(c->batch, mb, i);
    double f = c->task(c, 0, 1, 4.0 * m * t * (1 + 3 * d));
    if (i == 0) fwd = f;
  }
  double before = c->work(c);
  for (int i = 0; i < mt; i++) {
    double m = tsr__cost_tsize(c->batch, mb, i);
    chain += c->task(c, 0, 1, 4.0 * (m * t * (1 + 5 * d) + (i == 0 ? tables : 0)));
  }
  double upd = c->update(c, l->geom.kh * d);
  if (l->geom.kw > 0) upd = c->update(c, l->geom.kw * d);
  *bwd = c->work(c) - before;
  return fwd + chain + upd;
}

/* An add per output value with a position table (the lookup is a copy). */
static double embed_flops(const tsr_layout_layer_t *l) {
  return l->geom.kw > 0 ? l->fout : 0.0;
}

/* TSR_INIT_GPT2: both tables normal(0, at->init_std) (0.02); otherwise nn.Embedding's
 * normal(0, 1), the token table first. */
static int embed_create(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_site_t *at) {
  double std = net->opts.init == TSR_INIT_GPT2 ? at->init_std : 1.0;
  for (int k = 0; k < l->nparams; k++) {
    const tsr_layout_matrix_t *m = &l->lay->params[k];
    TSR_TRY(tsr__init_normal(l->params[k].w, (size_t)(m->rows * m->cols), std, at->rng));
  }
  return 0;
}

/* "embedding/v256/t128" (no "/t" without a position table). */
static int embed_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  char t[32] = "";
  if (s->context > 0) snprintf(t, sizeof t, "/t%d", s->context);
  return snprintf(buf, size, "embedding/v%d%s", s->vocab, t);
}

static const char *const embed_params[] = {"weight", "position", NULL};

static const tsr_layer_key_t embed_keys[] = {
    {"vocab", NULL, TSR_KEY_COUNT, TSR_SPEC_FIELD(vocab), 0,
     "is an embedding layer without 'vocab'; add vocab = V (token ids below V)"},
    {"units", NULL, TSR_KEY_COUNT, TSR_SPEC_FIELD(units), 0,
     "is an embedding layer without 'units'; add units = D (the width of a token's vector)"},
    {"context", NULL, TSR_KEY_COUNT, TSR_SPEC_FIELD(context), 0, NULL},
    {0},
};

const tsr_layer_type_t tsr__embedding_type = {
    .kind = TSR_LAYER_EMBEDDING,
    .name = "embedding",
    .no_grid = true,
    .keys = embed_keys,
    .whole_samples = true,
    .param_names = embed_params,
    .shape = embed_shape,
    .layout = embed_layout,
    .cost = embed_cost,
    .flops = embed_flops,
    .ops = &embed_ops,
    .create = embed_create,
    .describe = embed_describe,
};
