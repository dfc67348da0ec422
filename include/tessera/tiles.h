/* Tiled matrices: an M x N float32 matrix cut into mb x nb tiles, each tile a
 * StarPU data handle. Edge tiles are smaller, so no size needs to be a
 * multiple of the tile size. The descriptor is opaque: layers see shapes and
 * tilings, never StarPU types.
 *
 * Every tile has an owning MPI rank (rank_of) and an MPI tag (tag_base plus
 * the tile's linear index), so the same descriptor can later be spread over
 * StarPU-MPI ranks. */
#ifndef TESSERA_TILES_H
#define TESSERA_TILES_H

#include <stdint.h>

#include "tessera/error.h"

TSR_EXTERN_C_BEGIN

typedef struct tsr_tiles tsr_tiles_t;

/* Which MPI rank owns tile (i, j); ctx is the caller's. */
typedef int (*tsr_rank_of_fn)(int i, int j, void *ctx);

/* Creates an m x n matrix of mb x nb tiles, zero-filled, stored on this
 * process (rank_of NULL: every tile is local). *t is owned by the caller. */
TSR_API int tsr_tiles_create(tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb,
                             tsr_rank_of_fn rank_of, void *ctx, int64_t tag_base);
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
TSR_API int tsr_tiles_rank_of(const tsr_tiles_t *t, int i, int j);
TSR_API int64_t tsr_tiles_tag(const tsr_tiles_t *t, int i, int j);

/* Copies the whole matrix to dst (m, n) row-major, waiting for the tasks that
 * write it. Copies src (m, n) into the matrix, after the tasks that use it. */
TSR_API int tsr_tiles_read(const tsr_tiles_t *t, float *dst);
TSR_API int tsr_tiles_write(tsr_tiles_t *t, const float *src);

TSR_EXTERN_C_END

#endif
