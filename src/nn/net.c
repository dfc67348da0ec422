/* A network: a graph of layers over tiled matrices, built as its layout (layout.c) says (the
 * layer types live in dense.c, ..., and are looked up in the registry, layers.c). Forward, loss,
 * backward and update are submitted as tasks for a whole step and never
 * waited on here; the caller decides when to wait (evaluation, epoch ends,
 * reading parameters). A layer's output read by several layers gets their gradients added into
 * its own, one after the other in the order the backward pass submits them.
 *
 * Tiling: batch rows are cut in tile_rows, features in tile_cols, except the
 * logits, which stay one tile wide so that the softmax sees a whole row. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "tessera/dist.h"
#include "tessera/runtime.h"
#include "tile/ops.h"
#include "try.h"

void tsr_net_opts_init(tsr_net_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->batch = 64;
  o->seed = 1;
  o->init = TSR_INIT_PYTORCH;
  tsr_optimizer_init(&o->opt, "sgd", NULL);
}

static const char *const init_names[] = {
    [TSR_INIT_PYTORCH] = "pytorch", [TSR_INIT_HE] = "he", [TSR_INIT_GPT2] = "gpt2"};

const char *tsr_init_name(tsr_init_t init) {
  return (unsigned)init < sizeof init_names / sizeof *init_names ? init_names[init] : NULL;
}

int tsr_init_from_name(tsr_init_t *init, const char *name) {
  for (unsigned k = 0; k < sizeof init_names / sizeof *init_names; k++)
    if (name && strcmp(name, init_names[k]) == 0) {
      *init = (tsr_init_t)k;
      return 0;
    }
  return TSR_EINVAL;
}

/* This process's CPU workers, at least 1. */
static int this_workers(void) {
  return tsr_runtime_ncpus() > 0 ? tsr_runtime_ncpus() : 1;
}

int tsr__net_tiles(tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb) {
  return tsr_tiles_create(t, m, n, mb, nb);
}

/* Grid ownership: column tile j of a spread matrix on the column's row that tsr__placed_row
 * names (src/grid.h: the logits, one tile wide, and the per-batch-tile statistics on row 0); a
 * one-rank matrix's tiles on the rank its context names (net->grid_slot[p]). */
static int grid_column_rank(int i, int j, void *ctx) {
  (void)i;
  const tsr_net_t *net = ctx;
  return net->grid_slot[tsr__placed_row(TSR_PLACE_SPREAD, j, net->grid_rows, NULL)];
}

static int grid_slot_rank(int i, int j, void *ctx) {
  (void)i, (void)j;
  return *(const int *)ctx;
}

/* An activation-sized matrix: spread over the grid column by column tile (spread), per-node
 * under a grid otherwise, else local. */
static int act_tiles(tsr_net_t *net, tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb,
                     bool spread) {
  if (spread) return tsr_tiles_create_distributed(t, m, n, mb, nb, grid_column_rank, net);
  if (net->grid_rows > 1) return tsr_tiles_create_per_node(t, m, n, mb, nb);
  return tsr_tiles_create(t, m, n, mb, nb);
}

/* Grid, a dense layer spreading its output: with a spread input (l->lay->gathers) l->gathered
 * and l->partials, one (batch, fin) matrix per rank of the column, each allocated on its rank
 * only; with a per-node input whose gradient is computed, l->partials and l->dx_sums. A domain
 * layer (--domain rows): its slabs, halos and partial gradients (l->domain). */
static int grid_scratch(tsr_net_t *net, tsr_layer_t *l) {
  const tsr_layout_layer_t *ll = l->lay;
  if (ll->gathers_bands) {
    TSR_TRY(tsr_tiles_create_per_node(&l->whole_x, net->batch, l->fin, net->mb, l->fin));
    if (ll->has_dx)
      TSR_TRY(tsr_tiles_create_per_node(&l->whole_dx, net->batch, l->fin, net->mb, l->fin));
    return 0;
  }
  if (ll->domain && ll->type->batch_stats)
    return tsr__domain_bn_create(&l->domain, &ll->geom, net->grid_rows, net->grid_slot, net->batch,
                                 net->mb);
  if (ll->domain)
    return tsr__domain_create(&l->domain, &ll->geom, net->grid_rows, net->grid_slot, net->batch,
                              net->mb, ll->in_place == TSR_PLACE_BANDS, ll->has_dx,
                              ll->nparams > 0);
  bool in_split = l->lay->gathers;
  if (!l->lay->partials) return 0; /* a per-node input, no gradient below */
  int n = net->grid_rows;
  l->gathered = calloc((size_t)n, sizeof *l->gathered);
  l->partials = calloc((size_t)n, sizeof *l->partials);
  if (!l->gathered || !l->partials) return TSR_ENOMEM;
  for (int p = 0; p < n; p++) {
    if (in_split)
      TSR_TRY(tsr_tiles_create_distributed(&l->gathered[p], net->batch, l->fin, net->mb, l->in_nb,
                                           grid_slot_rank, &net->grid_slot[p]));
    TSR_TRY(tsr_tiles_create_distributed(&l->partials[p], net->batch, l->fin, net->mb, l->in_nb,
                                         grid_slot_rank, &net->grid_slot[p]));
  }
  if (!in_split)
    TSR_TRY(tsr_tiles_create_distributed(&l->dx_sums, net->batch, l->fin, net->mb, l->in_nb,
                                         grid_column_rank, net));
  return 0;
}

