/* One averaging mechanism for every synchronization policy, on descriptors:
 * a reduce-scatter then an all-gather, chunk by chunk.
 *
 * Each parameter's tiles are cut into bands of rows, the chunks, and every
 * chunk has a home rank; homes are balanced by bytes over all chunks of all
 * parameters, so every rank homes about 1/P of the model. To average a
 * matrix X that every rank holds (the gradient under batch, the weights and
 * with --sync-state the optimizer state otherwise), each rank copies its
 * bands of X into its staging matrix (chunk-tiled, local), each home
 * accumulates every rank's copy of its chunks into acc (StarPU-MPI sends
 * them), and each rank's X gets the result back band by band. A rank then
 * sends and receives about 2 (P - 1) / P |X| per averaging, the ring's
 * optimum, instead of the (P - 1) |tile| a whole-tile home moved.
 *
 * batch: the gradient is averaged every step, the optimizer updates each
 * chunk once, on its home, with the home's state (sharded, ZeRO-1 style), and
 * the updated band is what every rank gets back: the mathematics of one
 * process with the global batch. Because it works tile by tile as the
 * backward pass hands over each layer, a layer's averaging overlaps the
 * backward pass of the layers below. Other policies average weights, when
 * their schedule says (each policy's own file, sync_<name>.c, through the
 * registry of policy.h: its hooks call tsr__replicas_average_all and the
 * others below). async-epoch: each rank folds its weights into a global copy
 * (whole tiles, homed by tile; under a grid, in the tile's grid row) with a
 * commutative task and continues from its own fold's result. hier's group
 * averages use the same mechanism restricted to the group and chunk homes
 * inside it (each group its own acc).
 *
 * An outer optimizer (optim/outer.h) steps each chunk's anchor on the
 * chunk's home, between the reduce-scatter and the all-gather, so ranks get
 * the new anchor instead of the mean: no extra message. Under async-epoch
 * the fold itself is the outer step. --weighting steps (FedNova) weighs the
 * reduce-scatter by samples over local steps and extrapolates from the
 * anchor on the home at the same point (set_step_weights).
 *
 * --bucket-mb packs chunks into buckets (chunks.h): each rank copies its
 * bands of a bucket's chunks into its own row of floats as they are
 * submitted, and once the last is packed the bucket is summed on its home
 * and sent back as one message, not one a chunk; in between, the home
 * unpacks the sum into acc and updates (or steps the outer optimizer)
 * chunk by chunk as without buckets, and packs the results. With two
 * levels the buckets go between the nodes' local homes, and inside a node
 * whole tiles travel in node buckets. Averages over every rank only (hier's
 * group averages and async-epoch's folds keep their chunks or tiles); no
 * grid.
 *
 * Each rank submits only the tasks it takes part in (it runs them, or sends
 * their input), so submission costs O(P) per chunk on the home and O(1)
 * elsewhere. Deterministic mode sums in rank order: acc = w_0 x_0, then acc =
 * w_q x_q + acc for q = 1 .. P-1 (tsr_sync_t.deterministic, tested bit for
 * bit). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/net_impl.h"
#include "optim/outer.h"
#include "parallel/chunks.h"
#include "parallel/policy.h"
#include "parallel/sync_bn.h"
#include "parallel/replicas.h"
#include "runtime/progress.h"
#include "tile/ops.h"
#include "tile/tiles_impl.h"
#include "try.h"

/* Ranks that average together: all of them, or one group of hier:K1,K2. */
typedef struct {
  int n;
  int *ranks; /* in rank order */
} group_t;

struct rparam;
struct tsr_replicas;
/* The rank_of context of a group's acc. */
typedef struct {
  const struct rparam *rp;
  const group_t *g;
} group_home_t;

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
  group_home_t *gctx;   /* hier: [ngroups] */
  int *local;           /* two levels: (cmt, nt) each chunk's index inside a node (its tile's) */
  tsr_tiles_t **ntile;  /* two levels: [nnodes] tiled like the parameter, each tile on its local
                           home in that node: the node's partial sum of the tile */
  tsr_tiles_t **nband;  /* two levels: [nnodes] like acc, on the same ranks: the chunks' bands
                           the nodes exchange */
  group_home_t *nctx;   /* two levels: [nnodes] */
  tsr_tiles_t *updated; /* batch, k > 1: chunk-tiled, by chunk home: the updated bands */
  tsr_tiles_t *global;  /* async-epoch: tiled like w, by tile home: the global copy */
  tsr_tiles_t **snap;   /* async-epoch: [size], by tile home: each rank's fold */
  tsr_tiles_t *anchor;  /* --weighting steps without an outer optimizer: like acc, the weights
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
  int rank, size;
  group_t all;     /* every rank */
  int grid_rows;   /* Pr of --grid PrxPc (1: none): a replica is a grid column of Pr ranks */
  group_t *rows;   /* grid: [grid_rows] the ranks of each grid row, one per column */
  int ngroups;     /* hier: groups, and this rank's */
  group_t *groups; /* hier: [ngroups] */
  int my_group;
  bool two_level; /* averages over every rank go through the nodes (tsr_sync_t.allreduce) */
  int nnodes;     /* two levels: the nodes, this rank's, and the most ranks one holds */
  group_t *nodes; /* two levels: [nnodes] */
  int *node_of;   /* two levels: [size] each rank's node */
  int my_node, per_node;
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

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Averaging scopes: gi -1 is every rank, else group gi of hier:K1,K2. */
static const group_t *group_of(const tsr_replicas_t *r, int gi) {
  return gi < 0 ? &r->all : &r->groups[gi];
}

/* The ranks that average chunks of column tile j of rp in scope gi: under a
 * grid (gi -1), the grid row holding that column in every grid column (a
 * replicated parameter: this rank's row), else gi's. */
static const group_t *scope(const tsr_replicas_t *r, const rparam_t *rp, int gi, int j) {
  if (r->grid_rows == 1) return group_of(r, gi);
  int row = tsr_tiles_rank_of(rp->p->w, 0, j) % r->grid_rows;
  /* hier under a grid: group gi's columns, in that grid row (tsr__replicas_make_groups) */
  return gi < 0 ? &r->rows[row] : &r->groups[gi / r->grid_rows * r->grid_rows + row];
}

static bool member(const group_t *g, int rank) {
  for (int t = 0; t < g->n; t++)
    if (g->ranks[t] == rank) return true;
  return false;
}

/* Chunk (i, j)'s home: over all ranks; under a grid a position in its scope, the chunk's grid
 * row (plan_rows: this rank's row plans its own chunks, and another row's chunk, never averaged
 * here, goes to a rank of that row). */
static int chunk_home(int i, int j, void *ctx) {
  const rparam_t *rp = ctx;
  int home = rp->chome[i * rp->nt + j];
  if (rp->r->grid_rows == 1) return home;
  const group_t *g = scope(rp->r, rp, -1, j);
  return g->ranks[home % g->n];
}

/* Chunk (I, j)'s home among the ranks of g: its home over all ranks, folded
 * onto g's members (over all ranks, its home). */
static int home_in(const group_t *g, const rparam_t *rp, int I, int j) {
  return g->ranks[rp->chome[I * rp->nt + j] % g->n];
}

static int group_chunk_home(int i, int j, void *ctx) {
  const group_home_t *h = ctx;
  return home_in(h->g, h->rp, i, j);
}

/* Two levels: chunk (i, j)'s local home in node ctx (the rank of its index there). */
static int node_chunk_home(int i, int j, void *ctx) {
  const group_home_t *h = ctx;
  return h->g->ranks[h->rp->local[i * h->rp->nt + j] % h->g->n];
}

/* Two levels: tile (i, j)'s local home in node ctx (its chunks'). */
static int node_tile_home(int i, int j, void *ctx) {
  const group_home_t *h = ctx;
  return node_chunk_home(i * h->rp->k, j, ctx);
}

static int local_home(const rparam_t *rp, int node, int I, int j) {
  return node_chunk_home(I, j, &rp->nctx[node]);
}

static tsr_tiles_t *acc_of(const rparam_t *rp, int gi) {
  return gi < 0 ? rp->acc : rp->gacc[gi];
}

/* async-epoch: tile (i, j)'s home, in its scope (under a grid, in its grid row). */
static int tile_home(int i, int j, void *ctx) {
  const rparam_t *rp = ctx;
  return scope(rp->r, rp, -1, j)->ranks[rp->home[i * rp->nt + j]];
}

static int rank_zero(int i, int j, void *ctx) {
  (void)i, (void)j, (void)ctx;
  return 0;
}

/* [size] replica views of base, one per rank; NULL on failure. */
static tsr_tiles_t **replicas_of(tsr_replicas_t *r, tsr_tiles_t *base) {
  tsr_tiles_t **v = calloc((size_t)r->size, sizeof *v);
  for (int q = 0; v && q < r->size; q++)
    if (tsr__tiles_replica(&v[q], base, q)) {
      while (q-- > 0)
        tsr_tiles_destroy(&v[q]);
      free(v);
      return NULL;
    }
  return v;
}

static void destroy_all(tsr_replicas_t *r, tsr_tiles_t ***v) {
  for (int q = 0; *v && q < r->size; q++)
    tsr_tiles_destroy(&(*v)[q]);
  free(*v), *v = NULL;
}

/* Chunk (I, j): tile (I / k, j) of the parameter, rows from r0. */
static void chunk_tile(const rparam_t *rp, int I, int *i, int *r0) {
  *i = I / rp->k, *r0 = (I % rp->k) * rp->cr;
}

/* The chunks of tile (i, j), as chunk rows I0 .. I1 (exclusive). */
static void chunks_of_tile(const rparam_t *rp, int i, int *I0, int *I1) {
  *I0 = i * rp->k;
  *I1 = *I0 + rp->k < rp->cmt ? *I0 + rp->k : rp->cmt;
}

static uint64_t chunk_bytes(const rparam_t *rp, int I, int j) {
  return (uint64_t)tsr_tiles_tile_rows(rp->acc, I) * (uint64_t)tsr_tiles_tile_cols(rp->acc, j) *
         sizeof(float);
}

/* Options of averaging tasks outside a step's backward pass: labelled and
 * prioritized like layer 1's backward pass, since the next step's forward
 * pass waits for them. */
static tsr_task_opts_t layer_one_opts(const tsr_replicas_t *r) {
  return tsr__net_task_opts(r->net, 1, true);
}

static tsr_task_opts_t with_mpi(const tsr_task_opts_t *o, bool mpi) {
  tsr_task_opts_t m = *o;
  m.mpi = mpi;
  return m;
}

/* Two levels: the reduce-scatter of chunk (I, j), rows r0 .. of tile (i, j), over every rank
 * (x: this rank's matrix, xs: every rank's views of it). At the tile's first chunk each node's
 * ranks add their weighted copies of the whole tile into the node's partial on the tile's
 * local home there, ntile[n] (i, j): one message per tile and rank. The local home then cuts
 * the chunk's band out of it (nband[n] (I, j)) and the home adds the nodes' bands into
 * acc (I, j); a node of one rank adds its own weighted band straight into acc. Deterministic
 * mode: s_n = w_a x_a, then s_n = w_q x_q + s_n for node n's ranks in rank order; acc = s_0,
 * then acc = s_n + acc for n = 1 .. N-1 (nodes numbered by their lowest rank). That is flat's
 * float32 sum in rank order, task for task, when every node holds one rank, and bit for bit
 * when one node holds them all. */
/* On home, dst (i, j) = the sum over t of w_t xs[ranks[t]] (i, j) (w NULL: the ranks' weights),
 * in the ranks' order in deterministic mode (acc = w_0 x_0, then acc = w_t x_t + acc), else as
 * the copies arrive (commutative adds); home is one of the n ranks. This rank submits only what
 * it takes part in, and counts a message of `bytes` from each other rank to the home. */
static int sum_on_home(const tsr_task_opts_t *o, tsr_replicas_t *r, int home, int n,
                       const int *ranks, const float *w, tsr_tiles_t **xs, tsr_tiles_t *dst, int i,
                       int j, uint64_t bytes) {
  tsr_task_opts_t local = with_mpi(o, false), mpi = with_mpi(o, true);
  bool det = r->sync.deterministic, at_home = r->rank == home, in = false;
  if (!det && at_home) TSR_TRY(tsr__tile_fill(&local, dst, i, j, 0.0f));
  for (int t = 0; t < n; t++) {
    int q = ranks[t];
    in = in || q == r->rank;
    if (at_home || q == r->rank)
      TSR_TRY(tsr__tile_axpby(&mpi, w ? w[t] : (float)r->weights[q], xs[q],
                              det && t == 0 ? 0.0f : 1.0f, dst, i, j, !det));
  }
  if (at_home)
    r->st.bytes_received += bytes * (uint64_t)(n - 1), r->st.messages_received += n - 1;
  else if (in)
    r->st.bytes_sent += bytes, r->st.messages_sent++;
  return 0;
}

/* The other way: src (i, j), on home, to ys[q] (i, j) of every other of the n ranks, one message
 * of `bytes` each. */
