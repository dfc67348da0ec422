/* Outer optimizers of weight averaging (tessera/dist.h, tsr_outer_t). The
 * state object owns, per parameter, the anchor x (the weights every replica
 * last restarted from) and the momentum u, as distributed matrices in the
 * layout the caller gives: the synchronization code lays them out like its
 * averages (by chunk home), so each rank keeps only the chunks it homes and
 * steps them where the mean arrives, as --sync batch shards the optimizer
 * state. */
#ifndef TSR_OPTIM_OUTER_H
#define TSR_OPTIM_OUTER_H

#include <stdbool.h>

#include "runtime/task_opts.h"
#include "tessera/dist.h"
#include "tessera/tiles.h"

typedef struct tsr_outer_state tsr_outer_state_t;

/* The state of nparams parameters with hyper-parameters hp (copied); none created yet. */
int tsr__outer_create(tsr_outer_state_t **o, const tsr_outer_t *hp, int nparams);
void tsr__outer_destroy(tsr_outer_state_t **o);
const tsr_outer_t *tsr__outer_hyper(const tsr_outer_state_t *o);

/* Parameter k's state: u, zero, and with anchor x, (m, n) in tiles of (mb,
 * nb) with tile (i, j) on rank rank_of(i, j, ctx) (ctx must outlive o). */
int tsr__outer_add(tsr_outer_state_t *o, int k, int64_t m, int64_t n, int mb, int nb,
                   tsr_rank_of_fn rank_of, void *ctx, bool anchor);
tsr_tiles_t *tsr__outer_anchor(const tsr_outer_state_t *o, int k);
tsr_tiles_t *tsr__outer_momentum(const tsr_outer_state_t *o, int k);

/* Submits the outer step of tile (i, j) of parameter k's anchor from tile
 * (i, j) of mean (tiled like it), at base rate gamma (the inner optimizer's
 * rate now; SlowMo divides by it). Runs on the tile's rank. */
int tsr__outer_step_tile(const tsr_outer_state_t *o, int k, int i, int j, const tsr_tiles_t *mean,
                         float gamma, const tsr_task_opts_t *to);
/* async-epoch: the fold of one rank as an outer step on tile (i, j) of
 * global, with pseudo-gradient scale (snap - w), then snap = global;
 * global, snap and w tiled like parameter k's momentum. */
int tsr__outer_fold_tile(const tsr_outer_state_t *o, int k, tsr_tiles_t *global, tsr_tiles_t *snap,
                         const tsr_tiles_t *w, int i, int j, float scale, float gamma, bool commute,
                         const tsr_task_opts_t *to);

#endif
