/* The replicas' lifecycle (replicas.h): the trainer's calls at fixed points of every rank's loop,
 * so every rank submits the same StarPU-MPI tasks in the same order. Creating lays the averages
 * out (who meets, placement.c's chunks and buckets, each parameter's matrices in the same order
 * on every rank, their MPI tags), starts every replica equal and, where gradients are averaged,
 * takes over the net's gradient hook; each hook of the loop runs the policy's (policy.h), timed
 * as synchronization; the training statistics are summed on rank 0 by StarPU-MPI tasks. */
#include <stdlib.h>
#include <string.h>

#include "parallel/average.h"
#include "parallel/buckets.h"
#include "parallel/collective.h"
#include "parallel/gradients.h"
#include "parallel/home.h"
#include "parallel/placement.h"
#include "runtime/progress.h"
#include "tile/ops.h"
#include "tile/tiles_impl.h"
#include "try.h"

static int rank_zero(int i, int j, void *ctx) {
  (void)i, (void)j, (void)ctx;
  return 0;
}

/* Chunks, their homes and buckets (tsr__placement_plan: the coarsest chunking that balances what
 * each rank sends; with --shares, homes in proportion to them, share; under a grid each row its
 * own), kept in each parameter's record. */
static int plan_chunks(tsr_replicas_t *r, const double *share) {
  int n = r->nparams, cap = n ? n : 1;
  tsr_chunk_shape_t *shapes = malloc(sizeof *shapes * (size_t)cap);
  tsr_chunking_t *ch = malloc(sizeof *ch * (size_t)cap);
  bool *spread = malloc(sizeof *spread * (size_t)cap),
       *staged = malloc(sizeof *staged * (size_t)cap), *whole = malloc(sizeof *whole * (size_t)cap);
  int rc = shapes && ch && spread && staged && whole ? 0 : TSR_ENOMEM;
  for (int k = 0; rc == 0 && k < n; k++) {
    const tsr_tiles_t *w = r->params[k].p->w;
    shapes[k] =
        (tsr_chunk_shape_t){tsr_tiles_rows(w), tsr_tiles_cols(w), tsr_tiles_mb(w), tsr_tiles_nb(w)};
    spread[k] = w->kind == TSR_TILES_DISTRIBUTED;
  }
  tsr_buckets_t bk = {0}, tb = {0};
  if (rc == 0)
    rc = tsr__placement_plan(shapes, spread, n, &r->m, share,
                             tsr__placement_bucket_bytes(r->sync.bucket_mb), ch, &bk, &tb, staged,
                             whole);
  if (rc == 0 && (rc = tsr__buckets_lay(r, &bk, &tb, ch))) tsr__chunks_free(ch, n);
  tsr__buckets_free(&bk), tsr__buckets_free(&tb);
  for (int k = 0; rc == 0 && k < n; k++) {
    rparam_t *rp = &r->params[k];
    rp->k = ch[k].k, rp->cr = ch[k].cr, rp->cmt = ch[k].cmt, rp->nt = ch[k].nt;
    rp->chome = ch[k].home, rp->local = ch[k].local; /* the replicas' now */
    rp->cbucket = ch[k].bucket, rp->coff = ch[k].offset;
    rp->tbucket = ch[k].tbucket, rp->toff = ch[k].toffset;
    rp->spread = spread[k], rp->staged = staged[k], rp->whole_g = whole[k];
  }
  free(shapes), free(ch), free(spread), free(staged), free(whole);
  return rc;
}

/* A chunk-tiled matrix of p's shape, distributed by chunk home. */
static int by_chunk_home(tsr_tiles_t **t, rparam_t *rp) {
  const tsr_tiles_t *w = rp->p->w;
  return tsr_tiles_create_distributed(t, tsr_tiles_rows(w), tsr_tiles_cols(w), rp->cr,
                                      tsr_tiles_nb(w), tsr__chunk_home, rp);
}

/* A parameter's views and matrices: its weights' (and, averaging gradients or with
 * --sync-state, its optimizer state's) on every rank, its buffer's, the stage of its bands, the
 * accumulator, and with two levels each node's partials. */