static int copy_from_home(const tsr_task_opts_t *o, tsr_replicas_t *r, int home, int n,
                          const int *ranks, const tsr_tiles_t *src, tsr_tiles_t **ys, int i, int j,
                          uint64_t bytes) {
  tsr_task_opts_t mpi = with_mpi(o, true);
  bool at_home = r->rank == home, in = false;
  for (int t = 0; t < n; t++) {
    int q = ranks[t];
    in = in || q == r->rank;
    if (q != home && (at_home || q == r->rank)) TSR_TRY(tsr__tile_copy(&mpi, ys[q], src, i, j));
  }
  if (at_home)
    r->st.bytes_sent += bytes * (uint64_t)(n - 1), r->st.messages_sent += n - 1;
  else if (in)
    r->st.bytes_received += bytes, r->st.messages_received++;
  return 0;
}

/* Two levels, inside this rank's node (of several ranks): tile (i, j)'s weighted sum over the
 * node's ranks (xs: every rank's views) on the tile's local home lh, ntile[node] (i, j); one
 * message per rank. */
static int node_sum_tile(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp,
                         tsr_tiles_t **xs, int i, int j, int lh) {
  const group_t *node = &r->nodes[r->my_node];
  tsr_tiles_t *part = rp->ntile[r->my_node];
  uint64_t tile = (uint64_t)tsr_tiles_tile_rows(part, i) * (uint64_t)tsr_tiles_tile_cols(part, j) *
                  sizeof(float);
  return sum_on_home(o, r, lh, node->n, node->ranks, NULL, xs, part, i, j, tile);
}

/* Two levels, inside this rank's node (of several ranks): tile (i, j) of the local home lh's y
 * sent whole to the node's other ranks' y; one message per rank. */
static int node_spread_tile(const tsr_task_opts_t *o, tsr_replicas_t *r, tsr_tiles_t **y, int i,
                            int j, int lh) {
  const group_t *node = &r->nodes[r->my_node];
  uint64_t tile = (uint64_t)tsr_tiles_tile_rows(y[r->rank], i) *
                  (uint64_t)tsr_tiles_tile_cols(y[r->rank], j) * sizeof(float);
  return copy_from_home(o, r, lh, node->n, node->ranks, y[lh], y, i, j, tile);
}

static int reduce_two_level(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp,
                            tsr_tiles_t *x, tsr_tiles_t **xs, int I, int j) {
  tsr_task_opts_t local = with_mpi(o, false), mpi = with_mpi(o, true);
  bool det = r->sync.deterministic;
  int i, r0, I0, I1, me = r->rank, home = chunk_home(I, j, rp);
  chunk_tile(rp, I, &i, &r0);
  chunks_of_tile(rp, i, &I0, &I1);
  int lh = local_home(rp, r->my_node, I, j);
  const group_t *node = &r->nodes[r->my_node];
  /* Where a lone rank's band of the chunk is (chunk-tiled: chunk (I, j) is tile (I, j)). */
  tsr_tiles_t **bands = rp->k > 1 ? rp->stages : xs;
  if (node->n == 1 && rp->k > 1) TSR_TRY(tsr__tile_band_get(&local, rp->stage, I, j, x, i, j, r0));
  if (node->n > 1 && I == I0) TSR_TRY(node_sum_tile(o, r, rp, xs, i, j, lh));
  if (node->n > 1 && me == lh)
    TSR_TRY(
        tsr__tile_band_get(&local, rp->nband[r->my_node], I, j, rp->ntile[r->my_node], i, j, r0));
  if (!det && me == home) TSR_TRY(tsr__tile_fill(&local, rp->acc, I, j, 0.0f));
  for (int n = 0; n < r->nnodes; n++) {
    if (me != home && (n != r->my_node || me != lh)) continue;
    const group_t *g = &r->nodes[n];
    float beta = det && n == 0 ? 0.0f : 1.0f;
    if (g->n == 1)
      TSR_TRY(tsr__tile_axpby(&mpi, (float)r->weights[g->ranks[0]], bands[g->ranks[0]], beta,
                              rp->acc, I, j, !det));
    else
      TSR_TRY(tsr__tile_axpby(&mpi, 1.0f, rp->nband[n], beta, rp->acc, I, j, !det));
  }
  uint64_t bytes = chunk_bytes(rp, I, j);
  if (me == home)
    r->st.bytes_received += bytes * (uint64_t)(r->nnodes - 1),
        r->st.messages_received += r->nnodes - 1;
  else if (me == lh)
    r->st.bytes_sent += bytes, r->st.messages_sent++;
  return 0;
}

/* Two levels: the all-gather of chunk (I, j), rows r0 .. of tile (i, j): tile (si, sj) of src,
 * on the chunk's home, goes to the tile's local home in every other node (nband[n] (I, j); a
 * lone rank's y straight away) and into its y there; the home's own y too when with_home (in
 * the home's node the home is the tile's local home). At the tile's last chunk each local home
 * sends the whole tile of its y to its node's other ranks: one message per tile and rank. */
static int gather_two_level(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp,
                            const tsr_tiles_t *src, int si, int sj, tsr_tiles_t **y, bool with_home,
                            int I, int j) {
  tsr_task_opts_t local = with_mpi(o, false), mpi = with_mpi(o, true);
  int i, r0, I0, I1, me = r->rank, home = chunk_home(I, j, rp);
  chunk_tile(rp, I, &i, &r0);
  chunks_of_tile(rp, i, &I0, &I1);
  int hn = r->node_of[home], lh = local_home(rp, r->my_node, I, j);
  const group_t *node = &r->nodes[r->my_node];
  for (int n = 0; n < r->nnodes; n++) {
    if (n == hn) continue;
    int to = local_home(rp, n, I, j);
    if (me != home && me != to) continue;
    if (r->nodes[n].n == 1) /* a node of one rank: straight into its y */
      TSR_TRY(tsr__tile_band_put(&mpi, y[to], i, j, r0, src, si, sj));
    else
      TSR_TRY(tsr__tile_band_put(&mpi, rp->nband[n], I, j, 0, src, si, sj));
  }
  if (me == home && with_home) TSR_TRY(tsr__tile_band_put(&local, y[me], i, j, r0, src, si, sj));
  if (me == lh && r->my_node != hn && node->n > 1)
    TSR_TRY(tsr__tile_band_put(&local, y[me], i, j, r0, rp->nband[r->my_node], I, j));
  uint64_t bytes = chunk_bytes(rp, I, j);
  if (me == home)
    r->st.bytes_sent += bytes * (uint64_t)(r->nnodes - 1), r->st.messages_sent += r->nnodes - 1;
  else if (me == lh)
    r->st.bytes_received += bytes, r->st.messages_received++;
  if (I != I1 - 1 || node->n == 1) return 0;
  return node_spread_tile(o, r, y, i, j, lh);
}

/* Reduce-scatter of one chunk over the ranks q of scope gi (this rank is
 * one): the home's acc (I, j) = sum of weights[q] x_q, where x_q is rank q's
 * band of X (x, this rank's own, and xs, every rank's views); in rank order
 * in deterministic mode, else as the copies arrive (commutative adds). A
 * band smaller than its tile is first copied into the stage matrix, so that
 * only the band travels. */
static int reduce_chunk(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, int gi,
                        tsr_tiles_t *x, tsr_tiles_t **xs, int I, int j) {
  tsr_task_opts_t local = with_mpi(o, false);
  const group_t *g = scope(r, rp, gi, j);
  if (!member(g, r->rank)) return 0; /* grid: another row's column */
  if (gi < 0 && r->two_level) return reduce_two_level(o, r, rp, x, xs, I, j);
  tsr_tiles_t *acc = acc_of(rp, gi);
  int i, r0, home = home_in(g, rp, I, j);
  chunk_tile(rp, I, &i, &r0);
  if (rp->k > 1) {
    TSR_TRY(tsr__tile_band_get(&local, rp->stage, I, j, x, i, j, r0));
    xs = rp->stages; /* chunk-tiled: chunk (I, j) is its tile (I, j) */
  }
  return sum_on_home(o, r, home, g->n, g->ranks, NULL, xs, acc, I, j, chunk_bytes(rp, I, j));
}

/* All-gather of one chunk over scope gi: rows r0 .. of tile (i, j) of every
 * member's y_q = tile (si, sj) of src, which lives on the chunk's home; the
 * home's own y too when with_home (the result of an average), else it has it
 * already (batch). */
static int gather_chunk(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, int gi,
                        const tsr_tiles_t *src, int si, int sj, tsr_tiles_t **y, bool with_home,
                        int I, int j) {
  const group_t *g = scope(r, rp, gi, j);
  if (!member(g, r->rank)) return 0; /* grid: another row's column */
  if (gi < 0 && r->two_level) return gather_two_level(o, r, rp, src, si, sj, y, with_home, I, j);
  tsr_task_opts_t mpi = with_mpi(o, true);
  int i, r0, home = home_in(g, rp, I, j);
  chunk_tile(rp, I, &i, &r0);
  bool at_home = r->rank == home;
  for (int t = 0; t < g->n; t++) {
    int q = g->ranks[t];
    if ((q != home || with_home) && (at_home || q == r->rank))
      TSR_TRY(tsr__tile_band_put(&mpi, y[q], i, j, r0, src, si, sj));
  }
  uint64_t bytes = chunk_bytes(rp, I, j);
  if (at_home)
    r->st.bytes_sent += bytes * (uint64_t)(g->n - 1), r->st.messages_sent += g->n - 1;
  else
    r->st.bytes_received += bytes, r->st.messages_received++;
  return 0;
}

/* ---- Buckets (--bucket-mb) ---- */

static int bucket_home(int i, int j, void *ctx) {
  (void)i, (void)j;
  return ((const bucket_t *)ctx)->home;
}

/* What an average gets back: set 0 the weights, set s > 0 optimizer state s - 1. */
static tsr_tiles_t *set_of(const tsr_replicas_t *r, rparam_t *rp, int s) {
  return s == 0 ? rp->p->w : tsr__optim_state(r->net->optim, rp->p->index, s - 1);
}

/* The views of set s of rp (set_of): every rank's weights, or state s - 1. */
static tsr_tiles_t **views_of(rparam_t *rp, int s) {
  return s == 0 ? rp->w : rp->s[s - 1];
}

/* Packs chunk (I, j) of rp into its bucket: flat, this rank's band of x; with two levels, at the
 * tile's first chunk its sum over the node (node_sum_tile, from xs, every rank's views of x),
 * then on the local home the node's band of it (a lone rank's own band). *full: the bucket when
 * that was the last of its chunks in this pass (the next pass packs it from the start), else
 * NULL; every rank counts, whether it packs or not. */
static int pack_chunk(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, tsr_tiles_t *x,
                      tsr_tiles_t **xs, int I, int j, bucket_t **full) {
  tsr_task_opts_t local = with_mpi(o, false);
  int i, r0, I0, I1, c = I * rp->nt + j;
  chunk_tile(rp, I, &i, &r0);
  bucket_t *b = &r->buckets[rp->cbucket[c]];
  const tsr_tiles_t *src = x;
  bool packs = true;
  if (r->two_level) {
    int lh = local_home(rp, r->my_node, I, j);
    chunks_of_tile(rp, i, &I0, &I1);
    if (r->nodes[r->my_node].n > 1) { /* with node buckets the node's sum is there already */
      if (I == I0 && !r->ntb) TSR_TRY(node_sum_tile(o, r, rp, xs, i, j, lh));
      src = rp->ntile[r->my_node];
    }
    packs = r->rank == lh;
  }
  if (packs)
    TSR_TRY(tsr__tile_pack(&local, b->mine, rp->coff[c], src, i, j, r0,
                           tsr_tiles_tile_rows(rp->acc, I)));
  *full = ++b->packed == b->nchunks ? b : NULL;
  if (*full) b->packed = 0;
  return 0;
}

/* Bucket b's senders, in the order its home adds them: flat every rank (under a grid every rank
 * of this rank's grid row), with two levels each node's local home of b's index; their ranks and
 * weights in the sum (a node's sum is weighted already, a lone rank's band is not), and how
 * many. */
static int senders(const tsr_replicas_t *r, const bucket_t *b, int *ranks, float *w) {
  const group_t *row = r->grid_rows > 1 ? &r->rows[r->rank % r->grid_rows] : &r->all;
  int n = r->two_level ? r->nnodes : row->n;
  for (int t = 0; t < n; t++) {
    ranks[t] = r->two_level ? r->nodes[t].ranks[b->lidx % r->nodes[t].n] : row->ranks[t];
    w[t] = r->two_level && r->nodes[t].n > 1 ? 1.0f : (float)r->weights[ranks[t]];
  }
  return n;
}

static int reduce_bucket(const tsr_task_opts_t *o, tsr_replicas_t *r, bucket_t *b) {
  tsr_task_opts_t local = with_mpi(o, false);
  int *ranks = r->send_ranks, n = senders(r, b, ranks, r->send_w);
  TSR_TRY(sum_on_home(o, r, b->home, n, ranks, r->send_w, b->mines, b->sum, 0, 0,
                      (uint64_t)b->floats * sizeof(float)));
  if (r->rank != b->home) return 0;
  for (int t = 0; t < b->nchunks; t++) {
    rparam_t *rp = &r->params[b->param[t]];
    int I = b->I[t], j = b->j[t];
    TSR_TRY(tsr__tile_unpack(&local, rp->acc, I, j, 0, tsr_tiles_tile_rows(rp->acc, I), b->sum,
                             rp->coff[I * rp->nt + j]));
  }
  return 0;
}

