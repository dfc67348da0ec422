/* A network: dense layers (with an optional fused ReLU) and standalone ReLU
 * layers over tiled matrices. Forward, loss, backward and update are
 * submitted as tasks for a whole step and never waited on here; the caller
 * decides when to wait (evaluation, epoch ends, reading parameters).
 *
 * Tiling: batch rows are cut in tile_rows, features in tile_cols, except the
 * logits, which stay one tile wide so that the softmax sees a whole row. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "tessera/net.h"
#include "tessera/runtime.h"
#include "tessera/tiles.h"
#include "tile/ops.h"
#include "try.h"

typedef struct {
  tsr_layer_kind_t kind;
  int fin, fout;
  bool relu;                /* dense: ReLU fused into the bias add */
  tsr_tiles_t *w, *b;       /* dense: (fin, fout), (1, fout) */
  tsr_tiles_t *dw, *db;     /* their gradients */
  tsr_tiles_t *w_s1, *b_s1; /* SGD velocity or Adam first moment (NULL for plain SGD) */
  tsr_tiles_t *w_s2, *b_s2; /* Adam second moment */
  tsr_tiles_t *y, *dy;      /* (batch, fout) output and its gradient */
} layer_t;

struct tsr_net {
  int inputs, classes, batch, mb, nb;
  tsr_net_opts_t opts;
  int n_layers;
  layer_t layers[TSR_MAX_LAYERS];
  tsr_tiles_t *x0, *dx0;    /* (batch, inputs) input and, when kept, its gradient */
  tsr_tiles_t *labels;      /* (batch, 1) */
  tsr_tiles_t *train_stats; /* (mt, 2) [loss sum, correct] per batch-row tile */
  tsr_tiles_t *eval_stats;
  int step;                /* optimizer steps taken (Adam's t) */
  float lr;                /* current learning rate (opts.opt.lr is the base) */
  uint64_t tasks_per_step; /* measured on the first training step */
};

void tsr_net_opts_init(tsr_net_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->batch = 64;
  o->seed = 1;
  o->opt.kind = TSR_OPT_SGD;
  o->opt.lr = 0.01f;
  o->opt.momentum = 0.9f;
  o->opt.beta1 = 0.9f, o->opt.beta2 = 0.999f, o->opt.eps = 1e-8f;
}

/* Default tiles, from the training benchmark's sweeps (README): one
 * batch-row tile up to 512 samples, and feature tiles that cut the widest
 * layer into about two tiles per worker, between 256 and 1024 features. Fewer,
 * larger GEMM tasks let BLIS run near its peak; two per worker keep every
 * worker busy while the other waits on a dependency. */
static void choose_tiles(const tsr_model_spec_t *spec, int inputs, const tsr_net_opts_t *o, int *mb,
                         int *nb) {
  int widest = 0;
  for (int i = 0; i < spec->n_layers - 1; i++)
    if (spec->layers[i].kind == TSR_LAYER_DENSE && spec->layers[i].units > widest)
      widest = spec->layers[i].units;
  if (widest == 0) widest = inputs;
  int workers = tsr_runtime_ncpus() > 0 ? tsr_runtime_ncpus() : 1;
  int cols = 256;
  while (cols < 1024 && widest / (2 * workers) >= 2 * cols)
    cols *= 2;
  *mb = o->tile_rows > 0 ? o->tile_rows : (o->batch <= 512 ? o->batch : 512);
  *nb = o->tile_cols > 0 ? o->tile_cols : cols;
}

static int64_t next_tag;

static int tiles(tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb) {
  int rc = tsr_tiles_create(t, m, n, mb, nb, NULL, NULL, next_tag);
  next_tag += (m + mb - 1) / mb * ((n + nb - 1) / nb);
  return rc;
}

/* He-uniform weights for ReLU networks, zero biases. */
static int init_dense(layer_t *l, tsr_rng_t *rng) {
  size_t n = (size_t)l->fin * (size_t)l->fout;
  float *w = malloc(n * sizeof *w);
  if (!w) return TSR_ENOMEM;
  double bound = sqrt(6.0 / l->fin);
  for (size_t k = 0; k < n; k++)
    w[k] = (float)((2.0 * tsr__rng_uniform(rng) - 1.0) * bound);
  int rc = tsr_tiles_write(l->w, w);
  free(w);
  return rc;
}

