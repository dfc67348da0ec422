/* The planner's model of a step: tasks and transfers counted tile by tile
 * from the layout a run would build (nn/layout.h): each layer type describes its tasks to the
 * sink here (its cost hook), which prices them on a machine; no layer kind is named here.
 *
 * The grid (README, "Grids"): rank q is row p = q % Pr of column c = q / Pr.
 * A column is one replica training on its own batch. Inside it, a dense
 * layer's output tile column j (W (:, j), bias (0, j), y (:, j), dy (:, j))
 * belongs to row j mod Pr; convolutions and pooling are replicated on every
 * row; the logits (one tile wide) are on row 0. Forward, a row receives each
 * input tile of a dense layer it does not own, once, if it owns an output
 * tile of that layer; backward, each row owning output tiles sends its
 * partial input gradient of each input tile k to that tile's owner (to row
 * k mod Pr, then from there to every row, when the input is replicated). Across columns, row p
 * averages its slice of the parameters with row p of every other column, as
 * src/parallel/average.c averages whole replicas today.
 *
 * Compute and bytes are those of row 0, the busiest (it owns tile column 0 of
 * every dense layer, the logits and the loss). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "parallel/policy.h"
#include "parallel/members.h"
#include "parallel/placement.h"
#include "plan/plan_impl.h"
#include "tessera/optim.h"
#include "tile/domain.h"
#include "try.h"

void tsr_plan_opts_init(tsr_plan_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->inputs = 784, o->classes = 10, o->samples = 60000;
  o->batch = 64, o->ranks = 1;
  tsr_plan_sync_parse(&o->sync, "batch", NULL);
  o->nstate = 1;
}

void tsr_plan_opts_from_run(tsr_plan_opts_t *o, const tsr_run_config_t *c, int ranks) {
  tsr_plan_opts_init(o);
  const tsr_net_opts_t *net = &c->net;
  o->inputs = c->inputs, o->classes = c->classes, o->samples = c->samples;
  o->batch = net->batch, o->ranks = ranks;
  o->pr = net->grid_rows > 0 ? net->grid_rows : 1, o->pc = ranks / o->pr;
  o->nstate = tsr_optimizer_nstate(&net->opt);
  o->tile_rows = net->tile_rows, o->tile_cols = net->tile_cols;
  o->in_channels = net->in_channels, o->in_height = net->in_height, o->in_width = net->in_width;
  o->domain = net->domain ? TSR_PLAN_DOMAIN_ROWS : TSR_PLAN_DOMAIN_NONE;
  o->domain_layers = net->domain_layers;
  if (!c->sync) return;
  if (tsr_sync_traits(&c->sync->schedule)->plannable) o->sync = c->sync->schedule;
  o->allreduce = c->sync->allreduce, o->node_size = c->sync->node_size;
  o->bucket_mb = c->sync->bucket_mb;
}

static bool plannable(const tsr_sync_traits_t *t) {
  return t->plannable;
}

int tsr_plan_sync_parse(tsr_sync_schedule_t *sync, const char *text, tsr_errbuf_t *err) {
  char forms[256];
  tsr__sync_list(forms, sizeof forms, plannable, false);
  const tsr__sync_policy_t *p = tsr__sync_policy_claiming(text);
  if (!p) return tsr_error_set(err, TSR_EINVAL, "--sync %s: expected %s", text, forms);
  TSR_TRY(tsr_sync_schedule_parse(sync, text, err));
  if (!p->traits.plannable)
    return tsr_error_set(err, TSR_EINVAL, "--sync %s: the planner does not model %s; it models %s",
                         text, p->traits.name, forms);
  return 0;
}

double tsr__plan_gemm_flops(int64_t m, int64_t n, int64_t k) {
  return tsr__gemm_flops(m, n, k);
}

static int ntiles(int64_t n, int b) {
  return tsr__cost_ntiles(n, b);
}

/* Size of tile i of a dimension n cut in b. */
static int tsize(int64_t n, int b, int i) {
  return tsr__cost_tsize(n, b, i);
}

static int imin(int a, int b) {
  return a < b ? a : b;
}

/* ---- Compute ---------------------------------------------------------- */

/* The sink the layer types describe their tasks to (nn/layout.h): a roofline per task on this
 * machine, summed over one rank's tasks of a step. */
typedef struct {
  tsr_cost_sink_t sink; /* first: the layer types see only this */
  const tsr_machine_t *m;
  const tsr_net_layout_t *lay;
  int batch, mb, pr, pc, nstate, classes, inputs, workers;
  bool sharded_update;    /* batch averaging: each chunk's update runs once, on its home */
  double work, flops;     /* one worker's seconds of tasks, and their flops, per step */
  double chain;           /* critical path per step */
  double *bwd;            /* [n_layers] seconds of each layer's backward pass on the rank */
  double *all, *flops_of; /* [n_layers] or NULL: each layer's seconds of tasks and flops */
} compute_t;

/* One task whose kernel takes kernel_s: that plus its overhead, counted with its flops. */
static double charge(compute_t *c, double kernel_s, double flops) {
  double t = kernel_s + c->m->task_overhead;
  c->work += t, c->flops += flops;
  return t;
}

/* One task: its overhead plus the roofline bound of its kernel. */
static double task(compute_t *c, double flops, double rate, double bytes) {
  double t = bytes / (c->m->mem_gbs * 1e9);
  if (flops > 0 && flops / rate > t) t = flops / rate;
  return charge(c, t, flops);
}

/* An update of n floats: reads w, g and the state, writes w and the state. */
static double update_task(compute_t *c, double n) {
  double t = task(c, 0, 1, 4.0 * n * (3 + 2 * c->nstate));
  if (c->sharded_update) { /* on the chunk's home only: 1/Pc of the tiles per rank */
    c->work -= t * (1.0 - 1.0 / c->pc);
    t /= c->pc;
  }
  return t;
}

