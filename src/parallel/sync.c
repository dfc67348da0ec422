/* One averaging mechanism for every synchronization policy. Each parameter
 * tile has a home rank (homes balanced by bytes). Every rank registers, for each tile, a handle
 * per rank's replica: its own tile, and placeholders standing for the other
 * ranks' copies. Averaging is then two rounds of StarPU-MPI tasks that every
 * rank submits alike: the home accumulates each rank's copy into its acc
 * tile (StarPU-MPI sends the copies to it), and each rank's copy is
 * overwritten from the home's result (StarPU-MPI sends it back). Because it
 * works tile by tile, the averaging of a layer starts while the layers below
 * are still in their backward pass.
 *
 * batch: the gradient is averaged every step, the optimizer runs once on the
 * home (its optimizer state is the only one used: sharded, ZeRO-1 style) and
 * the updated tile is what is broadcast. every=K, epoch=n: weights (and with
 * average_state the optimizer state) are averaged. async-epoch: each rank
 * folds itself into a global copy with a commutative task and continues
 * from its own fold's result. */
#include <mpi.h>
#include <starpu.h>
#include <starpu_mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codelets.h"
#include "parallel/replicas.h"
#include "nn/net_impl.h"
#include "runtime/progress.h"
#include "tile/tiles_impl.h"
#include "try.h"

typedef struct {
  int home;
  starpu_data_handle_t *w, *s1, *s2, *g; /* [size]: each rank's copy; NULL when not needed */
  starpu_data_handle_t acc;              /* owned by home: the weighted sum */
  starpu_data_handle_t global;           /* async-epoch: the global copy, owned by home */
  starpu_data_handle_t *snap;            /* async-epoch: [size] each rank's fold result */
  uint64_t bytes;
} rtile_t;

typedef struct {
  tsr_param_t *p;
  int ntiles;
  rtile_t *t;
} rparam_t;

struct tsr_replicas {
  tsr_net_t *net;
  tsr_sync_t sync;
  int rank, size;
  int nparams;
  rparam_t *params;
  int nstats;                      /* stats tiles per rank */
  starpu_data_handle_t *stats;     /* [size * nstats] every rank's training stats tiles */
  starpu_data_handle_t *stats_sum; /* [nstats] owned by rank 0: the sums over ranks */
  double *weights;                 /* [size] weight of each rank in the next averaging */
  int64_t *samples;                /* [size] samples since the last averaging */
  tsr_sync_stats_t st;
};

/* MPI tags of replica handles: above every tile tag the network uses (those
 * count up from 0), and never reused within a process, since a local tile
 * keeps its StarPU-MPI registration until the tile itself is freed. Every
 * rank creates the same replicas in the same order, so tags agree. */
static starpu_mpi_tag_t next_tag = (starpu_mpi_tag_t)1 << 40;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Placeholder for data owned by `owner`: StarPU allocates it where needed. */
static starpu_data_handle_t placeholder(int rows, int cols, int owner) {
  starpu_data_handle_t h;
  starpu_matrix_data_register(&h, -1, 0, (uint32_t)cols, (uint32_t)cols, (uint32_t)rows,
                              sizeof(float));
  starpu_mpi_data_register(h, next_tag++, owner);
  return h;
}

/* One handle per rank for tile (i, j) of a replicated matrix: the local tile
 * for this rank, placeholders for the others. */
static starpu_data_handle_t *per_rank(tsr_replicas_t *r, tsr_tiles_t *t, int i, int j) {
  starpu_data_handle_t *h = calloc((size_t)r->size, sizeof *h);
  if (!h) return NULL;
  int rows = tsr_tiles_tile_rows(t, i), cols = tsr_tiles_tile_cols(t, j);
  for (int q = 0; q < r->size; q++) {
    if (q == r->rank) {
      h[q] = tsr__tile(t, i, j);
      starpu_mpi_data_register(h[q], next_tag++, q);
    } else {
      h[q] = placeholder(rows, cols, q);
    }
  }
  return h;
}

static void free_per_rank(tsr_replicas_t *r, starpu_data_handle_t *h) {
  if (!h) return;
  for (int q = 0; q < r->size; q++)
    if (q != r->rank) starpu_data_unregister_no_coherency(h[q]);
  free(h);
}

