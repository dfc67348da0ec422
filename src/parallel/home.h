/* What a chunk's home does between the two phases of an average (src/parallel, above
 * collective.h), once the reduce-scatter has summed the chunk and before the all-gather sends
 * the result back: --sync batch's update of the chunk with the home's optimizer state (clipped
 * first under --clip-grad), FedNova's extrapolation from the anchor (--weighting steps) and the
 * outer optimizer's step; and the weights of the sum, by samples or by FedNova's local steps. */
#ifndef TSR_PARALLEL_HOME_H
#define TSR_PARALLEL_HOME_H

#include "parallel/replicas_impl.h"

/* batch: on chunk (I, j)'s home, the optimizer (the net's own, on its own weights and state,
 * rows r0 .. of tile (i, j)) from the averaged gradient, clipped first under --clip-grad. */
int tsr__home_update(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *local, int i, int j,
                     int I, int r0);
/* Once acc (scope gi's) holds chunk (I, j)'s weighted sum of the weights, on its home
 * (at_home): FedNova's step from the anchor, then the outer optimizer's; *result: what every
 * member gets back (acc, or the outer anchor), on every rank. */
int tsr__home_step(tsr_replicas_t *r, rparam_t *rp, int gi, bool outer, bool fednova, bool at_home,
                   int I, int j, const tsr_tiles_t **result);
/* The weights of scope gi's members in the next average (r->weights): by the samples each took
 * since the scope last averaged, or uniform; with fednova (--weighting steps, over every rank)
 * FedNova's, and its extrapolation. */
void tsr__home_weights(tsr_replicas_t *r, int gi, bool fednova);
/* Scope gi averaged: its samples (and over every rank the local steps) counted from zero. */
void tsr__home_clear(tsr_replicas_t *r, int gi);
/* The outer optimizer's anchors (or FedNova's) become the weights (equal on every rank now),
 * each chunk at its home. */
int tsr__home_anchors(tsr_replicas_t *r);

#endif
