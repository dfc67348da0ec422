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
/* Local SGD's epoch end (every=K, post-local, hier): on the last epoch, one model at the end
 * unless the last step averaged already; then, unless gradients are being averaged, waits. */
int tsr__replicas_end_local(tsr_replicas_t *r, bool last);
/* The average just taken is the end's, one the schedule would not have taken there (a
 * checkpoint of it says so: a run resumed from it is not the uninterrupted one). */
void tsr__replicas_mark_final(tsr_replicas_t *r);
/* Waits for everything submitted (an epoch end's average is a point users see). */
int tsr__replicas_wait(tsr_replicas_t *r);
/* Every replica starts from rank 0's weights (under a grid every rank initialized its tiles
 * from the same seed, so replicas start equal), and the outer optimizer's anchors. */
int tsr__replicas_start_equal(tsr_replicas_t *r);

/* hier's groups (its state, sync_hier.c): groups of group_size consecutive ranks, or each
 * node's (0; a collective call), under a grid of whole grid columns (tsr__members_groups), and
 * every group's accumulator of every parameter (every rank creates them all, in the same
 * order). 0 or a TSR_E* code; *g is destroyed by tsr__groups_destroy either way. */
typedef struct tsr__groups tsr__groups_t;
int tsr__groups_create(tsr_replicas_t *r, int group_size, tsr__groups_t **g);
void tsr__groups_destroy(tsr_replicas_t *r, tsr__groups_t **g);
/* The mean over this rank's group only (never an outer step), each member weighed by its
 * samples since the last average of all ranks (by samples, as that average weighs them). */
int tsr__replicas_average_group(tsr_replicas_t *r, tsr__groups_t *g);

/* async-epoch's global copy (its state, sync_async_epoch.c): whole tiles homed by
 * tsr__placement_tile_homes, the global copy and each rank's fold, the outer optimizer's state
 * laid out like them; started from the first rank of each tile's scope. 0 or a TSR_E* code; *f
 * is destroyed by tsr__fold_destroy either way (after the outer state, whose rank_of reads
 * its homes). */
typedef struct tsr__fold tsr__fold_t;
int tsr__fold_create(tsr_replicas_t *r, tsr__fold_t **f);
void tsr__fold_destroy(tsr_replicas_t *r, tsr__fold_t **f);
/* Every rank folds itself into the global copy and continues from the result: each rank's
 * fold, then its copy of the result, per tile. The folds of one tile are adjacent accesses to
 * the global copy and commute (in deterministic mode they apply in rank order instead). Under
 * a grid a tile is folded by the ranks of its scope, one per grid column (in column order),
 * each with a column's share; a replicated parameter by every row alike, into that row's
 * global copy. */
int tsr__replicas_fold(tsr_replicas_t *r, tsr__fold_t *f);

#endif
