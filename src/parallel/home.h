/* What a chunk's home does between the two phases of an average (src/parallel, above
 * collective.h), once the reduce-scatter has summed the chunk and before the all-gather sends
 * the result back: the gradient's update with the home's optimizer state (clipped first under
 * --clip-grad), FedNova's extrapolation from the anchor (--weighting steps) and the outer
 * optimizer's step; the weights of the sum, by samples or by FedNova's local steps; and what
 * the homes keep from one average to the next (the outer state, FedNova's steps and anchors). */
#ifndef TSR_PARALLEL_HOME_H
#define TSR_PARALLEL_HOME_H

#include "parallel/replicas_impl.h"

/* What the homes keep (r->homes): the outer optimizer's state (tsr_sync_t.outer), laid out by
 * chunk home unless the policy folds (then the policy lays it out, tsr__homes_outer), and with
 * --weighting steps each rank's local steps and, without an outer optimizer, FedNova's anchors.
 * Once the chunks are placed; every rank in the same order. 0 or a TSR_E* code. */
int tsr__homes_create(tsr_replicas_t *r);
/* Before the chunks' homes are freed (the outer state's rank_of reads them). */
void tsr__homes_destroy(tsr_replicas_t *r);
/* The outer optimizer's state, or NULL: none. */
tsr_outer_state_t *tsr__homes_outer(const tsr_replicas_t *r);
/* The weights every rank restarted from at the last average where they are kept (the outer
 * optimizer's anchor of the replicas' parameter index, or FedNova's), else NULL. */
tsr_tiles_t *tsr__homes_anchor(const tsr_replicas_t *r, int index);
/* [size] each rank's local steps since the last average of every rank (FedNova's count). */
int64_t *tsr__homes_steps(const tsr_replicas_t *r);
/* The samples every rank takes in the coming step: a step with samples is a local step. */
void tsr__homes_count(tsr_replicas_t *r, const int *samples_per_rank);

/* On chunk (I, j)'s home, the optimizer (the net's own, on its own weights and state, rows r0
 * .. of tile (i, j)) from the averaged gradient in acc, clipped first by norm (the 1 x 1 sum of
 * squares of the whole gradient; NULL: no clipping). */
int tsr__home_update(tsr_replicas_t *r, rparam_t *rp, const tsr_tiles_t *norm,
                     const tsr_task_opts_t *local, int i, int j, int I, int r0);
/* Once acc holds chunk (I, j)'s weighted sum of the weights, on its home (at_home): FedNova's
 * step from the anchor, then the outer optimizer's (both over every rank only); *result: what
 * every member gets back (acc, or the outer anchor), on every rank. */
int tsr__home_step(tsr_replicas_t *r, rparam_t *rp, tsr_tiles_t *acc, bool outer, bool fednova,
                   bool at_home, int I, int j, const tsr_tiles_t **result);
/* The weights of the next average (r->weights) over g's members (NULL: every rank): by the
 * samples each took since they last averaged (samples; NULL: r->samples), or uniform; with
 * fednova (--weighting steps, every rank) FedNova's, and its extrapolation. */
void tsr__home_weights(tsr_replicas_t *r, const tsr__group_t *g, const int64_t *samples,
                       bool fednova);
/* Every rank averaged: the samples and local steps counted from zero. */
void tsr__home_clear(tsr_replicas_t *r);
/* The outer optimizer's anchors (or FedNova's) become the weights (equal on every rank now),
 * each chunk at its home. */
int tsr__home_anchors(tsr_replicas_t *r);

#endif