static int create_param(tsr_replicas_t *r, rparam_t *rp) {
  tsr_param_t *p = rp->p;
  const tsr_tiles_t *w = p->w;
  if (!(rp->w = tsr__views_of(r, p->w))) return TSR_ENOMEM;
  bool batch = r->batch; /* batch, or post-local's first phase */
  rp->nstate = r->sync.average_state || batch ? tsr__optim_nstate(r->net->optim) : 0;
  for (int k = 0; k < rp->nstate; k++)
    if (!(rp->s[k] = tsr__views_of(r, tsr__optim_state(r->net->optim, p->index, k))))
      return TSR_ENOMEM;
  if (rp->buf) {
    const tsr_tiles_t *b = rp->buf;
    if (tsr_tiles_rows(b) != tsr_tiles_rows(w) || tsr_tiles_cols(b) != tsr_tiles_cols(w) ||
        tsr_tiles_mb(b) != tsr_tiles_mb(w) || tsr_tiles_nb(b) != tsr_tiles_nb(w))
      return TSR_ESHAPE;
    if (!(rp->bufs = tsr__views_of(r, rp->buf))) return TSR_ENOMEM;
  }
  if (rp->staged) {
    /* A grid's slice stages its own columns only, on their rank. */
    if (w->kind == TSR_TILES_DISTRIBUTED)
      TSR_TRY(tsr_tiles_create_distributed(&rp->stage, tsr_tiles_rows(w), tsr_tiles_cols(w), rp->cr,
                                           tsr_tiles_nb(w), w->rank_of, w->rank_ctx));
    else
      TSR_TRY(tsr_tiles_create(&rp->stage, tsr_tiles_rows(w), tsr_tiles_cols(w), rp->cr,
                               tsr_tiles_nb(w)));
    if (!(rp->stages = tsr__views_of(r, rp->stage))) return TSR_ENOMEM;
    if (batch) TSR_TRY(by_chunk_home(&rp->updated, rp));
  }
  /* Averaging gradients: the gradient's whole tiles travel (as chunks, or inside a node with two
   * levels). */
  if (batch && rp->whole_g && !(rp->g = tsr__views_of(r, p->g))) return TSR_ENOMEM;
  TSR_TRY(by_chunk_home(&rp->acc, rp));
  if (!r->m.two_level) return 0;
  rp->ntile = calloc((size_t)r->m.nnodes, sizeof *rp->ntile);
  rp->nband = calloc((size_t)r->m.nnodes, sizeof *rp->nband);
  rp->nctx = calloc((size_t)r->m.nnodes, sizeof *rp->nctx);
  if (!rp->ntile || !rp->nband || !rp->nctx) return TSR_ENOMEM;
  for (int n = 0; n < r->m.nnodes; n++) {
    rp->nctx[n] = (tsr__group_home_t){rp, &r->m.nodes[n]};
    TSR_TRY(tsr_tiles_create_distributed(&rp->ntile[n], tsr_tiles_rows(w), tsr_tiles_cols(w),
                                         tsr_tiles_mb(w), tsr_tiles_nb(w), tsr__node_tile_home,
                                         &rp->nctx[n]));
    TSR_TRY(tsr_tiles_create_distributed(&rp->nband[n], tsr_tiles_rows(w), tsr_tiles_cols(w),
                                         rp->cr, tsr_tiles_nb(w), tsr__node_chunk_home,
                                         &rp->nctx[n]));
  }
  return 0;
}

static void destroy_param(tsr_replicas_t *r, rparam_t *rp) {
  /* Views first: they borrow the matrices' tiles. */
  for (int k = 0; k < TSR_OPTIM_MAX_STATE; k++)
    tsr__views_destroy(r, &rp->s[k]);
  tsr__views_destroy(r, &rp->w), tsr__views_destroy(r, &rp->g), tsr__views_destroy(r, &rp->stages);
  tsr__views_destroy(r, &rp->bufs);
  tsr_tiles_destroy(&rp->stage), tsr_tiles_destroy(&rp->acc), tsr_tiles_destroy(&rp->updated);
  for (int n = 0; rp->ntile && n < r->m.nnodes; n++)
    tsr_tiles_destroy(&rp->ntile[n]);
  for (int n = 0; rp->nband && n < r->m.nnodes; n++)
    tsr_tiles_destroy(&rp->nband[n]);
  free(rp->ntile), free(rp->nband), free(rp->nctx);
  free(rp->chome), free(rp->local), free(rp->cbucket), free(rp->coff);
  free(rp->tbucket), free(rp->toff);
}

/* Everything the averages need, laid out in the same order on every rank (descriptors take
 * their MPI tags in creation order): who meets, the chunks and their matrices, what the homes
 * keep, the buckets, the statistics' views, the policy's own state; then every replica equal,
 * --sync-bn's hook and, averaging gradients, the gradient hook. */
