/* What a chunk's home does between the two phases of an average (home.h): the update, FedNova's
 * extrapolation and the outer step, the weights of the sum.
 *
 * An outer optimizer (optim/outer.h) steps each chunk's anchor on the chunk's home, between the
 * reduce-scatter and the all-gather, so ranks get the new anchor instead of the mean: no extra
 * message. --weighting steps (FedNova) weighs the reduce-scatter by samples over local steps and
 * extrapolates from the anchor on the home at the same point. */
#include <stdlib.h>
#include <string.h>

#include "parallel/collective.h"
#include "parallel/home.h"
#include "tile/ops.h"
#include "try.h"

struct tsr__homes {
  tsr_outer_state_t *outer; /* anchor and momentum of an outer optimizer; NULL: none */
  int64_t *steps;           /* [size] steps with samples since the last average of every rank */
  double lambda;            /* --weighting steps: the extrapolation of the next average */
  tsr_tiles_t **anchor;     /* --weighting steps without an outer optimizer: [nparams] like acc,
                               the weights every rank last restarted from (the outer state keeps
                               its own) */
};

int tsr__homes_create(tsr_replicas_t *r) {
  tsr__homes_t *h = calloc(1, sizeof *h);
  if (!h) return TSR_ENOMEM;
  r->homes = h;
  if (!(h->steps = calloc((size_t)r->m.size, sizeof *h->steps))) return TSR_ENOMEM;
  if (r->sync.outer.kind != TSR_OUTER_NONE)
    TSR_TRY(tsr__outer_create(&h->outer, &r->sync.outer, r->nparams));
  bool anchors = r->sync.by_steps && !h->outer;
  if (anchors && !(h->anchor = calloc((size_t)r->nparams + 1, sizeof *h->anchor)))
    return TSR_ENOMEM;
  for (int k = 0; k < r->nparams; k++) {
    rparam_t *rp = &r->params[k];
    const tsr_tiles_t *w = rp->p->w;
    /* The outer state laid out like the averages: anchor and momentum by chunk home. */
    if (h->outer && !r->policy->folds)
      TSR_TRY(tsr__outer_add(h->outer, rp->index, tsr_tiles_rows(w), tsr_tiles_cols(w), rp->cr,
                             tsr_tiles_nb(w), tsr__chunk_home, rp, true));
    if (anchors)
      TSR_TRY(tsr_tiles_create_distributed(&h->anchor[k], tsr_tiles_rows(w), tsr_tiles_cols(w),
                                           rp->cr, tsr_tiles_nb(w), tsr__chunk_home, rp));
  }
  return 0;
}

void tsr__homes_destroy(tsr_replicas_t *r) {
  tsr__homes_t *h = r->homes;
  if (!h) return;
  tsr__outer_destroy(&h->outer);
  for (int k = 0; h->anchor && k < r->nparams; k++)
    tsr_tiles_destroy(&h->anchor[k]);
  free(h->anchor), free(h->steps), free(h);
  r->homes = NULL;
}

tsr_outer_state_t *tsr__homes_outer(const tsr_replicas_t *r) {
  return r->homes ? r->homes->outer : NULL;
}

tsr_tiles_t *tsr__homes_anchor(const tsr_replicas_t *r, int index) {
  tsr__homes_t *h = r->homes;
  if (!h) return NULL;
  return h->outer ? tsr__outer_anchor(h->outer, index) : h->anchor ? h->anchor[index] : NULL;
}

int64_t *tsr__homes_steps(const tsr_replicas_t *r) {
  return r->homes->steps;
}

void tsr__homes_count(tsr_replicas_t *r, const int *samples_per_rank) {
  for (int q = 0; q < r->m.size; q++)
    r->homes->steps[q] += samples_per_rank[q] > 0;
}

int tsr__home_update(tsr_replicas_t *r, rparam_t *rp, const tsr_tiles_t *norm,
                     const tsr_task_opts_t *local, int i, int j, int I, int r0) {
  if (norm) TSR_TRY(tsr__tile_clip(local, rp->acc, I, j, norm, r->net->opts.clip_grad));
  return tsr__optim_update_tile(r->net->optim, rp->p->index, rp->p->w, NULL, i, j, r0, rp->acc, I,
                                j, local);
}

