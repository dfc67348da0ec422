/* Weight averages and async-epoch's fold (average.h).
 *
 * Each rank submits only the tasks it takes part in (it runs them, or sends their input), so
 * submission costs O(P) per chunk on the home and O(1) elsewhere. Deterministic mode sums in
 * rank order: acc = w_0 x_0, then acc = w_q x_q + acc for q = 1 .. P-1 (tsr_sync_t.deterministic,
 * tested bit for bit). */
#include <stdlib.h>

#include "parallel/average.h"
#include "parallel/buckets.h"
#include "parallel/collective.h"
#include "parallel/home.h"
#include "parallel/placement.h"
#include "runtime/progress.h"
#include "tile/ops.h"
#include "try.h"

/* On a full bucket's home (tsr__bucket_finish): chunk t's FedNova and outer steps (step_t: for
 * the weights, set 0), and its result packed. */
typedef struct {
  bool outer, fednova;
} step_t;

static int step_packed(tsr_replicas_t *r, bucket_t *b, int t, const tsr_task_opts_t *local,
                       void *ctx) {
  const step_t *st = ctx;
  rparam_t *bp = &r->params[b->param[t]];
  const tsr_tiles_t *result;
  TSR_TRY(tsr__home_step(r, bp, bp->acc, st->outer, st->fednova, true, b->I[t], b->j[t], &result));
  return tsr__bucket_pack_result(local, b, t, bp, result, b->I[t], 0);
}

/* With buckets, an average over every rank of the weights and with average_state each state
 * matrix (tsr__set_of), set by set, bucket by bucket. */
static int average_buckets(tsr_replicas_t *r, bool outer, bool fednova, const tsr_task_opts_t *o) {
  int nsets = 1 + (r->sync.average_state && r->nparams > 0 ? r->params[0].nstate : 0);
  for (int s = 0; s < nsets; s++) {
    step_t st = {s == 0 && outer, s == 0 && fednova};
    tsr__bucket_pass_t p = {o, s, step_packed, &st, true, s, true};
    for (int k = 0; k < r->nparams; k++) {
      rparam_t *rp = &r->params[k];
      for (int I = 0; I < rp->cmt; I++)
        for (int j = 0; j < rp->nt; j++)
          TSR_TRY(tsr__bucket_offer(r, rp, I, j, &p));
    }
  }
  return 0;
}

/* The replicas of scope sc's members (NULL: every rank; and with average_state the optimizer
 * state) become their weighted mean, by the samples each took since they last averaged
 * (samples; NULL: r->samples); with outer, the weights' mean is the outer optimizer's target
 * instead, and every member restarts from its new anchor. With buckets (over every rank), the
 * weights and state bucket by bucket and the layers' buffers chunk by chunk. */
static int average(tsr_replicas_t *r, const tsr__scope_t *sc, const int64_t *samples, bool outer) {
  const tsr__group_t *g = sc ? sc->group : &r->m.all;
  tsr_task_opts_t o = tsr__layer_one_opts(r);
  bool fednova = r->sync.by_steps && !sc, bucketed = !sc && tsr__buckets_on(r);
  tsr__home_weights(r, sc ? sc->group : NULL, samples, fednova);
  int rc = bucketed && g->n > 1 ? average_buckets(r, outer, fednova, &o) : 0;
  for (int k = 0; k < r->nparams && rc == 0 && g->n > 1; k++) {
    rparam_t *rp = &r->params[k];
    /* The weights, then with average_state each state matrix: this rank's own, and every
     * rank's views. */
    tsr_tiles_t *own[2 + TSR_OPTIM_MAX_STATE] = {rp->p->w};
    tsr_tiles_t **views[2 + TSR_OPTIM_MAX_STATE] = {rp->w};
    int nsets = 1;
    for (int s = 0; r->sync.average_state && s < rp->nstate; s++, nsets++)
      own[nsets] = tsr__optim_state(r->net->optim, rp->p->index, s), views[nsets] = rp->s[s];
    if (rp->bufs) own[nsets] = rp->buf, views[nsets++] = rp->bufs; /* a plain weighted mean */
    /* Set by set: two levels keep one node partial per tile for all its chunks. */
    for (int s = bucketed ? nsets - (rp->bufs != NULL) : 0; s < nsets && rc == 0; s++)
      for (int I = 0; I < rp->cmt && rc == 0; I++)
        for (int j = 0; j < rp->nt && rc == 0; j++) {
          rc = tsr__reduce_chunk(&o, r, rp, sc, own[s], views[s], I, j);
          tsr_tiles_t *acc = tsr__acc(rp, sc);
          const tsr_tiles_t *result = acc;
          /* The home in the chunk's scope (under a grid, in its grid row): where acc is. */
          const tsr__group_t *in = tsr__scope(r, rp, sc, j);
          bool at_home = in && r->m.rank == tsr__home_in(in, rp, I, j);
          if (rc == 0 && s == 0)
            rc = tsr__home_step(r, rp, acc, outer, fednova, at_home, I, j, &result);
          if (rc == 0) rc = tsr__gather_chunk(&o, r, rp, sc, result, I, j, views[s], true, I, j);
        }
  }
  if (!sc) tsr__home_clear(r);
  if (!sc)
    r->agreed = rc == 0, r->st.averages++;
  else if (g->n > 1)
    r->st.group_averages++;
  return rc;
}

