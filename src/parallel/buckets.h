/* Buckets (--bucket-mb) of the averaging engine (src/parallel, above collective.h): a home's
 * chunks travel together, one message per bucket and sender instead of one per chunk. Each
 * rank copies its bands of a bucket's chunks into its own row of floats as they are handed
 * over (the bucket_pack / bucket_unpack codelets), and once the last is packed the bucket is
 * summed on its home, which does its work on each chunk (the caller's: an update, an outer
 * step; tsr__bucket_pass_t) and packs the results, sent back as one message. With two levels
 * the buckets go between the nodes' local homes, and inside a node whole tiles travel in node
 * buckets. Averages over every rank only (hier's group averages and async-epoch's folds keep
 * their chunks or tiles). */
#ifndef TSR_PARALLEL_BUCKETS_H
#define TSR_PARALLEL_BUCKETS_H

#include "parallel/replicas_impl.h"

/* Chunks of one home that travel together (chunks.h). Flat, every rank packs its bands of them;
 * with two levels, each node's local home of their index (lidx) its node's sum. A node bucket
 * (two levels, tsr__chunks_tile_buckets) holds whole tiles instead (I: the tile row), which this
 * rank's node sends to its local home of index lidx (home) and gets back. */
typedef struct {
  int home, nchunks, lidx;
  int64_t floats;
  int *param, *I, *j;  /* [nchunks] its chunks (tiles) */
  tsr_tiles_t *mine;   /* 1 x floats, local: this rank's packed bands, and what it gets back */
  tsr_tiles_t **mines; /* [size] replica views of mine */
  tsr_tiles_t *sum;    /* 1 x floats on the home: the weighted sum, then the results */
  int packed;          /* chunks packed in this pass */
  int back;            /* node buckets: tiles back in this pass */
} bucket_t;

/* What the home of a full bucket does with its chunk t, whose sum is in acc, before the
 * all-gather: typically its work, then the result packed (tsr__bucket_pack_result). */
typedef int (*tsr__bucket_home_fn)(tsr_replicas_t *r, bucket_t *b, int t,
                                   const tsr_task_opts_t *local, void *ctx);

/* A pass of buckets: what is packed (batch's gradient, set -1, or set `set` of tsr__set_of),
 * what a full bucket's home does with each chunk (at_home, with ctx; NULL: nothing), and
 * whether the bucket is then gathered back into set gather_set (the home too with with_home:
 * an average's result), or not (gather false: the caller finishes it later). */
typedef struct {
  const tsr_task_opts_t *o;
  int set;
  tsr__bucket_home_fn at_home;
  void *ctx;
  bool gather;
  int gather_set;
  bool with_home;
} tsr__bucket_pass_t;

/* With --bucket-mb (r->bk; nothing without): the buckets of bk and the chunks each holds (ch:
 * the parameters' chunkings, in parameter and chunk order), and with two levels the node
 * buckets of tb and the tiles each holds, each rank keeping its own node's (every node cuts the
 * same), homed on its local home of the bucket's index. Their matrices come later
 * (tsr__buckets_create). 0 or TSR_ENOMEM. */
int tsr__buckets_lay(tsr_replicas_t *r, const tsr_buckets_t *bk, const tsr_buckets_t *tb,
                     const tsr_chunking_t *ch);
/* Each bucket's row of floats on every rank (with every rank's views) and its sum on its home,
 * created on every rank in bucket order (descriptors take their MPI tags in creation order);
 * under a grid first padded to as many as the row with the most (collective). */
int tsr__buckets_create(tsr_replicas_t *r);
void tsr__buckets_destroy(tsr_replicas_t *r);
/* Whether averages over every rank go in buckets. */
bool tsr__buckets_on(const tsr_replicas_t *r);
/* Whether no bucket waits for chunks (every one went in this pass). */
bool tsr__buckets_idle(const tsr_replicas_t *r);
/* Every bucket, in order, through tsr__bucket_finish (batch under --clip-grad, once the norm is
 * known). */
int tsr__buckets_finish_all(tsr_replicas_t *r, const tsr__bucket_pass_t *p);

/* Chunk (I, j) of rp handed over in pass p: packed into its bucket, and the bucket on once
 * full (summed on its home, the home's work, the all-gather). With node buckets (two levels, a
 * node of several ranks), at its tile's first chunk every rank packs the whole tile into the
 * tile's node bucket; once that is full, the local home sums it and every chunk of its tiles
 * goes on. Nothing for another grid row's chunk. */
int tsr__bucket_offer(tsr_replicas_t *r, rparam_t *rp, int I, int j, const tsr__bucket_pass_t *p);
/* Bucket b, whose sums are in acc on its home: p's work on each of its chunks there, then with
 * p->gather the all-gather. */
int tsr__bucket_finish(tsr_replicas_t *r, bucket_t *b, const tsr__bucket_pass_t *p);
/* On bucket b's home: chunk t's result, rows r0 .. of tile (i, j) of src, packed into the
 * sum. */
int tsr__bucket_pack_result(const tsr_task_opts_t *local, const bucket_t *b, int t, rparam_t *rp,
                            const tsr_tiles_t *src, int i, int r0);

#endif
