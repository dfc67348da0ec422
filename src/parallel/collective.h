/* The collective of the averaging engine (src/parallel, above members.h and placement.h): the
 * reduce-scatter of one chunk onto its home and the all-gather of the result back, over every
 * rank, a grid row or a hier group, flat or with two levels through the nodes; the homes as
 * rank_of functions of the matrices that hold chunks; the replica views every rank keeps of a
 * matrix. Every rank submits only the tasks it takes part in (it runs them, or sends their
 * input) and counts its bytes and messages in r->st. */
#ifndef TSR_PARALLEL_COLLECTIVE_H
#define TSR_PARALLEL_COLLECTIVE_H

#include "parallel/replicas_impl.h"

/* Whom an average is over, besides every rank (NULL: under a grid each chunk's grid row, with
 * the replicas' accumulators): a hier group, this rank's (under a grid its row's ranks of the
 * group's columns), with its own accumulator of each parameter (acc[k], distributed by chunk
 * home in the group). */
typedef struct {
  const tsr__group_t *group;
  tsr_tiles_t *const *acc;
} tsr__scope_t;

/* rank_of functions (tessera/tiles.h) of the matrices of one parameter (ctx: its rparam_t, or
 * its tsr__group_home_t). Chunk (i, j)'s home: over all ranks; under a grid a position in its
 * scope, the chunk's grid row (tsr__placement_plan: this rank's row plans its own chunks, and
 * another row's chunk, never averaged here, goes to a rank of that row). */
int tsr__chunk_home(int i, int j, void *ctx);
/* Chunk (i, j)'s home in the group of a tsr__group_home_t (tsr__home_in). */
int tsr__group_chunk_home(int i, int j, void *ctx);
/* Two levels: chunk (i, j)'s local home in the node of a tsr__group_home_t (the rank of its
 * index there), and tile (i, j)'s (its chunks'). */
int tsr__node_chunk_home(int i, int j, void *ctx);
int tsr__node_tile_home(int i, int j, void *ctx);
/* The ranks that average chunks of column tile j of rp in scope sc: over every rank (sc NULL),
 * under a grid the grid row holding that column in every grid column (a replicated parameter:
 * this rank's row); a group's members, or NULL under a grid for another row's column. */
const tsr__group_t *tsr__scope(const tsr_replicas_t *r, const rparam_t *rp, const tsr__scope_t *sc,
                               int j);
/* Chunk (I, j)'s home among the ranks of g: its home over all ranks, folded onto g's members
 * (over all ranks, its home). */
int tsr__home_in(const tsr__group_t *g, const rparam_t *rp, int I, int j);
/* Two levels: chunk (I, j)'s local home in node `node`. */
int tsr__local_home(const rparam_t *rp, int node, int I, int j);
/* The accumulator of rp in scope sc: rp->acc over every rank, else the group's. */
tsr_tiles_t *tsr__acc(const rparam_t *rp, const tsr__scope_t *sc);
/* The bytes of chunk (I, j). */
uint64_t tsr__chunk_bytes(const rparam_t *rp, int I, int j);

/* What an average gets back: set 0 the weights, set s > 0 optimizer state s - 1; and every
 * rank's views of it. */
tsr_tiles_t *tsr__set_of(const tsr_replicas_t *r, rparam_t *rp, int s);
tsr_tiles_t **tsr__set_views(rparam_t *rp, int s);

/* [size] replica views of base, one per rank; NULL on failure. */
tsr_tiles_t **tsr__views_of(tsr_replicas_t *r, tsr_tiles_t *base);
void tsr__views_destroy(tsr_replicas_t *r, tsr_tiles_t ***v);

/* On home, dst (i, j) = the sum over t of w_t xs[ranks[t]] (i, j) (w NULL: the ranks' weights),
 * in the ranks' order in deterministic mode (acc = w_0 x_0, then acc = w_t x_t + acc), else as
 * the copies arrive (commutative adds); home is one of the n ranks. This rank submits only what
 * it takes part in, and counts a message of `bytes` from each other rank to the home. */
int tsr__sum_on_home(const tsr_task_opts_t *o, tsr_replicas_t *r, int home, int n, const int *ranks,
                     const float *w, tsr_tiles_t **xs, tsr_tiles_t *dst, int i, int j,
                     uint64_t bytes);
/* The other way: src (i, j), on home, to ys[q] (i, j) of every other of the n ranks, one
 * message of `bytes` each. */
int tsr__copy_from_home(const tsr_task_opts_t *o, tsr_replicas_t *r, int home, int n,
                        const int *ranks, const tsr_tiles_t *src, tsr_tiles_t **ys, int i, int j,
                        uint64_t bytes);
/* Two levels, inside this rank's node (of several ranks): tile (i, j)'s weighted sum over the
 * node's ranks (xs: every rank's views) on the tile's local home lh, ntile[node] (i, j); one
 * message per rank. */
int tsr__node_sum_tile(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, tsr_tiles_t **xs,
                       int i, int j, int lh);
/* Two levels, inside this rank's node (of several ranks): tile (i, j) of the local home lh's y
 * sent whole to the node's other ranks' y; one message per rank. */
int tsr__node_spread_tile(const tsr_task_opts_t *o, tsr_replicas_t *r, tsr_tiles_t **y, int i,
                          int j, int lh);

/* Reduce-scatter of one chunk over the ranks q of scope sc (this rank is one): the home's
 * acc (I, j) = sum of weights[q] x_q, where x_q is rank q's band of X (x, this rank's own, and
 * xs, every rank's views); in rank order in deterministic mode, else as the copies arrive
 * (commutative adds). A band smaller than its tile is first copied into the stage matrix, so
 * that only the band travels. Over every rank with two levels, through the nodes. */
int tsr__reduce_chunk(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp,
                      const tsr__scope_t *sc, tsr_tiles_t *x, tsr_tiles_t **xs, int I, int j);
/* All-gather of one chunk over scope sc: rows r0 .. of tile (i, j) of every member's y_q =
 * tile (si, sj) of src, which lives on the chunk's home; the home's own y too when with_home
 * (the result of an average), else it has it already (batch). */
int tsr__gather_chunk(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp,
                      const tsr__scope_t *sc, const tsr_tiles_t *src, int si, int sj,
                      tsr_tiles_t **y, bool with_home, int I, int j);

#endif
