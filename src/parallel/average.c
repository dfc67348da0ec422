/* Weight averages and async-epoch's fold (average.h).
 *
 * Each rank submits only the tasks it takes part in (it runs them, or sends their input), so
 * submission costs O(P) per chunk on the home and O(1) elsewhere. Deterministic mode sums in
 * rank order: acc = w_0 x_0, then acc = w_q x_q + acc for q = 1 .. P-1 (tsr_sync_t.deterministic,
 * tested bit for bit). */
#include "parallel/average.h"
#include "parallel/buckets.h"
#include "parallel/collective.h"
#include "parallel/home.h"
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
  TSR_TRY(tsr__home_step(r, bp, -1, st->outer, st->fednova, true, b->I[t], b->j[t], &result));
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

/* The replicas of scope gi's members (and with average_state the optimizer
 * state) become their weighted mean; with outer, the weights' mean is the
 * outer optimizer's target instead, and every member restarts from its new
 * anchor. With buckets (over every rank), the weights and state bucket by bucket and the
 * layers' buffers chunk by chunk. */
static int average(tsr_replicas_t *r, int gi, bool outer) {
  const tsr__group_t *g = tsr__group_of(r, gi);
  tsr_task_opts_t o = tsr__layer_one_opts(r);
  bool fednova = r->sync.by_steps && gi < 0, bucketed = gi < 0 && r->nbuckets > 0;
  tsr__home_weights(r, gi, fednova);
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
          rc = tsr__reduce_chunk(&o, r, rp, gi, own[s], views[s], I, j);
          const tsr_tiles_t *result = tsr__acc_of(rp, gi);
          /* The home in the chunk's scope (under a grid, in its grid row): where acc is. */
          bool at_home = r->m.rank == (gi < 0 ? tsr__chunk_home(I, j, rp)
                                              : tsr__home_in(tsr__scope(r, rp, gi, j), rp, I, j));
          if (rc == 0 && s == 0)
            rc = tsr__home_step(r, rp, gi, outer, fednova, at_home, I, j, &result);
          if (rc == 0) rc = tsr__gather_chunk(&o, r, rp, gi, result, I, j, views[s], true, I, j);
        }
  }
  tsr__home_clear(r, gi);
  if (gi < 0)
    r->agreed = rc == 0, r->st.averages++;
  else if (g->n > 1)
    r->st.group_averages++;
  return rc;
}

/* async-epoch: each rank's fold, then its copy of the result, per tile. The
 * folds of one tile are adjacent accesses to the global copy and commute
 * (in deterministic mode they apply in rank order instead). Under a grid a
 * tile is folded by the ranks of its scope, one per grid column (in column
 * order), each with a column's share; a replicated parameter by every row
 * alike, into that row's global copy. */
static int fold_all(tsr_replicas_t *r) {
  tsr_task_opts_t o = tsr__layer_one_opts(r);
  o.mpi = true;
  float gamma = tsr__optim_lr(r->net->optim);
  bool commute = !r->sync.deterministic;
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    for (int i = 0; i < tsr_tiles_mt(rp->p->w) && rc == 0; i++)
      for (int j = 0; j < rp->nt && rc == 0; j++) {
        const tsr__group_t *g = tsr__scope(r, rp, -1, j);
        if (!tsr__group_has(g, r->m.rank)) continue; /* grid: another row's tile */
        float share = 1.0f / (float)g->n;
        for (int t = 0; t < g->n && rc == 0; t++) {
          int q = g->ranks[t];
          rc = r->outer ? tsr__outer_fold_tile(r->outer, k, rp->global, rp->snap[q], rp->w[q], i, j,
                                               share, gamma, commute, &o)
                        : tsr__tile_fold(&o, rp->global, rp->snap[q], rp->w[q], i, j, commute);
          if (rc == 0) rc = tsr__tile_copy(&o, rp->w[q], rp->snap[q], i, j);
        }
        uint64_t bytes = (uint64_t)tsr_tiles_tile_rows(rp->p->w, i) *
                         (uint64_t)tsr_tiles_tile_cols(rp->p->w, j) * sizeof(float);
        int n = r->m.rank == tsr__tile_home(i, j, rp) ? g->n - 1 : 1;
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
static int start_global(tsr_replicas_t *r, const tsr_task_opts_t *o) {
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    for (int i = 0; rp->global && i < tsr_tiles_mt(rp->p->w) && rc == 0; i++)
      for (int j = 0; j < rp->nt && rc == 0; j++) {
        const tsr__group_t *g = tsr__scope(r, rp, -1, j);
        if (!tsr__group_has(g, r->m.rank)) continue; /* grid: another row's tile */
        const tsr_tiles_t *first = rp->w[g->ranks[0]];
        rc = tsr__tile_copy(o, rp->global, first, i, j);
        for (int t = 0; r->outer && t < g->n && rc == 0; t++)
          rc = tsr__tile_copy(o, rp->snap[g->ranks[t]], first, i, j);
      }
  }
  return rc;
}

/* Every replica starts from rank 0's weights (under a grid every rank
 * initialized its tiles from the same seed, so replicas start equal); the
 * async global copy from them too (start_global), and the outer optimizer's
 * anchors. */
int tsr__replicas_start_equal(tsr_replicas_t *r) {
  tsr_task_opts_t o = tsr__layer_one_opts(r);
  o.mpi = true;
  int rc = 0;
  for (int k = 0; r->m.grid_rows == 1 && k < r->nparams && rc == 0; k++)
    for (int q = 1; q < r->m.size && rc == 0; q++)
      rc = tsr__tiles_copy(&o, r->params[k].w[q], r->params[k].w[0]);
  if (rc == 0) rc = start_global(r, &o);
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
  return average(r, -1, r->outer != NULL);
}

int tsr__replicas_average_plain(tsr_replicas_t *r) {
  return average(r, -1, false);
}

int tsr__replicas_average_group(tsr_replicas_t *r) {
  return average(r, r->my_group, false);
}

int tsr__replicas_fold(tsr_replicas_t *r) {
  return fold_all(r);
}

int tsr__replicas_wait(tsr_replicas_t *r) {
  (void)r;
  return tsr__progress_wait_all();
}