/* ---- hier's groups ---- */

struct tsr__groups {
  int n, mine;          /* groups, and this rank's */
  tsr__group_t *groups; /* [n] (tsr__members_groups) */
  int nparams;
  tsr_tiles_t **acc;      /* [n * nparams] group g's accumulator of parameter k at g nparams + k */
  tsr__group_home_t *ctx; /* [n * nparams] their rank_of contexts */
};

int tsr__groups_create(tsr_replicas_t *r, int group_size, tsr__groups_t **out) {
  tsr__groups_t *gs = calloc(1, sizeof *gs);
  if (!(*out = gs)) return TSR_ENOMEM;
  TSR_TRY(tsr__members_groups(&r->m, group_size, &gs->groups, &gs->n, &gs->mine));
  size_t n = (size_t)gs->n * (size_t)r->nparams;
  gs->nparams = r->nparams;
  gs->acc = calloc(n + 1, sizeof *gs->acc);
  gs->ctx = calloc(n + 1, sizeof *gs->ctx);
  if (!gs->acc || !gs->ctx) return TSR_ENOMEM;
  /* Every rank creates every group's, in the same order: descriptors take their MPI tags in
   * creation order. */
  for (int k = 0; k < r->nparams; k++) {
    const rparam_t *rp = &r->params[k];
    const tsr_tiles_t *w = rp->p->w;
    for (int g = 0; g < gs->n; g++) {
      size_t e = (size_t)g * (size_t)r->nparams + (size_t)k;
      gs->ctx[e] = (tsr__group_home_t){rp, &gs->groups[g]};
      TSR_TRY(tsr_tiles_create_distributed(&gs->acc[e], tsr_tiles_rows(w), tsr_tiles_cols(w),
                                           rp->cr, tsr_tiles_nb(w), tsr__group_chunk_home,
                                           &gs->ctx[e]));
    }
  }
  return 0;
}

void tsr__groups_destroy(tsr_replicas_t *r, tsr__groups_t **out) {
  (void)r;
  tsr__groups_t *gs = *out;
  if (!gs) return;
  for (int e = 0; gs->acc && e < gs->n * gs->nparams; e++)
    tsr_tiles_destroy(&gs->acc[e]);
  tsr__groups_free(&gs->groups, gs->n);
  free(gs->acc), free(gs->ctx), free(gs);
  *out = NULL;
}

/* A group average weighs its members by the samples each took since the last average of all
 * ranks (r->samples, which only that average counts from zero), not since the group's own last
 * average. So a group average is the average of all ranks restricted to the group: an average
 * of all ranks taken right after it gives what it would have given without it, each rank still
 * weighing by all its samples since then. Counted from the group's own last average instead,
 * the group's model, and every average of all ranks after it, would weigh the group's members
 * by their latest samples alone. */
int tsr__replicas_average_group(tsr_replicas_t *r, tsr__groups_t *gs) {
  tsr__scope_t sc = {&gs->groups[gs->mine], &gs->acc[(size_t)gs->mine * (size_t)gs->nparams]};
  return average(r, &sc, NULL, false);
}

/* ---- async-epoch's fold ---- */

/* One parameter's global copy and each rank's fold, tiled like its weights. */
typedef struct {
  const rparam_t *rp;
  int *home;           /* (mt, nt) each whole tile's home, as its index in the tile's scope (the
                          rank without a grid, the grid column under one) */
  tsr_tiles_t *global; /* by tile home: the global copy */
  tsr_tiles_t **snap;  /* [size], by tile home: each rank's fold */
} fold_param_t;

struct tsr__fold {
  int nparams;
  fold_param_t *p; /* [nparams] */
};