static int lay_out(tsr_replicas_t *r, const double *share, tsr_errbuf_t *err) {
  tsr_net_t *net = r->net;
  /* Homes in proportion to the shares (a rank's part of the reductions and sharded updates
   * follows its part of the samples); a share of 0 still homes what the others cannot. */
  double *home_share = NULL;
  if (share && r->m.grid_rows == 1) {
    if (!(home_share = malloc(sizeof(double) * (size_t)r->m.size))) return TSR_ENOMEM;
    for (int q = 0; q < r->m.size; q++)
      home_share[q] = share[q] * r->m.size > 1e-3 ? share[q] * r->m.size : 1e-3;
  }
  int rc = tsr__members_levels(&r->m, &r->sync, home_share != NULL, err);
  int k = 0;
  for (int l = 0; l < net->n_layers && rc == 0; l++)
    for (int m = 0; m < net->layers[l].nparams; m++, k++)
      r->params[k].p = &net->layers[l].params[m], r->params[k].index = k, r->params[k].r = r,
      r->params[k].buf = m < net->layers[l].nbuffers ? net->layers[l].buffers[m] : NULL;
  if (rc == 0) rc = plan_chunks(r, home_share);
  free(home_share);
  for (k = 0; k < r->nparams && rc == 0; k++)
    rc = create_param(r, &r->params[k]);
  if (rc == 0) rc = tsr__homes_create(r);
  if (rc == 0) rc = tsr__buckets_create(r);
  if (rc == 0 && !(r->stats = tsr__views_of(r, net->train_stats))) rc = TSR_ENOMEM;
  if (rc == 0)
    rc = tsr_tiles_create_distributed(&r->stats_sum, tsr_tiles_rows(net->train_stats), 2, 1, 2,
                                      rank_zero, NULL);
  if (rc == 0 && r->policy->create) rc = r->policy->create(r, &r->sync.schedule, &r->state);
  if (rc == 0) rc = tsr__replicas_start_equal(r);
  if (rc == 0 && r->sync.sync_bn) rc = tsr__sync_bn_create(&r->sync_bn, net);
  if (rc == 0 && r->batch) rc = tsr__gradients_start(r);
  return rc;
}

int tsr__replicas_create(tsr_replicas_t **out, tsr_net_t *net, const tsr_sync_t *sync,
                         const double *share, tsr_errbuf_t *err) {
  *out = NULL;
  int pr = tsr_net_grid_rows(net); /* what a grid supports: tsr_run_check */
  tsr_replicas_t *r = calloc(1, sizeof *r);
  if (!r) return TSR_ENOMEM;
  r->net = net, r->sync = *sync;
  int rc = tsr__members_init(&r->m, tsr_dist_rank(), tsr_dist_size(), pr);
  /* One grid column (Px1): one replica, nothing to average. */
  r->policy = pr == r->m.size ? &tsr__sync_none : tsr__sync_policy(&sync->schedule);
  r->batch = r->policy->traits.meets_every_step;
  r->weights = calloc((size_t)r->m.size, sizeof *r->weights);
  r->samples = calloc((size_t)r->m.size, sizeof *r->samples);
  r->nparams = tsr_net_n_params(net);
  r->params = calloc((size_t)r->nparams + 1, sizeof *r->params);
  if (rc == 0 && !(r->weights && r->samples && r->params)) rc = TSR_ENOMEM;
  tsr_errbuf_t why = {""};
  if (rc == 0) rc = lay_out(r, share, &why);
  if (rc) {
    tsr__replicas_destroy(&r);
    return why.msg[0] ? tsr_error_set(err, rc, "%s", why.msg)
                      : tsr_error_set(err, rc, "cannot set up the replicas: %s", tsr_strerror(rc));
  }
  memset(&r->st, 0, sizeof r->st);
  r->agreed = true;
  *out = r;
  return 0;
}

bool tsr__replicas_agree(const tsr_replicas_t *r) {
  /* One grid column (Px1) is one replica: nothing to disagree with. */
  return r->batch || r->agreed || r->m.grid_rows == r->m.size;
}