/* Two levels, node bucket nb full: its home (the local home) sums the rows of this rank's node's
 * ranks, weights[q] each, in rank order in deterministic mode (node_sum_tile's order), and
 * unpacks the sums into the node's partial tiles, ntile. */
static int reduce_node_bucket(const tsr_task_opts_t *o, tsr_replicas_t *r, bucket_t *nb) {
  tsr_task_opts_t local = with_mpi(o, false);
  const group_t *node = &r->nodes[r->my_node];
  TSR_TRY(sum_on_home(o, r, nb->home, node->n, node->ranks, NULL, nb->mines, nb->sum, 0, 0,
                      (uint64_t)nb->floats * sizeof(float)));
  if (r->rank != nb->home) return 0;
  for (int t = 0; t < nb->nchunks; t++) {
    rparam_t *rp = &r->params[nb->param[t]];
    int i = nb->I[t], j = nb->j[t];
    TSR_TRY(tsr__tile_unpack(&local, rp->ntile[r->my_node], i, j, 0,
                             tsr_tiles_tile_rows(rp->p->w, i), nb->sum, rp->toff[i * rp->nt + j]));
  }
  return 0;
}

/* Two levels with node buckets: tile (i, j) of set `set` is whole on its local home; packed into
 * its node bucket's row there, and once every tile of the bucket is, the row goes to the node's
 * other ranks in one message each, which unpack it (node_spread_tile's, bucket by bucket). */
static int tile_back(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, int i, int j,
                     int set) {
  tsr_task_opts_t local = with_mpi(o, false);
  bucket_t *nb = &r->tbuckets[rp->tbucket[i * rp->nt + j]];
  bool at_home = r->rank == nb->home;
  if (at_home)
    TSR_TRY(tsr__tile_pack(&local, nb->sum, rp->toff[i * rp->nt + j], set_of(r, rp, set), i, j, 0,
                           tsr_tiles_tile_rows(rp->p->w, i)));
  if (++nb->back < nb->nchunks) return 0;
  nb->back = 0;
  const group_t *node = &r->nodes[r->my_node];
  TSR_TRY(copy_from_home(o, r, nb->home, node->n, node->ranks, nb->sum, nb->mines, 0, 0,
                         (uint64_t)nb->floats * sizeof(float)));
  if (at_home) return 0;
  for (int t = 0; t < nb->nchunks; t++) {
    rparam_t *tp = &r->params[nb->param[t]];
    int ti = nb->I[t], tj = nb->j[t];
    TSR_TRY(tsr__tile_unpack(&local, set_of(r, tp, set), ti, tj, 0,
                             tsr_tiles_tile_rows(tp->p->w, ti), nb->mine,
                             tp->toff[ti * tp->nt + tj]));
  }
  return 0;
}

/* On bucket b's home: chunk t's result, rows r0 .. of tile (i, j) of src, packed into the sum. */
static int pack_result(const tsr_task_opts_t *local, const bucket_t *b, int t, rparam_t *rp,
                       const tsr_tiles_t *src, int i, int r0) {
  int I = b->I[t], j = b->j[t];
  return tsr__tile_pack(local, b->sum, rp->coff[I * rp->nt + j], src, i, j, r0,
                        tsr_tiles_tile_rows(rp->acc, I));
}

/* The all-gather of bucket b, whose home packed the results into its sum: every other sender
 * gets the sum in one message and unpacks it into set `set` of each chunk's parameter (set_of);
 * the home too with with_home (an average's result), else it has it already (batch). With two
 * levels, once every chunk of a tile is back, its local home sends the whole tile to its node's
 * other ranks (node_spread_tile), as gather_two_level does at a tile's last chunk. */
static int gather_bucket(const tsr_task_opts_t *o, tsr_replicas_t *r, bucket_t *b, int set,
                         bool with_home) {
  tsr_task_opts_t local = with_mpi(o, false);
  int *ranks = r->send_ranks, n = senders(r, b, ranks, r->send_w);
  bool at_home = r->rank == b->home, gets = false;
  for (int t = 0; t < n; t++)
    gets = gets || ranks[t] == r->rank;
  TSR_TRY(copy_from_home(o, r, b->home, n, ranks, b->sum, b->mines, 0, 0,
                         (uint64_t)b->floats * sizeof(float)));
  bool unpacks = gets && (!at_home || with_home);
  const tsr_tiles_t *src = at_home ? b->sum : b->mine;
  for (int t = 0; t < b->nchunks; t++) {
    rparam_t *rp = &r->params[b->param[t]];
    int I = b->I[t], j = b->j[t], i, r0, I0, I1;
    chunk_tile(rp, I, &i, &r0);
    if (unpacks)
      TSR_TRY(tsr__tile_unpack(&local, set_of(r, rp, set), i, j, r0,
                               tsr_tiles_tile_rows(rp->acc, I), src, rp->coff[I * rp->nt + j]));
    if (!r->two_level || r->nodes[r->my_node].n == 1) continue;
    chunks_of_tile(rp, i, &I0, &I1);
    if (++rp->tdone[i * rp->nt + j] < I1 - I0) continue;
    rp->tdone[i * rp->nt + j] = 0;
    if (r->ntb)
      TSR_TRY(tile_back(o, r, rp, i, j, set));
    else
      TSR_TRY(node_spread_tile(o, r, views_of(rp, set), i, j, local_home(rp, r->my_node, I, j)));
  }
  return 0;
}

/* batch: on chunk (I, j)'s home, the optimizer (the net's own, on its own weights and state,
 * rows r0 .. of tile (i, j)) from the averaged gradient, clipped first under --clip-grad. */
static int update_home(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *local, int i, int j,
                       int I, int r0) {
  if (r->sq_total)
    TSR_TRY(tsr__tile_clip(local, rp->acc, I, j, r->sq_total, r->net->opts.clip_grad));
  return tsr__optim_update_tile(r->net->optim, rp->p->index, rp->p->w, NULL, i, j, r0, rp->acc, I,
                                j, local);
}

/* batch with buckets, once bucket b's sums are in acc: each chunk updated on the home, the
 * updated bands packed and sent back in one message. */
static int update_bucket(tsr_replicas_t *r, bucket_t *b, const tsr_task_opts_t *layer) {
  tsr_task_opts_t local = with_mpi(layer, false);
  for (int t = 0; t < b->nchunks && r->rank == b->home; t++) {
    rparam_t *rp = &r->params[b->param[t]];
    int i, r0;
    chunk_tile(rp, b->I[t], &i, &r0);
    TSR_TRY(update_home(r, rp, &local, i, b->j[t], b->I[t], r0));
    TSR_TRY(pack_result(&local, b, t, rp, rp->p->w, i, r0));
  }
  return gather_bucket(layer, r, b, 0, false);
}

/* batch: the optimizer on chunk (I, j)'s home (update_home) and the updated band sent to every
 * other rank. */
static int update_chunk(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer, int i, int j,
                        int I, int r0) {
  tsr_param_t *p = rp->p;
  tsr_task_opts_t local = with_mpi(layer, false);
  int home = chunk_home(I, j, rp);
  bool at_home = r->rank == home;
  if (at_home) TSR_TRY(update_home(r, rp, &local, i, j, I, r0));
  /* A band travels from a chunk-tiled copy; a whole tile straight from the home's. */
  if (rp->k > 1 && at_home) TSR_TRY(tsr__tile_band_get(&local, rp->updated, I, j, p->w, i, j, r0));
  return rp->k > 1 ? gather_chunk(layer, r, rp, -1, rp->updated, I, j, rp->w, false, I, j)
                   : gather_chunk(layer, r, rp, -1, rp->w[home], i, j, rp->w, false, I, j);
}

/* Calls fn for each chunk (I, j) of rp: rows r0 .. of tile (i, j). */
static int each_chunk(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer,
                      int (*fn)(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer,
                                int i, int j, int I, int r0)) {
  for (int i = 0; i < tsr_tiles_mt(rp->p->w); i++)
    for (int j = 0; j < rp->nt; j++) {
      int I0, I1;
      chunks_of_tile(rp, i, &I0, &I1);
      for (int I = I0; I < I1; I++)
        TSR_TRY(fn(r, rp, layer, i, j, I, (I - I0) * rp->cr));
    }
  return 0;
}

/* The reduce-scatter of chunk (I, j)'s gradient; then its update, or under --clip-grad its
 * squares added to this rank's part of the norm (the update waits for grad_end). */
static int reduce_and_update(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer, int i,
                             int j, int I, int r0) {
  TSR_TRY(reduce_chunk(layer, r, rp, -1, rp->p->g, rp->g, I, j));
  if (!r->sq_total) return update_chunk(r, rp, layer, i, j, I, r0);
  tsr_task_opts_t local = with_mpi(layer, false);
  return r->rank == chunk_home(I, j, rp)
             ? tsr__tile_sumsq_add(&local, rp->acc, I, j, r->net->grad_sq)
             : 0;
}

/* A pass of buckets: what is averaged (batch's gradient, set -1, or set `set` of set_of) and
 * what a full bucket does (batch: reduce and update; else reduce, step, gather). */
typedef struct {
  const tsr_task_opts_t *o;
  int set;
  bool outer, fednova;
} pass_t;

static int step_chunk(tsr_replicas_t *r, rparam_t *rp, int gi, bool outer, bool fednova,
                      bool at_home, int I, int j, const tsr_tiles_t **result);

/* Bucket b full in pass p: batch, its reduce-scatter, then its update, or under --clip-grad its
 * squares added to this rank's part of the norm; an average, its reduce-scatter, FedNova's and
 * the outer step chunk by chunk on the home, and the all-gather. */
static int bucket_full(tsr_replicas_t *r, bucket_t *b, const pass_t *p) {
  tsr_task_opts_t local = with_mpi(p->o, false);
  TSR_TRY(reduce_bucket(p->o, r, b));
  if (p->set < 0 && !r->sq_total) return update_bucket(r, b, p->o);
  for (int t = 0; t < b->nchunks && r->rank == b->home; t++) {
    rparam_t *bp = &r->params[b->param[t]];
    if (p->set < 0) {
      TSR_TRY(tsr__tile_sumsq_add(&local, bp->acc, b->I[t], b->j[t], r->net->grad_sq));
      continue;
    }
    const tsr_tiles_t *result;
    TSR_TRY(step_chunk(r, bp, -1, p->set == 0 && p->outer, p->set == 0 && p->fednova, true, b->I[t],
                       b->j[t], &result));
    TSR_TRY(pack_result(&local, b, t, bp, result, b->I[t], 0));
  }
  return p->set < 0 ? 0 : gather_bucket(p->o, r, b, p->set, true);
}

/* Chunk (I, j) of rp into its bucket (pack_chunk), and the bucket on once full. */
static int chunk_on(tsr_replicas_t *r, rparam_t *rp, int I, int j, const pass_t *p) {
  bucket_t *b;
  tsr_tiles_t *x = p->set < 0 ? rp->p->g : set_of(r, rp, p->set);
  TSR_TRY(pack_chunk(p->o, r, rp, x, p->set < 0 ? rp->g : views_of(rp, p->set), I, j, &b));
  return b ? bucket_full(r, b, p) : 0;
}

/* Chunk (I, j) of rp handed over in pass p. With node buckets (two levels, a node of several
 * ranks), at its tile's first chunk every rank packs the whole tile into the tile's node
 * bucket; once that is full, the local home sums it (reduce_node_bucket) and every chunk of its
 * tiles goes on (chunk_on). Otherwise chunk_on straight away. */
static int offer_chunk(tsr_replicas_t *r, rparam_t *rp, int I, int j, const pass_t *p) {
  if (!member(scope(r, rp, -1, j), r->rank)) return 0; /* grid: another row's column */
  if (!r->ntb || r->nodes[r->my_node].n == 1) return chunk_on(r, rp, I, j, p);
  tsr_task_opts_t local = with_mpi(p->o, false);
  int i, r0, I0, I1;
  chunk_tile(rp, I, &i, &r0);
  chunks_of_tile(rp, i, &I0, &I1);
  if (I != I0) return 0;
  bucket_t *nb = &r->tbuckets[rp->tbucket[i * rp->nt + j]];
  tsr_tiles_t *x = p->set < 0 ? rp->p->g : set_of(r, rp, p->set);
  TSR_TRY(tsr__tile_pack(&local, nb->mine, rp->toff[i * rp->nt + j], x, i, j, 0,
                         tsr_tiles_tile_rows(x, i)));
  if (++nb->packed < nb->nchunks) return 0;
  nb->packed = 0;
  TSR_TRY(reduce_node_bucket(p->o, r, nb));
  for (int t = 0; t < nb->nchunks; t++) {
    rparam_t *tp = &r->params[nb->param[t]];
    int a, e;
    chunks_of_tile(tp, nb->I[t], &a, &e);
    for (int c = a; c < e; c++)
      TSR_TRY(chunk_on(r, tp, c, nb->j[t], p));
  }
  return 0;
}

/* batch with buckets: chunk (I, j)'s gradient handed over (offer_chunk). */
static int pack_and_update(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer, int i,
                           int j, int I, int r0) {
  (void)i, (void)r0;
  pass_t p = {layer, -1, false, false};
  return offer_chunk(r, rp, I, j, &p);
}

/* batch: replaces the optimizer step of a parameter whose gradient was just
 * submitted: per chunk, the reduce-scatter of the gradient, the optimizer on
 * the chunk's home and the updated band sent to every other rank (update_chunk; under
 * --clip-grad in grad_end, once the norm is known). */