/* p's value, gradient and optimizer-state matrices as m says, spread over the grid column like
 * the layer's output (spread) or local. */
static int param_create(tsr_net_t *net, tsr_param_t *p, const tsr_layout_matrix_t *m, bool spread) {
  int64_t rows = m->rows, cols = m->cols;
  int mb = m->mb, nb = m->nb;
  bool decay = m->decay;
  p->decay = decay;
  if (spread) {
    TSR_TRY(tsr_tiles_create_distributed(&p->w, rows, cols, mb, nb, grid_column_rank, net));
    TSR_TRY(tsr_tiles_create_like(&p->g, p->w));
  } else {
    TSR_TRY(tsr__net_tiles(&p->w, rows, cols, mb, nb));
    TSR_TRY(tsr__net_tiles(&p->g, rows, cols, mb, nb));
  }
  return tsr__optim_add(net->optim, p->w, decay, &p->index);
}

/* l->y and l->dy (batch, fout) in net->mb x l->out_nb tiles, and the gradients of its other
 * readers (l->grads), placed as the layout says. */
static int activations(tsr_net_t *net, tsr_layer_t *l) {
  l->split = tsr__placed_spread(l->lay->place);
  TSR_TRY(act_tiles(net, &l->y, net->batch, l->fout, net->mb, l->out_nb, l->split));
  TSR_TRY(act_tiles(net, &l->dy, net->batch, l->fout, net->mb, l->out_nb, l->split));
  int extra = l->lay->consumers - 1;
  if (extra <= 0) return 0;
  l->grads = calloc((size_t)extra, sizeof *l->grads);
  if (!l->grads) return TSR_ENOMEM;
  for (int k = 0; k < extra; k++)
    TSR_TRY(tsr_tiles_create_like(&l->grads[k], l->dy));
  return 0;
}

int tsr__net_optimizer_step(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *to) {
  return tsr__optim_update(net->optim, p->index, p->w, p->g, to);
}

static int default_grad_hook(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *o, void *ctx) {
  (void)ctx;
  return tsr__net_optimizer_step(net, p, o);
}

bool tsr__net_fused_step(tsr_net_t *net, tsr_layer_t *l, const tsr_task_opts_t *o,
                         tsr_sgd_step_t *step) {
  if (!net->updating || net->on_grad.fn != default_grad_hook || net->opts.unfused_steps || o->mpi ||
      l->split || l->nparams != 2 || l->shared)
    return false;
  tsr_param_t *w = &l->params[0], *b = &l->params[1];
  if (!tsr__optim_sgd_step(net->optim, w->index, w->w, b->index, b->w, step)) return false;
  l->stepped = true;
  return true;
}

int tsr__net_each_param(tsr_net_t *net, int (*fn)(tsr_net_t *net, tsr_param_t *p, void *ctx),
                        void *ctx) {
  for (int i = net->n_layers - 1; i >= 0; i--)
    for (int k = 0; k < net->layers[i].nparams; k++)
      TSR_TRY(fn(net, &net->layers[i].params[k], ctx));
  return 0;
}

/* --clip-grad without a synchronization policy's hook: each gradient adds its squares to the
 * step's sum as it is submitted; once all are, each is clipped and its update submitted. */
static int clip_grad_hook(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *o, void *ctx) {
  (void)ctx;
  return tsr__tiles_sumsq_add(o, p->g, net->grad_sq);
}

typedef struct {
  const tsr_task_opts_t *o;
} clip_ctx_t;