int tsr__home_step(tsr_replicas_t *r, rparam_t *rp, tsr_tiles_t *acc, bool outer, bool fednova,
                   bool at_home, int I, int j, const tsr_tiles_t **result) {
  tsr_task_opts_t o = tsr__layer_one_opts(r), local = tsr__with_mpi(&o, false);
  tsr__homes_t *h = r->homes;
  *result = acc;
  if (fednova && at_home) {
    /* acc = x + lambda (x~ - x): FedNova's step from the anchor x; the outer optimizer (if any)
     * then takes it as the mean, and its anchor moves; else it becomes the anchor itself. */
    tsr_tiles_t *x = outer ? tsr__outer_anchor(h->outer, rp->index) : h->anchor[rp->index];
    TSR_TRY(tsr__tile_axpby(&local, (float)(1.0 - h->lambda), x, (float)h->lambda, rp->acc, I, j,
                            false));
    if (!outer) TSR_TRY(tsr__tile_copy(&local, h->anchor[rp->index], rp->acc, I, j));
  }
  if (!outer) return 0;
  if (at_home)
    TSR_TRY(tsr__outer_step_tile(h->outer, rp->index, I, j, *result, tsr__optim_lr(r->net->optim),
                                 &local));
  *result = tsr__outer_anchor(h->outer, rp->index);
  return 0;
}

/* The weights of g's members (NULL: every rank): by the samples each took since they last
 * averaged (n), or uniform. */
static void set_average_weights(tsr_replicas_t *r, const tsr__group_t *g, const int64_t *n) {
  bool all = !g;
  if (all) g = &r->m.all;
  int64_t total = 0;
  for (int t = 0; t < g->n; t++)
    total += n[g->ranks[t]];
  for (int t = 0; t < g->n; t++) {
    int q = g->ranks[t];
    r->weights[q] = (r->sync.by_samples || r->sync.by_steps) && total > 0
                        ? (double)n[q] / (double)total
                        : 1.0 / g->n;
    /* Grid: each column's Pr ranks took its samples; a chunk averages over one row. */
    if (all) r->weights[q] *= r->m.grid_rows;
  }
}

/* --weighting steps (FedNova; the formula is at tsr_sync_t.by_steps in tessera/dist.h):
 * weights v_q = (p_q / tau_q) / S over the ranks that took steps, and lambda = tau_eff S,
 * with which the home extrapolates from the anchor. Averages over all ranks only. Under a grid
 * each column's Pr ranks count its samples and steps, so p_q is the column's over Pr (S and
 * tau_eff are the columns'), and a chunk averages over one grid row: v_q times Pr. */
static void set_step_weights(tsr_replicas_t *r) {
  tsr__homes_t *h = r->homes;
  int64_t total = 0;
  for (int q = 0; q < r->m.size; q++)
    total += r->samples[q];
  double S = 0, tau_eff = 0;
  for (int q = 0; q < r->m.size && total > 0; q++)
    if (h->steps[q] > 0) {
      double p = (double)r->samples[q] / (double)total;
      S += p / (double)h->steps[q], tau_eff += p * (double)h->steps[q];
    }
  h->lambda = S > 0 ? tau_eff * S : 1.0;
  for (int q = 0; q < r->m.size && S > 0; q++) {
    double p = (double)r->samples[q] / (double)total;
    r->weights[q] = h->steps[q] > 0 ? p / (double)h->steps[q] / S * r->m.grid_rows : 0.0;
  }
}

void tsr__home_weights(tsr_replicas_t *r, const tsr__group_t *g, const int64_t *samples,
                       bool fednova) {
  set_average_weights(r, g, samples ? samples : r->samples);
  if (fednova) set_step_weights(r);
}

void tsr__home_clear(tsr_replicas_t *r) {
  for (int q = 0; q < r->m.size; q++)
    r->samples[q] = 0, r->homes->steps[q] = 0;
}

int tsr__home_anchors(tsr_replicas_t *r) {
  tsr_task_opts_t o = tsr__layer_one_opts(r), local = tsr__with_mpi(&o, false);
  tsr__homes_t *h = r->homes;
  int rc = 0;
  for (int k = 0; (h->outer || h->anchor) && k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    tsr_tiles_t *x = h->outer ? tsr__outer_anchor(h->outer, k) : h->anchor[k];
    for (int I = 0; x && I < rp->cmt && rc == 0; I++)
      for (int j = 0; j < rp->nt && rc == 0; j++) {
        int i, r0;
        tsr__chunk_tile(rp, I, &i, &r0);
        if (r->m.rank == tsr__chunk_home(I, j, rp))
          rc = tsr__tile_band_get(&local, x, I, j, rp->p->w, i, j, r0);
      }
  }
  return rc;
}