static int grad_hook(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *layer, void *ctx) {
  (void)net;
  tsr_replicas_t *r = ctx;
  rparam_t *rp = NULL;
  for (int k = 0; k < r->nparams && !rp; k++)
    if (r->params[k].p == p) rp = &r->params[k];
  if (!rp) return TSR_EINVAL;
  double t0 = now();
  int rc = each_chunk(r, rp, layer, r->nbuckets ? pack_and_update : reduce_and_update);
  r->st.seconds += now() - t0;
  return rc;
}

/* batch, once every gradient is handed over: with buckets, every bucket went (a parameter
 * without a gradient would leave its bucket waiting: an error, not a hang); under --clip-grad,
 * the sum of squares of the averaged gradient, each rank's part (its chunks') added on every
 * rank in rank order (all-reduce of one float), then each chunk clipped and updated on its home,
 * in backward order (with buckets bucket by bucket). */
static int grad_end(tsr_net_t *net, const tsr_task_opts_t *layer, void *ctx) {
  (void)net;
  tsr_replicas_t *r = ctx;
  tsr_task_opts_t mpi = with_mpi(layer, true);
  double t0 = now();
  int rc = 0;
  for (int b = 0; b < r->nbuckets; b++)
    if (r->buckets[b].packed) return TSR_EINVAL;
  for (int b = 0; b < r->ntb; b++)
    if (r->tbuckets[b].packed || r->tbuckets[b].back) return TSR_EINVAL;
  for (int q = 0; q < r->size && rc == 0 && r->sq_total; q++)
    for (int t = 0; t < r->size && rc == 0; t++) {
      if (r->rank != q && r->rank != t) continue;
      rc =
          tsr__tile_axpby(&mpi, 1.0f, r->sq[t], t == 0 ? 0.0f : 1.0f, r->sq_totals[q], 0, 0, false);
      if (t == q) continue;
      if (r->rank == q)
        r->st.bytes_received += sizeof(float), r->st.messages_received++;
      else
        r->st.bytes_sent += sizeof(float), r->st.messages_sent++;
    }
  for (int b = 0; b < r->nbuckets && rc == 0 && r->sq_total; b++)
    rc = update_bucket(r, &r->buckets[b], layer);
  for (int k = r->nparams - 1; k >= 0 && rc == 0 && r->sq_total && !r->nbuckets; k--)
    rc = each_chunk(r, &r->params[k], layer, update_chunk);
  r->st.seconds += now() - t0;
  return rc;
}

/* The weights of scope gi's members: by the samples each took since the
 * scope last averaged, or uniform. */
static void set_average_weights(tsr_replicas_t *r, int gi) {
  const group_t *g = group_of(r, gi);
  const int64_t *n = gi < 0 ? r->samples : r->gsamples;
  int64_t total = 0;
  for (int t = 0; t < g->n; t++)
    total += n[g->ranks[t]];
  for (int t = 0; t < g->n; t++) {
    int q = g->ranks[t];
    r->weights[q] = (r->sync.by_samples || r->sync.by_steps) && total > 0
                        ? (double)n[q] / (double)total
                        : 1.0 / g->n;
    /* Grid: each column's Pr ranks took its samples; a chunk averages over one row. */
    if (gi < 0) r->weights[q] *= r->grid_rows;
  }
}

/* --weighting steps (FedNova; the formula is at tsr_sync_t.by_steps in tessera/dist.h):
 * weights v_q = (p_q / tau_q) / S over the ranks that took steps, and lambda = tau_eff S,
 * with which the home extrapolates from the anchor. Averages over all ranks only. Under a grid
 * each column's Pr ranks count its samples and steps, so p_q is the column's over Pr (S and
 * tau_eff are the columns'), and a chunk averages over one grid row: v_q times Pr. */
static void set_step_weights(tsr_replicas_t *r) {
  int64_t total = 0;
  for (int q = 0; q < r->size; q++)
    total += r->samples[q];
  double S = 0, tau_eff = 0;
  for (int q = 0; q < r->size && total > 0; q++)
    if (r->steps[q] > 0) {
      double p = (double)r->samples[q] / (double)total;
      S += p / (double)r->steps[q], tau_eff += p * (double)r->steps[q];
    }
  r->lambda = S > 0 ? tau_eff * S : 1.0;
  for (int q = 0; q < r->size && S > 0; q++) {
    double p = (double)r->samples[q] / (double)total;
    r->weights[q] = r->steps[q] > 0 ? p / (double)r->steps[q] / S * r->grid_rows : 0.0;
  }
}

static void clear_samples(tsr_replicas_t *r, int gi) {
  /* hier under a grid: the group's columns in every grid row */
  int first = gi < 0 ? gi : gi / r->grid_rows * r->grid_rows,
      last = gi < 0 ? gi : first + r->grid_rows - 1;
  for (int h = first; h <= last; h++) {
    const group_t *g = group_of(r, h);
    for (int t = 0; t < g->n; t++) {
      int q = g->ranks[t];
      if (r->gsamples) r->gsamples[q] = 0;
      if (gi < 0) r->samples[q] = 0, r->steps[q] = 0;
    }
  }
}

/* Once acc (scope gi's) holds chunk (I, j)'s weighted sum of the weights, on its home
 * (at_home): FedNova's step from the anchor, then the outer optimizer's; *result: what every
 * member gets back (acc, or the outer anchor), on every rank. */
static int step_chunk(tsr_replicas_t *r, rparam_t *rp, int gi, bool outer, bool fednova,
                      bool at_home, int I, int j, const tsr_tiles_t **result) {
  tsr_task_opts_t o = layer_one_opts(r), local = with_mpi(&o, false);
  *result = acc_of(rp, gi);
  if (fednova && at_home) {
    /* acc = x + lambda (x~ - x): FedNova's step from the anchor x; the outer optimizer (if any)
     * then takes it as the mean, and its anchor moves; else it becomes the anchor itself. */
    tsr_tiles_t *x = outer ? tsr__outer_anchor(r->outer, rp->index) : rp->anchor;
    TSR_TRY(tsr__tile_axpby(&local, (float)(1.0 - r->lambda), x, (float)r->lambda, rp->acc, I, j,
                            false));
    if (!outer) TSR_TRY(tsr__tile_copy(&local, rp->anchor, rp->acc, I, j));
  }
  if (!outer) return 0;
  if (at_home)
    TSR_TRY(tsr__outer_step_tile(r->outer, rp->index, I, j, *result, tsr__optim_lr(r->net->optim),
                                 &local));
  *result = tsr__outer_anchor(r->outer, rp->index);
  return 0;
}

/* With buckets, an average over every rank of the weights and with average_state each state
 * matrix (set_of), set by set, bucket by bucket. */
static int average_buckets(tsr_replicas_t *r, bool outer, bool fednova, const tsr_task_opts_t *o) {
  int nsets = 1 + (r->sync.average_state && r->nparams > 0 ? r->params[0].nstate : 0);
  for (int s = 0; s < nsets; s++) {
    pass_t p = {o, s, outer, fednova};
    for (int k = 0; k < r->nparams; k++) {
      rparam_t *rp = &r->params[k];
      for (int I = 0; I < rp->cmt; I++)
        for (int j = 0; j < rp->nt; j++)
          TSR_TRY(offer_chunk(r, rp, I, j, &p));
    }
  }
  return 0;
}

/* The replicas of scope gi's members (and with average_state the optimizer
 * state) become their weighted mean; with outer, the weights' mean is the
 * outer optimizer's target instead, and every member restarts from its new
 * anchor. With buckets (over every rank), the weights and state bucket by bucket and the
 * layers' buffers chunk by chunk. */
static int average(tsr_replicas_t *r, int gi, bool outer) {
  const group_t *g = group_of(r, gi);
  tsr_task_opts_t o = layer_one_opts(r);
  set_average_weights(r, gi);
  bool fednova = r->sync.by_steps && gi < 0, bucketed = gi < 0 && r->nbuckets > 0;
  if (fednova) set_step_weights(r);
  int rc = bucketed && g->n > 1 ? average_buckets(r, outer, fednova, &o) : 0;
  for (int k = 0; k < r->nparams && rc == 0 && g->n > 1; k++) {
    rparam_t *rp = &r->params[k];
    /* The weights, then with average_state each state matrix: this rank's own, and every
     * rank's views. */
    tsr_tiles_t *own[2 + TSR_OPTIM_MAX_STATE] = {rp->p->w};
    tsr_tiles_t **views[2 + TSR_OPTIM_MAX_STATE] = {rp->w};
    int nsets = 1;
    for (int s = 0; r->sync.average_state && s < rp->nstate; s++, nsets++)
      own[nsets] = tsr__optim_state(r->net->optim, rp->p->index, s), views[nsets] = rp->s[s];
    if (rp->bufs) own[nsets] = rp->buf, views[nsets++] = rp->bufs; /* a plain weighted mean */
    /* Set by set: two levels keep one node partial per tile for all its chunks. */
    for (int s = bucketed ? nsets - (rp->bufs != NULL) : 0; s < nsets && rc == 0; s++)
      for (int I = 0; I < rp->cmt && rc == 0; I++)
        for (int j = 0; j < rp->nt && rc == 0; j++) {
          rc = reduce_chunk(&o, r, rp, gi, own[s], views[s], I, j);
          const tsr_tiles_t *result = acc_of(rp, gi);
          /* The home in the chunk's scope (under a grid, in its grid row): where acc is. */
          bool at_home =
              r->rank == (gi < 0 ? chunk_home(I, j, rp) : home_in(scope(r, rp, gi, j), rp, I, j));
          if (rc == 0 && s == 0) rc = step_chunk(r, rp, gi, outer, fednova, at_home, I, j, &result);
          if (rc == 0) rc = gather_chunk(&o, r, rp, gi, result, I, j, views[s], true, I, j);
        }
  }
  clear_samples(r, gi);
  if (gi < 0)
    r->agreed = rc == 0, r->st.averages++;
  else if (g->n > 1)
    r->st.group_averages++;
  return rc;
}

/* async-epoch: each rank's fold, then its copy of the result, per tile. The
 * folds of one tile are adjacent accesses to the global copy and commute
 * (in deterministic mode they apply in rank order instead). Under a grid a
 * tile is folded by the ranks of its scope, one per grid column (in column
 * order), each with a column's share; a replicated parameter by every row
 * alike, into that row's global copy. */
static int fold_all(tsr_replicas_t *r) {
  tsr_task_opts_t o = layer_one_opts(r);
  o.mpi = true;
  float gamma = tsr__optim_lr(r->net->optim);
  bool commute = !r->sync.deterministic;
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    for (int i = 0; i < tsr_tiles_mt(rp->p->w) && rc == 0; i++)
      for (int j = 0; j < rp->nt && rc == 0; j++) {
        const group_t *g = scope(r, rp, -1, j);
        if (!member(g, r->rank)) continue; /* grid: another row's tile */
        float share = 1.0f / (float)g->n;
        for (int t = 0; t < g->n && rc == 0; t++) {
          int q = g->ranks[t];
          rc = r->outer ? tsr__outer_fold_tile(r->outer, k, rp->global, rp->snap[q], rp->w[q], i, j,
                                               share, gamma, commute, &o)
                        : tsr__tile_fold(&o, rp->global, rp->snap[q], rp->w[q], i, j, commute);
          if (rc == 0) rc = tsr__tile_copy(&o, rp->w[q], rp->snap[q], i, j);
        }
        uint64_t bytes = (uint64_t)tsr_tiles_tile_rows(rp->p->w, i) *
                         (uint64_t)tsr_tiles_tile_cols(rp->p->w, j) * sizeof(float);
        int n = r->rank == tile_home(i, j, rp) ? g->n - 1 : 1;
        r->st.bytes_sent += bytes * (uint64_t)n, r->st.bytes_received += bytes * (uint64_t)n;
        r->st.messages_sent += n, r->st.messages_received += n;
      }
  }
  r->st.averages++;
  return rc;
}

/* The outer optimizer's anchors become the weights (equal on every rank
 * now), each chunk at its home. */
static int set_anchors(tsr_replicas_t *r) {
  tsr_task_opts_t o = layer_one_opts(r), local = with_mpi(&o, false);
  int rc = 0;
  for (int k = 0; (r->outer || r->sync.by_steps) && k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    tsr_tiles_t *x = r->outer ? tsr__outer_anchor(r->outer, k) : rp->anchor;
    for (int I = 0; x && I < rp->cmt && rc == 0; I++)
      for (int j = 0; j < rp->nt && rc == 0; j++) {
        int i, r0;
        chunk_tile(rp, I, &i, &r0);
        if (r->rank == chunk_home(I, j, rp))
          rc = tsr__tile_band_get(&local, x, I, j, rp->p->w, i, j, r0);
      }
  }
  return rc;
}

/* async-epoch: the global copy starts from the first rank of each tile's
 * scope (rank 0 without a grid, grid column 0 under one), and with an outer
 * optimizer each rank's fold start too. */