static int clip_and_update(tsr_net_t *net, tsr_param_t *p, void *ctx) {
  const clip_ctx_t *c = ctx;
  TSR_TRY(tsr__tiles_clip(c->o, p->g, net->grad_sq, net->opts.clip_grad));
  return tsr__net_optimizer_step(net, p, c->o);
}

static int clip_grad_end(tsr_net_t *net, const tsr_task_opts_t *o, void *ctx) {
  (void)ctx;
  return tsr__net_each_param(net, clip_and_update, &(clip_ctx_t){o});
}

tsr_stats_hook_t tsr__net_set_stats_hook(tsr_net_t *net, tsr_stats_hook_t hook) {
  tsr_stats_hook_t old = net->on_stats;
  net->on_stats = hook;
  return old;
}

tsr_grad_hook_t tsr__net_set_grad_hook(tsr_net_t *net, tsr_grad_hook_t hook) {
  tsr_grad_hook_t previous = net->on_grad;
  net->on_grad = hook;
  return previous;
}

tsr_task_opts_t tsr__net_task_opts(const tsr_net_t *net, int layer, bool backward) {
  tsr_task_opts_t o = tsr__task_opts_default();
  o.layer = layer, o.batch = net->step_label;
  o.priority = tsr__task_priority(!backward ? 0 : layer <= 1 ? 2 : 1);
  o.submitted = (uint64_t *)&net->submitted; /* a counter, not the net's state */
  o.mpi = net->grid_rows > 1;                /* spread tiles are computed by their owners */
  return o;
}

tsr_task_opts_t tsr__net_critical(const tsr_task_opts_t *o) {
  tsr_task_opts_t c = *o;
  c.priority = tsr__task_priority(TSR_PRIO_MAX);
  return c;
}

void tsr__net_label_step(tsr_net_t *net, int64_t step) {
  net->step_label = step;
}

static void err_clear(tsr_errbuf_t *err) {
  if (err) err->msg[0] = '\0';
}

/* TSR_INIT_GPT2's weight std for layer i: 0.02, divided by the square root of the residual
 * layers' count when only residual layers read its output (GPT-2's 1/sqrt(2L) on each block's
 * two output projections). */
static double gpt2_std(const tsr_net_layout_t *lay, int i) {
  int residual = 0, readers = 0, residual_readers = 0;
  for (int j = 0; j < lay->n_layers; j++) {
    const tsr_layout_layer_t *r = &lay->layers[j];
    residual += r->type->residual;
    for (int k = 0; k < r->n_inputs; k++)
      if (r->in[k].from == i) readers++, residual_readers += r->type->residual;
  }
  bool branch = readers > 0 && readers == residual_readers;
  return branch ? 0.02 / sqrt((double)residual) : 0.02;
}

/* The layers as net->layout says, in its order: each one's parameters, activations, scratch
 * and grid scratch, its type's ops, then its type's initial values (in layout order, which is
 * the order the parameters draw from rng). */
static int create_layers(tsr_net_t *net, tsr_rng_t *rng, tsr_errbuf_t *err) {
  const tsr_net_layout_t *lay = &net->layout;
  net->layers = calloc((size_t)lay->n_layers, sizeof *net->layers);
  if (!net->layers) return TSR_ENOMEM;
  for (int i = 0; i < lay->n_layers; i++) {
    const tsr_layout_layer_t *ll = &lay->layers[i];
    tsr_layer_t *l = &net->layers[net->n_layers++];
    l->lay = ll;
    l->spec = net->spec.layers[ll->spec], l->index = ll->index;
    l->fin = ll->fin, l->fout = ll->fout, l->in_nb = ll->in_nb, l->out_nb = ll->out_nb;
    l->geom = ll->geom, l->relu = ll->relu;
    l->relu_grad_by_next = ll->relu_grad_by_next, l->relu_grad_in = ll->relu_grad_in;
    l->nparams = ll->nparams;
    for (int k = 0; k < ll->nparams; k++)
      TSR_TRY(param_create(net, &l->params[k], &ll->params[k], ll->place == TSR_PLACE_SPREAD));
    TSR_TRY(activations(net, l));
    for (int k = 0; k < ll->nscratch; k++) {
      const tsr_layout_matrix_t *m = &ll->scratch[k];
      if (m->rows > 0) TSR_TRY(tsr__net_tiles(&l->scratch[k], m->rows, m->cols, m->mb, m->nb));
    }
    l->nbuffers = ll->nbuffers;
    for (int k = 0; k < ll->nbuffers; k++) {
      const tsr_layout_matrix_t *m = &ll->buffers[k];
      TSR_TRY(tsr__net_tiles(&l->buffers[k], m->rows, m->cols, m->mb, m->nb));
    }
    TSR_TRY(grid_scratch(net, l));
    tsr_layer_site_t at = {.index = ll->index,
                           .name = ll->name,
                           .last = i == lay->n_layers - 1,
                           .shown = ll->in[0].shown,
                           .rng = rng,
                           .init_std = gpt2_std(lay, i),
                           .err = err};
    l->ops = ll->type->ops;
    if (ll->type->create) TSR_TRY(ll->type->create(net, l, &at));
  }
  return 0;
}