/* Tile (i, j)'s home, in its scope (under a grid, in its grid row). */
static int tile_home(int i, int j, void *ctx) {
  const fold_param_t *fp = ctx;
  return tsr__scope(fp->rp->r, fp->rp, NULL, j)->ranks[fp->home[i * fp->rp->nt + j]];
}

/* A matrix tiled like the weights of fp's parameter, distributed by tile home. */
static int by_tile_home(tsr_tiles_t **t, fold_param_t *fp) {
  const tsr_tiles_t *w = fp->rp->p->w;
  return tsr_tiles_create_distributed(t, tsr_tiles_rows(w), tsr_tiles_cols(w), tsr_tiles_mb(w),
                                      tsr_tiles_nb(w), tile_home, fp);
}

/* async-epoch: each rank's fold, then its copy of the result, per tile. The
 * folds of one tile are adjacent accesses to the global copy and commute
 * (in deterministic mode they apply in rank order instead). Under a grid a
 * tile is folded by the ranks of its scope, one per grid column (in column
 * order), each with a column's share; a replicated parameter by every row
 * alike, into that row's global copy. */
static int fold_all(tsr_replicas_t *r, tsr__fold_t *f) {
  tsr_outer_state_t *outer = tsr__homes_outer(r);
  tsr_task_opts_t o = tsr__layer_one_opts(r);
  o.mpi = true;
  float gamma = tsr__optim_lr(r->net->optim);
  bool commute = !r->sync.deterministic;
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    fold_param_t *fp = &f->p[k];
    for (int i = 0; i < tsr_tiles_mt(rp->p->w) && rc == 0; i++)
      for (int j = 0; j < rp->nt && rc == 0; j++) {
        const tsr__group_t *g = tsr__scope(r, rp, NULL, j);
        if (!tsr__group_has(g, r->m.rank)) continue; /* grid: another row's tile */
        float share = 1.0f / (float)g->n;
        for (int t = 0; t < g->n && rc == 0; t++) {
          int q = g->ranks[t];
          rc = outer ? tsr__outer_fold_tile(outer, k, fp->global, fp->snap[q], rp->w[q], i, j,
                                            share, gamma, commute, &o)
                     : tsr__tile_fold(&o, fp->global, fp->snap[q], rp->w[q], i, j, commute);
          if (rc == 0) rc = tsr__tile_copy(&o, rp->w[q], fp->snap[q], i, j);
        }
        uint64_t bytes = (uint64_t)tsr_tiles_tile_rows(rp->p->w, i) *
                         (uint64_t)tsr_tiles_tile_cols(rp->p->w, j) * sizeof(float);
        int n = r->m.rank == tile_home(i, j, fp) ? g->n - 1 : 1;
        r->st.bytes_sent += bytes * (uint64_t)n, r->st.bytes_received += bytes * (uint64_t)n;
        r->st.messages_sent += n, r->st.messages_received += n;
      }
  }
  r->st.averages++;
  return rc;
}

/* async-epoch: the global copy starts from the first rank of each tile's
 * scope (rank 0 without a grid, grid column 0 under one), and with an outer
 * optimizer each rank's fold start too. */
static int start_global(tsr_replicas_t *r, tsr__fold_t *f, const tsr_task_opts_t *o) {
  bool outer = tsr__homes_outer(r) != NULL;
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    fold_param_t *fp = &f->p[k];
    for (int i = 0; i < tsr_tiles_mt(rp->p->w) && rc == 0; i++)
      for (int j = 0; j < rp->nt && rc == 0; j++) {
        const tsr__group_t *g = tsr__scope(r, rp, NULL, j);
        if (!tsr__group_has(g, r->m.rank)) continue; /* grid: another row's tile */
        const tsr_tiles_t *first = rp->w[g->ranks[0]];
        rc = tsr__tile_copy(o, fp->global, first, i, j);
        for (int t = 0; outer && t < g->n && rc == 0; t++)
          rc = tsr__tile_copy(o, fp->snap[g->ranks[t]], first, i, j);
      }
  }
  return rc;
}

void tsr__fold_destroy(tsr_replicas_t *r, tsr__fold_t **out) {
  tsr__fold_t *f = *out;
  if (!f) return;
  for (int k = 0; f->p && k < f->nparams; k++) {
    fold_param_t *fp = &f->p[k];
    tsr__views_destroy(r, &fp->snap);
    tsr_tiles_destroy(&fp->global);
    free(fp->home);
  }
  free(f->p), free(f);
  *out = NULL;
}

