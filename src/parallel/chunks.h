/* How averaging cuts parameters into chunks and gives each chunk a home
 * rank (src/parallel/collective.c reduces a chunk on its home and sends it back
 * from there), as a function of the parameters' shapes alone, so that the
 * planner (src/plan) counts exactly the chunks the engine averages. No StarPU,
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
  int *local;      /* two levels (tsr__chunks_plan_two_level): chunk (I, j)'s index inside a node;
                      NULL for one level */
  int *bucket;     /* --bucket-mb (tsr__chunks_buckets): chunk (I, j)'s bucket; NULL: none */
  int64_t *offset; /* --bucket-mb: chunk (I, j)'s first float in its bucket */
  int *tbucket;    /* --bucket-mb with two levels (tsr__chunks_tile_buckets): (mt, nt) each
                      whole tile's bucket inside a node, and its first float there */
  int64_t *toffset;
} tsr_chunking_t;

/* Buckets of chunks (--bucket-mb): bucket b holds chunks[b] chunks of one home, floats[b] floats
 * in all, and travels as one message where its chunks would each travel as one. */
typedef struct {
  int n;
  int *home;
  int *local; /* two levels: the index (chunking's local) its chunks share; flat 0 */
  int *chunks;
  int64_t *floats;
} tsr_buckets_t;

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
/* Two levels (--allreduce two-level), nodes of per_node ranks: the ranks of a node sum each
 * tile on one of them, the tile's local home there (node partials, one message per tile and
 * rank), the nodes' partials of each chunk meet on the chunk's home, and the result goes back
 * the same way. The cut is tsr__chunks_plan's for max(nodes, per_node) equal ranks (chunks
 * enough to balance the nodes, and no more). Whole tiles, largest first (ties in listing
 * order), take the index local[I * nt + j] in [0, per_node) with the fewest bytes so far (every
 * chunk of a tile the same); chunks, largest first, the node home[I * nt + j] among those
 * lightest to within the chunk's bytes whose rank of the chunk's index homes the fewest chunks
 * (then the lightest, then the lowest), so a node's chunks spread over its ranks. A chunk's home is
 * rank `local` of node `home`, its local home in node n rank `local` of n. A node then sends |W| +
 * (nodes - 2) x (the bytes it homes) to other nodes, the ring's 2 (N - 1) / N |W| when they are
 * balanced; a rank sends a message per tile (not per chunk) inside its node, and per chunk of its
 * index to other nodes. Fills out[n] (tsr__chunks_free), and where not NULL node_load[nodes] and
 * local_load[per_node] (bytes). Returns 0 or TSR_ENOMEM. */
int tsr__chunks_plan_two_level(const tsr_chunk_shape_t *shapes, int n, int nodes, int per_node,
                               tsr_chunking_t *out, uint64_t *node_load, uint64_t *local_load);
/* Packs a chunking's chunks into buckets, homes ranks (tsr__chunks_plan's; two levels' with
 * each home's node and index made its rank): each home's chunks (with two levels, of one index
 * in [0, per_node), whose senders are the same local homes; flat: per_node 1), parameters last to
 * first (the backward pass's order, in which --sync batch's gradients arrive), chunk rows then
 * columns in each, join that home's open bucket, which closes once it holds at least
 * target_bytes (a chunk larger than that is a bucket of its own). Buckets are numbered as they
 * open. Fills ch[k].bucket and .offset and out (tsr__buckets_free). Returns 0, TSR_EINVAL
 * (target_bytes 0) or TSR_ENOMEM. */
int tsr__chunks_buckets(const tsr_chunk_shape_t *shapes, int n, tsr_chunking_t *ch, int ranks,
                        int per_node, uint64_t target_bytes, tsr_buckets_t *out);
/* Two levels with --bucket-mb, inside a node: whole tiles of one index (local), parameters last
 * to first, tile rows then columns, join that index's open bucket until it holds at least
 * target_bytes, as tsr__chunks_buckets; every node cuts the same buckets (out->home: -1; local:
 * the index), which its ranks send to their local home of that index and get back. Fills
 * ch[k].tbucket and .toffset. Returns 0, TSR_EINVAL or TSR_ENOMEM. */
int tsr__chunks_tile_buckets(const tsr_chunk_shape_t *shapes, int n, tsr_chunking_t *ch,
                             int per_node, uint64_t target_bytes, tsr_buckets_t *out);
void tsr__buckets_free(tsr_buckets_t *b);
void tsr__chunks_free(tsr_chunking_t *c, int n);
/* The bytes of piece (I, j) of a parameter of shape s cut in bands of `band` rows by its nb
 * columns: a chunk with band = its chunking's cr, a tile with band = s->mb. */
uint64_t tsr__chunks_piece_bytes(const tsr_chunk_shape_t *s, int band, int I, int j);

#endif