static int check_opts(const tsr_net_opts_t *opts, tsr_errbuf_t *err) {
  if (opts->batch <= 0 || opts->tile_rows < 0 || opts->tile_cols < 0)
    return tsr_error_set(err, TSR_EINVAL, "batch must be positive and tile sizes non-negative");
  if (!tsr_init_name(opts->init))
    return tsr_error_set(
        err, TSR_EINVAL,
        "unknown initialization %d (TSR_INIT_PYTORCH, TSR_INIT_HE or TSR_INIT_GPT2)",
        (int)opts->init);
  if (!(opts->clip_grad >= 0.0f && opts->clip_grad <= 1e30f))
    return tsr_error_set(err, TSR_EINVAL, "gradient clipping %g is not a positive norm (0: none)",
                         (double)opts->clip_grad);
  if (opts->clip_grad > 0.0f && opts->grid_rows > 1)
    return tsr_error_set(err, TSR_EINVAL,
                         "gradient clipping is not implemented with a grid (--grid spreads the "
                         "dense layers' gradients over a column's ranks); drop --clip-grad or "
                         "--grid");
  if (!(opts->label_smoothing >= 0.0f && opts->label_smoothing < 1.0f))
    return tsr_error_set(err, TSR_EINVAL, "label smoothing %g is not in [0, 1)",
                         (double)opts->label_smoothing);
  return 0;
}

int tsr_net_create(tsr_net_t **out, const tsr_model_spec_t *spec, int inputs, int classes,
                   const tsr_net_opts_t *opts, tsr_errbuf_t *err) {
  *out = NULL;
  TSR_TRY(check_opts(opts, err));
  TSR_TRY(tsr_optimizer_check(&opts->opt, err));
  int pr = opts->grid_rows > 1 ? opts->grid_rows : 1;
  if (pr > 1 && (!tsr_dist_active() || tsr_dist_size() % pr != 0))
    return tsr_error_set(err, TSR_EINVAL,
                         "a grid with %d rows needs a multiple of %d MPI ranks (running %d); start "
                         "Pr x Pc ranks with mpirun",
                         pr, pr, tsr_dist_size());
  tsr_net_t *net = calloc(1, sizeof *net);
  if (!net) return TSR_ENOMEM;
  err_clear(err);
  int rc = tsr__net_layout(&net->layout, spec, inputs, classes, opts, this_workers(), err);
  if (rc == 0 && net->layout.grid_rc) {
    rc = net->layout.grid_rc;
    if (err) *err = net->layout.grid_err;
  }
  if (rc == 0) rc = tsr_model_spec_copy(&net->spec, spec);
  net->grid_rows = pr;
  net->grid_slot = rc == 0 ? malloc(sizeof(int) * (size_t)pr) : NULL;
  if (rc == 0 && !net->grid_slot) rc = TSR_ENOMEM;
  if (rc) {
    tsr_net_destroy(&net);
    if (err && err->msg[0]) return rc; /* the layout said what does not fit */
    return tsr_error_set(err, rc, "cannot build the network: %s", tsr_strerror(rc));
  }
  for (int p = 0; p < pr; p++)
    net->grid_slot[p] = tsr_dist_rank() / pr * pr + p;
  net->inputs = inputs, net->classes = classes, net->batch = opts->batch, net->opts = *opts;
  net->mb = net->layout.mb, net->nb = net->layout.nb;
  tsr_rng_t rng = {opts->seed};

  net->on_grad = opts->clip_grad > 0.0f ? (tsr_grad_hook_t){clip_grad_hook, NULL, clip_grad_end}
                                        : (tsr_grad_hook_t){default_grad_hook, NULL, NULL};
  rc = tsr__optim_create(&net->optim, &opts->opt);
  if (rc == 0) rc = create_layers(net, &rng, err);
  /* Grid: every rank of a column loads the batch (per-node); the loss task runs with the
   * logits, on row 0, which holds the statistics. */
  if (rc == 0) rc = act_tiles(net, &net->x0, net->batch, inputs, net->mb, net->layout.in_nb, false);
  net->positions = net->layout.positions;
  if (rc == 0)
    rc = act_tiles(net, &net->labels, net->batch, net->positions, net->mb, net->positions, false);
  int mt = (net->batch + net->mb - 1) / net->mb;
  if (rc == 0) rc = act_tiles(net, &net->train_stats, mt, 2, 1, 2, pr > 1);
  if (rc == 0) rc = act_tiles(net, &net->eval_stats, mt, 2, 1, 2, pr > 1);
  if (rc == 0 && opts->clip_grad > 0.0f) rc = tsr__net_tiles(&net->grad_sq, 1, 1, 1, 1);
  if (rc) {
    tsr_net_destroy(&net);
    if (err && err->msg[0]) return rc; /* a layer said what does not fit */
    return tsr_error_set(err, rc, "cannot build the network: %s", tsr_strerror(rc));
  }
  *out = net;
  return 0;
}