static double sink_task(tsr_cost_sink_t *k, double flops, double rate, double bytes) {
  return task((compute_t *)k, flops, rate, bytes);
}

static double sink_update(tsr_cost_sink_t *k, double n) {
  return update_task((compute_t *)k, n);
}

static double sink_gemm_rate(const tsr_cost_sink_t *k, bool ta, bool tb, int rows, int cols,
                             int inner) {
  return tsr__plan_gemm_rate(((const compute_t *)k)->m, ta, tb, rows, cols, inner);
}

static double sink_conv_rate(const tsr_cost_sink_t *k, const tsr_conv_geom_t *g, int n, int which) {
  return tsr__plan_conv_rate(((const compute_t *)k)->m, g, n, which);
}

static double sink_pool_task(tsr_cost_sink_t *k, const tsr_conv_geom_t *g, int n, bool max,
                             int which, double bytes) {
  compute_t *c = (compute_t *)k;
  double t = bytes / (c->m->mem_gbs * 1e9), s = tsr__plan_pool_seconds(c->m, g, n, max, which);
  return charge(c, s > t ? s : t, 0);
}

static double sink_work(const tsr_cost_sink_t *k) {
  return ((const compute_t *)k)->work;
}

/* Batch assembly, every layer's tasks as its type describes them, the loss; and the sums of
 * the gradients of an output read by several layers (one memory-bound task per tile and extra
 * reader, row 0's tiles). The critical path is the graph's longest path of the layers' own
 * chains (end[k]: where layer k's ends, after the latest of its inputs'): the branches of an
 * Inception block run side by side, and a stack's path is the sum of its layers' chains. */
static int compute_step(compute_t *c) {
  c->sink = (tsr_cost_sink_t){.batch = c->batch,
                              .mb = c->mb,
                              .pr = c->pr,
                              .task = sink_task,
                              .update = sink_update,
                              .gemm_rate = sink_gemm_rate,
                              .conv_rate = sink_conv_rate,
                              .pool_task = sink_pool_task,
                              .work = sink_work};
  int mb = c->mb, mt = ntiles(c->batch, mb), n = c->lay->n_layers;
  double chain = 0, start = 0;
  double *end = malloc(sizeof *end * (size_t)(n > 0 ? n : 1));
  if (!end) return TSR_ENOMEM;
  for (int i = 0; i < mt; i++) /* batch assembly: rows gathered from the data set */
    start = task(c, 0, 1, 4.0 * 2 * tsize(c->batch, mb, i) * (c->inputs + 1.0));
  for (int k = 0; k < n; k++) {
    const tsr_layout_layer_t *l = &c->lay->layers[k];
    double after = 0; /* the layout runs a layer after its inputs: their ends are known */
    for (int a = 0; a < l->n_inputs; a++) {
      double e = l->in[a].from >= 0 ? end[l->in[a].from] : start;
      if (e > after) after = e;
    }
    if (l->n_inputs == 0) after = start;
    double work0 = c->work, flops0 = c->flops;
    end[k] = after + l->type->cost(c->lay, l, &c->sink, &c->bwd[k]);
    if (end[k] > chain) chain = end[k];
    int nb = imin(l->out_nb, l->fout), nt = ntiles(l->fout, nb);
    for (int s = 1; s < l->consumers; s++)
      for (int i = 0; i < mt; i++)
        for (int j = 0; j < nt; j++)
          if (tsr__cost_row0(l->place, j, c->pr)) /* row 0's tile columns */
            c->bwd[k] += task(c, 0, 1, 4.0 * 3 * tsize(c->batch, mb, i) * tsize(l->fout, nb, j));
    if (c->all) c->all[k] = c->work - work0, c->flops_of[k] = c->flops - flops0;
  }
  for (int i = 0; i < mt; i++) { /* softmax and cross-entropy, on row 0 */
    double t = task(c, 0, 1, 4.0 * 3 * tsize(c->batch, mb, i) * c->classes);
    if (i == 0) chain += t;
  }
  c->chain = chain;
  free(end);
  return 0;
}

/* ---- Transfers inside a grid column ----------------------------------- */

typedef struct {
  int pr;
  double *sent, *recv, *msent, *mrecv, *reduced; /* [pr] this phase */
  double seconds, bytes_max, messages_max;       /* totals per step */
  double *total_sent, *total_msgs;               /* [pr] per step */
  double *halo, halo_max;                        /* [pr] halo bytes sent per step; the most */
} grid_t;

static void send(grid_t *g, int from, int to, double bytes, bool reduce) {
  g->sent[from] += bytes, g->msent[from] += 1;
  g->recv[to] += bytes, g->mrecv[to] += 1;
  if (reduce) g->reduced[to] += bytes;
}

/* Ends a phase (a layer's all-gather or reduce-scatter): the slowest row's
 * time, every row transferring at once. */
static void phase_end(grid_t *g, const tsr_machine_t *m) {
  double worst = 0;
  for (int p = 0; p < g->pr; p++) {
    double msgs = g->msent[p] > g->mrecv[p] ? g->msent[p] : g->mrecv[p];
    double bytes = g->sent[p] > g->recv[p] ? g->sent[p] : g->recv[p];
    double t = msgs * m->alpha + bytes * m->beta + g->reduced[p] * m->gamma;
    if (t > worst) worst = t;
    g->total_sent[p] += g->sent[p], g->total_msgs[p] += g->msent[p];
    g->sent[p] = g->recv[p] = g->msent[p] = g->mrecv[p] = g->reduced[p] = 0;
  }
  g->seconds += worst;
}

/* A layer cut into bands of image rows (src/tile/domain.h), per batch-row tile: forward the halo
 * rows each band's owner sends the bands whose windows read them; backward their gradients the
 * other way (with the input's gradient); a convolution's weight and bias gradients from every
 * band to row 0 and their sum back to every row; a batchnorm's statistics (3 C floats) the
 * same way forward, and its sums backward. */
