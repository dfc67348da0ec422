/* What a chunk's home does between the two phases of an average (home.h): the update, FedNova's
 * extrapolation and the outer step, the weights of the sum.
 *
 * An outer optimizer (optim/outer.h) steps each chunk's anchor on the chunk's home, between the
 * reduce-scatter and the all-gather, so ranks get the new anchor instead of the mean: no extra
 * message. --weighting steps (FedNova) weighs the reduce-scatter by samples over local steps and
 * extrapolates from the anchor on the home at the same point. */
#include "parallel/collective.h"
#include "parallel/home.h"
#include "tile/ops.h"
#include "try.h"

int tsr__home_update(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *local, int i, int j,
                     int I, int r0) {
  if (r->sq_total)
    TSR_TRY(tsr__tile_clip(local, rp->acc, I, j, r->sq_total, r->net->opts.clip_grad));
  return tsr__optim_update_tile(r->net->optim, rp->p->index, rp->p->w, NULL, i, j, r0, rp->acc, I,
                                j, local);
}

int tsr__home_step(tsr_replicas_t *r, rparam_t *rp, int gi, bool outer, bool fednova, bool at_home,
                   int I, int j, const tsr_tiles_t **result) {
  tsr_task_opts_t o = tsr__layer_one_opts(r), local = tsr__with_mpi(&o, false);
  *result = tsr__acc_of(rp, gi);
  if (fednova && at_home) {
    /* acc = x + lambda (x~ - x): FedNova's step from the anchor x; the outer optimizer (if any)
     * then takes it as the mean, and its anchor moves; else it becomes the anchor itself. */
    tsr_tiles_t *x = outer ? tsr__outer_anchor(r->outer, rp->index) : rp->anchor;
    TSR_TRY(tsr__tile_axpby(&local, (float)(1.0 - r->lambda), x, (float)r->lambda, rp->acc, I, j,
                            false));
    if (!outer) TSR_TRY(tsr__tile_copy(&local, rp->anchor, rp->acc, I, j));
  }
  if (!outer) return 0;
  if (at_home)
    TSR_TRY(tsr__outer_step_tile(r->outer, rp->index, I, j, *result, tsr__optim_lr(r->net->optim),
                                 &local));
  *result = tsr__outer_anchor(r->outer, rp->index);
  return 0;
}

/* The weights of scope gi's members: by the samples each took since the
 * scope last averaged, or uniform. */
static void set_average_weights(tsr_replicas_t *r, int gi) {
  const tsr__group_t *g = tsr__group_of(r, gi);
  const int64_t *n = gi < 0 ? r->samples : r->gsamples;
  int64_t total = 0;
  for (int t = 0; t < g->n; t++)
    total += n[g->ranks[t]];
  for (int t = 0; t < g->n; t++) {
    int q = g->ranks[t];
    r->weights[q] = (r->sync.by_samples || r->sync.by_steps) && total > 0
                        ? (double)n[q] / (double)total
                        : 1.0 / g->n;
    /* Grid: each column's Pr ranks took its samples; a chunk averages over one row. */
    if (gi < 0) r->weights[q] *= r->m.grid_rows;
  }
}

/* --weighting steps (FedNova; the formula is at tsr_sync_t.by_steps in tessera/dist.h):
 * weights v_q = (p_q / tau_q) / S over the ranks that took steps, and lambda = tau_eff S,
 * with which the home extrapolates from the anchor. Averages over all ranks only. Under a grid
 * each column's Pr ranks count its samples and steps, so p_q is the column's over Pr (S and
 * tau_eff are the columns'), and a chunk averages over one grid row: v_q times Pr. */
static void set_step_weights(tsr_replicas_t *r) {
  int64_t total = 0;
  for (int q = 0; q < r->m.size; q++)
    total += r->samples[q];
  double S = 0, tau_eff = 0;
  for (int q = 0; q < r->m.size && total > 0; q++)
    if (r->steps[q] > 0) {
      double p = (double)r->samples[q] / (double)total;
      S += p / (double)r->steps[q], tau_eff += p * (double)r->steps[q];
    }
  r->lambda = S > 0 ? tau_eff * S : 1.0;
  for (int q = 0; q < r->m.size && S > 0; q++) {
    double p = (double)r->samples[q] / (double)total;
    r->weights[q] = r->steps[q] > 0 ? p / (double)r->steps[q] / S * r->m.grid_rows : 0.0;
  }
}

void tsr__home_weights(tsr_replicas_t *r, int gi, bool fednova) {
  set_average_weights(r, gi);
  if (fednova) set_step_weights(r);
}

void tsr__home_clear(tsr_replicas_t *r, int gi) {
  /* hier under a grid: the group's columns in every grid row */
  int first = gi < 0 ? gi : gi / r->m.grid_rows * r->m.grid_rows,
      last = gi < 0 ? gi : first + r->m.grid_rows - 1;
  for (int h = first; h <= last; h++) {
    const tsr__group_t *g = tsr__group_of(r, h);
    for (int t = 0; t < g->n; t++) {
      int q = g->ranks[t];
      if (r->gsamples) r->gsamples[q] = 0;
      if (gi < 0) r->samples[q] = 0, r->steps[q] = 0;
    }
  }
}

int tsr__home_anchors(tsr_replicas_t *r) {
  tsr_task_opts_t o = tsr__layer_one_opts(r), local = tsr__with_mpi(&o, false);
  int rc = 0;
  for (int k = 0; (r->outer || r->sync.by_steps) && k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    tsr_tiles_t *x = r->outer ? tsr__outer_anchor(r->outer, k) : rp->anchor;
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
