/* The tiled-matrix descriptor's insides, for src/tile, src/parallel and
 * codelet callers only; and views, descriptors over another descriptor's
 * tiles that the synchronization code works on. */
#ifndef TSR_TILES_IMPL_H
#define TSR_TILES_IMPL_H

#include <starpu.h>

#include "tessera/tiles.h"

typedef enum {
  TSR_TILES_LOCAL,       /* every tile here, in one block of m rows tsr__tiles_row_stride apart */
  TSR_TILES_DISTRIBUTED, /* tile (i, j) on rank_of(i, j), each local tile its own block */
  TSR_TILES_REPLICA,     /* view: one rank's copy of a local matrix that every rank holds */
  TSR_TILES_PICK         /* view: tile (i, j) of sources[rank_of(i, j)] */
} tsr_tiles_kind_t;

struct tsr_tiles {
  tsr_tiles_kind_t kind;
  int64_t m, n;           /* matrix shape */
  int mb, nb;             /* tile shape (edge tiles are smaller) */
  int mt, nt;             /* number of tile rows and columns */
  int rank;               /* this process's MPI rank */
  tsr_rank_of_fn rank_of; /* NULL: every tile on owner */
  void *rank_ctx;         /* borrowed */
  int owner;              /* LOCAL: this rank; REPLICA: the rank whose copy it is */
  int64_t tag_space;      /* 0: not registered with StarPU-MPI */
  bool per_node;          /* LOCAL: registered as STARPU_MPI_PER_NODE (every rank its own) */
  float *data;            /* LOCAL: m rows of n floats, tsr__tiles_row_stride(n, nb) apart, 64-byte
                           * aligned, owned; tiles view it */
  float **blocks;         /* DISTRIBUTED: (mt, nt) local tiles' own blocks, NULL elsewhere */
  starpu_data_handle_t *handles; /* (mt, nt); NULL until first use for another rank's tile */
  bool *owned;                 /* (mt, nt): handle registered by this descriptor (else borrowed) */
  tsr_tiles_t *const *sources; /* PICK: [ranks] descriptors the tiles come from, borrowed */
  int64_t local_bytes;
  int remote_handles;
};

/* The floats from one row of a local matrix of n columns in tiles nb wide to the next: n, or
 * n + 16 where rows of an even number of cache lines would put a tile's rows into a few L1
 * sets (tiles.c says when and why). benchmarks/bench_gemm asks it too. */
int64_t tsr__tiles_row_stride(int64_t n, int nb);

/* Registers the handle of another rank's tile (i, j) on first use. */
starpu_data_handle_t tsr__tile_register(const tsr_tiles_t *t, int i, int j);

/* The handle of tile (i, j). */
static inline starpu_data_handle_t tsr__tile(const tsr_tiles_t *t, int i, int j) {
  starpu_data_handle_t h = t->handles[(long)i * t->nt + j];
  return h ? h : tsr__tile_register(t, i, j);
}

/* A view of rank's copy of base, a local matrix that every rank holds (a
 * replica of a network's parameter): tiles owned by rank, registered with
 * StarPU-MPI under the view's own tags (on rank, base's handles; elsewhere
 * handles without memory). base must outlive the view, and every rank makes
 * the same views in the same order. base may also be distributed (a grid
 * column's slice of a parameter): on rank the view then has base's tiles
 * that are rank's own, and only those may be used. */
int tsr__tiles_replica(tsr_tiles_t **v, tsr_tiles_t *base, int rank);
/* A view whose tile (i, j) is tile (i, j) of sources[rank_of(i, j)]: e.g.
 * every tile taken from its home rank's replica. sources (one per rank, all
 * of one shape and tiling) are borrowed, as is ctx. */
int tsr__tiles_pick(tsr_tiles_t **v, tsr_tiles_t *const *sources, tsr_rank_of_fn rank_of,
                    void *ctx);

#endif