static int create_dense(tsr_net_t *net, layer_t *l, bool last, tsr_rng_t *rng) {
  int onb = last ? l->fout : net->nb;
  const tsr_optimizer_t *opt = &net->opts.opt;
  bool s1 = opt->kind == TSR_OPT_ADAM || opt->momentum != 0.0f;
  bool s2 = opt->kind == TSR_OPT_ADAM;
  int rc = 0;
  if ((rc = tiles(&l->w, l->fin, l->fout, net->nb, onb)) ||
      (rc = tiles(&l->b, 1, l->fout, 1, onb)) ||
      (rc = tiles(&l->dw, l->fin, l->fout, net->nb, onb)) ||
      (rc = tiles(&l->db, 1, l->fout, 1, onb)) ||
      (s1 && ((rc = tiles(&l->w_s1, l->fin, l->fout, net->nb, onb)) ||
              (rc = tiles(&l->b_s1, 1, l->fout, 1, onb)))) ||
      (s2 && ((rc = tiles(&l->w_s2, l->fin, l->fout, net->nb, onb)) ||
              (rc = tiles(&l->b_s2, 1, l->fout, 1, onb)))) ||
      (rc = tiles(&l->y, net->batch, l->fout, net->mb, onb)) ||
      (rc = tiles(&l->dy, net->batch, l->fout, net->mb, onb)))
    return rc;
  return init_dense(l, rng);
}

static int create_relu(tsr_net_t *net, layer_t *l, bool last) {
  int onb = last ? l->fout : net->nb;
  int rc = tiles(&l->y, net->batch, l->fout, net->mb, onb);
  return rc ? rc : tiles(&l->dy, net->batch, l->fout, net->mb, onb);
}

static int check_spec(const tsr_model_spec_t *spec, int inputs, int classes, tsr_errbuf_t *err) {
  if (inputs <= 0 || classes < 2)
    return tsr_error_set(err, TSR_EINVAL, "a network needs inputs > 0 and at least 2 classes");
  if (spec->n_layers <= 0 || spec->n_layers > TSR_MAX_LAYERS)
    return tsr_error_set(err, TSR_EINVAL, "a model needs 1 to %d layers (got %d)", TSR_MAX_LAYERS,
                         spec->n_layers);
  const tsr_layer_spec_t *last = &spec->layers[spec->n_layers - 1];
  if (last->kind != TSR_LAYER_DENSE || last->units != classes)
    return tsr_error_set(err, TSR_ESHAPE,
                         "the last layer must be dense with one unit per class (%d); it is %s "
                         "with %d units",
                         classes, last->kind == TSR_LAYER_DENSE ? "dense" : "relu",
                         last->kind == TSR_LAYER_DENSE ? last->units : 0);
  for (int i = 0; i < spec->n_layers; i++)
    if (spec->layers[i].kind == TSR_LAYER_DENSE && spec->layers[i].units <= 0)
      return tsr_error_set(err, TSR_EINVAL, "layer %d: dense units must be positive (got %d)",
                           i + 1, spec->layers[i].units);
  return 0;
}

int tsr_net_create(tsr_net_t **out, const tsr_model_spec_t *spec, int inputs, int classes,
                   const tsr_net_opts_t *opts, tsr_errbuf_t *err) {
  *out = NULL;
  int rc = check_spec(spec, inputs, classes, err);
  if (rc) return rc;
  if (opts->batch <= 0 || opts->tile_rows < 0 || opts->tile_cols < 0)
    return tsr_error_set(err, TSR_EINVAL, "batch must be positive and tile sizes non-negative");
  if (!(opts->opt.lr > 0.0f) || opts->opt.momentum < 0.0f || opts->opt.momentum >= 1.0f ||
      opts->opt.weight_decay < 0.0f)
    return tsr_error_set(err, TSR_EINVAL,
                         "optimizer: lr must be > 0, momentum in [0, 1), weight decay >= 0");
  tsr_net_t *net = calloc(1, sizeof *net);
  if (!net) return TSR_ENOMEM;
  net->inputs = inputs, net->classes = classes, net->batch = opts->batch, net->opts = *opts;
  net->lr = opts->opt.lr;
  choose_tiles(spec, inputs, opts, &net->mb, &net->nb);
  tsr_rng_t rng = {opts->seed};

  /* Fold each ReLU that follows a dense layer into that layer. */
  int fin = inputs;
  for (int i = 0; i < spec->n_layers; i++) {
    const tsr_layer_spec_t *s = &spec->layers[i];
    if (s->kind == TSR_LAYER_RELU && net->n_layers > 0 &&
        net->layers[net->n_layers - 1].kind == TSR_LAYER_DENSE &&
        !net->layers[net->n_layers - 1].relu) {
      net->layers[net->n_layers - 1].relu = true;
      continue;
    }
    layer_t *l = &net->layers[net->n_layers++];
    l->kind = s->kind;
    l->fin = fin;
    l->fout = s->kind == TSR_LAYER_DENSE ? s->units : fin;
    fin = l->fout;
  }
  for (int i = 0; i < net->n_layers && rc == 0; i++) {
    layer_t *l = &net->layers[i];
    bool last = i == net->n_layers - 1;
    rc = l->kind == TSR_LAYER_DENSE ? create_dense(net, l, last, &rng) : create_relu(net, l, last);
  }
  if (rc == 0) rc = tiles(&net->x0, net->batch, inputs, net->mb, net->nb);
  if (rc == 0) rc = tiles(&net->labels, net->batch, 1, net->mb, 1);
  int mt = (net->batch + net->mb - 1) / net->mb;
  if (rc == 0) rc = tiles(&net->train_stats, mt, 2, 1, 2);
  if (rc == 0) rc = tiles(&net->eval_stats, mt, 2, 1, 2);
  if (rc) {
    tsr_net_destroy(&net);
    return tsr_error_set(err, rc, "cannot build the network: %s", tsr_strerror(rc));
  }
  *out = net;
  return 0;
}