static void domain_step(grid_t *g, const tsr_layout_layer_t *l, int batch, int mb,
                        const tsr_machine_t *m) {
  int pr = g->pr, mt = ntiles(batch, mb);
  const tsr_conv_geom_t *geo = &l->geom;
  bool stats = l->type->batch_stats;
  int nout = tsr__k_bands(stats ? geo->h : geo->oh, pr);
  double row = 4.0 * geo->w * geo->c;
  for (int dir = 0; dir < 2; dir++) {
    if (dir == 1 && !l->has_dx && l->nparams == 0) break;
    for (int i = 0; i < mt && !stats && l->in_place == TSR_PLACE_BANDS && (dir == 0 || l->has_dx);
         i++)
      for (int p = 0; p < nout; p++)
        for (int q = 0; q < pr; q++) {
          int rows = tsr__domain_halo_rows(geo, pr, p, q);
          if (!rows) continue;
          double bytes = row * rows * tsize(batch, mb, i);
          if (dir == 0) send(g, q, p, bytes, false), g->halo[q] += bytes;
          if (dir == 1) send(g, p, q, bytes, true), g->halo[p] += bytes;
        }
    /* what goes to row 0 and back: the statistics, or the weight and the bias gradients */
    double small[2] = {stats ? 4.0 * 3 * geo->c : 0, 0};
    if (!stats && dir == 1 && l->nparams > 0)
      small[0] = 4.0 * geo->kh * geo->kw * geo->c * geo->oc, small[1] = 4.0 * geo->oc;
    for (int k = 0; k < 2; k++)
      for (int p = 1; p < nout && small[k] > 0; p++)
        send(g, p, 0, small[k], true);
    phase_end(g, m);
    for (int k = 0; k < 2; k++)
      for (int p = 1; p < pr && small[k] > 0; p++)
        send(g, 0, p, small[k], false);
    phase_end(g, m);
  }
}

/* Per layer, where its inputs live (the layout's placement): replicated on every row, or tile
 * column j on row j mod Pr (tsr__placed_row). A layer that cuts its output over the column (a dense
 * layer) gathers a spread input forward and sends partial input gradients backward; a layer working
 * on whole samples after a spread input (a placement tessera train refuses) would gather it. */
static void grid_step(grid_t *g, const tsr_net_layout_t *lay, int batch, int mb,
                      const tsr_machine_t *m) {
  int pr = g->pr, mt = ntiles(batch, mb);
  for (int k = 0; k < lay->n_layers; k++) {
    const tsr_layout_layer_t *l = &lay->layers[k];
    bool in_repl = !tsr__reads_spread(l);
    int kb = imin(l->in_nb, l->fin), kt = ntiles(l->fin, kb);
    if (l->cuts) {
      int nt = ntiles(l->fout, imin(l->out_nb, l->fout)), owners = imin(nt, pr);
      for (int i = 0; i < mt; i++)
        for (int t = 0; t < kt; t++) {
          double bytes = 4.0 * tsize(batch, mb, i) * tsize(l->fin, kb, t);
          int o = tsr__placed_row(TSR_PLACE_SPREAD, t, pr, NULL);
          for (int p = 0; p < owners && !in_repl; p++) /* forward: all-gather */
            if (p != o) send(g, o, p, bytes, false);
        }
      phase_end(g, m);
      for (int i = 0; i < mt && l->has_dx; i++)
        for (int t = 0; t < kt; t++) {
          double bytes = 4.0 * tsize(batch, mb, i) * tsize(l->fin, kb, t);
          /* a replicated input: the sum is made on the row a spread one's tile t would be on,
           * then sent to every row */
          int o = tsr__placed_row(TSR_PLACE_SPREAD, t, pr, NULL);
          for (int p = 0; p < owners; p++) /* backward: partial input gradients to the owner */
            if (p != o) send(g, p, o, bytes, true);
          for (int p = 0; p < pr && in_repl; p++)
            if (p != o) send(g, o, p, bytes, false);
        }
      phase_end(g, m);
    } else if (l->domain) {
      domain_step(g, l, batch, mb, m);
    } else if (l->whole_samples) { /* over bands past --domain rows:K: they are all-gathered */
      for (int i = 0; i < mt && (l->gathers_bands || !in_repl); i++)
        for (int t = 0; t < kt; t++) {
          int o = tsr__placed_row(l->in_place, t, pr, NULL);
          for (int p = 0; p < pr; p++)
            if (p != o) send(g, o, p, 4.0 * tsize(batch, mb, i) * tsize(l->fin, kb, t), false);
        }
      phase_end(g, m);
    }
  }
  for (int p = 0; p < pr; p++) {
    if (g->total_sent[p] > g->bytes_max) g->bytes_max = g->total_sent[p];
    if (g->total_msgs[p] > g->messages_max) g->messages_max = g->total_msgs[p];
    if (g->halo[p] > g->halo_max) g->halo_max = g->halo[p];
  }
}

/* ---- Averaging across columns ------------------------------------------ */

/* Row 0's slice of every parameter, layer by layer in the layout's order: of a spread layer's
 * parameter the tile columns row 0 holds (j mod Pr = 0, tsr__placed_row), as one matrix of their
 * widths (the engine's grid rows plan their chunks from these shapes: placement.c's row_shapes), a
 * replicated layer's parameters whole. */
