/* A network: a stack of layers over tiled matrices (the layer types live in
 * dense.c, ..., and are looked up in the registry, layers.c). Forward, loss,
 * backward and update are submitted as tasks for a whole step and never
 * waited on here; the caller decides when to wait (evaluation, epoch ends,
 * reading parameters).
 *
 * Tiling: batch rows are cut in tile_rows, features in tile_cols, except the
 * logits, which stay one tile wide so that the softmax sees a whole row. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/layout.h"
#include "tessera/dist.h"
#include "tessera/runtime.h"
#include "tile/ops.h"
#include "try.h"

void tsr_net_opts_init(tsr_net_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->batch = 64;
  o->seed = 1;
  tsr_optimizer_init(&o->opt, "sgd", NULL);
}

/* The registered type of spec layer i (check_spec made sure there is one). */
static const tsr_layer_type_t *type_of(const tsr_model_spec_t *spec, int i) {
  const tsr_layer_type_t *t = tsr__layer_type(spec->layers[i].kind);
  assert(t);
  return t;
}

/* Default tiles, for this process's workers (under MPI, each rank's), from
 * the training benchmark's sweeps (README). Feature tiles cut the widest
 * layer into about two tiles per worker, between 256 and 1024 features:
 * fewer, larger GEMM tasks let BLIS run near its peak, and two per worker
 * keep every worker busy while another waits on a dependency. One worker
 * gains nothing from more tasks: 1024 (2 ranks x 1 worker, --sync batch:
 * 35k samples/s with 64x1024 against 27k with 64x256). Where the features
 * give fewer tiles than workers, the batch is cut too: 4 ranks x 4 workers
 * on a 16-core node trained 2x faster with 32x256 tiles than with 64x1024
 * (issue 11). Batch-row tiles hold at most 512 samples. Averaging over MPI
 * does not need large tiles: it moves chunks sized on their own
 * (src/parallel/sync.c). */
static void choose_tiles(const tsr_model_spec_t *spec, int inputs, const tsr_net_opts_t *o,
                         int workers, int *mb, int *nb) {
  bool spatial = false;
  for (int i = 0; i < spec->n_layers; i++)
    spatial |= type_of(spec, i)->whole_samples;
  int widest = 0;
  for (int i = 0; i < spec->n_layers - 1; i++)
    if (type_of(spec, i)->cuts_features && spec->layers[i].units > widest)
      widest = spec->layers[i].units;
  if (widest == 0) widest = inputs;
  int cols = workers == 1 ? 1024 : 256;
  while (cols < 1024 && widest / (2 * workers) >= 2 * cols)
    cols *= 2;
  /* A grid column's Pr ranks share the widest layer's column tiles: at least one each. */
  int rows = o->grid_rows;
  if (rows > 1 && cols > (widest + rows - 1) / rows) cols = (widest + rows - 1) / rows;
  int batch = o->batch <= 512 ? o->batch : 512;
  int col_tiles = (widest + cols - 1) / cols;
  if (col_tiles < workers) {
    int cuts = (workers + col_tiles - 1) / col_tiles; /* batch-row tiles wanted */
    batch = (batch + cuts - 1) / cuts;
    batch = batch < 16 ? (o->batch < 16 ? o->batch : 16) : batch;
  }
  *mb = o->tile_rows > 0 ? o->tile_rows : batch;
  /* Convolutions are one task per batch-row tile (their activations are one
   * tile wide): cut the batch into one tile per worker. With the default CNN
   * at batch 64 on 2 workers, tiles of 32 rows trained 5% faster than 16 and
   * 40% faster than 64 (benchmarks/bench_cnn --tile R, quiet machine). */
  if (spatial && o->tile_rows == 0) {
    int rows = (o->batch + workers - 1) / workers;
    *mb = rows < 8 ? (o->batch < 8 ? o->batch : 8) : rows > 512 ? 512 : rows;
  }
  *nb = o->tile_cols > 0 ? o->tile_cols : cols;
}