static int start_global(tsr_replicas_t *r, const tsr_task_opts_t *o) {
  int rc = 0;
  for (int k = 0; k < r->nparams && rc == 0; k++) {
    rparam_t *rp = &r->params[k];
    for (int i = 0; rp->global && i < tsr_tiles_mt(rp->p->w) && rc == 0; i++)
      for (int j = 0; j < rp->nt && rc == 0; j++) {
        const group_t *g = scope(r, rp, -1, j);
        if (!member(g, r->rank)) continue; /* grid: another row's tile */
        const tsr_tiles_t *first = rp->w[g->ranks[0]];
        rc = tsr__tile_copy(o, rp->global, first, i, j);
        for (int t = 0; r->outer && t < g->n && rc == 0; t++)
          rc = tsr__tile_copy(o, rp->snap[g->ranks[t]], first, i, j);
      }
  }
  return rc;
}

/* Every replica starts from rank 0's weights (under a grid every rank
 * initialized its tiles from the same seed, so replicas start equal); the
 * async global copy from them too (start_global), and the outer optimizer's
 * anchors. */
static int start_equal(tsr_replicas_t *r) {
  tsr_task_opts_t o = layer_one_opts(r);
  o.mpi = true;
  int rc = 0;
  for (int k = 0; r->grid_rows == 1 && k < r->nparams && rc == 0; k++)
    for (int q = 1; q < r->size && rc == 0; q++)
      rc = tsr__tiles_copy(&o, r->params[k].w[q], r->params[k].w[0]);
  if (rc == 0) rc = start_global(r, &o);
  return rc == 0 ? set_anchors(r) : rc;
}

/* --bucket-mb: the buckets of bk (none when it has none) and the chunks each holds, in
 * parameter and chunk order; their descriptors come later (create_buckets). */
static int make_buckets(tsr_replicas_t *r, const tsr_buckets_t *bk, const tsr_chunking_t *ch) {
  if (bk->n == 0) return 0;
  if (!(r->buckets = calloc((size_t)bk->n, sizeof *r->buckets))) return TSR_ENOMEM;
  r->nbuckets = bk->n;
  for (int b = 0; b < bk->n; b++) {
    bucket_t *t = &r->buckets[b];
    t->home = bk->home[b], t->floats = bk->floats[b];
    t->param = malloc(sizeof(int) * (size_t)bk->chunks[b]);
    t->I = malloc(sizeof(int) * (size_t)bk->chunks[b]);
    t->j = malloc(sizeof(int) * (size_t)bk->chunks[b]);
    if (!t->param || !t->I || !t->j) return TSR_ENOMEM;
  }
  for (int k = 0; k < r->nparams; k++)
    for (int c = 0; c < ch[k].cmt * ch[k].nt; c++) {
      if (ch[k].bucket[c] < 0) continue; /* a grid: another row's chunk */
      bucket_t *t = &r->buckets[ch[k].bucket[c]];
      if (ch[k].local) t->lidx = ch[k].local[c];
      t->param[t->nchunks] = k, t->I[t->nchunks] = c / ch[k].nt, t->j[t->nchunks++] = c % ch[k].nt;
    }
  return 0;
}

/* Two levels: the node buckets of tb and the tiles each holds; each rank keeps its own node's
 * (every node cuts the same, so every rank creates as many descriptors), homed on its local home
 * of the bucket's index. */
static int make_tile_buckets(tsr_replicas_t *r, const tsr_buckets_t *tb, const tsr_chunking_t *ch) {
  if (tb->n == 0) return 0;
  if (!(r->tbuckets = calloc((size_t)tb->n, sizeof *r->tbuckets))) return TSR_ENOMEM;
  r->ntb = tb->n;
  const group_t *node = &r->nodes[r->my_node];
  for (int b = 0; b < tb->n; b++) {
    bucket_t *t = &r->tbuckets[b];
    t->lidx = tb->local[b], t->home = node->ranks[tb->local[b] % node->n];
    t->floats = tb->floats[b];
    t->param = malloc(sizeof(int) * (size_t)tb->chunks[b]);
    t->I = malloc(sizeof(int) * (size_t)tb->chunks[b]);
    t->j = malloc(sizeof(int) * (size_t)tb->chunks[b]);
    if (!t->param || !t->I || !t->j) return TSR_ENOMEM;
  }
  for (int k = 0; k < r->nparams; k++) {
    const tsr_tiles_t *w = r->params[k].p->w;
    for (int c = 0; c < tsr_tiles_mt(w) * ch[k].nt; c++) {
      if (ch[k].tbucket[c] < 0) continue; /* a grid: another row's tile */
      bucket_t *t = &r->tbuckets[ch[k].tbucket[c]];
      t->param[t->nchunks] = k, t->I[t->nchunks] = c / ch[k].nt, t->j[t->nchunks++] = c % ch[k].nt;
    }
  }
  return 0;
}

/* Under a grid each row packs its own chunks into its own buckets: every rank makes as many
 * buckets (and node buckets) as the row with the most, the others empty and never packed, so
 * that every rank creates the same descriptors in the same order (their MPI tags). An empty
 * bucket's sum is homed on each rank itself; nothing travels. Collective. */
static int pad_buckets(tsr_replicas_t *r) {
  int mine[2] = {r->nbuckets, r->ntb}, most[2] = {0, 0};
  int *all = malloc(sizeof mine * (size_t)r->size);
  if (!all) return TSR_ENOMEM;
  int rc = tsr_dist_allgather(mine, (int)sizeof mine, all);
  for (int q = 0; rc == 0 && q < r->size; q++)
    for (int a = 0; a < 2; a++)
      if (all[2 * q + a] > most[a]) most[a] = all[2 * q + a];
  free(all);
  bucket_t **sets[2] = {&r->buckets, &r->tbuckets};
  int *counts[2] = {&r->nbuckets, &r->ntb};
  for (int a = 0; rc == 0 && a < 2; a++) {
    if (most[a] == *counts[a]) continue;
    bucket_t *more = realloc(*sets[a], sizeof *more * (size_t)most[a]);
    if (!more) return TSR_ENOMEM;
    memset(more + *counts[a], 0, sizeof *more * (size_t)(most[a] - *counts[a]));
    for (int b = *counts[a]; b < most[a]; b++)
      more[b].home = r->rank, more[b].floats = 1;
    *sets[a] = more, *counts[a] = most[a];
  }
  return rc;
}

/* Each bucket's row of floats on every rank (with every rank's views) and its sum on its home,
 * created on every rank in bucket order (descriptors take their MPI tags in creation order). */
static int create_bucket_rows(tsr_replicas_t *r, bucket_t *all, int n) {
  for (int b = 0; b < n; b++) {
    bucket_t *t = &all[b];
    TSR_TRY(tsr_tiles_create(&t->mine, 1, t->floats, 1, (int)t->floats));
    if (!(t->mines = replicas_of(r, t->mine))) return TSR_ENOMEM;
    TSR_TRY(tsr_tiles_create_distributed(&t->sum, 1, t->floats, 1, (int)t->floats, bucket_home, t));
  }
  return 0;
}

static int create_buckets(tsr_replicas_t *r) {
  if (r->grid_rows > 1 && r->sync.bucket_mb > 0) TSR_TRY(pad_buckets(r));
  TSR_TRY(create_bucket_rows(r, r->buckets, r->nbuckets));
  return create_bucket_rows(r, r->tbuckets, r->ntb);
}

static void destroy_bucket_rows(tsr_replicas_t *r, bucket_t **all, int *n) {
  for (int b = 0; b < *n; b++) {
    bucket_t *t = &(*all)[b];
    destroy_all(r, &t->mines);
    tsr_tiles_destroy(&t->mine), tsr_tiles_destroy(&t->sum);
    free(t->param), free(t->I), free(t->j);
  }
  free(*all), *all = NULL, *n = 0;
}

static void destroy_buckets(tsr_replicas_t *r) {
  destroy_bucket_rows(r, &r->buckets, &r->nbuckets);
  destroy_bucket_rows(r, &r->tbuckets, &r->ntb);
}

/* Under a grid row p averages the slice of the parameters its ranks hold: a spread parameter's
 * tile columns j with j mod Pr = p, as one matrix of their widths (its tiles are theirs, the
 * last one last), a replicated one whole (shapes[k]; cols 0: none of the row's). The planner
 * plans grid row 0 from the same shapes (src/plan/plan.c). */
static void row_shapes(const tsr_replicas_t *r, int p, tsr_chunk_shape_t *shapes) {
  for (int k = 0; k < r->nparams; k++) {
    const tsr_tiles_t *w = r->params[k].p->w;
    int64_t cols = 0;
    bool spread = w->kind == TSR_TILES_DISTRIBUTED;
    for (int j = 0; j < tsr_tiles_nt(w); j++)
      if (!spread || j % r->grid_rows == p) cols += tsr_tiles_tile_cols(w, j);
    shapes[k] = (tsr_chunk_shape_t){tsr_tiles_rows(w), cols, tsr_tiles_mb(w), tsr_tiles_nb(w)};
  }
}

/* Spreads a row's chunking c of a parameter (its tile columns of the row, or NULL: none)
 * back over the parameter's nt tile columns into *out (homes as positions in the row; another
 * row's columns take their neighbours' chunking, in no bucket). */
static int spread_row(const tsr_replicas_t *r, const tsr_tiles_t *w, const tsr_chunking_t *c,
                      tsr_chunking_t *out) {
  int pr = r->grid_rows, nt = tsr_tiles_nt(w), mt = tsr_tiles_mt(w);
  bool spread = w->kind == TSR_TILES_DISTRIBUTED;
  out->k = c ? c->k : 1, out->cr = c ? c->cr : tsr_tiles_mb(w), out->nt = nt;
  out->cmt = c ? c->cmt : mt;
  size_t count = (size_t)out->cmt * (size_t)nt, tiles = (size_t)mt * (size_t)nt;
  bool buckets = r->sync.bucket_mb > 0, tile_buckets = buckets && r->two_level;
  out->home = calloc(count, sizeof *out->home);
  if (r->two_level) out->local = calloc(count, sizeof *out->local);
  if (buckets) out->bucket = malloc(count * sizeof *out->bucket);
  if (buckets) out->offset = calloc(count, sizeof *out->offset);
  if (tile_buckets) out->tbucket = malloc(tiles * sizeof *out->tbucket);
  if (tile_buckets) out->toffset = calloc(tiles, sizeof *out->toffset);
  if (!out->home || (r->two_level && !out->local) || (buckets && (!out->bucket || !out->offset)) ||
      (tile_buckets && (!out->tbucket || !out->toffset)))
    return TSR_ENOMEM;
  for (size_t e = 0; buckets && e < count; e++) /* in no bucket until the row's own say */
    out->bucket[e] = -1;
  for (size_t e = 0; tile_buckets && e < tiles; e++)
    out->tbucket[e] = -1;
  for (int I = 0; c && I < out->cmt; I++)
    for (int j = 0; j < nt; j++) {
      int jc = spread ? j / pr : j, at = I * c->nt + (jc < c->nt ? jc : c->nt - 1);
      bool ours = !spread || j % pr == r->rank % pr;
      out->home[I * nt + j] = c->home[at];
      if (out->local) out->local[I * nt + j] = c->local[at];
      if (out->bucket) out->bucket[I * nt + j] = ours ? c->bucket[at] : -1;
      if (out->bucket && ours) out->offset[I * nt + j] = c->offset[at];
    }
  for (int i = 0; c && c->tbucket && i < mt; i++)
    for (int j = 0; j < nt; j++) {
      int jc = spread ? j / pr : j, at = i * c->nt + (jc < c->nt ? jc : c->nt - 1);
      bool ours = !spread || j % pr == r->rank % pr;
      out->tbucket[i * nt + j] = ours ? c->tbucket[at] : -1;
      if (ours) out->toffset[i * nt + j] = c->toffset[at];
    }
  return 0;
}

/* Under a grid: each grid row's chunks, planned over its own ranks (one a column), flat or
 * over the row's nodes, from its own slice (row_shapes), so that every row's ranks home its
 * chunks evenly; with --bucket-mb this rank's row's buckets (bk, and with two levels the node
 * buckets tb) from the same chunking, homes as ranks. This rank keeps its row's chunking (ch),
 * spread back over each parameter's tile columns (spread_row), each home as a position in the
 * row (a column: chunk_home takes it to the chunk's row). Every rank plans every row: the
 * descriptors a chunking needs (a stage, the updated bands, the gradient's views) are created
 * wherever any row needs them, so that every rank creates the same descriptors in the same
 * order (their MPI tags). */