static int row0_slice(const tsr_net_layout_t *lay, int pr, tsr__plan_param_t **out, int **layer_of,
                      int *n, double *layer_bytes) {
  int cap = 16, cnt = 0;
  tsr__plan_param_t *ps = malloc(sizeof *ps * (size_t)cap);
  int *of = malloc(sizeof *of * (size_t)cap);
  if (!ps || !of) {
    free(ps), free(of);
    return TSR_ENOMEM;
  }
  for (int k = 0; k < lay->n_layers; k++) {
    const tsr_layout_layer_t *l = &lay->layers[k];
    layer_bytes[k] = 0;
    if (l->nparams == 0) continue;
    bool sliced = l->place == TSR_PLACE_SPREAD && pr > 1;
    /* the tile columns: every parameter of a spread layer is tiled like its output; row 0
     * averages the columns it holds (tsr__placed_row) as one matrix of their widths
     * (placement.c's row_shapes) */
    int nb = imin(l->out_nb, l->fout), nt = sliced ? ntiles(l->fout, nb) : 1;
    for (int a = 0; a < l->nparams; a++) {
      const tsr_layout_matrix_t *p = &l->params[a];
      int pnb = imin(p->nb, (int)p->cols), kb = imin(p->mb, (int)p->rows);
      int64_t cols = sliced ? 0 : p->cols;
      for (int j = 0; sliced && j < nt; j++)
        if (tsr__placed_row(TSR_PLACE_SPREAD, j, pr, NULL) == 0) cols += tsize(p->cols, pnb, j);
      tsr__plan_param_t add = {p->rows, cols, kb, imin(pnb, (int)cols)};
      if (cnt == cap) {
        tsr__plan_param_t *more = realloc(ps, sizeof *ps * (size_t)(cap * 2));
        if (more) ps = more;
        int *more_of = more ? realloc(of, sizeof *of * (size_t)(cap * 2)) : NULL;
        if (!more_of) {
          free(ps), free(of);
          return TSR_ENOMEM;
        }
        of = more_of, cap *= 2;
      }
      of[cnt] = k, ps[cnt++] = add;
      layer_bytes[k] += 4.0 * (double)add.rows * (double)add.cols;
    }
  }
  *out = ps, *layer_of = of, *n = cnt;
  return 0;
}

/* ---- One configuration ------------------------------------------------- */

/* Ranks on a node share its cores: each takes its share of workers (at most 4), into *workers,
 * and more threads than cores slow every one down: returns by how much (1: not). *per_node: the
 * ranks a node holds. */
static double rank_workers(const tsr_machine_t *m, int ranks, int *per_node, int *workers) {
  *per_node = m->ranks_per_node > 0 ? m->ranks_per_node : ranks;
  if (*per_node > ranks) *per_node = ranks;
  *workers = m->workers > 0 ? m->workers : m->cores_per_node / *per_node;
  if (*workers > 4) *workers = 4;
  if (*workers < 1) *workers = 1;
  double oversubscribed = (double)*per_node * *workers / m->cores_per_node;
  return oversubscribed < 1 ? 1 : oversubscribed;
}

/* The layout a rank of a Pr-row grid column builds for o's model, with the first `split`
 * convolutions and poolings cut into bands (INT_MAX: all, as --domain rows; 0: none). */
static int layout_of(tsr_net_layout_t *lay, const tsr_model_spec_t *spec, const tsr_plan_opts_t *o,
                     int pr, int split, int workers, tsr_errbuf_t *err) {
  tsr_net_opts_t no;
  tsr_net_opts_init(&no);
  no.batch = o->batch, no.tile_rows = o->tile_rows, no.tile_cols = o->tile_cols;
  no.in_channels = o->in_channels, no.in_height = o->in_height, no.in_width = o->in_width;
  no.grid_rows = pr; /* tiles as `train --grid` chooses them (feature tile capped at widest / Pr) */
  no.domain = split > 0, no.domain_layers = split == INT_MAX ? 0 : split; /* as --domain rows[:K] */
  return tsr__net_layout_build(lay, spec, o->inputs, o->classes, &no, workers, o->nstate, err);
}

/* The pricing of one rank's step of lay on m (compute_step), in a grid of pr x pc; grads: the
 * policy averages gradients every step (each chunk's update then runs on its home only). */
static compute_t compute_of(const tsr_machine_t *m, const tsr_net_layout_t *lay,
                            const tsr_plan_opts_t *o, int pr, int pc, int workers, bool grads,
                            double *bwd) {
  return (compute_t){.m = m,
                     .lay = lay,
                     .batch = o->batch,
                     .mb = imin(lay->mb, o->batch),
                     .pr = pr,
                     .pc = pc,
                     .nstate = o->nstate,
                     .classes = o->classes,
                     .inputs = o->inputs,
                     .workers = workers,
                     .sharded_update = grads && pc > 1,
                     .bwd = bwd};
}

