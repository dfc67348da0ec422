/* Weight averages and async-epoch's fold (src/parallel, above buckets.h and home.h): what the
 * weight-averaging policies' hooks (sync_<name>.c, policy.h) call. An average makes the
 * replicas of a scope (every rank, or a hier group) their weighted mean, chunk by chunk through
 * the collective (with --sync-state the optimizer state too, and the layers' buffers), or the
 * outer optimizer's step towards it; async-epoch's fold has each rank fold its weights into a
 * global copy (whole tiles, homed by tile; under a grid in the tile's grid row) with a
 * commutative task and continue from its own fold's result. */
#ifndef TSR_PARALLEL_AVERAGE_H
#define TSR_PARALLEL_AVERAGE_H

#include <stdbool.h>

#include "parallel/replicas.h"

/* Every rank's replica becomes the weighted mean of all (with --sync-state the optimizer state
 * too), or the outer optimizer's step towards it when there is one. */
int tsr__replicas_average_all(tsr_replicas_t *r);
/* The same without the outer optimizer (async-epoch's final uniform average). */
int tsr__replicas_average_plain(tsr_replicas_t *r);
/* hier: the mean over this rank's group only (never an outer step). */
int tsr__replicas_average_group(tsr_replicas_t *r);
/* async-epoch: every rank folds itself into the global copy and continues from the result. */
int tsr__replicas_fold(tsr_replicas_t *r);
/* Local SGD's epoch end (every=K, post-local, hier): on the last epoch, one model at the end
 * unless the last step averaged already; then, unless gradients are being averaged, waits. */
int tsr__replicas_end_local(tsr_replicas_t *r, bool last);
/* The average just taken is the end's, one the schedule would not have taken there (a
 * checkpoint of it says so: a run resumed from it is not the uninterrupted one). */
void tsr__replicas_mark_final(tsr_replicas_t *r);
/* Waits for everything submitted (an epoch end's average is a point users see). */
int tsr__replicas_wait(tsr_replicas_t *r);
/* Every replica starts from rank 0's weights (under a grid every rank initialized its tiles
 * from the same seed, so replicas start equal); the async global copy from them too, and the
 * outer optimizer's anchors. */
int tsr__replicas_start_equal(tsr_replicas_t *r);

#endif