static int plan_rows(tsr_replicas_t *r, tsr_chunking_t *ch, tsr_buckets_t *bk, tsr_buckets_t *tb) {
  int pr = r->grid_rows, pc = r->size / pr, mine = r->rank % pr;
  tsr_chunk_shape_t *shapes = malloc(sizeof *shapes * (size_t)r->nparams);
  tsr_chunking_t *row = calloc((size_t)r->nparams, sizeof *row);
  int *of = malloc(sizeof *of * (size_t)r->nparams), rc = shapes && row && of ? 0 : TSR_ENOMEM;
  memset(ch, 0, sizeof *ch * (size_t)r->nparams);
  for (int p = 0; rc == 0 && p < pr; p++) {
    row_shapes(r, p, shapes);
    int n = 0; /* the parameters the row holds, planned together */
    for (int k = 0; k < r->nparams; k++)
      if (shapes[k].cols > 0) shapes[n] = shapes[k], of[n++] = k;
    if (n > 0)
      rc = r->two_level
               ? tsr__chunks_plan_two_level(shapes, n, r->nnodes, r->per_node, row, NULL, NULL)
               : tsr__chunks_plan(shapes, n, pc, NULL, row, NULL, NULL);
    for (int e = 0; rc == 0 && e < n; e++) {
      rparam_t *rp = &r->params[of[e]];
      rp->staged = rp->staged || row[e].k > 1;
      rp->whole_g = rp->whole_g || row[e].k == 1 || r->two_level;
    }
    /* This rank's row: homes as positions (two levels: rank `local` of node `home`, as its
     * column), its buckets, and the chunking spread back over the tile columns. */
    for (int e = 0; rc == 0 && p == mine && r->two_level && e < n; e++)
      for (int c = 0; c < row[e].cmt * row[e].nt; c++) {
        const group_t *g = &r->nodes[row[e].home[c]];
        row[e].home[c] = g->ranks[row[e].local[c] % g->n] / pr;
      }
    uint64_t target = (uint64_t)(r->sync.bucket_mb * 1048576.0 + 0.5);
    if (rc == 0 && p == mine && target > 0 && n > 0)
      rc = tsr__chunks_buckets(shapes, n, row, pc, r->two_level ? r->per_node : 1, target, bk);
    if (rc == 0 && p == mine && target > 0 && n > 0 && r->two_level)
      rc = tsr__chunks_tile_buckets(shapes, n, row, r->per_node, target, tb);
    for (int b = 0; rc == 0 && p == mine && b < bk->n; b++)
      bk->home[b] = r->rows[mine].ranks[bk->home[b]];
    for (int k = 0; rc == 0 && p == mine && k < r->nparams; k++) {
      int e = 0;
      while (e < n && of[e] != k)
        e++;
      rc = spread_row(r, r->params[k].p->w, e < n ? &row[e] : NULL, &ch[k]);
    }
    tsr__chunks_free(row, n);
  }
  if (rc) tsr__chunks_free(ch, r->nparams);
  free(shapes), free(row), free(of);
  return rc;
}

/* Chunks and their homes (chunks.h: the coarsest chunking that balances
 * what each rank sends; with --shares, homes in proportion to them). Also
 * homes whole tiles, for async-epoch's fold. */
static int plan_chunks(tsr_replicas_t *r) {
  tsr_chunk_shape_t *shapes = malloc(sizeof *shapes * (size_t)r->nparams);
  tsr_chunking_t *ch = malloc(sizeof *ch * (size_t)r->nparams);
  int rc = shapes && ch ? 0 : TSR_ENOMEM;
  for (int k = 0; rc == 0 && k < r->nparams; k++) {
    const tsr_tiles_t *w = r->params[k].p->w;
    shapes[k] =
        (tsr_chunk_shape_t){tsr_tiles_rows(w), tsr_tiles_cols(w), tsr_tiles_mb(w), tsr_tiles_nb(w)};
  }
  tsr_buckets_t bk = {0}, tb = {0};
  if (rc == 0 && r->grid_rows > 1)
    rc = plan_rows(r, ch, &bk, &tb);
  else if (rc == 0 && r->two_level)
    rc = tsr__chunks_plan_two_level(shapes, r->nparams, r->nnodes, r->per_node, ch, NULL, NULL);
  else if (rc == 0)
    rc = tsr__chunks_plan(shapes, r->nparams, r->size, r->home_share, ch, NULL, NULL);
  for (int k = 0; rc == 0 && r->grid_rows == 1 && k < r->nparams; k++) {
    r->params[k].staged = ch[k].k > 1;
    r->params[k].whole_g = ch[k].k == 1 || r->two_level;
  }
  /* Two levels: the home is rank `local` of node `home` (a grid's rows: plan_rows did). */
  for (int k = 0; rc == 0 && r->grid_rows == 1 && k < r->nparams; k++)
    for (int c = 0; ch[k].local && c < ch[k].cmt * ch[k].nt; c++) {
      const group_t *g = &r->nodes[ch[k].home[c]];
      ch[k].home[c] = g->ranks[ch[k].local[c] % g->n];
    }
  /* Buckets by home rank: with two levels a home's chunks share its index in every node; and
   * with two levels node buckets of whole tiles (a grid's rows: plan_rows did). */
  if (rc == 0 && r->grid_rows == 1 && r->sync.bucket_mb > 0)
    rc = tsr__chunks_buckets(shapes, r->nparams, ch, r->size, r->two_level ? r->per_node : 1,
                             (uint64_t)(r->sync.bucket_mb * 1048576.0 + 0.5), &bk);
  if (rc == 0 && r->grid_rows == 1 && r->sync.bucket_mb > 0 && r->two_level)
    rc = tsr__chunks_tile_buckets(shapes, r->nparams, ch, r->per_node,
                                  (uint64_t)(r->sync.bucket_mb * 1048576.0 + 0.5), &tb);
  if (rc == 0 && (rc = make_buckets(r, &bk, ch))) tsr__chunks_free(ch, r->nparams);
  if (rc == 0 && (rc = make_tile_buckets(r, &tb, ch))) tsr__chunks_free(ch, r->nparams);
  tsr__buckets_free(&bk), tsr__buckets_free(&tb);
  for (int k = 0; rc == 0 && k < r->nparams; k++) {
    rparam_t *rp = &r->params[k];
    rp->k = ch[k].k, rp->cr = ch[k].cr, rp->cmt = ch[k].cmt, rp->nt = ch[k].nt;
    rp->chome = ch[k].home, rp->local = ch[k].local; /* the replicas' now */
    rp->cbucket = ch[k].bucket, rp->coff = ch[k].offset;
    rp->tbucket = ch[k].tbucket, rp->toff = ch[k].toffset;
  }
  free(shapes), free(ch);
  if (rc) return rc;
  /* async-epoch's whole tiles: homed in order, to the lightest so far, on a rank of the tile's
   * grid row (rank c Pr + p is column c, row p), as its grid column; a replicated parameter's
   * tile in the same column of every row. Every rank chooses alike (no row's own view). */
  int pr = r->grid_rows, pc = r->size / pr;
  uint64_t *load = calloc((size_t)r->size, sizeof *load);
  if (!load) return TSR_ENOMEM;
  for (int k = 0; k < r->nparams; k++) {
    rparam_t *rp = &r->params[k];
    const tsr_tiles_t *w = rp->p->w;
    bool spread = w->kind == TSR_TILES_DISTRIBUTED;
    if (!(rp->home = calloc((size_t)tsr_tiles_mt(w) * (size_t)rp->nt, sizeof *rp->home))) {
      free(load);
      return TSR_ENOMEM;
    }
    for (int i = 0; i < tsr_tiles_mt(w); i++)
      for (int j = 0; j < rp->nt; j++) {
        int p0 = spread ? tsr_tiles_rank_of(w, 0, j) % pr : 0, p1 = spread ? p0 + 1 : pr, best = 0;
        uint64_t least = UINT64_MAX;
        for (int c = 0; c < pc; c++) {
          uint64_t cost = 0;
          for (int p = p0; p < p1; p++)
            cost += load[c * pr + p];
          if (cost < least) best = c, least = cost;
        }
        uint64_t bytes = (uint64_t)tsr_tiles_tile_rows(w, i) * (uint64_t)tsr_tiles_tile_cols(w, j);
        for (int p = p0; p < p1; p++)
          load[best * pr + p] += bytes;
        rp->home[i * rp->nt + j] = best;
      }
  }
  free(load);
  return 0;
}

/* A chunk-tiled matrix of p's shape, distributed by chunk home. */
static int by_chunk_home(tsr_tiles_t **t, rparam_t *rp) {
  const tsr_tiles_t *w = rp->p->w;
  return tsr_tiles_create_distributed(t, tsr_tiles_rows(w), tsr_tiles_cols(w), rp->cr,
                                      tsr_tiles_nb(w), chunk_home, rp);
}

/* A matrix tiled like p's weights, distributed by tile home (async-epoch). */
static int by_tile_home(tsr_tiles_t **t, rparam_t *rp) {
  const tsr_tiles_t *w = rp->p->w;
  return tsr_tiles_create_distributed(t, tsr_tiles_rows(w), tsr_tiles_cols(w), tsr_tiles_mb(w),
                                      tsr_tiles_nb(w), tile_home, rp);
}

static int create_param(tsr_replicas_t *r, rparam_t *rp) {
  tsr_param_t *p = rp->p;
  const tsr_tiles_t *w = p->w;
  if (!(rp->w = replicas_of(r, p->w))) return TSR_ENOMEM;
  bool batch = r->batch; /* batch, or post-local's first phase */
  rp->nstate = r->sync.average_state || batch ? tsr__optim_nstate(r->net->optim) : 0;
  for (int k = 0; k < rp->nstate; k++)
    if (!(rp->s[k] = replicas_of(r, tsr__optim_state(r->net->optim, p->index, k))))
      return TSR_ENOMEM;
  if (rp->buf) {
    const tsr_tiles_t *b = rp->buf;
    if (tsr_tiles_rows(b) != tsr_tiles_rows(w) || tsr_tiles_cols(b) != tsr_tiles_cols(w) ||
        tsr_tiles_mb(b) != tsr_tiles_mb(w) || tsr_tiles_nb(b) != tsr_tiles_nb(w))
      return TSR_ESHAPE;
    if (!(rp->bufs = replicas_of(r, rp->buf))) return TSR_ENOMEM;
  }
  if (rp->staged) {
    /* A grid's slice stages its own columns only, on their rank. */
    if (w->kind == TSR_TILES_DISTRIBUTED)
      TSR_TRY(tsr_tiles_create_distributed(&rp->stage, tsr_tiles_rows(w), tsr_tiles_cols(w), rp->cr,
                                           tsr_tiles_nb(w), w->rank_of, w->rank_ctx));
    else
      TSR_TRY(tsr_tiles_create(&rp->stage, tsr_tiles_rows(w), tsr_tiles_cols(w), rp->cr,
                               tsr_tiles_nb(w)));
    if (!(rp->stages = replicas_of(r, rp->stage))) return TSR_ENOMEM;
    if (batch) TSR_TRY(by_chunk_home(&rp->updated, rp));
  }
  /* batch: the gradient's whole tiles travel (as chunks, or inside a node with two levels) */
  if (batch && rp->whole_g && !(rp->g = replicas_of(r, p->g))) return TSR_ENOMEM;
  TSR_TRY(by_chunk_home(&rp->acc, rp));
  if (r->sync.by_steps && !r->outer) TSR_TRY(by_chunk_home(&rp->anchor, rp));
  if (r->ngroups > 0) {
    /* Every rank creates every group's, in the same order: descriptors take their MPI tags in
     * creation order. */
    rp->gacc = calloc((size_t)r->ngroups, sizeof *rp->gacc);
    rp->gctx = calloc((size_t)r->ngroups, sizeof *rp->gctx);
    if (!rp->gacc || !rp->gctx) return TSR_ENOMEM;
    for (int g = 0; g < r->ngroups; g++) {
      rp->gctx[g] = (group_home_t){rp, &r->groups[g]};
      TSR_TRY(tsr_tiles_create_distributed(&rp->gacc[g], tsr_tiles_rows(w), tsr_tiles_cols(w),
                                           rp->cr, tsr_tiles_nb(w), group_chunk_home,
                                           &rp->gctx[g]));
    }
  }
  if (r->two_level && r->nbuckets > 0 &&
      !(rp->tdone = calloc((size_t)tsr_tiles_mt(w) * (size_t)rp->nt, sizeof *rp->tdone)))
    return TSR_ENOMEM;
  if (r->two_level) {
    rp->ntile = calloc((size_t)r->nnodes, sizeof *rp->ntile);
    rp->nband = calloc((size_t)r->nnodes, sizeof *rp->nband);
    rp->nctx = calloc((size_t)r->nnodes, sizeof *rp->nctx);
    if (!rp->ntile || !rp->nband || !rp->nctx) return TSR_ENOMEM;
    for (int n = 0; n < r->nnodes; n++) {
      rp->nctx[n] = (group_home_t){rp, &r->nodes[n]};
      TSR_TRY(tsr_tiles_create_distributed(&rp->ntile[n], tsr_tiles_rows(w), tsr_tiles_cols(w),
                                           tsr_tiles_mb(w), tsr_tiles_nb(w), node_tile_home,
                                           &rp->nctx[n]));
      TSR_TRY(tsr_tiles_create_distributed(&rp->nband[n], tsr_tiles_rows(w), tsr_tiles_cols(w),
                                           rp->cr, tsr_tiles_nb(w), node_chunk_home, &rp->nctx[n]));
    }
  }
  bool async = r->policy->folds;
  if (async) {
    TSR_TRY(by_tile_home(&rp->global, rp));
    if (!(rp->snap = calloc((size_t)r->size, sizeof *rp->snap))) return TSR_ENOMEM;
    for (int q = 0; q < r->size; q++)
      TSR_TRY(by_tile_home(&rp->snap[q], rp));
  }
  /* The outer state: laid out like the averages (anchor and momentum by chunk home), or under
   * async-epoch like the global copy (momentum only: the global copy is the anchor). */
  if (r->outer && async)
    TSR_TRY(tsr__outer_add(r->outer, rp->index, tsr_tiles_rows(w), tsr_tiles_cols(w),
                           tsr_tiles_mb(w), tsr_tiles_nb(w), tile_home, rp, false));
  else if (r->outer)
    TSR_TRY(tsr__outer_add(r->outer, rp->index, tsr_tiles_rows(w), tsr_tiles_cols(w), rp->cr,
                           tsr_tiles_nb(w), chunk_home, rp, true));
  return 0;
}

