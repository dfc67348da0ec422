/* One averaging mechanism for every synchronization policy, on descriptors.
 * Each parameter tile has a home rank (homes balanced by bytes). For every
 * parameter matrix each rank makes a replica view per rank (its own matrix
 * for itself, handles without memory for the others), and matrices
 * distributed by home: acc, the weighted sum (and for async-epoch the global
 * copy and each rank's fold result). Averaging a tile is then two rounds of
 * StarPU-MPI tasks that every rank submits alike: the home accumulates each
 * rank's copy into acc (StarPU-MPI sends the copies to it), and each rank's
 * copy is overwritten from the home's result (StarPU-MPI sends it back).
 * Because it works tile by tile, the averaging of a layer starts while the
 * layers below are still in their backward pass.
 *
 * batch: the gradient is averaged every step, the optimizer runs once on the
 * home (its optimizer state is the only one used: sharded, ZeRO-1 style) and
 * the updated tile is what is broadcast. every=K, epoch=n: weights (and with
 * average_state the optimizer state) are averaged. async-epoch: each rank
 * folds itself into a global copy with a commutative task and continues
 * from its own fold's result.
 *
 * Deterministic mode sums in rank order: acc = w_0 x_0, then acc = w_q x_q +
 * acc for q = 1 .. P-1 (tsr_sync_t.deterministic, tested bit for bit). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/net_impl.h"
#include "parallel/replicas.h"
#include "runtime/progress.h"
#include "tile/ops.h"
#include "tile/tiles_impl.h"
#include "try.h"

typedef struct {
  tsr_param_t *p;
  int nt;    /* tile columns, for home_of */
  int *home; /* (mt, nt) home rank of each tile */
  /* [size] replica views of the weights and the gradient (batch only) */
  tsr_tiles_t **w, **g;
  /* optimizer state matrices with replica views (batch, or --sync-state), and those */
  int nstate;
  tsr_tiles_t **s[TSR_OPTIM_MAX_STATE];
  /* batch: each tile of the weights and state from its home's replica */
  tsr_tiles_t *home_w, *home_s[TSR_OPTIM_MAX_STATE];
  tsr_tiles_t *acc;    /* distributed by home: the weighted sum */
  tsr_tiles_t *global; /* async-epoch, distributed by home: the global copy */
  tsr_tiles_t **snap;  /* async-epoch: [size], distributed by home: each rank's fold */
} rparam_t;