/* Byte counters of one tile's transfers: every rank's copy to its home, and
 * the home's copy to every rank. */
static void count_to_home(tsr_replicas_t *r, const rtile_t *t) {
  if (r->rank == t->home)
    r->st.bytes_received += t->bytes * (uint64_t)(r->size - 1);
  else
    r->st.bytes_sent += t->bytes;
}

static void count_from_home(tsr_replicas_t *r, const rtile_t *t) {
  if (r->rank == t->home)
    r->st.bytes_sent += t->bytes * (uint64_t)(r->size - 1);
  else
    r->st.bytes_received += t->bytes;
}

/* Options of averaging tasks outside a step's backward pass: through
 * StarPU-MPI, labelled and prioritized like layer 1's backward pass, since
 * the next step's forward pass waits for them. */
static tsr_task_opts_t mpi_opts(const tsr_replicas_t *r) {
  tsr_task_opts_t o = tsr__net_task_opts(r->net, 1, true);
  o.mpi = true;
  return o;
}

/* acc (on the home) = sum over ranks q of weights[q] * x[q]; in rank order
 * in deterministic mode, else as the copies arrive (commutative adds). */
static int reduce(const tsr_task_opts_t *o, tsr_replicas_t *r, rtile_t *t,
                  starpu_data_handle_t *x) {
  if (r->sync.deterministic) {
    for (int q = 0; q < r->size; q++)
      TSR_TRY(tsr__insert_axpby_mode(o, (float)r->weights[q], x[q], q == 0 ? 0.0f : 1.0f, t->acc,
                                     false));
  } else {
    TSR_TRY(tsr__insert_fill(o, t->acc, 0.0f));
    for (int q = 0; q < r->size; q++)
      TSR_TRY(tsr__insert_axpby_mode(o, (float)r->weights[q], x[q], 1.0f, t->acc, true));
  }
  count_to_home(r, t);
  return 0;
}

/* y[q] = src for every rank q (except the home when skip_home); src lives on the home. */
static int broadcast(const tsr_task_opts_t *o, tsr_replicas_t *r, rtile_t *t,
                     starpu_data_handle_t src, starpu_data_handle_t *y, bool skip_home) {
  for (int q = 0; q < r->size; q++)
    if (!(skip_home && q == t->home)) TSR_TRY(tsr__insert_copy(o, y[q], src));
  count_from_home(r, t);
  return 0;
}

/* The optimizer update of one tile, on the tile's home, with the home's state. */
static int update_on_home(const tsr_task_opts_t *o, tsr_replicas_t *r, const tsr_param_t *p,
                          rtile_t *t) {
  const tsr_net_t *net = r->net;
  const tsr_optimizer_t *hp = &net->opts.opt;
  float wd = p->decay ? hp->weight_decay : 0.0f;
  int h = t->home;
  if (hp->kind == TSR_OPT_ADAM)
    return tsr__insert_adam(o, t->w[h], t->s1[h], t->s2[h], t->acc, net->lr, hp->beta1, hp->beta2,
                            hp->eps, wd, net->step);
  return tsr__insert_sgd(o, t->w[h], t->s1 ? t->s1[h] : NULL, t->acc, net->lr, hp->momentum, wd);
}

/* batch: replaces the optimizer step of a parameter whose gradient was just submitted. */
static int grad_hook(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *layer, void *ctx) {
  (void)net;
  tsr_task_opts_t mpi = *layer, *o = &mpi;
  mpi.mpi = true;
  tsr_replicas_t *r = ctx;
  rparam_t *rp = NULL;
  for (int k = 0; k < r->nparams && !rp; k++)
    if (r->params[k].p == p) rp = &r->params[k];
  if (!rp) return TSR_EINVAL;
  double t0 = now();
  int rc = 0;
  for (int k = 0; k < rp->ntiles && rc == 0; k++) {
    rtile_t *t = &rp->t[k];
    rc = reduce(o, r, t, t->g);
    if (rc == 0) rc = update_on_home(o, r, p, t);
    if (rc == 0) rc = broadcast(o, r, t, t->w[t->home], t->w, true);
  }
  r->st.seconds += now() - t0;
  return rc;
}

static void set_average_weights(tsr_replicas_t *r) {
  int64_t total = 0;
  for (int q = 0; q < r->size; q++)
    total += r->samples[q];
  for (int q = 0; q < r->size; q++)
    r->weights[q] =
        r->sync.by_samples && total > 0 ? (double)r->samples[q] / (double)total : 1.0 / r->size;
}

