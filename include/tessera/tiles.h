/* Tiled matrices: an M x N float32 matrix cut into mb x nb tiles, each tile a
 * StarPU data handle. Edge tiles are smaller, so no size needs to be a
 * multiple of the tile size. The descriptor is opaque: layers see shapes and
 * tilings, never StarPU types.
 *
 * A matrix is either local (every tile on this process: a network's
 * parameters and activations) or distributed over MPI ranks: tile (i, j)
 * lives on rank rank_of(i, j), which alone allocates it; another rank holds
 * a handle without memory, registered the first time a task or transfer
 * needs it, so a rank stores only its own tiles. Distributed tiles are
 * registered with StarPU-MPI under tags from one allocator. */
#ifndef TESSERA_TILES_H
#define TESSERA_TILES_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/error.h"

TSR_EXTERN_C_BEGIN

typedef struct tsr_tiles tsr_tiles_t;

/* Which MPI rank owns tile (i, j); ctx is the caller's. */
typedef int (*tsr_rank_of_fn)(int i, int j, void *ctx);

/* Creates a local m x n matrix of mb x nb tiles, zero-filled. *t is owned by
 * the caller (tsr_tiles_destroy). */
TSR_API int tsr_tiles_create(tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb);
/* Creates a matrix distributed by rank_of (ranks 0 .. tsr_dist_size() - 1,
 * checked; ctx borrowed for the matrix's life). Every rank calls this with
 * the same shape, in the same order relative to its other distributed
 * matrices, after tsr_runtime_init. This rank's tiles are zero-filled. */
TSR_API int tsr_tiles_create_distributed(tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb,
                                         tsr_rank_of_fn rank_of, void *ctx);
/* Creates a local m x n matrix that every rank holds its own value of, known
 * to StarPU-MPI as per-node data (STARPU_MPI_PER_NODE): tasks that write
 * distributed tiles may read it without any transfer (a grid column's input
 * batch, replicated layers' activations). Without MPI, a local matrix. */
TSR_API int tsr_tiles_create_per_node(tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb);
/* Creates a zero-filled matrix of src's shape, tiling and distribution
 * (local, per-node or distributed by the same rank_of). */
TSR_API int tsr_tiles_create_like(tsr_tiles_t **t, const tsr_tiles_t *src);
/* Unregisters every tile (waiting for the tasks that use it) and frees it. */
TSR_API void tsr_tiles_destroy(tsr_tiles_t **t);

TSR_API int64_t tsr_tiles_rows(const tsr_tiles_t *t);
TSR_API int64_t tsr_tiles_cols(const tsr_tiles_t *t);
TSR_API int tsr_tiles_mb(const tsr_tiles_t *t);
TSR_API int tsr_tiles_nb(const tsr_tiles_t *t);
TSR_API int tsr_tiles_mt(const tsr_tiles_t *t); /* number of tile rows */
TSR_API int tsr_tiles_nt(const tsr_tiles_t *t); /* number of tile columns */
TSR_API int tsr_tiles_tile_rows(const tsr_tiles_t *t, int i);
TSR_API int tsr_tiles_tile_cols(const tsr_tiles_t *t, int j);
/* The rank that owns tile (i, j) (this rank's for a local matrix). */
TSR_API int tsr_tiles_rank_of(const tsr_tiles_t *t, int i, int j);
TSR_API bool tsr_tiles_is_local(const tsr_tiles_t *t, int i, int j);
/* The StarPU-MPI tag of tile (i, j), the same on every rank; -1 for a local matrix. */
TSR_API int64_t tsr_tiles_tag(const tsr_tiles_t *t, int i, int j);
/* Accounting: bytes of tile memory this process allocated for t, and the
 * other ranks' tiles it has registered so far (handles without memory of
 * their own until data arrives). */
TSR_API int64_t tsr_tiles_local_bytes(const tsr_tiles_t *t);
TSR_API int tsr_tiles_remote_handles(const tsr_tiles_t *t);

/* Copies the whole matrix to dst (m, n) row-major, waiting for the tasks that
 * write it. Copies src (m, n) into the matrix, after the tasks that use it.
 * Every tile must be on this process (TSR_EINVAL otherwise). */
TSR_API int tsr_tiles_read(const tsr_tiles_t *t, float *dst);
TSR_API int tsr_tiles_write(tsr_tiles_t *t, const float *src);
/* The same for the tiles this process owns only, the others of dst and src
 * untouched: with a distributed matrix each rank reads or writes its part. */
TSR_API int tsr_tiles_read_owned(const tsr_tiles_t *t, float *dst);
TSR_API int tsr_tiles_write_owned(tsr_tiles_t *t, const float *src);
/* The whole matrix on rank 0, in dst (m, n) row-major there (ignored elsewhere, may be NULL):
 * a distributed matrix's tiles each from the rank that owns it (every rank reads its own and
 * MPI gathers them), another matrix read from rank 0's own copy. Collective under MPI: every
 * rank calls it for the same matrix at the same point, and the result is the same on every
 * rank (0, or an error of one of them). Without MPI, tsr_tiles_read. */
TSR_API int tsr_tiles_gather(const tsr_tiles_t *t, float *dst);
/* tsr_tiles_gather for every copy at once, where the ranks hold copies of t in groups of
 * `stride` consecutive ranks (a grid's columns), each group's spread alike: tile (i, j) of
 * copy c on rank c stride + rank_of(i, j) as rank 0 sees it (a matrix that is not spread:
 * every rank's own, copy c rank c stride's). On rank 0, dst ((size / stride), m, n) row-major,
 * copy by copy (ignored elsewhere, may be NULL). Collective as tsr_tiles_gather; stride must
 * divide the ranks. With stride 1 and a matrix every rank holds, each rank's own copy. */
TSR_API int tsr_tiles_gather_copies(const tsr_tiles_t *t, int stride, float *dst);
/* tsr_tiles_gather where the ranks disagree on who owns what and on the tiling, each right about
 * its own tiles only (a grid's rows, each homing its own chunks): every element from the lowest
 * rank that owns a tile holding it, none left out. Collective as tsr_tiles_gather. */
TSR_API int tsr_tiles_gather_owned(const tsr_tiles_t *t, float *dst);
/* Copies tile (i, j), which must be on this process, to dst (tile rows,
 * tile cols) row-major, waiting for the tasks that write it. */
TSR_API int tsr_tiles_read_tile(const tsr_tiles_t *t, int i, int j, float *dst);

TSR_EXTERN_C_END

#endif
