/* The replicas' record, shared by the layers of the averaging engine in src/parallel (and no
 * one else): who meets (members.h), each parameter's chunks and the matrices that average them,
 * the buckets, and the statistics. The layers, lowest first: members.c (who meets) and
 * placement.c (where chunks and buckets live), collective.c (the reduce-scatter and all-gather
 * of one chunk, flat or two levels), buckets.c, home.c (what a home does between the two
 * phases), gradients.c (--sync batch's gradient averaging) and average.c (weight averages and
 * async-epoch's fold), state.c (what a checkpoint reads and writes back), replicas.c (the
 * lifecycle the trainer calls). Each includes the headers of the layers below it only. */
#ifndef TSR_PARALLEL_REPLICAS_IMPL_H
#define TSR_PARALLEL_REPLICAS_IMPL_H

#include <time.h>

#include "nn/net_impl.h"
#include "optim/outer.h"
#include "parallel/chunks.h"
#include "parallel/members.h"
#include "parallel/policy.h"
#include "parallel/replicas.h"
#include "parallel/sync_bn.h"

struct rparam;
struct tsr_replicas;
/* The rank_of context of a matrix homed in one group of ranks (a hier group, a node). */
typedef struct {
  const struct rparam *rp;
  const tsr__group_t *g;
} tsr__group_home_t;

typedef struct rparam {
  const struct tsr_replicas *r;
  tsr_param_t *p;
  int index;    /* in the replicas' params, and in the outer state */
  int nt;       /* tile columns (chunks share them) */
  int k;        /* bands per tile row; chunk rows cr = mb / k */
  bool staged;  /* a stage (and under batch the updated bands) exist: k > 1 here, or under a grid
                   in some grid row (every rank creates the descriptors any row needs) */
  bool whole_g; /* batch: views of every rank's gradient exist (k 1 or two levels, in some row) */
  int cr;       /* rows of a chunk (the last of a matrix may be shorter) */
  int cmt;      /* chunk rows of the matrix: ceil(m / cr) */
  int *chome;   /* (cmt, nt) home rank of each chunk (under a grid its position in its row) */
  int *cbucket; /* --bucket-mb: (cmt, nt) bucket of each chunk, and its first float there */
  int64_t *coff;
  int *tdone;   /* --bucket-mb with two levels: (mt, nt) chunks of each tile gathered so far */
  int *tbucket; /* --bucket-mb with two levels: (mt, nt) each tile's node bucket, its first
                   float there */
  int64_t *toff;
  int *home;       /* (mt, nt) async-epoch: each whole tile's home, as its index in the tile's
                      scope (the rank without a grid, the grid column under one) */
  tsr_tiles_t **w; /* [size] replica views of the weights */
  tsr_tiles_t **g; /* batch, whole-tile chunks (k 1): [size] replica views of the gradient */
  int nstate;      /* optimizer state matrices with views (batch: shared for checkpoints;
                      --sync-state: averaged with the weights) */
  tsr_tiles_t **s[TSR_OPTIM_MAX_STATE]; /* [size] replica views of each */
  /* The layer's buffer of the same index as this parameter (batchnorm: running mean with the
   * scale, running variance with the shift), shaped and tiled like it, so that it is averaged
   * in the parameter's chunks by the weight-averaging policies (never under batch: each
   * replica keeps its own, as DDP); NULL: none. */
  tsr_tiles_t *buf;
  tsr_tiles_t **bufs;   /* [size] replica views of buf */
  tsr_tiles_t *stage;   /* k > 1: local, chunk-tiled: this rank's bands of what is averaged */
  tsr_tiles_t **stages; /* k > 1: [size] replica views of stage */
  tsr_tiles_t *acc;     /* chunk-tiled, distributed by chunk home: the weighted sum */
  tsr_tiles_t **gacc;   /* hier: [ngroups] like acc, each distributed by chunk home in its group */
  tsr__group_home_t *gctx; /* hier: [ngroups] */
  int *local;              /* two levels: (cmt, nt) each chunk's index inside a node (its tile's) */
  tsr_tiles_t **ntile;     /* two levels: [nnodes] tiled like the parameter, each tile on its local
                              home in that node: the node's partial sum of the tile */
  tsr_tiles_t **nband;     /* two levels: [nnodes] like acc, on the same ranks: the chunks' bands
                              the nodes exchange */
  tsr__group_home_t *nctx; /* two levels: [nnodes] */
  tsr_tiles_t *updated;    /* batch, k > 1: chunk-tiled, by chunk home: the updated bands */
  tsr_tiles_t *global;     /* async-epoch: tiled like w, by tile home: the global copy */
  tsr_tiles_t **snap;      /* async-epoch: [size], by tile home: each rank's fold */
  tsr_tiles_t *anchor;     /* --weighting steps without an outer optimizer: like acc, the weights
                              every rank last restarted from (the outer state keeps its own) */
} rparam_t;

