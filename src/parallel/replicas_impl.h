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
/* The layers' own state, each opaque to the other layers: what the homes keep between averages
 * (home.c), gradient averaging's (gradients.c), the buckets (buckets.c). */
typedef struct tsr__homes tsr__homes_t;
typedef struct tsr__grad tsr__grad_t;
typedef struct tsr__bucket_set tsr__bucket_set_t;

/* The rank_of context of a matrix homed in one group of ranks (a hier group, a node). */
typedef struct {
  const struct rparam *rp;
  const tsr__group_t *g;
} tsr__group_home_t;

/* One parameter as the averages see it: where its chunks live (placement.c) and the matrices
 * that average them. */
typedef struct rparam {
  const struct tsr_replicas *r;
  tsr_param_t *p;
  int index;    /* in the replicas' params, and in the outer state */
  bool spread;  /* under a grid, tile column j on grid row j mod Pr (src/grid.h), else whole */
  int nt;       /* tile columns (chunks share them) */
  int k;        /* bands per tile row; chunk rows cr = mb / k */
  bool staged;  /* a stage (and, averaging gradients, the updated bands) exist: k > 1 here, or
                   under a grid in some grid row (every rank creates what any row needs) */
  bool whole_g; /* averaging gradients, views of every rank's gradient exist (k 1 or two
                   levels, in some row) */
  int cr;       /* rows of a chunk (the last of a matrix may be shorter) */
  int cmt;      /* chunk rows of the matrix: ceil(m / cr) */
  int *chome;   /* (cmt, nt) home rank of each chunk (under a grid its position in its row) */
  int *cbucket; /* (cmt, nt) the bucket of each chunk (-1: none), and its first float there */
  int64_t *coff;
  int *tbucket; /* (mt, nt) each tile's node bucket (two levels; -1: none), its first float */
  int64_t *toff;
  tsr_tiles_t **w; /* [size] replica views of the weights */
  tsr_tiles_t **g; /* averaging gradients (whole_g): [size] replica views of the gradient */
  int nstate;      /* optimizer state matrices with views (averaging gradients: shared for
                      checkpoints; --sync-state: averaged with the weights) */
  tsr_tiles_t **s[TSR_OPTIM_MAX_STATE]; /* [size] replica views of each */
  /* The layer's buffer of the same index as this parameter (batchnorm: running mean with the
   * scale, running variance with the shift), shaped and tiled like it, so that it is averaged
   * in the parameter's chunks by weight averages (never with the gradients: each replica keeps
   * its own, as DDP); NULL: none. */
  tsr_tiles_t *buf;
  tsr_tiles_t **bufs;      /* [size] replica views of buf */
  tsr_tiles_t *stage;      /* k > 1: local, chunk-tiled: this rank's bands of what is averaged */
  tsr_tiles_t **stages;    /* k > 1: [size] replica views of stage */
  tsr_tiles_t *acc;        /* chunk-tiled, distributed by chunk home: the weighted sum */
  int *local;              /* two levels: (cmt, nt) each chunk's index inside a node (its tile's) */
  tsr_tiles_t **ntile;     /* two levels: [nnodes] tiled like the parameter, each tile on its local
                              home in that node: the node's partial sum of the tile */
  tsr_tiles_t **nband;     /* two levels: [nnodes] like acc, on the same ranks: the chunks' bands
                              the nodes exchange */
  tsr__group_home_t *nctx; /* two levels: [nnodes] */
  tsr_tiles_t *updated;    /* averaging gradients, k > 1: chunk-tiled, by chunk home: the updated
                              bands */
} rparam_t;

struct tsr_replicas {
  tsr_net_t *net;
  tsr_sync_t sync;
  const tsr__sync_policy_t *policy; /* sync's, or none's with one replica */
  void *state;                      /* the policy's own (its create hook), or NULL */
  tsr__members_t m;                 /* who meets: every rank, the grid's rows, the nodes */
  bool batch;                       /* gradients are averaged now (gradients.c) */
  int nparams;
  rparam_t *params;
  tsr__homes_t *homes;    /* between the two phases: the outer optimizer, FedNova (home.c) */
  tsr__grad_t *grad;      /* averaging gradients: the net's hook replaced (gradients.c) */
  tsr__bucket_set_t *bk;  /* --bucket-mb: the buckets (buckets.c), or NULL */
  tsr_sync_bn_t *sync_bn; /* --sync-bn's statistics hook (sync_bn.c), or NULL */
  tsr_tiles_t **stats;    /* [size] replica views of the training stats (mt, 2) */
  tsr_tiles_t *stats_sum; /* on rank 0: the sums over ranks */
  double *weights;        /* [size] weight of each rank in the next average */
  int64_t *samples;       /* [size] samples since the last average of all ranks */
  bool agreed;            /* every replica holds the same weights (tsr__replicas_agree) */
  bool final_extra;       /* the last average was the end's, off the schedule (checkpoints) */
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

/* Whether every replica holds the same weights now (batch: always; every=K, epoch=n: right after
 * an average; async-epoch: after its final average). The trainer reads it through
 * tsr__replicas_checkpoint. */
bool tsr__replicas_agree(const tsr_replicas_t *r);

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