/* Every replica (and with average_state the optimizer state) becomes the
 * weighted mean of all. */
static int average(tsr_replicas_t *r) {
  tsr_task_opts_t mpi = mpi_opts(r), *o = &mpi;
  set_average_weights(r);
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++)
    for (int i = 0; i < r->params[k].ntiles && rc == 0; i++) {
      rtile_t *t = &r->params[k].t[i];
      starpu_data_handle_t *sets[3] = {t->w, r->sync.average_state ? t->s1 : NULL,
                                       r->sync.average_state ? t->s2 : NULL};
      for (int s = 0; s < 3 && rc == 0; s++)
        if (sets[s]) {
          rc = reduce(o, r, t, sets[s]);
          if (rc == 0) rc = broadcast(o, r, t, t->acc, sets[s], false);
        }
    }
  memset(r->samples, 0, sizeof *r->samples * (size_t)r->size);
  return rc;
}

/* async-epoch: each rank's fold, then its copy of the result, per tile. The
 * folds of one tile are adjacent accesses to the global copy and commute
 * (in deterministic mode they apply in rank order instead). */
static int fold_all(tsr_replicas_t *r) {
  tsr_task_opts_t mpi = mpi_opts(r), *o = &mpi;
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++)
    for (int i = 0; i < r->params[k].ntiles && rc == 0; i++) {
      rtile_t *t = &r->params[k].t[i];
      for (int q = 0; q < r->size && rc == 0; q++) {
        rc = tsr__insert_fold(o, t->global, t->snap[q], t->w[q], !r->sync.deterministic);
        if (rc == 0) rc = tsr__insert_copy(o, t->w[q], t->snap[q]);
      }
      count_to_home(r, t), count_from_home(r, t);
    }
  return rc;
}

static int create_tile(tsr_replicas_t *r, tsr_param_t *p, int i, int j, int home, rtile_t *t) {
  bool batch = r->sync.kind == TSR_SYNC_BATCH;
  int rows = tsr_tiles_tile_rows(p->w, i), cols = tsr_tiles_tile_cols(p->w, j);
  t->home = home;
  t->bytes = (uint64_t)rows * (uint64_t)cols * sizeof(float);
  t->w = per_rank(r, p->w, i, j);
  if (!t->w) return TSR_ENOMEM;
  if (p->s1 && (batch || r->sync.average_state) && !(t->s1 = per_rank(r, p->s1, i, j)))
    return TSR_ENOMEM;
  if (p->s2 && (batch || r->sync.average_state) && !(t->s2 = per_rank(r, p->s2, i, j)))
    return TSR_ENOMEM;
  if (batch && !(t->g = per_rank(r, p->g, i, j))) return TSR_ENOMEM;
  t->acc = placeholder(rows, cols, home);
  if (r->sync.kind == TSR_SYNC_ASYNC_EPOCH) {
    t->global = placeholder(rows, cols, home);
    t->snap = calloc((size_t)r->size, sizeof *t->snap);
    if (!t->snap) return TSR_ENOMEM;
    for (int q = 0; q < r->size; q++)
      t->snap[q] = placeholder(rows, cols, home);
  }
  return 0;
}

/* Every replica starts from rank 0's weights; the async global copy from them too. */
static int start_equal(tsr_replicas_t *r) {
  tsr_task_opts_t mpi = mpi_opts(r), *o = &mpi;
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++)
    for (int i = 0; i < r->params[k].ntiles && rc == 0; i++) {
      rtile_t *t = &r->params[k].t[i];
      for (int q = 1; q < r->size && rc == 0; q++)
        rc = tsr__insert_copy(o, t->w[q], t->w[0]);
      if (rc == 0 && t->global) rc = tsr__insert_copy(o, t->global, t->w[0]);
    }
  return rc;
}

/* The home of the next tile: the rank with the fewest bytes homed so far, so
 * that averaging traffic and optimizer updates spread evenly (tile index mod
 * P would home every weight matrix of a net with one tile per matrix on rank
 * 0 and only the biases elsewhere). Every rank computes the same answer. */