struct tsr_replicas {
  tsr_net_t *net;
  tsr_sync_t sync;
  int rank, size;
  int nparams;
  rparam_t *params;
  tsr_tiles_t **stats;      /* [size] replica views of the training stats (mt, 2) */
  tsr_tiles_t *stats_sum;   /* on rank 0: the sums over ranks */
  double *weights;          /* [size] weight of each rank in the next averaging */
  int64_t *samples;         /* [size] samples since the last averaging */
  tsr_grad_hook_t previous; /* batch: the hook this one replaced, restored at the end */
  tsr_sync_stats_t st;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int home_of(int i, int j, void *ctx) {
  const rparam_t *rp = ctx;
  return rp->home[i * rp->nt + j];
}

static int rank_zero(int i, int j, void *ctx) {
  (void)i, (void)j, (void)ctx;
  return 0;
}

/* [size] replica views of base, one per rank; NULL on failure. */
static tsr_tiles_t **replicas_of(tsr_replicas_t *r, tsr_tiles_t *base) {
  tsr_tiles_t **v = calloc((size_t)r->size, sizeof *v);
  for (int q = 0; v && q < r->size; q++)
    if (tsr__tiles_replica(&v[q], base, q)) {
      while (q-- > 0)
        tsr_tiles_destroy(&v[q]);
      free(v);
      return NULL;
    }
  return v;
}

static void destroy_all(tsr_replicas_t *r, tsr_tiles_t ***v) {
  for (int q = 0; *v && q < r->size; q++)
    tsr_tiles_destroy(&(*v)[q]);
  free(*v), *v = NULL;
}

/* Bytes of tile (i, j), and this rank's share of moving it: every rank's
 * copy to its home, and the home's copy to every rank. */
static uint64_t tile_bytes(const tsr_tiles_t *t, int i, int j) {
  return (uint64_t)tsr_tiles_tile_rows(t, i) * (uint64_t)tsr_tiles_tile_cols(t, j) * sizeof(float);
}

static void count_to_home(tsr_replicas_t *r, const rparam_t *rp, int i, int j) {
  uint64_t bytes = tile_bytes(rp->acc, i, j);
  if (r->rank == home_of(i, j, (void *)rp))
    r->st.bytes_received += bytes * (uint64_t)(r->size - 1);
  else
    r->st.bytes_sent += bytes;
}

static void count_from_home(tsr_replicas_t *r, const rparam_t *rp, int i, int j) {
  uint64_t bytes = tile_bytes(rp->acc, i, j);
  if (r->rank == home_of(i, j, (void *)rp))
    r->st.bytes_sent += bytes * (uint64_t)(r->size - 1);
  else
    r->st.bytes_received += bytes;
}

/* Options of averaging tasks outside a step's backward pass: through
 * StarPU-MPI, labelled and prioritized like layer 1's backward pass, since
 * the next step's forward pass waits for them. */
static tsr_task_opts_t mpi_opts(const tsr_replicas_t *r) {
  tsr_task_opts_t o = tsr__net_task_opts(r->net, 1, true);
  o.mpi = true;
  return o;
}

/* Tile (i, j) of acc (on the home) = sum over ranks q of weights[q] x[q]; in
 * rank order in deterministic mode, else as the copies arrive (commutative
 * adds). */
static int reduce(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, tsr_tiles_t **x, int i,
                  int j) {
  if (r->sync.deterministic) {
    for (int q = 0; q < r->size; q++)
      TSR_TRY(tsr__tile_axpby(o, (float)r->weights[q], x[q], q == 0 ? 0.0f : 1.0f, rp->acc, i, j,
                              false));
  } else {
    TSR_TRY(tsr__tile_fill(o, rp->acc, i, j, 0.0f));
    for (int q = 0; q < r->size; q++)
      TSR_TRY(tsr__tile_axpby(o, (float)r->weights[q], x[q], 1.0f, rp->acc, i, j, true));
  }
  count_to_home(r, rp, i, j);
  return 0;
}

/* Tile (i, j) of y[q] = the same tile of src for every rank q (except the
 * home when skip_home: src is the home's own copy); src lives on the home. */
static int broadcast(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, tsr_tiles_t *src,
                     tsr_tiles_t **y, bool skip_home, int i, int j) {
  int home = home_of(i, j, rp);
  for (int q = 0; q < r->size; q++)
    if (!(skip_home && q == home)) TSR_TRY(tsr__tile_copy(o, y[q], src, i, j));
  count_from_home(r, rp, i, j);
  return 0;
}

/* The optimizer update of tile (i, j), on its home, with the home's state:
 * the net's own optimizer, on the home's copies. */
static int update_on_home(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, int i, int j) {
  return tsr__optim_update_tile(r->net->optim, rp->p->index, rp->home_w, rp->home_s, rp->acc, i, j,
                                o);
}

/* batch: replaces the optimizer step of a parameter whose gradient was just submitted. */
static int grad_hook(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *layer, void *ctx) {
  (void)net;
  tsr_replicas_t *r = ctx;
  rparam_t *rp = NULL;
  for (int k = 0; k < r->nparams && !rp; k++)
    if (r->params[k].p == p) rp = &r->params[k];
  if (!rp) return TSR_EINVAL;
  tsr_task_opts_t o = *layer;
  o.mpi = true;
  double t0 = now();
  int rc = 0;
  for (int i = 0; i < tsr_tiles_mt(p->w) && rc == 0; i++)
    for (int j = 0; j < rp->nt && rc == 0; j++) {
      rc = reduce(&o, r, rp, rp->g, i, j);
      if (rc == 0) rc = update_on_home(&o, r, rp, i, j);
      if (rc == 0) rc = broadcast(&o, r, rp, rp->home_w, rp->w, true, i, j);
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
  tsr_task_opts_t o = mpi_opts(r);
  set_average_weights(r);
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    /* The weights, then with average_state each state matrix. */
    tsr_tiles_t **sets[1 + TSR_OPTIM_MAX_STATE] = {rp->w};
    int nsets = 1;
    for (int k = 0; r->sync.average_state && k < rp->nstate; k++)
      sets[nsets++] = rp->s[k];
    for (int i = 0; i < tsr_tiles_mt(rp->p->w) && rc == 0; i++)
      for (int j = 0; j < rp->nt && rc == 0; j++)
        for (int s = 0; s < nsets && rc == 0; s++) {
          rc = reduce(&o, r, rp, sets[s], i, j);
          if (rc == 0) rc = broadcast(&o, r, rp, rp->acc, sets[s], false, i, j);
        }
  }
  memset(r->samples, 0, sizeof *r->samples * (size_t)r->size);
  return rc;
}

/* async-epoch: each rank's fold, then its copy of the result, per tile. The
 * folds of one tile are adjacent accesses to the global copy and commute
 * (in deterministic mode they apply in rank order instead). */
static int fold_all(tsr_replicas_t *r) {
  tsr_task_opts_t o = mpi_opts(r);
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    for (int i = 0; i < tsr_tiles_mt(rp->p->w) && rc == 0; i++)
      for (int j = 0; j < rp->nt && rc == 0; j++) {
        for (int q = 0; q < r->size && rc == 0; q++) {
          rc = tsr__tile_fold(&o, rp->global, rp->snap[q], rp->w[q], i, j, !r->sync.deterministic);
          if (rc == 0) rc = tsr__tile_copy(&o, rp->w[q], rp->snap[q], i, j);
        }
        count_to_home(r, rp, i, j), count_from_home(r, rp, i, j);
      }
  }
  return rc;
}