void tsr__replicas_destroy(tsr_replicas_t **rp) {
  tsr_replicas_t *r = *rp;
  if (!r) return;
  if (tsr_dist_active()) tsr__progress_wait_all();
  tsr__gradients_stop(r);
  tsr__sync_bn_destroy(&r->sync_bn);
  /* What the homes keep first (the outer state): destroying a distributed matrix asks its
   * rank_of, which reads the chunk homes destroy_param frees (or the policy's). */
  tsr__homes_destroy(r);
  if (r->policy && r->policy->destroy) r->policy->destroy(r, r->state);
  r->state = NULL;
  tsr__buckets_destroy(r);
  for (int k = 0; r->params && k < r->nparams; k++)
    destroy_param(r, &r->params[k]);
  tsr__views_destroy(r, &r->stats);
  tsr_tiles_destroy(&r->stats_sum);
  tsr__members_fini(&r->m);
  free(r->params), free(r->weights), free(r->samples);
  free(r);
  *rp = NULL;
}

bool tsr__replicas_count(tsr_replicas_t *r, const int *samples_per_rank) {
  r->agreed = false; /* a step without an average follows (batch: always agree) */
  int64_t total = 0;
  for (int q = 0; q < r->m.size; q++) {
    r->samples[q] += samples_per_rank[q];
    total += samples_per_rank[q];
  }
  tsr__homes_count(r, samples_per_rank);
  if (r->policy->count) r->policy->count(r->state, samples_per_rank);
  if (r->sync_bn) tsr__sync_bn_count(r->sync_bn, samples_per_rank);
  /* The global gradient is the mean over the global batch. */
  if (r->batch)
    for (int q = 0; q < r->m.size; q++)
      r->weights[q] =
          total > 0 ? (double)samples_per_rank[q] * r->m.grid_rows / (double)total : 0.0;
  return r->batch;
}

/* The policy's hooks, timed as synchronization. */
int tsr__replicas_epoch_begin(tsr_replicas_t *r, int epoch, int64_t steps_done) {
  if (!r->policy->epoch_begin) return 0;
  double t0 = tsr__now();
  int rc = r->policy->epoch_begin(r, &r->sync.schedule, r->state, epoch, steps_done);
  r->st.seconds += tsr__now() - t0;
  return rc;
}

int tsr__replicas_after_step(tsr_replicas_t *r, int64_t step) {
  if (!r->policy->after_step) return 0;
  double t0 = tsr__now();
  int rc = r->policy->after_step(r, &r->sync.schedule, r->state, step);
  r->st.seconds += tsr__now() - t0;
  return rc;
}

int tsr__replicas_epoch_end(tsr_replicas_t *r, int epoch, bool last) {
  if (!r->policy->epoch_end) return 0;
  double t0 = tsr__now();
  int rc = r->policy->epoch_end(r, &r->sync.schedule, r->state, epoch, last);
  r->st.seconds += tsr__now() - t0;
  return rc;
}

/* The training counters of every rank are summed on rank 0 by StarPU-MPI
 * tasks (the same owner-computes mechanism as averaging), then read there (a language model's
 * divided by its positions, as tsr_net_read_stats does); each rank then clears its own. */
int tsr__replicas_reduce_stats(tsr_replicas_t *r, double *loss, double *correct) {
  tsr_task_opts_t o = tsr__layer_one_opts(r);
  o.mpi = true;
  int rc = 0;
  /* Grid: row 0 of each column holds its column's counts. */
  for (int q = 0; q < r->m.size && rc == 0; q += r->m.grid_rows)
    rc = tsr__tiles_axpby(&o, 1.0f, r->stats[q], q == 0 ? 0.0f : 1.0f, r->stats_sum);
  double mine_loss, mine_correct;
  if (rc == 0) rc = tsr_net_take_stats(r->net, false, &mine_loss, &mine_correct);
  *loss = 0, *correct = 0;
  if (rc || r->m.rank != 0) return rc;
  int64_t n = tsr_tiles_rows(r->stats_sum);
  float buf[2 * 64];
  float *v = n <= 64 ? buf : malloc(sizeof(float) * 2 * (size_t)n);
  if (!v) return TSR_ENOMEM;
  rc = tsr_tiles_read(r->stats_sum, v);
  for (int64_t i = 0; i < n && rc == 0; i++)
    *loss += v[2 * i], *correct += v[2 * i + 1];
  int p = tsr_net_positions(r->net); /* per sample, as tsr_net_read_stats says */
  *loss /= p, *correct /= p;
  if (v != buf) free(v);
  return rc;
}

void tsr__replicas_take_stats(tsr_replicas_t *r, tsr_sync_stats_t *st) {
  *st = r->st;
  memset(&r->st, 0, sizeof r->st);
}
