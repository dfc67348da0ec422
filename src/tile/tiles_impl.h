/* The tiled-matrix descriptor's insides, for src/tile and codelet callers only. */
#ifndef TSR_TILES_IMPL_H
#define TSR_TILES_IMPL_H

#include <starpu.h>

#include "tessera/tiles.h"

struct tsr_tiles {
  int64_t m, n; /* matrix shape */
  int mb, nb;   /* tile shape (edge tiles are smaller) */
  int mt, nt;   /* number of tile rows and columns */
  float *data;  /* (m, n) row-major, 64-byte aligned, owned; tiles are views into it */
  starpu_data_handle_t *handles; /* (mt, nt) */
  tsr_rank_of_fn rank_of;
  void *rank_ctx;
  int64_t tag_base;
};

static inline starpu_data_handle_t tsr__tile(const tsr_tiles_t *t, int i, int j) {
  return t->handles[(long)i * t->nt + j];
}

#endif
