/* How averaging cuts parameters into chunks and gives each chunk a home
 * rank (src/parallel/sync.c reduces a chunk on its home and sends it back
 * from there), as a function of the parameters' shapes alone, so that the
 * planner (src/plan) counts exactly the chunks sync.c averages. No StarPU,
 * no MPI. */
#ifndef TSR_CHUNKS_H
#define TSR_CHUNKS_H

#include <stdint.h>

/* A chunk averages at least this many floats: below it, messages cost more
 * than the balance they buy. */
#define TSR_MIN_CHUNK_FLOATS 256
/* The busiest rank may move this much more than the ring's optimum. */
#define TSR_CHUNK_BALANCE 1.05

/* One parameter matrix: rows x cols floats in mb x nb tiles. */
typedef struct {
  int64_t rows, cols;
  int mb, nb;
} tsr_chunk_shape_t;

/* How one parameter is cut: each tile row in k bands of cr rows (k divides
 * mb, so a chunk never straddles two tiles), cmt = ceil(rows / cr) chunk
 * rows by the nt tile columns; home[I * nt + j] is chunk (I, j)'s rank. */
typedef struct {
  int k, cr, cmt, nt;
  int *home;
} tsr_chunking_t;

/* The coarsest chunking under which the busiest rank sends at most
 * TSR_CHUNK_BALANCE times the ring's 2 (P - 1) / P |W| per averaging: whole
 * tiles first, then chunks of at most 1/P, 1/2P, 1/4P ... of the model, down
 * to TSR_MIN_CHUNK_FLOATS. A rank sends |W| + (P - 2) x (the bytes it homes),
 * so with 2 ranks any homes do, and with more the homes must be balanced;
 * fewer chunks are fewer tasks, messages and staging copies. Chunks are
 * homed largest first (ties in listing order), each to the rank with the
 * fewest bytes homed so far (the lowest among equals), or with weight (NULL:
 * equal; else [ranks], > 0) to the rank whose bytes after it are the fewest
 * for its weight, the balance then judged relative to the weights. Every
 * rank computes the same. Fills out[n] (tsr__chunks_free), and where not
 * NULL load[q] (bytes) and count[q] (chunks) each rank homes. Returns 0 or
 * TSR_ENOMEM. */
int tsr__chunks_plan(const tsr_chunk_shape_t *shapes, int n, int ranks, const double *weight,
                     tsr_chunking_t *out, uint64_t *load, int64_t *count);
void tsr__chunks_free(tsr_chunking_t *c, int n);

#endif