/* What tsr_net_create allocates, as its layout counts it (layout.c). */
int tsr_net_estimate(tsr_net_memory_t *mem, const tsr_model_spec_t *spec, int inputs, int classes,
                     const tsr_net_opts_t *opts, tsr_errbuf_t *err) {
  memset(mem, 0, sizeof *mem);
  TSR_TRY(check_opts(opts, err));
  tsr_net_layout_t lay;
  TSR_TRY(tsr__net_layout(&lay, spec, inputs, classes, opts, this_workers(), err));
  int rc = lay.grid_rc;
  if (rc && err) *err = lay.grid_err;
  if (rc == 0) *mem = lay.memory;
  tsr__net_layout_fini(&lay);
  return rc;
}

void tsr_net_destroy(tsr_net_t **np) {
  tsr_net_t *net = *np;
  if (!net) return;
  for (int i = 0; i < net->n_layers; i++) {
    tsr_layer_t *l = &net->layers[i];
    for (int k = 0; k < l->nparams; k++) {
      tsr_param_t *p = &l->params[k];
      tsr_tiles_destroy(&p->w), tsr_tiles_destroy(&p->g);
    }
    tsr_tiles_destroy(&l->y), tsr_tiles_destroy(&l->dy);
    for (int k = 0; k < TSR_LAYER_MAX_SCRATCH; k++)
      tsr_tiles_destroy(&l->scratch[k]);
    for (int k = 0; k < TSR_LAYER_MAX_BUFFERS; k++)
      tsr_tiles_destroy(&l->buffers[k]);
    for (int p = 0; l->gathered && p < net->grid_rows; p++)
      tsr_tiles_destroy(&l->gathered[p]), tsr_tiles_destroy(&l->partials[p]);
    free(l->gathered), free(l->partials);
    tsr_tiles_destroy(&l->dx_sums);
    tsr__domain_destroy(&l->domain);
    tsr_tiles_destroy(&l->whole_x), tsr_tiles_destroy(&l->whole_dx);
    for (int k = 0; l->grads && k < l->lay->consumers - 1; k++)
      tsr_tiles_destroy(&l->grads[k]);
    free(l->grads);
  }
  free(net->layers);
  tsr_tiles_destroy(&net->x0);
  tsr_tiles_destroy(&net->dx0);
  for (int k = 0; net->dx0_grads && k < net->layout.in_consumers - 1; k++)
    tsr_tiles_destroy(&net->dx0_grads[k]);
  free(net->dx0_grads);
  tsr_tiles_destroy(&net->labels);
  tsr_tiles_destroy(&net->train_stats);
  tsr_tiles_destroy(&net->eval_stats);
  tsr_tiles_destroy(&net->grad_sq);
  tsr__optim_destroy(&net->optim);
  free(net->grid_slot);
  free(net->augment_fill);
  tsr__net_layout_fini(&net->layout);
  tsr_model_spec_fini(&net->spec);
  free(net);
  *np = NULL;
}

int tsr_net_batch(const tsr_net_t *net) {
  return net->batch;
}

int tsr_net_positions(const tsr_net_t *net) {
  return net->positions;
}

void tsr_net_set_lr(tsr_net_t *net, float lr) {
  tsr__optim_set_lr(net->optim, lr);
}

float tsr_net_base_lr(const tsr_net_t *net) {
  return net->opts.opt.lr;
}

float tsr_net_lr(const tsr_net_t *net) {
  return tsr__optim_lr(net->optim);
}

