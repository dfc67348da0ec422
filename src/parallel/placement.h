/* Where each chunk and bucket of the averages lives (src/parallel, above members.h): from the
 * parameters' shapes and who meets, the chunks each grid row cuts its slice of the parameters
 * into, their homes, their buckets (--bucket-mb) and async-epoch's homes of whole tiles, by the
 * rules of chunks.h. The engine lays its matrices out from it and the planner (src/plan) counts
 * its bytes from the same calls, so measured bytes equal planned bytes by construction. No
 * StarPU, no tiles: shapes only. */
#ifndef TSR_PARALLEL_PLACEMENT_H
#define TSR_PARALLEL_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "parallel/chunks.h"
#include "parallel/members.h"

/* Why averages under sync cannot pack chunks into buckets (--bucket-mb): a sentence, or NULL
 * where they can. tsr_run_check refuses --bucket-mb then. */
const char *tsr__placement_no_buckets(const tsr_sync_t *sync);

/* --bucket-mb's target in bytes (0: no buckets). */
uint64_t tsr__placement_bucket_bytes(float bucket_mb);

/* One row's chunks: n parameters of the row's slice (shapes, every one with cols > 0) over
 * `ranks` ranks (weight: as tsr__chunks_plan's), flat, or with two_level over the nodes nodes
 * ([nnodes], each holding at most per_node ranks; a node's ranks divided by stride are the
 * ranks' positions among the `ranks`: Pr under a grid, else 1). Fills row[n] with homes as
 * positions (two levels: position of rank `local` of node `home`), and with bucket_bytes > 0
 * the buckets bk (homes as positions) and with two levels the node buckets tb (tsr__chunks_
 * functions' rules). Returns 0 or TSR_ENOMEM; on failure nothing is left allocated. */
int tsr__placement_row(const tsr_chunk_shape_t *shapes, int n, int ranks, const double *weight,
                       bool two_level, const tsr__group_t *nodes, int nnodes, int per_node,
                       int stride, uint64_t bucket_bytes, tsr_chunking_t *row, tsr_buckets_t *bk,
                       tsr_buckets_t *tb);

/* The engine's placement of n parameters (shapes, whole; spread[k]: under a grid a spread
 * layer's matrix, its tile column j held by grid row j mod Pr (src/grid.h), else every rank
 * holds it whole) for this rank (m, whose levels are chosen): each grid row (every rank, one row,
 * without a grid) plans its own chunks from its own slice over its own ranks (tsr__placement_row,
 * weighted by weight without a grid), so that every row's ranks home its chunks evenly. This
 * rank keeps its row's chunking of each parameter, spread back over the parameter's tile
 * columns into ch[n] (tsr__chunks_free; homes as positions in the row, a column: rank c Pr + p
 * is position c of row p; another row's columns take their neighbours' chunking, in no bucket),
 * and its row's buckets bk and node buckets tb with homes as ranks. staged[k]: some row cuts
 * parameter k in bands (k > 1); whole[k]: some row moves its gradient's whole tiles (k 1, or
 * two levels). Every rank plans every row, so that every rank can create the descriptors any
 * row needs, in the same order (their MPI tags). Returns 0 or TSR_ENOMEM. */
int tsr__placement_plan(const tsr_chunk_shape_t *shapes, const bool *spread, int n,
                        const tsr__members_t *m, const double *weight, uint64_t bucket_bytes,
                        tsr_chunking_t *ch, tsr_buckets_t *bk, tsr_buckets_t *tb, bool *staged,
                        bool *whole);

/* async-epoch's whole tiles: tile (i, j) of parameter k homed on column home[k][i * nt + j] of
 * its grid row (rank c Pr + p is column c, row p; without a grid the rank), in parameter and
 * tile order to the lightest so far (a spread parameter's tile on its own row, a replicated
 * parameter's on the same column of every row, counted on each). home[k] ([mt * nt], malloc'd,
 * the caller's to free). Returns 0 or TSR_ENOMEM. */
int tsr__placement_tile_homes(const tsr_chunk_shape_t *shapes, const bool *spread, int n,
                              const tsr__members_t *m, int **home);

#endif