static int lightest(uint64_t *load, int size, const tsr_param_t *p, int i, int j) {
  int best = 0;
  for (int q = 1; q < size; q++)
    if (load[q] < load[best]) best = q;
  load[best] += (uint64_t)tsr_tiles_tile_rows(p->w, i) * (uint64_t)tsr_tiles_tile_cols(p->w, j);
  return best;
}

int tsr__replicas_create(tsr_replicas_t **out, tsr_net_t *net, const tsr_sync_t *sync,
                         tsr_errbuf_t *err) {
  *out = NULL;
  tsr_replicas_t *r = calloc(1, sizeof *r);
  if (!r) return TSR_ENOMEM;
  r->net = net, r->sync = *sync;
  r->rank = tsr_dist_rank(), r->size = tsr_dist_size();
  r->weights = calloc((size_t)r->size, sizeof *r->weights);
  r->samples = calloc((size_t)r->size, sizeof *r->samples);
  r->nparams = tsr_net_n_params(net);
  r->params = calloc((size_t)r->nparams, sizeof *r->params);
  int rc = r->weights && r->samples && r->params ? 0 : TSR_ENOMEM;
  int k = 0;
  uint64_t *load = calloc((size_t)r->size, sizeof *load); /* bytes homed on each rank */
  if (!load) rc = TSR_ENOMEM;
  for (int l = 0; l < net->n_layers && rc == 0; l++)
    for (int m = 0; m < net->layers[l].nparams && rc == 0; m++, k++) {
      rparam_t *rp = &r->params[k];
      rp->p = &net->layers[l].params[m];
      int mt = tsr_tiles_mt(rp->p->w), nt = tsr_tiles_nt(rp->p->w);
      rp->ntiles = mt * nt;
      rp->t = calloc((size_t)rp->ntiles, sizeof *rp->t);
      if (!rp->t) rc = TSR_ENOMEM;
      for (int i = 0; i < mt && rc == 0; i++)
        for (int j = 0; j < nt && rc == 0; j++)
          rc =
              create_tile(r, rp->p, i, j, lightest(load, r->size, rp->p, i, j), &rp->t[i * nt + j]);
    }
  free(load);
  r->nstats = rc == 0 ? tsr_tiles_mt(net->train_stats) : 0;
  if (rc == 0 && !(r->stats = calloc((size_t)(r->size * r->nstats), sizeof *r->stats)))
    rc = TSR_ENOMEM;
  if (rc == 0 && !(r->stats_sum = calloc((size_t)r->nstats, sizeof *r->stats_sum))) rc = TSR_ENOMEM;
  for (int i = 0; i < r->nstats && rc == 0; i++) {
    r->stats_sum[i] = placeholder(1, 2, 0);
    starpu_data_handle_t *h = per_rank(r, net->train_stats, i, 0);
    if (!h) rc = TSR_ENOMEM;
    for (int q = 0; h && q < r->size; q++)
      r->stats[q * r->nstats + i] = h[q];
    free(h);
  }
  if (rc == 0) rc = start_equal(r);
  if (rc) {
    tsr__replicas_destroy(&r);
    return tsr_error_set(err, rc, "cannot set up the replicas: %s", tsr_strerror(rc));
  }
  if (sync->kind == TSR_SYNC_BATCH) net->on_grad = grad_hook, net->on_grad_ctx = r;
  memset(&r->st, 0, sizeof r->st);
  *out = r;
  return 0;
}

void tsr__replicas_destroy(tsr_replicas_t **rp) {
  tsr_replicas_t *r = *rp;
  if (!r) return;
  if (tsr_dist_active()) tsr__progress_wait_all();
  for (int k = 0; r->params && k < r->nparams; k++) {
    for (int i = 0; i < r->params[k].ntiles; i++) {
      rtile_t *t = &r->params[k].t[i];
      free_per_rank(r, t->w), free_per_rank(r, t->s1), free_per_rank(r, t->s2);
      free_per_rank(r, t->g);
      if (t->acc) starpu_data_unregister_no_coherency(t->acc);
      if (t->global) starpu_data_unregister_no_coherency(t->global);
      for (int q = 0; t->snap && q < r->size; q++)
        starpu_data_unregister_no_coherency(t->snap[q]);
      free(t->snap);
    }
    free(r->params[k].t);
  }
  for (int q = 0; r->stats && q < r->size; q++)
    for (int i = 0; i < r->nstats; i++)
      if (q != r->rank && r->stats[q * r->nstats + i])
        starpu_data_unregister_no_coherency(r->stats[q * r->nstats + i]);
  if (r->net->on_grad_ctx == r) r->net->on_grad = NULL, r->net->on_grad_ctx = NULL;
  for (int i = 0; r->stats_sum && i < r->nstats; i++)
    if (r->stats_sum[i]) starpu_data_unregister_no_coherency(r->stats_sum[i]);
  free(r->stats), free(r->stats_sum), free(r->params), free(r->weights), free(r->samples);
  free(r);
  *rp = NULL;
}