void tsr_net_tiles(const tsr_net_t *net, int *tile_rows, int *tile_cols) {
  *tile_rows = net->mb, *tile_cols = net->nb;
}

int64_t tsr_net_param_count(const tsr_net_t *net) {
  int64_t n = 0;
  for (int i = 0; i < net->n_layers; i++)
    for (int k = 0; k < net->layers[i].nparams; k++) {
      const tsr_tiles_t *w = net->layers[i].params[k].w;
      n += tsr_tiles_rows(w) * tsr_tiles_cols(w);
    }
  return n;
}

/* The matrix input k of layer i reads. */
static const tsr_tiles_t *layer_input(const tsr_net_t *net, int i, int k) {
  int from = net->layers[i].lay->in[k].from;
  return from < 0 ? net->x0 : net->layers[from].y;
}

/* The gradient input k of layer i writes in training: the producer's dy or one of its extra
 * gradients (NULL: the input batch's, unless kept). */
static tsr_tiles_t *layer_input_grad(const tsr_net_t *net, int i, int k) {
  const tsr_layout_input_t *e = &net->layers[i].lay->in[k];
  if (e->from < 0) return !net->dx0 ? NULL : e->slot == 0 ? net->dx0 : net->dx0_grads[e->slot - 1];
  const tsr_layer_t *p = &net->layers[e->from];
  return e->slot == 0 ? p->dy : p->grads[e->slot - 1];
}

/* The batch's inputs (augmented in training, augment.c) and labels. */
static int load_batch(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n,
                      bool train) {
  int targets = ds->targets > 0 ? ds->targets : 1;
  if (n < 0 || n > net->batch || ds->features != net->inputs || targets != net->positions)
    return TSR_ESHAPE;
  net->valid = n;
  tsr_task_opts_t o = tsr__net_task_opts(net, 0, false);
  TSR_TRY(tsr__net_gather_input(net, &o, ds, rows, n, train));
  return tsr__tiles_gather(&o, net->labels, ds->y, targets, rows, n);
}

static int forward(tsr_net_t *net, bool train) {
  for (int i = 0; i < net->n_layers; i++) {
    tsr_layer_t *l = &net->layers[i];
    const tsr_tiles_t *x[TSR_MAX_INPUTS];
    for (int k = 0; k < l->lay->n_inputs; k++)
      x[k] = layer_input(net, i, k);
    tsr_task_opts_t o = tsr__net_task_opts(net, i + 1, false);
    if (l->whole_x) { /* computed whole over bands (--domain rows:K): they are gathered first */
      TSR_TRY(tsr__domain_allgather(&o, x[0], l->whole_x, net->grid_rows, net->grid_slot,
                                    &net->traffic));
      x[0] = l->whole_x;
    }
    TSR_TRY(l->ops->forward(net, l, x, train, &o));
  }
  return 0;
}

/* Backward from the last layer to the first. A layer's input gradients that are extra
 * gradients of their producer (it has other readers) are added into the producer's dy right
 * away, in this fixed order, at the priority of input gradients. Each layer's parameters are
 * handed to the gradient hook (the optimizer step, or a synchronization policy) as soon as
 * their gradients are submitted, so updates overlap the backward pass of the layers below;
 * under --clip-grad the hook only adds to the norm, and its end call, after the first layer,
 * clips and updates. */
static int backward(tsr_net_t *net, bool do_update) {
  if (do_update) tsr__optim_next_step(net->optim);
  net->updating = do_update;
  if (do_update && net->grad_sq) {
    tsr_task_opts_t o = tsr__net_task_opts(net, net->n_layers, true);
    TSR_TRY(tsr__tiles_fill(&o, net->grad_sq, 0.0f));
  }
  for (int i = net->n_layers - 1; i >= 0; i--) {
    tsr_layer_t *l = &net->layers[i];
    const tsr_tiles_t *x[TSR_MAX_INPUTS];
    tsr_tiles_t *dx[TSR_MAX_INPUTS];
    for (int k = 0; k < l->lay->n_inputs; k++)
      x[k] = layer_input(net, i, k), dx[k] = layer_input_grad(net, i, k);
    tsr_task_opts_t o = tsr__net_task_opts(net, i + 1, true);
    tsr_tiles_t *banded_dx = NULL;
    if (l->whole_x) /* the whole input gradient, then each rank's bands of it */
      x[0] = l->whole_x, banded_dx = dx[0], dx[0] = dx[0] ? l->whole_dx : NULL;
    l->stepped = false;
    TSR_TRY(l->ops->backward(net, l, x, dx, &o));
    if (banded_dx) {
      tsr_task_opts_t critical = tsr__net_critical(&o);
      TSR_TRY(tsr__domain_take_bands(&critical, banded_dx, l->whole_dx, net->grid_rows,
                                     net->grid_slot));
      dx[0] = banded_dx;
    }
    for (int k = 0; k < l->lay->n_inputs; k++) {
      const tsr_layout_input_t *e = &l->lay->in[k];
      if (e->slot == 0 || !dx[k]) continue;
      tsr_tiles_t *sum = e->from < 0 ? net->dx0 : net->layers[e->from].dy;
      tsr_task_opts_t critical = tsr__net_critical(&o);
      TSR_TRY(tsr__tiles_axpby(&critical, 1.0f, dx[k], 1.0f, sum));
    }
    for (int k = 0; do_update && !l->stepped && k < l->nparams; k++)
      TSR_TRY(net->on_grad.fn(net, &l->params[k], &o, net->on_grad.ctx));
  }
  net->updating = false;
  if (!do_update || !net->on_grad.end) return 0;
  tsr_task_opts_t o = tsr__net_task_opts(net, 1, true);
  return net->on_grad.end(net, &o, net->on_grad.ctx);
}

