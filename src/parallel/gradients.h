/* Gradient averaging (src/parallel, above buckets.h and home.h): under --sync batch (and
 * post-local's first epochs) the replicas take over the net's gradient hook, and every
 * parameter's gradient is averaged chunk by chunk as the backward pass hands it over, the
 * optimizer updating each chunk once, on its home, with the home's state (sharded, ZeRO-1
 * style), and the updated band is what every rank gets back: the mathematics of one process
 * with the global batch. */
#ifndef TSR_PARALLEL_GRADIENTS_H
#define TSR_PARALLEL_GRADIENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "parallel/replicas.h"

/* Gradients averaged from now on: the net's gradient hook (with --clip-grad its views first).
 * 0 or TSR_ENOMEM. */
int tsr__gradients_start(tsr_replicas_t *r);
/* The net's own hook back (nothing if not averaging gradients). */
void tsr__gradients_stop(tsr_replicas_t *r);
/* Averaging gradients: copies each chunk's optimizer state from its home to every rank, so
 * that each rank holds the whole state (sharded during training), e.g. for a checkpoint; waits
 * for it. Otherwise nothing to do. */
int tsr__replicas_share_state(tsr_replicas_t *r);

/* For the policies' hooks. Whether gradients are averaged every step (batch, post-local's first
 * epochs) now. */
bool tsr__replicas_averaging_gradients(const tsr_replicas_t *r);
/* From gradient averaging to local SGD (post-local), nothing if local already: every rank gets
 * the whole optimizer state (share; false where every rank holds its own already, as a
 * checkpoint gives it back) and updates its own weights again. */
int tsr__replicas_go_local(tsr_replicas_t *r, bool share);

#endif