void tsr__replicas_count(tsr_replicas_t *r, const int *samples_per_rank) {
  int64_t total = 0;
  for (int q = 0; q < r->size; q++) {
    r->samples[q] += samples_per_rank[q];
    total += samples_per_rank[q];
  }
  /* The global gradient is the mean over the global batch. */
  if (r->sync.kind == TSR_SYNC_BATCH)
    for (int q = 0; q < r->size; q++)
      r->weights[q] = total > 0 ? (double)samples_per_rank[q] / (double)total : 0.0;
}

int tsr__replicas_after_step(tsr_replicas_t *r, int64_t step) {
  if (r->sync.kind != TSR_SYNC_EVERY || step % r->sync.every != 0) return 0;
  double t0 = now();
  int rc = average(r);
  r->st.seconds += now() - t0;
  return rc;
}

/* Whether no rank took a sample since the last averaging (every rank takes
 * the same steps, so a step since then would have counted samples). */
static bool nothing_since_average(const tsr_replicas_t *r) {
  for (int q = 0; q < r->size; q++)
    if (r->samples[q] != 0) return false;
  return true;
}

int tsr__replicas_epoch_end(tsr_replicas_t *r, int epoch, bool last) {
  double t0 = now();
  int rc = 0;
  switch (r->sync.kind) {
  case TSR_SYNC_EPOCH:
    if (epoch % r->sync.every == 0 || last) rc = average(r);
    break;
  case TSR_SYNC_EVERY:
    /* One model at the end, unless the last step averaged already (no samples since). */
    if (last && !nothing_since_average(r)) rc = average(r);
    break;
  case TSR_SYNC_ASYNC_EPOCH:
    rc = fold_all(r);
    if (rc == 0 && last) rc = average(r); /* a final uniform average */
    break;
  default: break;
  }
  /* Epoch-end averaging is a synchronization point users see: wait for it. */
  if (rc == 0 && r->sync.kind != TSR_SYNC_BATCH && r->sync.kind != TSR_SYNC_ASYNC_EPOCH)
    rc = tsr__progress_wait_all();
  r->st.seconds += now() - t0;
  return rc;
}

/* The training counters of every rank are summed on rank 0 by StarPU-MPI
 * tasks (the same owner-computes mechanism as averaging), then read there;
 * each rank then clears its own. */
int tsr__replicas_reduce_stats(tsr_replicas_t *r, double *loss, double *correct) {
  tsr_task_opts_t mpi = mpi_opts(r), *o = &mpi;
  int rc = 0;
  for (int i = 0; i < r->nstats && rc == 0; i++)
    for (int q = 0; q < r->size && rc == 0; q++)
      rc = tsr__insert_axpby_mode(o, 1.0f, r->stats[q * r->nstats + i], q == 0 ? 0.0f : 1.0f,
                                  r->stats_sum[i], false);
  double mine_loss, mine_correct;
  if (rc == 0) rc = tsr_net_take_stats(r->net, false, &mine_loss, &mine_correct);
  *loss = 0, *correct = 0;
  for (int i = 0; i < r->nstats && rc == 0 && r->rank == 0; i++) {
    if (starpu_data_acquire(r->stats_sum[i], STARPU_R) != 0) return TSR_ERUNTIME;
    const float *v = (const float *)starpu_matrix_get_local_ptr(r->stats_sum[i]);
    *loss += v[0], *correct += v[1];
    starpu_data_release(r->stats_sum[i]);
  }
  return rc;
}

void tsr__replicas_take_stats(tsr_replicas_t *r, tsr_sync_stats_t *st) {
  *st = r->st;
  memset(&r->st, 0, sizeof r->st);
}