static void destroy_param(tsr_replicas_t *r, rparam_t *rp) {
  /* Views first: they borrow the matrices' tiles. */
  for (int k = 0; k < TSR_OPTIM_MAX_STATE; k++)
    destroy_all(r, &rp->s[k]);
  destroy_all(r, &rp->w), destroy_all(r, &rp->g), destroy_all(r, &rp->stages);
  destroy_all(r, &rp->bufs);
  destroy_all(r, &rp->snap);
  tsr_tiles_destroy(&rp->stage), tsr_tiles_destroy(&rp->acc), tsr_tiles_destroy(&rp->updated);
  tsr_tiles_destroy(&rp->global), tsr_tiles_destroy(&rp->anchor);
  for (int g = 0; rp->gacc && g < r->ngroups; g++)
    tsr_tiles_destroy(&rp->gacc[g]);
  for (int n = 0; rp->ntile && n < r->nnodes; n++)
    tsr_tiles_destroy(&rp->ntile[n]);
  for (int n = 0; rp->nband && n < r->nnodes; n++)
    tsr_tiles_destroy(&rp->nband[n]);
  free(rp->gacc), free(rp->gctx), free(rp->ntile), free(rp->nband), free(rp->nctx);
  free(rp->chome), free(rp->local), free(rp->home), free(rp->cbucket), free(rp->coff);
  free(rp->tdone), free(rp->tbucket), free(rp->toff);
}

/* Each rank's node, of_rank[q] (size entries, the caller's), numbered in order of their lowest
 * ranks: groups of gs consecutive ranks, or (gs 0) the nodes MPI sees (a collective call).
 * Returns the number of nodes. */
static int rank_nodes(int size, int gs, int *of_rank) {
  if (gs == 0) return tsr_dist_nodes(of_rank);
  for (int q = 0; q < size; q++)
    of_rank[q] = q / gs;
  return (size + gs - 1) / gs;
}

/* The ranks cut into groups of gs consecutive ranks, or (gs 0) into the nodes MPI sees (a
 * collective call): *n groups in *groups, their ranks in rank order; of_rank[q] (size entries,
 * the caller's) is rank q's group. */
static int split_ranks(const tsr_replicas_t *r, int gs, int *n, group_t **groups, int *of_rank) {
  *n = rank_nodes(r->size, gs, of_rank);
  if (!(*groups = calloc((size_t)*n, sizeof **groups))) return TSR_ENOMEM;
  for (int g = 0; g < *n; g++)
    if (!((*groups)[g].ranks = malloc(sizeof(int) * (size_t)r->size))) return TSR_ENOMEM;
  for (int q = 0; q < r->size; q++) {
    group_t *g = &(*groups)[of_rank[q]];
    g->ranks[g->n++] = q;
  }
  return 0;
}

/* hier under --grid PrxPc: groups of whole grid columns, gs consecutive columns each, or
 * (gs 0) the columns whose first rank is on one node; group g of columns is groups g Pr + p, its
 * columns' ranks of grid row p (in column order), so that each rank averages its slice with its
 * row's ranks of the group's other columns. */
static int column_groups(tsr_replicas_t *r, int gs) {
  int pr = r->grid_rows, pc = r->size / pr, ncg = 0;
  int *of_col = malloc(sizeof(int) * (size_t)pc), *node_of = malloc(sizeof(int) * (size_t)r->size);
  int rc = of_col && node_of ? 0 : TSR_ENOMEM;
  if (rc == 0 && gs == 0) tsr_dist_nodes(node_of); /* collective */
  for (int c = 0; rc == 0 && c < pc; c++) {
    of_col[c] = gs > 0 ? c / gs : -1;
    for (int e = 0; gs == 0 && e < c && of_col[c] < 0; e++) /* nodes numbered as they appear */
      if (node_of[e * pr] == node_of[c * pr]) of_col[c] = of_col[e];
    if (of_col[c] < 0) of_col[c] = ncg;
    if (of_col[c] + 1 > ncg) ncg = of_col[c] + 1;
  }
  if (rc == 0 && !(r->groups = calloc((size_t)ncg * (size_t)pr, sizeof *r->groups)))
    rc = TSR_ENOMEM;
  for (int g = 0; rc == 0 && g < ncg * pr; g++)
    if (!(r->groups[g].ranks = malloc(sizeof(int) * (size_t)pc))) rc = TSR_ENOMEM;
  for (int c = 0; rc == 0 && c < pc; c++)
    for (int p = 0; p < pr; p++) {
      group_t *g = &r->groups[of_col[c] * pr + p];
      g->ranks[g->n++] = c * pr + p;
    }
  if (rc == 0) r->ngroups = ncg * pr, r->my_group = of_col[r->rank / pr] * pr + r->rank % pr;
  free(of_col), free(node_of);
  return rc;
}

int tsr__replicas_make_groups(tsr_replicas_t *r, int gs) {
  if (r->grid_rows > 1) {
    TSR_TRY(column_groups(r, gs));
    return (r->gsamples = calloc((size_t)r->size, sizeof *r->gsamples)) ? 0 : TSR_ENOMEM;
  }
  int *group_of_rank = malloc(sizeof(int) * (size_t)r->size);
  int rc = group_of_rank ? split_ranks(r, gs, &r->ngroups, &r->groups, group_of_rank) : TSR_ENOMEM;
  if (rc == 0) r->my_group = group_of_rank[r->rank];
  free(group_of_rank);
  if (rc == 0 && !(r->gsamples = calloc((size_t)r->size, sizeof *r->gsamples))) rc = TSR_ENOMEM;
  return rc;
}

const char *tsr__replicas_flat_only(const tsr_sync_t *sync, bool uneven) {
  if (tsr__sync_policy(&sync->schedule)->folds)
    return "async-epoch folds one rank's weights after another into the global copy, so a "
           "node's ranks cannot be summed first";
  if (uneven) return "--shares other than uniform places the chunks' homes by rank";
  return NULL;
}

const char *tsr__replicas_no_buckets(const tsr_sync_t *sync) {
  if (tsr__sync_policy(&sync->schedule)->folds)
    return "async-epoch folds whole tiles into the global copy, not chunks";
  return NULL;
}

const char *tsr__replicas_row_nodes(const int *node_of, int size, int pr, int *nodes,
                                    int *per_node) {
  static char why[160];
  int *count = malloc(sizeof(int) * (size_t)size); /* node numbers are below the ranks */
  if (!count) return "out of memory";
  for (int p = 0; p < pr; p++) {
    int n = 0, most = 0;
    memset(count, 0, sizeof(int) * (size_t)size);
    for (int q = p; q < size; q += pr) {
      n += count[node_of[q]] == 0;
      if (++count[node_of[q]] > most) most = count[node_of[q]];
    }
    if (p == 0) {
      *nodes = n, *per_node = most;
    } else if (n != *nodes || most != *per_node) {
      snprintf(why, sizeof why,
               "the grid rows lie on the nodes unevenly (row 1 on %d node%s with at most %d of "
               "its ranks on one, row %d on %d with at most %d)",
               *nodes, *nodes == 1 ? "" : "s", *per_node, p + 1, n, most);
      free(count);
      return why;
    }
  }
  free(count);
  return NULL;
}

bool tsr__replicas_two_level(const tsr_sync_t *sync, bool uneven, int nodes, int per_node) {
  if (tsr__replicas_flat_only(sync, uneven)) return false;
  return sync->allreduce == TSR_ALLREDUCE_TWO_LEVEL ||
         (sync->allreduce == TSR_ALLREDUCE_AUTO && nodes > 1 && per_node > 1);
}

/* The nodes of the ranks this rank averages with (every rank; under a grid its grid row's, one
 * a column), from every rank's node (of_rank): r->nodes in order of their lowest ranks, each
 * member's index in r->node_of (-1 for the others), the most members one holds. */
static int member_nodes(tsr_replicas_t *r, const group_t *members, const int *of_rank) {
  int *index = malloc(sizeof(int) * (size_t)r->size);
  r->node_of = malloc(sizeof(int) * (size_t)r->size);
  r->nodes = calloc((size_t)members->n, sizeof *r->nodes);
  if (!index || !r->node_of || !r->nodes) {
    free(index);
    return TSR_ENOMEM;
  }
  for (int q = 0; q < r->size; q++)
    index[q] = -1, r->node_of[q] = -1;
  for (int t = 0; t < members->n; t++) {
    int q = members->ranks[t], n = of_rank[q];
    if (index[n] < 0) {
      index[n] = r->nnodes++;
      if (!(r->nodes[index[n]].ranks = malloc(sizeof(int) * (size_t)members->n))) {
        free(index);
        return TSR_ENOMEM;
      }
    }
    group_t *g = &r->nodes[index[n]];
    g->ranks[g->n++] = q, r->node_of[q] = index[n];
    if (g->n > r->per_node) r->per_node = g->n;
  }
  r->my_node = r->node_of[r->rank];
  free(index);
  return 0;
}

/* --allreduce and --node-size: the nodes (always computed: a collective call every rank makes),
 * and whether averages over every rank go through them. auto: where there are several nodes
 * and one holds several of the ranks that average together (every rank, or under a grid a grid
 * row's), homes not weighted by --shares, and a policy that sums (async-epoch folds one rank
 * after another). Under a grid each row averages over its own nodes, so every row must lie
 * alike on them: each makes descriptors of its nodes' number and shape, and every rank creates
 * the same descriptors in the same order (their MPI tags). Asked for explicitly where it cannot
 * be: an error (tsr_run_check refuses what it can tell before the nodes are known). */
static int choose_levels(tsr_replicas_t *r, tsr_errbuf_t *err) {
  int *of_rank = malloc(sizeof(int) * (size_t)r->size);
  if (!of_rank) return TSR_ENOMEM;
  rank_nodes(r->size, r->sync.node_size, of_rank);
  int pr = r->grid_rows, nodes = 0, per_node = 0;
  const char *why = tsr__replicas_flat_only(&r->sync, r->home_share != NULL);
  const char *rows = tsr__replicas_row_nodes(of_rank, r->size, pr, &nodes, &per_node);
  int rc = member_nodes(r, pr > 1 ? &r->rows[r->rank % pr] : &r->all, of_rank);
  free(of_rank);
  TSR_TRY(rc);
  if (!why) why = rows;
  if (r->sync.allreduce == TSR_ALLREDUCE_TWO_LEVEL && why)
    return tsr_error_set(err, TSR_EINVAL, "--allreduce two-level: %s; use --allreduce flat or auto",
                         why);
  r->two_level =
      !why && tsr__replicas_two_level(&r->sync, r->home_share != NULL, r->nnodes, r->per_node);
  return 0;
}

/* batch under --clip-grad: the views grad_end all-reduces the sum of squares with. */
static int clip_views(tsr_replicas_t *r) {
  TSR_TRY(tsr__net_tiles(&r->sq_total, 1, 1, 1, 1));
  if (!(r->sq = replicas_of(r, r->net->grad_sq))) return TSR_ENOMEM;
  if (!(r->sq_totals = replicas_of(r, r->sq_total))) return TSR_ENOMEM;
  return 0;
}