static int plan_one(const tsr_model_spec_t *spec, const tsr_plan_opts_t *o, const tsr_machine_t *m,
                    int pr, int pc, const tsr_sync_schedule_t *sync, int split, tsr_plan_row_t *row,
                    tsr_errbuf_t *err) {
  const tsr__sync_policy_t *policy = tsr__sync_policy(sync);
  /* Gradients averaged every step (batch), overlapping the backward pass, or weights averaged
   * between steps. */
  bool grads = policy->traits.meets_every_step;
  int ranks = pr * pc;
  int per_node, workers;
  double oversubscribed = rank_workers(m, ranks, &per_node, &workers);
  tsr_net_layout_t layout, *lay = &layout;
  TSR_TRY(layout_of(lay, spec, o, pr, split, workers, err));
  /* per layer: the seconds of its backward pass, its parameters' bytes on row 0 */
  double *bwd = calloc((size_t)lay->n_layers + 1, sizeof *bwd);
  double *layer_bytes = calloc((size_t)lay->n_layers + 1, sizeof *layer_bytes);
  if (!bwd || !layer_bytes) {
    free(bwd), free(layer_bytes), tsr__net_layout_fini(lay);
    return TSR_ENOMEM;
  }
  memset(row, 0, sizeof *row);
  row->pr = pr, row->pc = pc, row->sync = *sync;
  int windows = 0, cut = 0; /* the layers that could be cut, and those that are */
  for (int k = 0; k < lay->n_layers; k++)
    if (lay->layers[k].type->splits_rows) windows++, cut += lay->layers[k].domain;
  row->domain = cut > 0 && !lay->grid_rc; /* bands the engine builds */
  row->domain_layers = row->domain ? cut : 0, row->splittable = windows;
  row->tile_rows = lay->mb, row->tile_cols = lay->nb;
  int64_t shard = (o->samples + pc - 1) / pc;
  row->steps_per_epoch = (shard + o->batch - 1) / o->batch;

  compute_t c = compute_of(m, lay, o, pr, pc, workers, grads, bwd);
  if (compute_step(&c)) {
    free(bwd), free(layer_bytes), tsr__net_layout_fini(lay);
    return tsr_error_set(err, TSR_ENOMEM, "plan: out of memory for %d layers", lay->n_layers);
  }
  double spread = c.work / workers;
  row->compute_s = oversubscribed * (spread > c.chain ? spread : c.chain);
  row->flops_step = c.flops;

  /* Inside the column. */
  grid_t g = {.pr = pr};
  double *buf = calloc((size_t)pr * 8, sizeof *buf);
  if (!buf) {
    free(bwd), free(layer_bytes), tsr__net_layout_fini(lay);
    return TSR_ENOMEM;
  }
  g.sent = buf, g.recv = buf + pr, g.msent = buf + 2 * pr, g.mrecv = buf + 3 * pr;
  g.reduced = buf + 4 * pr, g.total_sent = buf + 5 * pr, g.total_msgs = buf + 6 * pr;
  g.halo = buf + 7 * pr;
  if (pr > 1) grid_step(&g, lay, o->batch, c.mb, m);
  free(buf);
  row->grid_s = g.seconds, row->grid_bytes_step = g.bytes_max;
  row->grid_messages_step = g.messages_max, row->halo_bytes_step = g.halo_max;

  /* Across columns. */
  tsr__plan_param_t *ps = NULL;
  int nps = 0, *layer_of = NULL;
  double slice = 0;
  int rc = row0_slice(lay, pr, &ps, &layer_of, &nps, layer_bytes);
  double *release = rc == 0 ? calloc((size_t)nps + 1, sizeof *release) : NULL;
  if (rc == 0 && !release) rc = TSR_ENOMEM;
  tsr__plan_average_t a = {0};
  /* The averaging's nodes: a grid row's ranks (one per column) spread over them, per_node / Pr
   * a node (whole columns on a node); two levels as the engine decides (tsr__replicas_create:
   * each grid row over its own nodes). */
  int node_size = o->node_size > 0 ? o->node_size : per_node;
  int avg_node = pr > 1 ? (node_size / pr > 1 ? node_size / pr : 1) : node_size;
  if (avg_node > pc) avg_node = pc;
  int nodes = (pc + avg_node - 1) / avg_node;
  tsr_sync_t as_run = {.schedule = *sync, .allreduce = o->allreduce, .bucket_mb = o->bucket_mb};
  row->two_level = tsr__members_two_level(&as_run, false, nodes, avg_node);
  row->nodes = nodes, row->node_size = avg_node;
  uint64_t bucket = (uint64_t)(o->bucket_mb * 1048576.0 + 0.5); /* as train's (a grid: row 0's) */
  if (rc == 0 && pc > 1)
    rc = tsr__plan_average(ps, nps, pc, avg_node, row->two_level, bucket, release, &a);
  row->buckets = a.buckets;
  /* A node holds ranks of min(Pr, node_size) grid rows, each row averaging its own slice at
   * the same time: their bytes to other nodes share the node's link. */
  a.node_sent_max *= pr < node_size ? pr : node_size;
  /* What each layer's backward pass lets start: with buckets, the buckets it closes. */
  double *released = calloc((size_t)lay->n_layers + 1, sizeof *released);
  if (rc == 0 && !released) rc = TSR_ENOMEM;
  for (int k = 0; rc == 0 && k < nps; k++)
    released[layer_of[k]] += pc > 1 ? release[k] : 4.0 * (double)ps[k].rows * (double)ps[k].cols;
  free(ps), free(layer_of), free(release);
  if (rc) {
    free(bwd), free(layer_bytes), free(released), tsr__net_layout_fini(lay);
    return rc;
  }
  for (int k = 0; k < lay->n_layers; k++)
    slice += layer_bytes[k];
  double avg_s = pc > 1 ? tsr__plan_average_seconds(&a, m) : 0;
  row->average_s = grads ? 0 : avg_s;
  row->sync_bytes_step = a.sent_max, row->sync_messages_step = a.messages_max;
  row->node_bytes_step = a.node_sent_max, row->inter_messages_step = a.inter_messages_max;
  double steps = (double)row->steps_per_epoch, averages = policy->plan_averages(sync, steps);
  if (grads) {
    row->sync_s = avg_s;
    /* Layer l's averaging starts when its backward pass ends and overlaps
     * the backward pass of the layers below; averagings queue on the link. */
    double bwd_total = 0;
    for (int k = 0; k < lay->n_layers; k++)
      bwd_total += c.bwd[k];
    double scale = bwd_total > 0 ? row->compute_s * (bwd_total / c.work) / bwd_total : 0;
    double t = 0, link = 0;
    for (int k = lay->n_layers - 1; k >= 0; k--) {
      t += c.bwd[k] * scale;
      double share = slice > 0 ? released[k] / slice : 0;
      if (share > 0) link = (link > t ? link : t) + avg_s * share;
    }
    row->exposed_sync_s = link > t ? link - t : 0;
  }
  if (pc == 1) averages = 0;
  row->step_s = row->compute_s + row->grid_s + row->exposed_sync_s;
  row->epoch_s = steps * row->step_s + (grads ? 0 : averages * avg_s);
  row->sync_bytes_epoch = averages * a.sent_rank0;
  row->sync_messages_epoch = averages * a.messages_rank0;
  row->bytes_epoch = steps * row->grid_bytes_step + averages * a.sent_max;

  /* Memory: what the layout counts for row 0, the busiest (tsr_net_estimate's figures:
   * parameters with gradient and state, activations, the workers' scratch), and the
   * averaging's sums (its chunks; batch: and their updated copies; with buckets each rank's row
   * of every bucket, the whole model). */
  const tsr_net_memory_t *mem = &lay->memory;
  row->memory_bytes = (double)mem->total +
                      (pc > 1 ? (double)mem->params / pc * (grads ? 2 : 1) : 0) +
                      (pc > 1 && a.buckets ? (double)mem->params : 0);
  free(bwd), free(layer_bytes), free(released), tsr__net_layout_fini(lay);
  return 0;
}