/* This process's CPU workers, at least 1. */
static int this_workers(void) {
  return tsr_runtime_ncpus() > 0 ? tsr_runtime_ncpus() : 1;
}

int tsr__net_tiles(tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb) {
  return tsr_tiles_create(t, m, n, mb, nb);
}

/* Grid ownership: column tile j on the column's row j mod Pr (the logits, one tile wide, and
 * the per-batch-tile statistics on row 0); a one-rank matrix's tiles on the rank its context
 * names (net->grid_slot[p]). */
static int grid_column_rank(int i, int j, void *ctx) {
  (void)i;
  const tsr_net_t *net = ctx;
  return net->grid_slot[j % net->grid_rows];
}

static int grid_slot_rank(int i, int j, void *ctx) {
  (void)i, (void)j;
  return *(const int *)ctx;
}

int tsr__net_act_tiles(tsr_net_t *net, tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb) {
  if (net->split_out) return tsr_tiles_create_distributed(t, m, n, mb, nb, grid_column_rank, net);
  if (net->grid_rows > 1) return tsr_tiles_create_per_node(t, m, n, mb, nb);
  return tsr_tiles_create(t, m, n, mb, nb);
}

int tsr__net_grid_scratch(tsr_net_t *net, tsr_layer_t *l, bool in_split, bool need_dx) {
  if (!in_split && !need_dx) return 0; /* a per-node input, no gradient below */
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

int tsr__net_param_create(tsr_net_t *net, tsr_param_t *p, int64_t rows, int64_t cols, int mb,
                          int nb, bool decay) {
  p->decay = decay;
  if (net->split_out) {
    TSR_TRY(tsr_tiles_create_distributed(&p->w, rows, cols, mb, nb, grid_column_rank, net));
    TSR_TRY(tsr_tiles_create_like(&p->g, p->w));
  } else {
    TSR_TRY(tsr__net_tiles(&p->w, rows, cols, mb, nb));
    TSR_TRY(tsr__net_tiles(&p->g, rows, cols, mb, nb));
  }
  return tsr__optim_add(net->optim, p->w, decay, &p->index);
}

int tsr__net_activations(tsr_net_t *net, tsr_layer_t *l, bool last) {
  int onb = last ? l->fout : l->out_nb;
  l->split = net->split_out;
  TSR_TRY(tsr__net_act_tiles(net, &l->y, net->batch, l->fout, net->mb, onb));
  return tsr__net_act_tiles(net, &l->dy, net->batch, l->fout, net->mb, onb);
}

int tsr__net_optimizer_step(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *to) {
  return tsr__optim_update(net->optim, p->index, p->w, p->g, to);
}

static int default_grad_hook(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *o, void *ctx) {
  (void)ctx;
  return tsr__net_optimizer_step(net, p, o);
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

static int check_spec(const tsr_model_spec_t *spec, int inputs, int classes, tsr_errbuf_t *err) {
  if (inputs <= 0 || classes < 2)
    return tsr_error_set(err, TSR_EINVAL, "a network needs inputs > 0 and at least 2 classes");
  if (spec->n_layers <= 0 || spec->n_layers > TSR_MAX_LAYERS)
    return tsr_error_set(err, TSR_EINVAL, "a model needs 1 to %d layers (got %d)", TSR_MAX_LAYERS,
                         spec->n_layers);
  const tsr_layer_spec_t *last = &spec->layers[spec->n_layers - 1];
  const tsr_layer_type_t *lt = tsr__layer_type(last->kind);
  if (!lt || !lt->output || last->units != classes)
    return tsr_error_set(err, TSR_ESHAPE,
                         "the last layer must be dense with one unit per class (%d); it is %s "
                         "with %d units",
                         classes, lt ? lt->name : "unknown", lt && lt->output ? last->units : 0);
  for (int i = 0; i < spec->n_layers; i++)
    if (!tsr__layer_type(spec->layers[i].kind))
      return tsr_error_set(err, TSR_EINVAL, "layer %d: unknown layer kind %d", i + 1,
                           (int)spec->layers[i].kind);
  return 0;
}

/* Whether the activations entering spec layer i must hold whole samples in
 * one tile: the next layer that is not element-wise works on whole samples
 * (a convolution or a pooling). */
static bool whole_rows_from(const tsr_model_spec_t *spec, int i) {
  for (; i < spec->n_layers; i++)
    if (!type_of(spec, i)->elementwise) return type_of(spec, i)->whole_samples;
  return false;
}

/* The input sample's shape: the options', or a square one-channel image
 * when inputs is a perfect square, or 1 x 1 x inputs. */
static int input_geometry(const tsr_net_opts_t *o, int inputs, tsr_conv_geom_t *g,
                          tsr_errbuf_t *err) {
  *g = (tsr_conv_geom_t){.c = o->in_channels, .h = o->in_height, .w = o->in_width};
  if (g->c == 0 && g->h == 0 && g->w == 0) {
    int side = (int)lround(sqrt((double)inputs));
    *g = side * side == inputs ? (tsr_conv_geom_t){.c = 1, .h = side, .w = side}
                               : (tsr_conv_geom_t){.c = inputs, .h = 1, .w = 1};
    return 0;
  }
  if (g->c <= 0 || g->h <= 0 || g->w <= 0 || (int64_t)g->c * g->h * g->w != inputs)
    return tsr_error_set(err, TSR_ESHAPE,
                         "input geometry %d channels x %d x %d does not match the %d input "
                         "features of a sample",
                         g->c, g->h, g->w, inputs);
  return 0;
}

static void err_clear(tsr_errbuf_t *err) {
  if (err) err->msg[0] = '\0';
}

/* Builds the layers in order, following each sample's shape through the
 * registry's shape checks. A ReLU right after a dense or conv layer is folded
 * into it (its bias task applies it), saving a pass over the activations; a
 * type without a create function (flatten) changes only the shape. */
static int create_layers(tsr_net_t *net, const tsr_model_spec_t *spec, tsr_rng_t *rng,
                         tsr_errbuf_t *err) {
  int fin = net->inputs;
  int nb = whole_rows_from(spec, 0) ? net->inputs : net->nb; /* column tile of the activations */
  tsr_conv_geom_t g;                                         /* their sample shape, (h, w, c) */
  TSR_TRY(input_geometry(&net->opts, net->inputs, &g, err));
  tsr_conv_geom_t shown = g; /* messages show the shape before a flatten */
  for (int i = 0; i < spec->n_layers; i++) {
    const tsr_layer_spec_t *s = &spec->layers[i];
    const tsr_layer_type_t *t = type_of(spec, i);
    bool last = i == spec->n_layers - 1;
    tsr_layer_t *prev = net->n_layers > 0 ? &net->layers[net->n_layers - 1] : NULL;
    if (t->is_relu && prev && prev->ops->fuses_relu && !prev->relu) {
      prev->relu = true;
      continue;
    }
    if (i == 0 || type_of(spec, i - 1)->create) shown = g;
    tsr_layer_site_t at = {.index = i + 1,
                           .last = last,
                           .whole_out = last || whole_rows_from(spec, i + 1),
                           .shown = shown,
                           .rng = rng,
                           .err = err};
    tsr_conv_geom_t io = {.c = g.c, .h = g.h, .w = g.w};
    assert((int64_t)g.c * g.h * g.w == fin);
    TSR_TRY(t->shape(s, &io, &at));
    g = (tsr_conv_geom_t){.c = io.oc, .h = io.oh, .w = io.ow};
    if (!t->create) continue;
    tsr_layer_t *l = &net->layers[net->n_layers++];
    l->fin = fin, l->in_nb = nb, l->spec = *s, l->index = i + 1, l->geom = io;
    /* Grid: dense layers spread their output columns, element-wise layers keep their input's
     * layout, the rest stay replicated in the column. */
    bool in_split = net->n_layers > 1 && net->layers[net->n_layers - 2].split;
    net->split_out = net->grid_rows > 1 && (t->cuts_features || (t->elementwise && in_split));
    if (in_split && !net->split_out)
      return tsr_error_set(err, TSR_EINVAL,
                           "layer %d (%s): under --grid, a layer after a dense layer must be dense "
                           "or element-wise (convolutions and pooling are replicated in a grid "
                           "column and take the input batch or another convolution's output); "
                           "use --grid 1xP for this model",
                           i + 1, t->name);
    TSR_TRY(t->create(net, l, &at));
    if (net->split_out && t->cuts_features)
      TSR_TRY(tsr__net_grid_scratch(net, l, in_split, net->n_layers > 1));
    net->split_out = false;
    fin = l->fout, nb = l->out_nb;
  }
  return 0;
}

int tsr_net_create(tsr_net_t **out, const tsr_model_spec_t *spec, int inputs, int classes,
                   const tsr_net_opts_t *opts, tsr_errbuf_t *err) {
  *out = NULL;
  int rc = check_spec(spec, inputs, classes, err);
  if (rc) return rc;
  if (opts->batch <= 0 || opts->tile_rows < 0 || opts->tile_cols < 0)
    return tsr_error_set(err, TSR_EINVAL, "batch must be positive and tile sizes non-negative");
  rc = tsr_optimizer_check(&opts->opt, err);
  if (rc) return rc;
  int pr = opts->grid_rows > 1 ? opts->grid_rows : 1;
  if (pr > 1 && (!tsr_dist_active() || tsr_dist_size() % pr != 0))
    return tsr_error_set(err, TSR_EINVAL,
                         "a grid with %d rows needs a multiple of %d MPI ranks (running %d); start "
                         "Pr x Pc ranks with mpirun",
                         pr, pr, tsr_dist_size());
  tsr_net_t *net = calloc(1, sizeof *net);
  if (!net) return TSR_ENOMEM;
  net->grid_rows = pr;
  net->grid_slot = malloc(sizeof(int) * (size_t)pr);
  if (!net->grid_slot) {
    free(net);
    return TSR_ENOMEM;
  }
  for (int p = 0; p < pr; p++)
    net->grid_slot[p] = tsr_dist_rank() / pr * pr + p;
  net->inputs = inputs, net->classes = classes, net->batch = opts->batch, net->opts = *opts;
  net->spec = *spec;
  choose_tiles(spec, inputs, opts, this_workers(), &net->mb, &net->nb);
  tsr_rng_t rng = {opts->seed};

  net->on_grad = (tsr_grad_hook_t){default_grad_hook, NULL};
  err_clear(err);
  rc = tsr__optim_create(&net->optim, &opts->opt);
  if (rc == 0) rc = create_layers(net, spec, &rng, err);
  /* Grid: every rank of a column loads the batch (per-node); the loss task runs with the
   * logits, on row 0, which holds the statistics. */
  if (rc == 0)
    rc = tsr__net_act_tiles(net, &net->x0, net->batch, inputs, net->mb, net->layers[0].in_nb);
  if (rc == 0) rc = tsr__net_act_tiles(net, &net->labels, net->batch, 1, net->mb, 1);
  int mt = (net->batch + net->mb - 1) / net->mb;
  net->split_out = pr > 1;
  if (rc == 0) rc = tsr__net_act_tiles(net, &net->train_stats, mt, 2, 1, 2);
  if (rc == 0) rc = tsr__net_act_tiles(net, &net->eval_stats, mt, 2, 1, 2);
  net->split_out = false;
  if (rc) {
    tsr_net_destroy(&net);
    if (err && err->msg[0]) return rc; /* a layer said what does not fit */
    return tsr_error_set(err, rc, "cannot build the network: %s", tsr_strerror(rc));
  }
  *out = net;
  return 0;
}

/* What create_layers and tsr_net_create allocate, followed layer by layer through the same
 * shape checks, as floats. The kinds with parameters are named here (dense, conv): the registry
 * says nothing of sizes, and these two are the only ones. */
int tsr_net_estimate(tsr_net_memory_t *mem, const tsr_model_spec_t *spec, int inputs, int classes,
                     const tsr_net_opts_t *opts, tsr_errbuf_t *err) {
  memset(mem, 0, sizeof *mem);
  TSR_TRY(check_spec(spec, inputs, classes, err));
  if (opts->batch <= 0 || opts->tile_rows < 0 || opts->tile_cols < 0)
    return tsr_error_set(err, TSR_EINVAL, "batch must be positive and tile sizes non-negative");
  int mb, nb;
  choose_tiles(spec, inputs, opts, this_workers(), &mb, &nb);
  tsr_optim_t *optim;
  TSR_TRY(tsr__optim_create(&optim, &opts->opt));
  int nstate = tsr__optim_nstate(optim);
  tsr__optim_destroy(&optim);
  tsr_conv_geom_t g;
  TSR_TRY(input_geometry(opts, inputs, &g, err));
  int64_t batch = opts->batch, mt = (batch + mb - 1) / mb;
  int64_t params = 0, activations = batch * inputs + batch, workspace = 0;
  bool fusable = false; /* the last layer built is dense or conv, without a ReLU yet */
  /* A grid: the busiest rank of a column holds its share of each spread layer's columns (the
   * logits whole, on row 0), and gathered inputs and partial input gradients. */
  int pr = opts->grid_rows > 1 ? opts->grid_rows : 1;
  bool split_in = false, built = false;
  int64_t share_in = 0;
  for (int i = 0; i < spec->n_layers; i++) {
    const tsr_layer_spec_t *s = &spec->layers[i];
    const tsr_layer_type_t *t = type_of(spec, i);
    if (t->is_relu && fusable) {
      fusable = false;
      continue;
    }
    tsr_layer_site_t at = {.index = i + 1, .last = i == spec->n_layers - 1, .shown = g, .err = err};
    tsr_conv_geom_t io = {.c = g.c, .h = g.h, .w = g.w};
    TSR_TRY(t->shape(s, &io, &at));
    g = (tsr_conv_geom_t){.c = io.oc, .h = io.oh, .w = io.ow};
    if (!t->create) continue;
    int64_t fin = (int64_t)io.c * io.h * io.w, fout = (int64_t)io.oc * io.oh * io.ow;
    bool split = pr > 1 && (t->cuts_features || (t->elementwise && split_in));
    int64_t share = split && !t->cuts_features ? share_in : fout; /* columns held here */
    if (split && t->cuts_features) {
      int64_t onb = at.last ? fout : nb, nt = (fout + onb - 1) / onb;
      share = (nt + pr - 1) / pr * onb < fout ? (nt + pr - 1) / pr * onb : fout;
      if (split_in || built) activations += 2 * batch * fin; /* gathered, partials */
    }
    activations += 2 * batch * share; /* y and dy */
    fusable = s->kind == TSR_LAYER_DENSE || s->kind == TSR_LAYER_CONV;
    if (s->kind == TSR_LAYER_DENSE) params += fin * share + share;
    split_in = split, share_in = share, built = true;
    if (s->kind == TSR_LAYER_CONV) {
      int64_t fan_in = (int64_t)io.kh * io.kw * io.c;
      params += fan_in * io.oc + io.oc;
      activations += (mt - 1) * (fan_in * io.oc + io.oc); /* per-tile gradient partials */
      int64_t work = (int64_t)tsr__k_conv_work(&io, mb);
      if (work > workspace) workspace = work;
    }
  }
  int workers = tsr_runtime_ncpus() > 0 ? tsr_runtime_ncpus() : 1;
  int64_t f = (int64_t)sizeof(float);
  mem->params = f * params, mem->grads = f * params, mem->optimizer = f * nstate * params;
  mem->activations = f * activations, mem->workspace = f * workers * workspace;
  mem->total = mem->params + mem->grads + mem->optimizer + mem->activations + mem->workspace;
  return 0;
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
    tsr_tiles_destroy(&l->scratch[0]), tsr_tiles_destroy(&l->scratch[1]);
    for (int p = 0; l->gathered && p < net->grid_rows; p++)
      tsr_tiles_destroy(&l->gathered[p]), tsr_tiles_destroy(&l->partials[p]);
    free(l->gathered), free(l->partials);
    tsr_tiles_destroy(&l->dx_sums);
  }
  tsr_tiles_destroy(&net->x0);
  tsr_tiles_destroy(&net->dx0);
  tsr_tiles_destroy(&net->labels);
  tsr_tiles_destroy(&net->train_stats);
  tsr_tiles_destroy(&net->eval_stats);
  tsr__optim_destroy(&net->optim);
  free(net->grid_slot);
  free(net);
  *np = NULL;
}

int tsr_net_batch(const tsr_net_t *net) {
  return net->batch;
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

static const tsr_tiles_t *layer_input(const tsr_net_t *net, int i) {
  return i == 0 ? net->x0 : net->layers[i - 1].y;
}

static int load_batch(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n) {
  if (n < 0 || n > net->batch || ds->features != net->inputs) return TSR_ESHAPE;
  tsr_task_opts_t o = tsr__net_task_opts(net, 0, false);
  TSR_TRY(tsr__tiles_gather(&o, net->x0, ds->x, ds->features, rows, n));
  return tsr__tiles_gather(&o, net->labels, ds->y, 1, rows, n);
}

static int forward(tsr_net_t *net, bool train) {
  for (int i = 0; i < net->n_layers; i++) {
    tsr_layer_t *l = &net->layers[i];
    tsr_task_opts_t o = tsr__net_task_opts(net, i + 1, false);
    TSR_TRY(l->ops->forward(net, l, layer_input(net, i), train, &o));
  }
  return 0;
}

/* Backward from the last layer to the first. Each layer's parameters are
 * handed to the gradient hook (the optimizer step, or a synchronization
 * policy) as soon as their gradients are submitted, so updates overlap the
 * backward pass of the layers below. */
static int backward(tsr_net_t *net, bool do_update) {
  if (do_update) tsr__optim_next_step(net->optim);
  for (int i = net->n_layers - 1; i >= 0; i--) {
    tsr_layer_t *l = &net->layers[i];
    tsr_tiles_t *dx = i > 0 ? net->layers[i - 1].dy : net->dx0;
    tsr_task_opts_t o = tsr__net_task_opts(net, i + 1, true);
    TSR_TRY(l->ops->backward(net, l, layer_input(net, i), dx, &o));
    for (int k = 0; do_update && k < l->nparams; k++)
      TSR_TRY(net->on_grad.fn(net, &l->params[k], &o, net->on_grad.ctx));
  }
  return 0;
}

int tsr_net_train_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n,
                       bool do_update) {
  uint64_t before = net->submitted;
  TSR_TRY(load_batch(net, ds, rows, n));
  TSR_TRY(forward(net, true));
  tsr_layer_t *last = &net->layers[net->n_layers - 1];
  tsr_task_opts_t o = tsr__net_task_opts(net, net->n_layers, false);
  TSR_TRY(tsr__tiles_softmax_xent(&o, last->dy, net->train_stats, last->y, net->labels, n,
                                  n > 0 ? 1.0f / (float)n : 0.0f));
  TSR_TRY(backward(net, do_update));
  if (net->tasks_per_step == 0) net->tasks_per_step = net->submitted - before;
  return 0;
}

int tsr_net_eval_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n) {
  TSR_TRY(load_batch(net, ds, rows, n));
  TSR_TRY(forward(net, false));
  tsr_layer_t *last = &net->layers[net->n_layers - 1];
  tsr_task_opts_t o = tsr__net_task_opts(net, net->n_layers, false);
  return tsr__tiles_softmax_xent(&o, NULL, net->eval_stats, last->y, net->labels, n, 1.0f);
}