int tsr__replicas_create(tsr_replicas_t **out, tsr_net_t *net, const tsr_sync_t *sync,
                         const double *share, tsr_errbuf_t *err) {
  *out = NULL;
  int pr = tsr_net_grid_rows(net); /* what a grid supports: tsr_run_check */
  tsr_replicas_t *r = calloc(1, sizeof *r);
  if (!r) return TSR_ENOMEM;
  r->net = net, r->sync = *sync;
  r->rank = tsr_dist_rank(), r->size = tsr_dist_size();
  r->grid_rows = pr;
  /* One grid column (Px1): one replica, nothing to average. */
  r->policy = pr == r->size ? &tsr__sync_none : tsr__sync_policy(&sync->schedule);
  sync = &r->sync;
  r->batch = r->policy->traits.meets_every_step;
  r->weights = calloc((size_t)r->size, sizeof *r->weights);
  r->send_ranks = calloc((size_t)r->size, sizeof *r->send_ranks);
  r->send_w = calloc((size_t)r->size, sizeof *r->send_w);
  r->samples = calloc((size_t)r->size, sizeof *r->samples);
  r->steps = calloc((size_t)r->size, sizeof *r->steps);
  r->all.n = r->size;
  r->all.ranks = malloc(sizeof(int) * (size_t)r->size);
  r->nparams = tsr_net_n_params(net);
  r->params = calloc((size_t)r->nparams, sizeof *r->params);
  int rc = r->weights && r->send_ranks && r->send_w && r->samples && r->steps && r->all.ranks &&
                   r->params
               ? 0
               : TSR_ENOMEM;
  for (int q = 0; q < r->size && rc == 0; q++)
    r->all.ranks[q] = q;
  /* Homes in proportion to the shares (a rank's part of the reductions and sharded updates
   * follows its part of the samples); a share of 0 still homes what the others cannot. */
  if (rc == 0 && share && pr == 1) {
    if (!(r->home_share = malloc(sizeof(double) * (size_t)r->size))) rc = TSR_ENOMEM;
    for (int q = 0; rc == 0 && q < r->size; q++)
      r->home_share[q] = share[q] * r->size > 1e-3 ? share[q] * r->size : 1e-3;
  }
  if (rc == 0 && !(r->rows = calloc((size_t)pr, sizeof *r->rows))) rc = TSR_ENOMEM;
  for (int p = 0; p < pr && rc == 0; p++) {
    if (!(r->rows[p].ranks = malloc(sizeof(int) * (size_t)(r->size / pr)))) rc = TSR_ENOMEM;
    for (int q = p; rc == 0 && q < r->size; q += pr)
      r->rows[p].ranks[r->rows[p].n++] = q;
  }
  if (rc == 0 && r->policy->create) rc = r->policy->create(r, &sync->schedule);
  tsr_errbuf_t why = {""};
  if (rc == 0 && (rc = choose_levels(r, &why)) && why.msg[0]) {
    tsr__replicas_destroy(&r);
    return tsr_error_set(err, rc, "%s", why.msg);
  }
  if (rc == 0 && sync->outer.kind != TSR_OUTER_NONE)
    rc = tsr__outer_create(&r->outer, &sync->outer, r->nparams);
  int k = 0;
  for (int l = 0; l < net->n_layers && rc == 0; l++)
    for (int m = 0; m < net->layers[l].nparams; m++, k++)
      r->params[k].p = &net->layers[l].params[m], r->params[k].index = k, r->params[k].r = r,
      r->params[k].buf = m < net->layers[l].nbuffers ? net->layers[l].buffers[m] : NULL;
  if (rc == 0) rc = plan_chunks(r);
  for (k = 0; k < r->nparams && rc == 0; k++)
    rc = create_param(r, &r->params[k]);
  if (rc == 0) rc = create_buckets(r);
  if (rc == 0 && !(r->stats = replicas_of(r, net->train_stats))) rc = TSR_ENOMEM;
  if (rc == 0)
    rc = tsr_tiles_create_distributed(&r->stats_sum, tsr_tiles_rows(net->train_stats), 2, 1, 2,
                                      rank_zero, NULL);
  if (rc == 0) rc = start_equal(r);
  if (rc == 0 && sync->sync_bn) rc = tsr__sync_bn_create(&r->sync_bn, net);
  if (rc == 0 && r->batch && net->grad_sq) rc = clip_views(r);
  if (rc) {
    tsr__replicas_destroy(&r);
    return tsr_error_set(err, rc, "cannot set up the replicas: %s", tsr_strerror(rc));
  }
  if (r->batch)
    r->previous = tsr__net_set_grad_hook(
        net, (tsr_grad_hook_t){grad_hook, r, r->sq_total || r->nbuckets ? grad_end : NULL});
  memset(&r->st, 0, sizeof r->st);
  r->agreed = true;
  *out = r;
  return 0;
}

bool tsr__replicas_agree(const tsr_replicas_t *r) {
  /* One grid column (Px1) is one replica: nothing to disagree with. */
  return r->batch || r->agreed || r->grid_rows == r->size;
}

int tsr__replicas_share_state(tsr_replicas_t *r) {
  if (!r->batch) return 0;
  tsr_task_opts_t o = layer_one_opts(r), local = with_mpi(&o, false);
  int rc = 0;
  for (int p = 0; p < r->nparams && rc == 0; p++) {
    rparam_t *rp = &r->params[p];
    for (int s = 0; s < rp->nstate && rc == 0; s++) {
      tsr_tiles_t *own = tsr__optim_state(r->net->optim, rp->p->index, s);
      for (int I = 0; I < rp->cmt && rc == 0; I++)
        for (int j = 0; j < rp->nt && rc == 0; j++) {
          int i, r0, home = chunk_home(I, j, rp);
          chunk_tile(rp, I, &i, &r0);
          /* A band travels from a chunk-tiled copy; a whole tile straight from the home's. */
          if (rp->k > 1 && r->rank == home)
            rc = tsr__tile_band_get(&local, rp->updated, I, j, own, i, j, r0);
          if (rc == 0)
            rc = rp->k > 1
                     ? gather_chunk(&o, r, rp, -1, rp->updated, I, j, rp->s[s], false, I, j)
                     : gather_chunk(&o, r, rp, -1, rp->s[s][home], i, j, rp->s[s], false, I, j);
        }
    }
  }
  return rc == 0 ? tsr__progress_wait_all() : rc;
}

/* ---- What a checkpoint needs of the replicas ---- */

void tsr__replicas_mark_final(tsr_replicas_t *r) {
  r->final_extra = true;
}

bool tsr__replicas_final_extra(const tsr_replicas_t *r) {
  return r->final_extra;
}

bool tsr__replicas_has_outer(const tsr_replicas_t *r) {
  return r->outer != NULL;
}

static const rparam_t *param_of(const tsr_replicas_t *r, int index) {
  for (int k = 0; k < r->nparams; k++)
    if (r->params[k].p->index == index) return &r->params[k];
  return NULL;
}

int tsr__replicas_outer_read(tsr_replicas_t *r, int index, float *all) {
  const rparam_t *rp = param_of(r, index);
  const tsr_tiles_t *u = r->outer && rp ? tsr__outer_momentum(r->outer, rp->index) : NULL;
  /* Each tile from the rank that homes it; under a grid each row homes its chunks by its own
   * plan (plan_rows), which only that row's ranks know. */
  if (!u) return TSR_EINVAL;
  return r->grid_rows > 1 ? tsr_tiles_gather_owned(u, all) : tsr_tiles_gather(u, all);
}

int tsr__replicas_outer_write(tsr_replicas_t *r, int index, const float *all) {
  const rparam_t *rp = param_of(r, index);
  tsr_tiles_t *u = r->outer && rp ? tsr__outer_momentum(r->outer, rp->index) : NULL;
  return u ? tsr_tiles_write_owned(u, all) : TSR_EINVAL;
}

int tsr__replicas_resume_local(tsr_replicas_t *r, int64_t local_from) {
  /* As tsr__replicas_go_local, but every rank holds its own optimizer state already (the
   * checkpoint's): nothing to share. */
  if (!r->batch) return 0;
  tsr__net_set_grad_hook(r->net, r->previous);
  r->previous = (tsr_grad_hook_t){0};
  r->batch = false, r->agreed = true;
  r->local_from = local_from;
  clear_samples(r, -1);
  return set_anchors(r);
}

void tsr__replicas_destroy(tsr_replicas_t **rp) {
  tsr_replicas_t *r = *rp;
  if (!r) return;
  if (tsr_dist_active()) tsr__progress_wait_all();
  if (r->previous.fn) tsr__net_set_grad_hook(r->net, r->previous);
  tsr__sync_bn_destroy(&r->sync_bn);
  /* The outer state first: destroying a distributed matrix asks its rank_of, which reads the
   * chunk homes destroy_param frees. */
  tsr__outer_destroy(&r->outer);
  destroy_buckets(r);
  for (int k = 0; r->params && k < r->nparams; k++)
    destroy_param(r, &r->params[k]);
  destroy_all(r, &r->stats);
  tsr_tiles_destroy(&r->stats_sum);
  destroy_all(r, &r->sq);
  destroy_all(r, &r->sq_totals);
  tsr_tiles_destroy(&r->sq_total);
  for (int g = 0; r->groups && g < r->ngroups; g++)
    free(r->groups[g].ranks);
  for (int p = 0; r->rows && p < r->grid_rows; p++)
    free(r->rows[p].ranks);
  for (int n = 0; r->nodes && n < r->nnodes; n++)
    free(r->nodes[n].ranks);
  free(r->nodes), free(r->node_of);
  free(r->rows);
  free(r->groups), free(r->all.ranks), free(r->gsamples);
  free(r->params), free(r->weights), free(r->send_ranks), free(r->send_w), free(r->home_share),
      free(r->samples), free(r->steps);
  free(r);
  *rp = NULL;
}

void tsr__replicas_count(tsr_replicas_t *r, const int *samples_per_rank) {
  r->agreed = false; /* a step without an average follows (batch: always agree) */
  int64_t total = 0;
  for (int q = 0; q < r->size; q++) {
    r->samples[q] += samples_per_rank[q];
    r->steps[q] += samples_per_rank[q] > 0;
    if (r->gsamples) r->gsamples[q] += samples_per_rank[q];
    total += samples_per_rank[q];
  }
  if (r->sync_bn) tsr__sync_bn_count(r->sync_bn, samples_per_rank);
  /* The global gradient is the mean over the global batch. */
  if (r->batch)
    for (int q = 0; q < r->size; q++)
      r->weights[q] = total > 0 ? (double)samples_per_rank[q] * r->grid_rows / (double)total : 0.0;
}

bool tsr__replicas_averaging_gradients(const tsr_replicas_t *r) {
  return r->batch;
}

int64_t tsr__replicas_local_from(const tsr_replicas_t *r) {
  return r->local_from;
}

int tsr__replicas_go_local(tsr_replicas_t *r, int64_t steps_done) {
  /* Local SGD from here: every rank needs the whole optimizer state (sharded until now) and
   * updates its own weights again. */
  int rc = tsr__replicas_share_state(r);
  tsr__net_set_grad_hook(r->net, r->previous);
  r->previous = (tsr_grad_hook_t){0};
  r->batch = false, r->agreed = true;
  r->local_from = steps_done;
  clear_samples(r, -1);
  if (rc == 0) rc = set_anchors(r);
  return rc;
}

int tsr__replicas_average_all(tsr_replicas_t *r) {
  return average(r, -1, r->outer != NULL);
}

int tsr__replicas_average_plain(tsr_replicas_t *r) {
  return average(r, -1, false);
}

int tsr__replicas_average_group(tsr_replicas_t *r) {
  return average(r, r->my_group, false);
}

int tsr__replicas_fold(tsr_replicas_t *r) {
  return fold_all(r);
}

int tsr__replicas_wait(tsr_replicas_t *r) {
  (void)r;
  return tsr__progress_wait_all();
}

/* Whether no rank took a sample since the last averaging (every rank takes
 * the same steps, so a step since then would have counted samples). */
static bool nothing_since_average(const tsr_replicas_t *r) {
  for (int q = 0; q < r->size; q++)
    if (r->samples[q] != 0) return false;
  return true;
}

int tsr__replicas_end_local(tsr_replicas_t *r, bool last) {
  int rc = 0;
  /* One model at the end, unless the last step averaged already (no samples since). */
  if (last && !r->batch && !nothing_since_average(r)) {
    rc = tsr__replicas_average_all(r);
    tsr__replicas_mark_final(r);
  }
  if (rc == 0 && !r->batch) rc = tsr__progress_wait_all();
  return rc;
}

/* The policy's hooks, timed as synchronization. */
int tsr__replicas_epoch_begin(tsr_replicas_t *r, int epoch, int64_t steps_done) {
  if (!r->policy->epoch_begin) return 0;
  double t0 = now();
  int rc = r->policy->epoch_begin(r, &r->sync.schedule, epoch, steps_done);
  r->st.seconds += now() - t0;
  return rc;
}

int tsr__replicas_after_step(tsr_replicas_t *r, int64_t step) {
  if (!r->policy->after_step) return 0;
  double t0 = now();
  int rc = r->policy->after_step(r, &r->sync.schedule, step);
  r->st.seconds += now() - t0;
  return rc;
}

int tsr__replicas_epoch_end(tsr_replicas_t *r, int epoch, bool last) {
  if (!r->policy->epoch_end) return 0;
  double t0 = now();
  int rc = r->policy->epoch_end(r, &r->sync.schedule, epoch, last);
  r->st.seconds += now() - t0;
  return rc;
}

/* The training counters of every rank are summed on rank 0 by StarPU-MPI
 * tasks (the same owner-computes mechanism as averaging), then read there (a language model's
 * divided by its positions, as tsr_net_read_stats does); each rank then clears its own. */
int tsr__replicas_reduce_stats(tsr_replicas_t *r, double *loss, double *correct) {
  tsr_task_opts_t o = layer_one_opts(r);
  o.mpi = true;
  int rc = 0;
  /* Grid: row 0 of each column holds its column's counts. */
  for (int q = 0; q < r->size && rc == 0; q += r->grid_rows)
    rc = tsr__tiles_axpby(&o, 1.0f, r->stats[q], q == 0 ? 0.0f : 1.0f, r->stats_sum);
  double mine_loss, mine_correct;
  if (rc == 0) rc = tsr_net_take_stats(r->net, false, &mine_loss, &mine_correct);
  *loss = 0, *correct = 0;
  if (rc || r->rank != 0) return rc;
  int64_t n = tsr_tiles_rows(r->stats_sum);
  float buf[2 * 64];
  float *v = n <= 64 ? buf : malloc(sizeof(float) * 2 * (size_t)n);
  if (!v) return TSR_ENOMEM;
  rc = tsr_tiles_read(r->stats_sum, v);
  for (int64_t i = 0; i < n && rc == 0; i++)
    *loss += v[2 * i], *correct += v[2 * i + 1];
  int p = tsr_net_positions(r->net); /* per sample, as tsr_net_read_stats says */
  *loss /= p, *correct /= p;
  if (v != buf) free(v);
  return rc;
}

void tsr__replicas_take_stats(tsr_replicas_t *r, tsr_sync_stats_t *st) {
  *st = r->st;
  memset(&r->st, 0, sizeof r->st);
}