int tsr_plan_run(const tsr_model_spec_t *spec, const tsr_plan_opts_t *opts, const tsr_machine_t *m,
                 tsr_plan_row_t *rows, int max_rows, int *n_rows, tsr_errbuf_t *err) {
  *n_rows = 0;
  if (opts->ranks < 1 || opts->batch < 1 || opts->samples < 1 || opts->sync.every < 1)
    return tsr_error_set(err, TSR_EINVAL, "ranks, batch, samples and the policy's K must be >= 1");
  if (!opts->all_policies && !tsr_sync_traits(&opts->sync)->plannable) {
    char text[64];
    tsr_sync_schedule_describe(&opts->sync, text, sizeof text);
    return tsr_error_set(err, TSR_EINVAL, "--sync %s: the planner does not model %s", text,
                         tsr_sync_traits(&opts->sync)->name);
  }
  if ((opts->pr || opts->pc) && opts->pr * opts->pc != opts->ranks)
    return tsr_error_set(err, TSR_EINVAL, "grid %dx%d has %d ranks, not %d: Pr x Pc must be P",
                         opts->pr, opts->pc, opts->pr * opts->pc, opts->ranks);
  if (m->cores_per_node < 1 || !(m->gemm_gflops > 0) || !(m->mem_gbs > 0))
    return tsr_error_set(err, TSR_EINVAL,
                         "machine '%s': cores, GFLOP/s and memory bandwidth "
                         "must be positive",
                         m->name);
  tsr_sync_schedule_t syncs[3] = {opts->sync};
  int nsync = 1;
  if (opts->all_policies) {
    static const char *const compared[] = {"batch", "every=8", "epoch"};
    for (nsync = 0; nsync < 3; nsync++)
      TSR_TRY(tsr_sync_schedule_parse(&syncs[nsync], compared[nsync], err));
  }
  int best = -1;
  for (int pr = 1; pr <= opts->ranks; pr++) {
    if (opts->ranks % pr) continue;
    if (opts->pr && pr != opts->pr) continue;
    for (int s = 0; s < nsync; s++) {
      if (*n_rows >= max_rows)
        return tsr_error_set(err, TSR_EINVAL, "more than %d plans", max_rows);
      tsr_plan_row_t *r = &rows[*n_rows];
      int split = pr < 2 || opts->domain == TSR_PLAN_DOMAIN_NONE ? 0
                  : opts->domain == TSR_PLAN_DOMAIN_ROWS && opts->domain_layers > 0
                      ? opts->domain_layers
                      : INT_MAX;
      TSR_TRY(plan_one(spec, opts, m, pr, opts->ranks / pr, &syncs[s], split, r, err));
      /* auto: the first K cut for every K too (0: none), the fastest the engine builds kept */
      bool built = r->domain;
      for (int k = 0; split && opts->domain == TSR_PLAN_DOMAIN_AUTO && k < r->splittable; k++) {
        tsr_plan_row_t other;
        TSR_TRY(plan_one(spec, opts, m, pr, opts->ranks / pr, &syncs[s], k, &other, err));
        if (k > 0 && !other.domain) continue; /* refused (a residual add between cut and not) */
        if (!built || other.epoch_s < r->epoch_s) *r = other, built = true;
      }
      if (best < 0 || r->epoch_s < rows[best].epoch_s) best = *n_rows;
      (*n_rows)++;
    }
  }
  if (best >= 0) rows[best].best = true;
  return 0;
}

int tsr_plan_layers(const tsr_model_spec_t *spec, const tsr_plan_opts_t *opts,
                    const tsr_machine_t *m, const tsr_plan_row_t *row, tsr_plan_layer_t *out,
                    int max, int *n, tsr_errbuf_t *err) {
  *n = 0;
  if (row->pr < 1 || row->pc < 1 || opts->batch < 1)
    return tsr_error_set(err, TSR_EINVAL, "plan layers: a row of tsr_plan_run is needed");
  int split = !row->domain                            ? 0
              : row->domain_layers >= row->splittable ? INT_MAX
                                                      : row->domain_layers;
  int per_node, workers;
  (void)rank_workers(m, row->pr * row->pc, &per_node, &workers);
  tsr_plan_opts_t o = *opts;
  o.tile_rows = row->tile_rows, o.tile_cols = row->tile_cols; /* the row's, as it planned */
  tsr_net_layout_t lay;
  TSR_TRY(layout_of(&lay, spec, &o, row->pr, split, workers, err));
  int nl = lay.n_layers;
  if (nl > max) {
    tsr__net_layout_fini(&lay);
    return tsr_error_set(err, TSR_EINVAL, "plan layers: %d layers, room for %d", nl, max);
  }
  double *buf = calloc((size_t)(3 * nl + 1), sizeof *buf);
  if (!buf) {
    tsr__net_layout_fini(&lay);
    return tsr_error_set(err, TSR_ENOMEM, "plan: out of memory for %d layers", nl);
  }
  bool grads = tsr__sync_policy(&row->sync)->traits.meets_every_step;
  compute_t c = compute_of(m, &lay, &o, row->pr, row->pc, workers, grads, buf);
  c.all = buf + nl, c.flops_of = buf + 2 * nl;
  int rc = compute_step(&c);
  for (int k = 0; rc == 0 && k < nl; k++) {
    const tsr_layout_layer_t *l = &lay.layers[k];
    tsr_plan_layer_t *p = &out[k];
    snprintf(p->name, sizeof p->name, "%s", l->name);
    p->type = l->type->name;
    p->forward_s = c.all[k] - c.bwd[k], p->backward_s = c.bwd[k], p->flops = c.flops_of[k];
  }
  if (rc == 0) *n = nl;
  free(buf);
  tsr__net_layout_fini(&lay);
  return rc ? tsr_error_set(err, rc, "plan: out of memory for %d layers", nl) : 0;
}