int tsr_net_train_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n,
                       bool do_update) {
  uint64_t before = net->submitted;
  TSR_TRY(load_batch(net, ds, rows, n, true));
  TSR_TRY(forward(net, true));
  tsr_layer_t *last = &net->layers[net->n_layers - 1];
  tsr_task_opts_t o = tsr__net_task_opts(net, net->n_layers, false);
  float scale = n > 0 ? 1.0f / ((float)n * (float)net->positions) : 0.0f;
  TSR_TRY(tsr__tiles_softmax_xent(&o, last->dy, net->train_stats, last->y, net->labels, n, scale,
                                  net->opts.label_smoothing));
  TSR_TRY(backward(net, do_update));
  if (net->tasks_per_step == 0) net->tasks_per_step = net->submitted - before;
  return 0;
}

int tsr_net_stats_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n, int k) {
  if (k < 0 || n < 1) return TSR_EINVAL;
  TSR_TRY(load_batch(net, ds, rows, n, true));
  /* Dropout's masks are numbered by its training passes: this one takes a mask and gives its
   * number back, so the training steps that follow draw what they would have drawn. */
  uint64_t *calls = malloc(sizeof *calls * (size_t)net->n_layers);
  if (!calls) return TSR_ENOMEM;
  for (int i = 0; i < net->n_layers; i++)
    calls[i] = net->layers[i].calls;
  net->bn_momentum = 1.0f / (float)(k + 1); /* submitted by value: reset once submitted */
  int rc = forward(net, true);
  net->bn_momentum = 0.0f;
  for (int i = 0; i < net->n_layers; i++)
    net->layers[i].calls = calls[i];
  free(calls);
  return rc;
}

int tsr_net_eval_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n) {
  TSR_TRY(load_batch(net, ds, rows, n, false));
  TSR_TRY(forward(net, false));
  tsr_layer_t *last = &net->layers[net->n_layers - 1];
  tsr_task_opts_t o = tsr__net_task_opts(net, net->n_layers, false);
  /* The evaluation loss is smoothed as the training loss is, as PyTorch's
   * nn.CrossEntropyLoss(label_smoothing=eps) is wherever it is used. */
  return tsr__tiles_softmax_xent(&o, NULL, net->eval_stats, last->y, net->labels, n, 1.0f,
                                 net->opts.label_smoothing);
}

int tsr_net_wait(tsr_net_t *net, int pending) {
  uint64_t per = net->tasks_per_step ? net->tasks_per_step : 1;
  uint64_t left = pending > 0 ? per * (uint64_t)pending : 0;
  return tsr__tiles_wait(left > UINT32_MAX ? UINT32_MAX : (unsigned)left);
}

int tsr_net_read_stats(tsr_net_t *net, bool eval, double *loss_sum, double *correct) {
  tsr_tiles_t *s = eval ? net->eval_stats : net->train_stats;
  int mt = (int)tsr_tiles_rows(s);
  float buf[2 * 64];
  float *v = mt <= 64 ? buf : malloc(sizeof(float) * 2 * (size_t)mt);
  if (!v) return TSR_ENOMEM;
  /* Grid: the column's row 0 holds the counts; the other rows read 0. */
  bool here = tsr_tiles_is_local(s, 0, 0);
  if (!here) memset(v, 0, sizeof(float) * 2 * (size_t)mt);
  int rc = here ? tsr_tiles_read(s, v) : 0;
  *loss_sum = 0, *correct = 0;
  for (int i = 0; rc == 0 && i < mt; i++)
    *loss_sum += v[2 * i], *correct += v[2 * i + 1];
  *loss_sum /= net->positions, *correct /= net->positions; /* per sample: over its positions */
  if (v != buf) free(v);
  return rc;
}