void tsr_net_destroy(tsr_net_t **np) {
  tsr_net_t *net = *np;
  if (!net) return;
  for (int i = 0; i < net->n_layers; i++) {
    layer_t *l = &net->layers[i];
    tsr_tiles_t **all[] = {&l->w,    &l->b,    &l->dw,   &l->db, &l->w_s1,
                           &l->b_s1, &l->w_s2, &l->b_s2, &l->y,  &l->dy};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
      tsr_tiles_destroy(all[k]);
  }
  tsr_tiles_destroy(&net->x0);
  tsr_tiles_destroy(&net->dx0);
  tsr_tiles_destroy(&net->labels);
  tsr_tiles_destroy(&net->train_stats);
  tsr_tiles_destroy(&net->eval_stats);
  free(net);
  *np = NULL;
}

int tsr_net_batch(const tsr_net_t *net) {
  return net->batch;
}

void tsr_net_set_lr(tsr_net_t *net, float lr) {
  net->lr = lr;
}

float tsr_net_base_lr(const tsr_net_t *net) {
  return net->opts.opt.lr;
}

void tsr_net_tiles(const tsr_net_t *net, int *tile_rows, int *tile_cols) {
  *tile_rows = net->mb, *tile_cols = net->nb;
}

int64_t tsr_net_param_count(const tsr_net_t *net) {
  int64_t n = 0;
  for (int i = 0; i < net->n_layers; i++)
    if (net->layers[i].kind == TSR_LAYER_DENSE)
      n += (int64_t)net->layers[i].fin * net->layers[i].fout + net->layers[i].fout;
  return n;
}

static const tsr_tiles_t *layer_input(const tsr_net_t *net, int i) {
  return i == 0 ? net->x0 : net->layers[i - 1].y;
}

static int load_batch(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n) {
  if (n <= 0 || n > net->batch || ds->features != net->inputs) return TSR_ESHAPE;
  TSR_TRY(tsr__tiles_gather(net->x0, ds->x, ds->features, rows, n));
  return tsr__tiles_gather(net->labels, ds->y, 1, rows, n);
}

static int forward(tsr_net_t *net) {
  for (int i = 0; i < net->n_layers; i++) {
    layer_t *l = &net->layers[i];
    const tsr_tiles_t *x = layer_input(net, i);
    if (l->kind == TSR_LAYER_DENSE) {
      TSR_TRY(tsr__tiles_gemm(false, false, 1.0f, x, l->w, 0.0f, l->y, 0));
      TSR_TRY(tsr__tiles_bias_add(l->y, l->b, l->relu));
    } else {
      TSR_TRY(tsr__tiles_relu_fwd(l->y, x));
    }
  }
  return 0;
}

static int update(tsr_net_t *net, layer_t *l) {
  const tsr_optimizer_t *o = &net->opts.opt;
  if (o->kind == TSR_OPT_ADAM) {
    TSR_TRY(tsr__tiles_adam(l->w, l->w_s1, l->w_s2, l->dw, net->lr, o->beta1, o->beta2, o->eps,
                            o->weight_decay, net->step));
    return tsr__tiles_adam(l->b, l->b_s1, l->b_s2, l->db, net->lr, o->beta1, o->beta2, o->eps, 0.0f,
                           net->step);
  }
  TSR_TRY(tsr__tiles_sgd(l->w, l->w_s1, l->dw, net->lr, o->momentum, o->weight_decay));
  return tsr__tiles_sgd(l->b, l->b_s1, l->db, net->lr, o->momentum, 0.0f);
}