/* ---- Averaging: the engine's chunks and homes (placement.c) ------------- */

/* Per rank and per node, what one averaging sends: to ranks of the same node (bytes,
 * messages), to other nodes (messages; bytes per rank and summed per node), and what it adds. */
typedef struct {
  int ranks, per_node, nodes;
  double *intra, *intra_msgs, *inter, *inter_msgs, *reduced;       /* [ranks] */
  double *node_out;                                                /* [nodes] */
  double *all_intra, *all_intra_msgs, *all_inter, *all_inter_msgs; /* [nodes]: each rank of it */
} traffic_t;

static int node_size_of(const traffic_t *t, int node) {
  int rest = t->ranks - node * t->per_node;
  return rest < t->per_node ? rest : t->per_node;
}

/* Every rank of node n but `except` sends b to one rank of the node. */
static void each_sends(traffic_t *t, int n, int except, double b) {
  t->all_intra[n] += b, t->all_intra_msgs[n] += 1;
  t->intra[except] -= b, t->intra_msgs[except] -= 1;
}

/* Rank q sends b to k ranks, inside its node or outside it. */
static void sends(traffic_t *t, int q, double b, double k, bool inside) {
  if (inside)
    t->intra[q] += k * b, t->intra_msgs[q] += k;
  else
    t->inter[q] += k * b, t->inter_msgs[q] += k, t->node_out[q / t->per_node] += k * b;
}

/* Flat: every rank sends chunk (b bytes) to its home h, which sends the result to every rank. */
static void flat_chunk(traffic_t *t, int h, double b) {
  int m = h / t->per_node;
  for (int n = 0; n < t->nodes; n++) {
    int g = node_size_of(t, n);
    if (n == m) /* to the home: inside the node */
      each_sends(t, n, h, b);
    else /* every rank of n, to another node */
      t->all_inter[n] += b, t->all_inter_msgs[n] += 1, t->node_out[n] += b * g;
  }
  int gm = node_size_of(t, m);
  sends(t, h, b, gm - 1, true);
  sends(t, h, b, t->ranks - gm, false);
  t->reduced[h] += (t->ranks - 1) * b;
}

/* Two levels, inside every node: its ranks send a whole tile (b bytes, index l) to the tile's
 * local home there (the rank of index l), which sends the tile of the result back to each. */
static void two_level_tile(traffic_t *t, int l, double b) {
  for (int n = 0; n < t->nodes; n++) {
    int g = node_size_of(t, n), lh = n * t->per_node + l % g;
    if (g == 1) continue;
    each_sends(t, n, lh, b);
    sends(t, lh, b, g - 1, true);
    t->reduced[lh] += (g - 1) * b;
  }
}

/* Two levels, between the nodes: chunk (b bytes) of node m and index l: every other node's
 * local home sends its band to the home (the rank of index l in node m), which sends the
 * result back to each. */
static void two_level_chunk(traffic_t *t, int m, int l, double b) {
  for (int n = 0; n < t->nodes; n++)
    if (n != m) sends(t, n * t->per_node + l % node_size_of(t, n), b, 1, false);
  int home = m * t->per_node + l % node_size_of(t, m);
  sends(t, home, b, t->nodes - 1, false);
  t->reduced[home] += (t->nodes - 1) * b;
}