int tsr_net_take_stats(tsr_net_t *net, bool eval, double *loss_sum, double *correct) {
  TSR_TRY(tsr_net_read_stats(net, eval, loss_sum, correct));
  tsr_task_opts_t o = tsr__net_task_opts(net, 0, false);
  return tsr__tiles_fill(&o, eval ? net->eval_stats : net->train_stats, 0.0f);
}

/* Parameters are numbered in layer order, each layer's in its own order. */
static tsr_param_t *param(const tsr_net_t *net, int index) {
  for (int i = 0; i < net->n_layers; i++) {
    const tsr_layer_t *l = &net->layers[i];
    if (index < l->nparams) return (tsr_param_t *)&l->params[index];
    index -= l->nparams;
  }
  return NULL;
}

int tsr_net_grid_rows(const tsr_net_t *net) {
  return net->grid_rows;
}

void tsr_net_grid_traffic(const tsr_net_t *net, uint64_t *bytes_sent, uint64_t *bytes_received,
                          int64_t *messages_sent, int64_t *messages_received) {
  *bytes_sent = net->traffic.bytes_sent, *bytes_received = net->traffic.bytes_received;
  *messages_sent = net->traffic.messages_sent;
  *messages_received = net->traffic.messages_received;
}

void tsr_net_halo_traffic(const tsr_net_t *net, uint64_t *bytes_sent, int64_t *messages_sent) {
  *bytes_sent = net->traffic.halo_bytes_sent, *messages_sent = net->traffic.halo_messages_sent;
}

int64_t tsr_net_param_local_bytes(const tsr_net_t *net) {
  int64_t n = 0;
  for (int i = 0; i < net->n_layers; i++)
    for (int k = 0; k < net->layers[i].nparams; k++)
      n += tsr_tiles_local_bytes(net->layers[i].params[k].w);
  return n;
}

int tsr_net_n_params(const tsr_net_t *net) {
  int k = 0;
  for (int i = 0; i < net->n_layers; i++)
    k += net->layers[i].nparams;
  return k;
}

int tsr_net_param_info(const tsr_net_t *net, int index, int64_t *rows, int64_t *cols) {
  const tsr_param_t *p = param(net, index);
  if (!p) return TSR_EINVAL;
  *rows = tsr_tiles_rows(p->w), *cols = tsr_tiles_cols(p->w);
  return 0;
}

int tsr_net_param_get(const tsr_net_t *net, int index, float *dst) {
  const tsr_param_t *p = param(net, index);
  return p ? tsr_tiles_read(p->w, dst) : TSR_EINVAL;
}

int tsr_net_param_set(tsr_net_t *net, int index, const float *src) {
  tsr_param_t *p = param(net, index);
  return p ? tsr_tiles_write(p->w, src) : TSR_EINVAL;
}

int tsr_net_grad_get(const tsr_net_t *net, int index, float *dst) {
  const tsr_param_t *p = param(net, index);
  return p ? tsr_tiles_read(p->g, dst) : TSR_EINVAL;
}

int tsr_net_keep_input_grad(tsr_net_t *net) {
  if (net->dx0) return 0;
  int extra = net->layout.in_consumers - 1;
  if (extra > 0) {
    net->dx0_grads = calloc((size_t)extra, sizeof *net->dx0_grads);
    if (!net->dx0_grads) return TSR_ENOMEM;
    for (int k = 0; k < extra; k++)
      TSR_TRY(
          tsr__net_tiles(&net->dx0_grads[k], net->batch, net->inputs, net->mb, net->layout.in_nb));
  }
  return tsr__net_tiles(&net->dx0, net->batch, net->inputs, net->mb, net->layout.in_nb);
}

int tsr_net_input_grad_get(const tsr_net_t *net, float *dst) {
  return net->dx0 ? tsr_tiles_read(net->dx0, dst) : TSR_EINVAL;
}

int tsr_net_logits_get(const tsr_net_t *net, float *dst) {
  if (!net || !dst || net->n_layers < 1) return TSR_EINVAL;
  return tsr_tiles_read(net->layers[net->n_layers - 1].y, dst);
}