/* --bucket-mb: chunks of one home that travel together (chunks.h). Flat, every rank packs its
 * bands of them; with two levels, each node's local home of their index (lidx) its node's sum.
 * A node bucket (two levels, tsr__chunks_tile_buckets) holds whole tiles instead (I: the tile
 * row), which this rank's node sends to its local home of index lidx (home) and gets back. */
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

struct tsr_replicas {
  tsr_net_t *net;
  tsr_sync_t sync;
  const tsr__sync_policy_t *policy; /* sync's, or none's with one replica */
  tsr__members_t m;                 /* who meets: every rank, the grid's rows, the nodes */
  int ngroups;                      /* hier: groups, and this rank's */
  tsr__group_t *groups;             /* hier: [ngroups] */
  int my_group;
  bool batch;               /* gradients are averaged (batch, and post-local's first epochs) */
  int64_t local_from;       /* post-local: the step at which local SGD began */
  tsr_outer_state_t *outer; /* anchor and momentum of an outer optimizer; NULL: none */
  int nparams;
  rparam_t *params;
  tsr_tiles_t **stats;      /* [size] replica views of the training stats (mt, 2) */
  tsr_tiles_t *stats_sum;   /* on rank 0: the sums over ranks */
  double *weights;          /* [size] weight of each rank in the next averaging */
  double *home_share;       /* [size] part of the chunk bytes each rank homes (sums to size), or
                               NULL: equal parts (tsr__replicas_create's share) */
  int64_t *samples;         /* [size] samples since the last averaging of all ranks */
  int64_t *gsamples;        /* hier: [size] samples since the last averaging in the group */
  int64_t *steps;           /* [size] steps with samples since the last averaging of all ranks */
  double lambda;            /* --weighting steps: the extrapolation of the next average */
  tsr_grad_hook_t previous; /* batch: the hook this one replaced, restored at the end */
  /* batch under --clip-grad: [size] replica views of each rank's part of the sum of squares
   * (the net's grad_sq), and of each rank's total, this rank's own (sq_total, local) */
  tsr_tiles_t **sq, **sq_totals, *sq_total;
  tsr_sync_bn_t *sync_bn; /* --sync-bn's statistics hook, or NULL */
  int nbuckets;           /* --bucket-mb: averages over every rank pack chunks; 0: they do not */
  bucket_t *buckets;
  int *send_ranks; /* [size] a bucket's senders and their weights (senders) */
  float *send_w;
  int ntb;            /* --bucket-mb with two levels: node buckets of whole tiles; 0: none */
  bucket_t *tbuckets; /* [ntb] this rank's node's */
  bool agreed;        /* every replica holds the same weights (tsr__replicas_agree) */
  bool final_extra;   /* the last average was the end's, off the schedule (checkpoints) */
  tsr_sync_stats_t st;
};

static inline double tsr__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Options of averaging tasks outside a step's backward pass: labelled and prioritized like
 * layer 1's backward pass, since the next step's forward pass waits for them. */
static inline tsr_task_opts_t tsr__layer_one_opts(const tsr_replicas_t *r) {
  return tsr__net_task_opts(r->net, 1, true);
}

static inline tsr_task_opts_t tsr__with_mpi(const tsr_task_opts_t *o, bool mpi) {
  tsr_task_opts_t m = *o;
  m.mpi = mpi;
  return m;
}

/* Chunk (I, j): tile (I / k, j) of the parameter, rows from r0. */
static inline void tsr__chunk_tile(const rparam_t *rp, int I, int *i, int *r0) {
  *i = I / rp->k, *r0 = (I % rp->k) * rp->cr;
}

/* The chunks of tile (i, j), as chunk rows I0 .. I1 (exclusive). */
static inline void tsr__chunks_of_tile(const rparam_t *rp, int i, int *I0, int *I1) {
  *I0 = i * rp->k;
  *I1 = *I0 + rp->k < rp->cmt ? *I0 + rp->k : rp->cmt;
}

#endif