/* Every replica starts from rank 0's weights; the async global copy from them too. */
static int start_equal(tsr_replicas_t *r) {
  tsr_task_opts_t o = mpi_opts(r);
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    for (int q = 1; q < r->size && rc == 0; q++)
      rc = tsr__tiles_copy(&o, rp->w[q], rp->w[0]);
    if (rc == 0 && rp->global) rc = tsr__tiles_copy(&o, rp->global, rp->w[0]);
  }
  return rc;
}

/* The home of each tile of p: the rank with the fewest bytes homed so far,
 * so that averaging traffic and optimizer updates spread evenly (tile index
 * mod P would home every weight matrix of a net with one tile per matrix on
 * rank 0 and only the biases elsewhere). Every rank computes the same. */
static int assign_homes(tsr_replicas_t *r, rparam_t *rp, uint64_t *load) {
  const tsr_tiles_t *w = rp->p->w;
  int mt = tsr_tiles_mt(w);
  rp->nt = tsr_tiles_nt(w);
  rp->home = malloc(sizeof *rp->home * (size_t)mt * (size_t)rp->nt);
  if (!rp->home) return TSR_ENOMEM;
  for (int i = 0; i < mt; i++)
    for (int j = 0; j < rp->nt; j++) {
      int best = 0;
      for (int q = 1; q < r->size; q++)
        if (load[q] < load[best]) best = q;
      load[best] += (uint64_t)tsr_tiles_tile_rows(w, i) * (uint64_t)tsr_tiles_tile_cols(w, j);
      rp->home[i * rp->nt + j] = best;
    }
  return 0;
}

/* A matrix shaped and tiled like p's weights, distributed by home. */
static int by_home(tsr_tiles_t **t, rparam_t *rp) {
  const tsr_tiles_t *w = rp->p->w;
  return tsr_tiles_create_distributed(t, tsr_tiles_rows(w), tsr_tiles_cols(w), tsr_tiles_mb(w),
                                      tsr_tiles_nb(w), home_of, rp);
}

static int create_param(tsr_replicas_t *r, rparam_t *rp, uint64_t *load) {
  bool batch = r->sync.kind == TSR_SYNC_BATCH;
  bool state = batch || r->sync.average_state;
  tsr_param_t *p = rp->p;
  TSR_TRY(assign_homes(r, rp, load));
  if (!(rp->w = replicas_of(r, p->w))) return TSR_ENOMEM;
  rp->nstate = state ? tsr__optim_nstate(r->net->optim) : 0;
  for (int k = 0; k < rp->nstate; k++)
    if (!(rp->s[k] = replicas_of(r, tsr__optim_state(r->net->optim, p->index, k))))
      return TSR_ENOMEM;
  if (batch && !(rp->g = replicas_of(r, p->g))) return TSR_ENOMEM;
  TSR_TRY(by_home(&rp->acc, rp));
  if (batch) {
    TSR_TRY(tsr__tiles_pick(&rp->home_w, rp->w, home_of, rp));
    for (int k = 0; k < rp->nstate; k++)
      TSR_TRY(tsr__tiles_pick(&rp->home_s[k], rp->s[k], home_of, rp));
  }
  if (r->sync.kind == TSR_SYNC_ASYNC_EPOCH) {
    TSR_TRY(by_home(&rp->global, rp));
    if (!(rp->snap = calloc((size_t)r->size, sizeof *rp->snap))) return TSR_ENOMEM;
    for (int q = 0; q < r->size; q++)
      TSR_TRY(by_home(&rp->snap[q], rp));
  }
  return 0;
}