int tsr_net_wait(tsr_net_t *net, int pending) {
  uint64_t per = net->tasks_per_step ? net->tasks_per_step : 1;
  uint64_t left = pending > 0 ? per * (uint64_t)pending : 0;
  return tsr__tiles_wait(left > UINT32_MAX ? UINT32_MAX : (unsigned)left);
}

int tsr_net_take_stats(tsr_net_t *net, bool eval, double *loss_sum, double *correct) {
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
  if (v != buf) free(v);
  tsr_task_opts_t o = tsr__net_task_opts(net, 0, false);
  return rc ? rc : tsr__tiles_fill(&o, s, 0.0f);
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
  return tsr__net_tiles(&net->dx0, net->batch, net->inputs, net->mb, net->layers[0].in_nb);
}

int tsr_net_input_grad_get(const tsr_net_t *net, float *dst) {
  return net->dx0 ? tsr_tiles_read(net->dx0, dst) : TSR_EINVAL;
}

int tsr__net_layout(tsr_net_layout_t *out, const tsr_model_spec_t *spec, int inputs, int classes,
                    const tsr_net_opts_t *opts, int workers, tsr_errbuf_t *err) {
  memset(out, 0, sizeof *out);
  TSR_TRY(check_spec(spec, inputs, classes, err));
  if (opts->batch <= 0 || opts->tile_rows < 0 || opts->tile_cols < 0 || workers <= 0)
    return tsr_error_set(err, TSR_EINVAL,
                         "batch and workers must be positive and tile sizes non-negative");
  choose_tiles(spec, inputs, opts, workers, &out->mb, &out->nb);
  tsr_conv_geom_t g;
  TSR_TRY(input_geometry(opts, inputs, &g, err));
  /* create_layers' walk, recording instead of creating. */
  int fin = inputs, nb = whole_rows_from(spec, 0) ? inputs : out->nb;
  for (int i = 0; i < spec->n_layers; i++) {
    const tsr_layer_spec_t *s = &spec->layers[i];
    const tsr_layer_type_t *t = type_of(spec, i);
    bool last = i == spec->n_layers - 1;
    tsr_layout_layer_t *prev = out->n_layers > 0 ? &out->layers[out->n_layers - 1] : NULL;
    if (t->is_relu && prev && (prev->kind == TSR_LAYER_DENSE || prev->kind == TSR_LAYER_CONV) &&
        !prev->relu) {
      prev->relu = true;
      continue;
    }
    tsr_layer_site_t at = {.index = i + 1, .last = last, .shown = g, .err = err};
    tsr_conv_geom_t io = {.c = g.c, .h = g.h, .w = g.w};
    TSR_TRY(t->shape(s, &io, &at));
    g = (tsr_conv_geom_t){.c = io.oc, .h = io.oh, .w = io.ow};
    if (!t->create) continue;
    tsr_layout_layer_t *l = &out->layers[out->n_layers++];
    int fout = io.oc * io.oh * io.ow;
    bool whole_out = last || whole_rows_from(spec, i + 1);
    *l = (tsr_layout_layer_t){.kind = s->kind,
                              .fin = fin,
                              .fout = fout,
                              .in_nb = nb,
                              .whole_samples = t->whole_samples,
                              .has_dx =
                                  out->n_layers > 1, /* backward(): every layer but the first */
                              .geom = io};
    /* As each type's create sets out_nb (dense.c, conv.c, pool.c, dropout.c). */
    l->out_nb = t->whole_samples ? fout : t->elementwise ? nb : whole_out ? fout : out->nb;
    fin = fout, nb = l->out_nb;
  }
  return 0;
}