/* Backward from the last layer to the first. The input gradient of a layer
 * is submitted before its weight gradient, since the layer below waits for
 * it; each layer's update is submitted as soon as its gradients are, so it
 * overlaps with the backward pass of the layers below. */
static int backward(tsr_net_t *net, bool do_update) {
  if (do_update) net->step++;
  for (int i = net->n_layers - 1; i >= 0; i--) {
    layer_t *l = &net->layers[i];
    const tsr_tiles_t *x = layer_input(net, i);
    tsr_tiles_t *dx = i > 0 ? net->layers[i - 1].dy : net->dx0;
    if (l->kind == TSR_LAYER_RELU) {
      if (dx) TSR_TRY(tsr__tiles_relu_bwd(dx, l->dy, l->y));
      continue;
    }
    if (l->relu) TSR_TRY(tsr__tiles_relu_bwd(l->dy, l->dy, l->y));
    if (dx) TSR_TRY(tsr__tiles_gemm(false, true, 1.0f, l->dy, l->w, 0.0f, dx, 1));
    TSR_TRY(tsr__tiles_gemm(true, false, 1.0f, x, l->dy, 0.0f, l->dw, 0));
    TSR_TRY(tsr__tiles_bias_grad(l->db, l->dy));
    if (do_update) TSR_TRY(update(net, l));
  }
  return 0;
}

int tsr_net_train_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n,
                       bool do_update) {
  uint64_t before = tsr__tiles_task_count();
  TSR_TRY(load_batch(net, ds, rows, n));
  TSR_TRY(forward(net));
  layer_t *last = &net->layers[net->n_layers - 1];
  TSR_TRY(tsr__tiles_softmax_xent(last->dy, net->train_stats, last->y, net->labels, n, 1.0f / n));
  TSR_TRY(backward(net, do_update));
  if (net->tasks_per_step == 0) net->tasks_per_step = tsr__tiles_task_count() - before;
  return 0;
}

int tsr_net_eval_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n) {
  TSR_TRY(load_batch(net, ds, rows, n));
  TSR_TRY(forward(net));
  layer_t *last = &net->layers[net->n_layers - 1];
  return tsr__tiles_softmax_xent(NULL, net->eval_stats, last->y, net->labels, n, 1.0f);
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
  int rc = tsr_tiles_read(s, v);
  *loss_sum = 0, *correct = 0;
  for (int i = 0; rc == 0 && i < mt; i++)
    *loss_sum += v[2 * i], *correct += v[2 * i + 1];
  if (v != buf) free(v);
  return rc ? rc : tsr__tiles_fill(s, 0.0f);
}

/* Parameter index k maps to layer and W (even) or b (odd) among dense layers. */
static tsr_tiles_t *param(const tsr_net_t *net, int index, bool grad) {
  int k = 0;
  for (int i = 0; i < net->n_layers; i++) {
    const layer_t *l = &net->layers[i];
    if (l->kind != TSR_LAYER_DENSE) continue;
    if (k == index) return grad ? l->dw : l->w;
    if (k + 1 == index) return grad ? l->db : l->b;
    k += 2;
  }
  return NULL;
}

int tsr_net_n_params(const tsr_net_t *net) {
  int k = 0;
  for (int i = 0; i < net->n_layers; i++)
    k += net->layers[i].kind == TSR_LAYER_DENSE ? 2 : 0;
  return k;
}

int tsr_net_param_info(const tsr_net_t *net, int index, int64_t *rows, int64_t *cols) {
  const tsr_tiles_t *t = param(net, index, false);
  if (!t) return TSR_EINVAL;
  *rows = tsr_tiles_rows(t), *cols = tsr_tiles_cols(t);
  return 0;
}

int tsr_net_param_get(const tsr_net_t *net, int index, float *dst) {
  const tsr_tiles_t *t = param(net, index, false);
  return t ? tsr_tiles_read(t, dst) : TSR_EINVAL;
}

int tsr_net_param_set(tsr_net_t *net, int index, const float *src) {
  tsr_tiles_t *t = param(net, index, false);
  return t ? tsr_tiles_write(t, src) : TSR_EINVAL;
}

int tsr_net_grad_get(const tsr_net_t *net, int index, float *dst) {
  const tsr_tiles_t *t = param(net, index, true);
  return t ? tsr_tiles_read(t, dst) : TSR_EINVAL;
}

int tsr_net_keep_input_grad(tsr_net_t *net) {
  if (net->dx0) return 0;
  return tiles(&net->dx0, net->batch, net->inputs, net->mb, net->nb);
}

int tsr_net_input_grad_get(const tsr_net_t *net, float *dst) {
  return net->dx0 ? tsr_tiles_read(net->dx0, dst) : TSR_EINVAL;
}