int tsr__fold_create(tsr_replicas_t *r, tsr__fold_t **out) {
  int n = r->nparams;
  tsr__fold_t *f = calloc(1, sizeof *f);
  if (!(*out = f) || !(f->p = calloc((size_t)n + 1, sizeof *f->p))) return TSR_ENOMEM;
  f->nparams = n;
  tsr_chunk_shape_t *shapes = calloc((size_t)n + 1, sizeof *shapes);
  bool *spread = calloc((size_t)n + 1, sizeof *spread);
  int **homes = calloc((size_t)n + 1, sizeof *homes);
  int rc = shapes && spread && homes ? 0 : TSR_ENOMEM;
  for (int k = 0; rc == 0 && k < n; k++) {
    const tsr_tiles_t *w = r->params[k].p->w;
    shapes[k] =
        (tsr_chunk_shape_t){tsr_tiles_rows(w), tsr_tiles_cols(w), tsr_tiles_mb(w), tsr_tiles_nb(w)};
    spread[k] = r->params[k].spread;
  }
  if (rc == 0) rc = tsr__placement_tile_homes(shapes, spread, n, &r->m, homes);
  for (int k = 0; rc == 0 && k < n; k++)
    f->p[k] = (fold_param_t){.rp = &r->params[k], .home = homes[k]};
  free(shapes), free(spread), free(homes);
  /* The outer state, if any, laid out like the global copy (momentum only: the global copy is
   * the anchor). */
  tsr_outer_state_t *outer = tsr__homes_outer(r);
  for (int k = 0; k < n && rc == 0; k++) {
    fold_param_t *fp = &f->p[k];
    const tsr_tiles_t *w = fp->rp->p->w;
    rc = by_tile_home(&fp->global, fp);
    if (rc == 0 && !(fp->snap = calloc((size_t)r->m.size, sizeof *fp->snap))) rc = TSR_ENOMEM;
    for (int q = 0; q < r->m.size && rc == 0; q++)
      rc = by_tile_home(&fp->snap[q], fp);
    if (rc == 0 && outer)
      rc = tsr__outer_add(outer, fp->rp->index, tsr_tiles_rows(w), tsr_tiles_cols(w),
                          tsr_tiles_mb(w), tsr_tiles_nb(w), tile_home, fp, false);
  }
  tsr_task_opts_t o = tsr__layer_one_opts(r);
  o.mpi = true;
  return rc ? rc : start_global(r, f, &o);
}

/* Every replica starts from rank 0's weights (under a grid every rank
 * initialized its tiles from the same seed, so replicas start equal), and the
 * outer optimizer's anchors. */
int tsr__replicas_start_equal(tsr_replicas_t *r) {
  tsr_task_opts_t o = tsr__layer_one_opts(r);
  o.mpi = true;
  int rc = 0;
  for (int k = 0; r->m.grid_rows == 1 && k < r->nparams && rc == 0; k++)
    for (int q = 1; q < r->m.size && rc == 0; q++)
      rc = tsr__tiles_copy(&o, r->params[k].w[q], r->params[k].w[0]);
  return rc == 0 ? tsr__home_anchors(r) : rc;
}

/* Whether no rank took a sample since the last averaging (every rank takes
 * the same steps, so a step since then would have counted samples). */
static bool nothing_since_average(const tsr_replicas_t *r) {
  for (int q = 0; q < r->m.size; q++)
    if (r->samples[q] != 0) return false;
  return true;
}

int tsr__replicas_end_local(tsr_replicas_t *r, bool last) {
  int rc = 0;
  /* One model at the end, unless the last step averaged already (no samples since). */
  if (last && !r->batch && !nothing_since_average(r)) {
    rc = tsr__replicas_average_all(r);
    tsr__replicas_mark_final(r);
  }
  if (rc == 0 && !r->batch) rc = tsr__progress_wait_all();
  return rc;
}

void tsr__replicas_mark_final(tsr_replicas_t *r) {
  r->final_extra = true;
}

int tsr__replicas_average_all(tsr_replicas_t *r) {
  return average(r, NULL, NULL, tsr__homes_outer(r) != NULL);
}

int tsr__replicas_average_plain(tsr_replicas_t *r) {
  return average(r, NULL, NULL, false);
}

int tsr__replicas_fold(tsr_replicas_t *r, tsr__fold_t *f) {
  return fold_all(r, f);
}

int tsr__replicas_wait(tsr_replicas_t *r) {
  (void)r;
  return tsr__progress_wait_all();
}