static void destroy_param(tsr_replicas_t *r, rparam_t *rp) {
  /* Views first: they borrow the replicas' and the distributed matrices' tiles. */
  tsr_tiles_destroy(&rp->home_w);
  for (int k = 0; k < TSR_OPTIM_MAX_STATE; k++)
    tsr_tiles_destroy(&rp->home_s[k]), destroy_all(r, &rp->s[k]);
  destroy_all(r, &rp->w);
  destroy_all(r, &rp->g), destroy_all(r, &rp->snap);
  tsr_tiles_destroy(&rp->acc), tsr_tiles_destroy(&rp->global);
  free(rp->home);
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
  uint64_t *load = calloc((size_t)r->size, sizeof *load); /* bytes homed on each rank */
  int rc = r->weights && r->samples && r->params && load ? 0 : TSR_ENOMEM;
  int k = 0;
  for (int l = 0; l < net->n_layers && rc == 0; l++)
    for (int m = 0; m < net->layers[l].nparams && rc == 0; m++, k++) {
      r->params[k].p = &net->layers[l].params[m];
      rc = create_param(r, &r->params[k], load);
    }
  free(load);
  if (rc == 0 && !(r->stats = replicas_of(r, net->train_stats))) rc = TSR_ENOMEM;
  if (rc == 0)
    rc = tsr_tiles_create_distributed(&r->stats_sum, tsr_tiles_rows(net->train_stats), 2, 1, 2,
                                      rank_zero, NULL);
  if (rc == 0) rc = start_equal(r);
  if (rc) {
    tsr__replicas_destroy(&r);
    return tsr_error_set(err, rc, "cannot set up the replicas: %s", tsr_strerror(rc));
  }
  if (sync->kind == TSR_SYNC_BATCH)
    r->previous = tsr__net_set_grad_hook(net, (tsr_grad_hook_t){grad_hook, r});
  memset(&r->st, 0, sizeof r->st);
  *out = r;
  return 0;
}

void tsr__replicas_destroy(tsr_replicas_t **rp) {
  tsr_replicas_t *r = *rp;
  if (!r) return;
  if (tsr_dist_active()) tsr__progress_wait_all();
  if (r->previous.fn) tsr__net_set_grad_hook(r->net, r->previous);
  for (int k = 0; r->params && k < r->nparams; k++)
    destroy_param(r, &r->params[k]);
  destroy_all(r, &r->stats);
  tsr_tiles_destroy(&r->stats_sum);
  free(r->params), free(r->weights), free(r->samples);
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
  tsr_task_opts_t o = mpi_opts(r);
  int rc = 0;
  for (int q = 0; q < r->size && rc == 0; q++)
    rc = tsr__tiles_axpby(&o, 1.0f, r->stats[q], q == 0 ? 0.0f : 1.0f, r->stats_sum);
  double mine_loss, mine_correct;
  if (rc == 0) rc = tsr_net_take_stats(r->net, false, &mine_loss, &mine_correct);
  *loss = 0, *correct = 0;
  if (rc || r->rank != 0) return rc;
  int64_t n = tsr_tiles_rows(r->stats_sum);
  float buf[2 * 64];
  float *v = n <= 64 ? buf : malloc(sizeof(float) * 2 * (size_t)n);
  if (!v) return TSR_ENOMEM;
  rc = tsr_tiles_read(r->stats_sum, v);
  for (int64_t i = 0; i < n && rc == 0; i++)
    *loss += v[2 * i], *correct += v[2 * i + 1];
  if (v != buf) free(v);
  return rc;
}

void tsr__replicas_take_stats(tsr_replicas_t *r, tsr_sync_stats_t *st) {
  *st = r->st;
  memset(&r->st, 0, sizeof r->st);
}