int tsr__plan_average(const tsr__plan_param_t *params, int n, int ranks, int per_node,
                      bool two_level, uint64_t bucket_bytes, double *release,
                      tsr__plan_average_t *out) {
  memset(out, 0, sizeof *out);
  for (int k = 0; release && k < n; k++)
    release[k] = 4.0 * (double)params[k].rows * (double)params[k].cols;
  int64_t total = 0;
  for (int k = 0; k < n; k++)
    total += params[k].rows * params[k].cols;
  out->bytes = 4.0 * (double)total;
  if (ranks < 2 || total == 0) return 0;
  if (per_node < 1 || per_node > ranks) per_node = ranks;
  traffic_t t = {.ranks = ranks, .per_node = per_node, .nodes = (ranks + per_node - 1) / per_node};
  double *buf = calloc((size_t)ranks * 5 + (size_t)t.nodes * 5, sizeof *buf);
  tsr_chunking_t *ch = malloc(sizeof *ch * (size_t)n);
  tsr_chunk_shape_t *sh = malloc(sizeof *sh * (size_t)n); /* tiles clamped, as tsr_tiles_t's */
  for (int k = 0; sh && k < n; k++) {
    sh[k] = params[k];
    if (sh[k].mb > sh[k].rows) sh[k].mb = (int)sh[k].rows;
    if (sh[k].nb > sh[k].cols) sh[k].nb = (int)sh[k].cols;
  }
  int rc = buf && ch && sh ? 0 : TSR_ENOMEM;
  if (rc == 0) {
    double *b = buf;
    t.intra = b, t.intra_msgs = b += ranks, t.inter = b += ranks, t.inter_msgs = b += ranks;
    t.reduced = b += ranks, t.node_out = b += ranks, t.all_intra = b += t.nodes;
    t.all_intra_msgs = b += t.nodes, t.all_inter = b += t.nodes, t.all_inter_msgs = b += t.nodes;
  }
  /* The engine's placement of the row (placement.c, the same call): its chunks, their homes as
   * positions among the ranks (two levels: rank `local` of node `home`, nodes of per_node
   * consecutive ranks), its buckets by home and with two levels its node buckets. */
  tsr__group_t *nodes = calloc((size_t)t.nodes, sizeof *nodes);
  int *in_node = malloc(sizeof *in_node * (size_t)ranks);
  if (rc == 0 && (!nodes || !in_node)) rc = TSR_ENOMEM;
  for (int m = 0; rc == 0 && m < t.nodes; m++) {
    nodes[m] = (tsr__group_t){node_size_of(&t, m), in_node + m * per_node};
    for (int i = 0; i < nodes[m].n; i++)
      nodes[m].ranks[i] = m * per_node + i;
  }
  tsr_buckets_t bk = {0}, tb = {0};
  if (rc == 0)
    rc = tsr__placement_row(sh, n, ranks, NULL, two_level, nodes, t.nodes, per_node, 1,
                            bucket_bytes, ch, &bk, &tb);
  free(nodes), free(in_node);
  /* Inside the nodes: whole tiles, or with buckets node buckets of them (a bucket as a tile). */
  for (int b = 0; b < tb.n; b++)
    two_level_tile(&t, tb.local[b], 4.0 * (double)tb.floats[b]);
  for (int k = 0; rc == 0 && two_level && !tb.n && k < n; k++)
    for (int i = 0; i * (int64_t)sh[k].mb < sh[k].rows; i++)
      for (int j = 0; j < ch[k].nt; j++)
        two_level_tile(&t, ch[k].local[i * ch[k].k * ch[k].nt + j],
                       (double)tsr__chunks_piece_bytes(&sh[k], sh[k].mb, i, j));
  for (int b = 0; b < bk.n; b++) /* a bucket travels as a chunk does */
    if (two_level)
      two_level_chunk(&t, bk.home[b] / per_node, bk.local[b], 4.0 * (double)bk.floats[b]);
    else
      flat_chunk(&t, bk.home[b], 4.0 * (double)bk.floats[b]);
  out->buckets = bk.n;
  if (release && bk.n) { /* a bucket starts once its last chunk is packed: the lowest k's */
    for (int k = 0; k < n; k++)
      release[k] = 0;
    int *last = malloc(sizeof *last * (size_t)bk.n);
    if (!last) rc = TSR_ENOMEM;
    for (int b = 0; last && b < bk.n; b++)
      last[b] = n;
    for (int k = 0; last && k < n; k++)
      for (int c = 0; c < ch[k].cmt * ch[k].nt; c++)
        if (last[ch[k].bucket[c]] > k) last[ch[k].bucket[c]] = k;
    for (int b = 0; last && b < bk.n; b++)
      release[last[b]] += 4.0 * (double)bk.floats[b];
    free(last);
  }
  for (int k = 0; rc == 0 && k < n; k++) {
    out->chunks += (int64_t)ch[k].cmt * ch[k].nt;
    for (int I = 0; I < ch[k].cmt && !bk.n; I++)
      for (int j = 0; j < ch[k].nt; j++) {
        double b = (double)tsr__chunks_piece_bytes(&sh[k], ch[k].cr, I, j);
        int c = I * ch[k].nt + j;
        if (two_level)
          two_level_chunk(&t, ch[k].home[c] / per_node, ch[k].local[c], b);
        else
          flat_chunk(&t, ch[k].home[c], b);
      }
  }
  for (int q = 0; rc == 0 && q < ranks; q++) {
    int nq = q / per_node;
    double intra = t.intra[q] + t.all_intra[nq],
           intra_msgs = t.intra_msgs[q] + t.all_intra_msgs[nq];
    double inter = t.inter[q] + t.all_inter[nq],
           inter_msgs = t.inter_msgs[q] + t.all_inter_msgs[nq];
    double sent = intra + inter, msgs = intra_msgs + inter_msgs;
    if (sent > out->sent_max) out->sent_max = sent;
    if (msgs > out->messages_max) out->messages_max = msgs;
    if (intra > out->intra_sent_max) out->intra_sent_max = intra;
    if (intra_msgs > out->intra_messages_max) out->intra_messages_max = intra_msgs;
    if (inter_msgs > out->inter_messages_max) out->inter_messages_max = inter_msgs;
    if (t.reduced[q] > out->reduced_max) out->reduced_max = t.reduced[q];
    if (q == 0) out->sent_rank0 = sent, out->messages_rank0 = msgs;
  }
  for (int a = 0; rc == 0 && a < t.nodes; a++)
    if (t.node_out[a] > out->node_sent_max) out->node_sent_max = t.node_out[a];
  if (rc == 0) tsr__chunks_free(ch, n);
  tsr__buckets_free(&bk), tsr__buckets_free(&tb);
  free(sh), free(ch), free(buf);
  return rc;
}

double tsr__plan_average_seconds(const tsr__plan_average_t *a, const tsr_machine_t *m) {
  double intra_alpha = m->intra_alpha > 0 ? m->intra_alpha : m->alpha;
  double intra_beta = m->intra_beta > 0 ? m->intra_beta : m->beta;
  return a->intra_messages_max * intra_alpha + a->intra_sent_max * intra_beta +
         a->inter_messages_max * m->alpha + a->node_sent_max * m->beta + a->reduced_max * m->gamma;
}
