/* Data-parallel training over MPI ranks: each rank holds a full replica and
 * a shard of the training set; a synchronization policy keeps the replicas
 * in agreement. All communication inside the training loop is StarPU-MPI
 * moving tiles between tasks; plain MPI is used only at start-up (checking
 * that ranks agree) and on a fatal error (stopping every rank). */
#ifndef TESSERA_DIST_H
#define TESSERA_DIST_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/error.h"

TSR_EXTERN_C_BEGIN

/* The synchronization policies (--sync). Each is described once, by its own file in
 * src/parallel/ (sync_<name>.c) and one line of the registry (src/parallel/policy.c): its
 * parse, description, traits and the hooks the training loop calls. Nothing else tests a
 * kind: ask tsr_sync_traits. A zeroed tsr_sync_t is TSR_SYNC_NONE. */
typedef enum {
  TSR_SYNC_NONE,        /* one process, or independent replicas */
  TSR_SYNC_BATCH,       /* gradients averaged every batch; update on each tile's home rank */
  TSR_SYNC_EVERY,       /* weights averaged every K batches (local SGD) */
  TSR_SYNC_EPOCH,       /* weights averaged every n epochs, all ranks together */
  TSR_SYNC_ASYNC_EPOCH, /* at its epoch end each rank folds itself into a global copy */
  TSR_SYNC_POST_LOCAL,  /* batch for the first `post_epochs` epochs, then every=K */
  TSR_SYNC_HIER,        /* the ranks of a node average every `group_every` steps, all every K */
  TSR_SYNC_GROW         /* weights averaged after steps K, 3K, 7K ... (periods doubling) */
} tsr_sync_kind_t;

/* When replicas meet and what they average: what --sync says, and nothing else. */
typedef struct {
  tsr_sync_kind_t kind;
  int every; /* K for every=K, post-local and hier (steps between averages over all ranks), n for
                epoch=n, grow=K's first period (>= 1) */
  int post_epochs; /* post-local: epochs of batch averaging before local SGD */
  int group_every; /* hier: steps between averages inside a group */
  int group_size;  /* hier: ranks per group, consecutive; 0: the ranks of one node */
} tsr_sync_schedule_t;

/* What a policy is, for everyone who must decide by it (the trainer, the run's setup, the
 * planner, the CLI): read from its registry entry (tsr_sync_traits). */
typedef struct {
  const char *name;     /* "every", "post-local" */
  const char *synopsis; /* as messages and help write it: "every=K", "epoch[=n]" */
  /* Ranks meet at every step (batch, post-local): under --shares each rank's batch is its
   * share of the global batch, no empty step is skipped, and SGD's rate scales linearly with
   * the ranks (TSR_LR_SCALING_AUTO). */
  bool meets_every_step;
  bool averages_weights; /* averages weights, so it can take an outer optimizer */
  bool counts_steps;     /* can normalize its averages by local steps (--weighting steps) */
  bool grid_columns;     /* supported under --grid PrxPc with several columns (Pc > 1) */
  /* Does anything only with several ranks: on one process it trains that process alone (the
   * run's setup warns). Batch is not: one rank with the batch is the same training. */
  bool needs_ranks;
  bool plannable; /* tessera plan models it (tsr_plan_run) */
} tsr_sync_traits_t;

/* What a weight average does with the mean x̄ of the replicas (every=K,
 * epoch=n, post-local's local phase, hier's averages over all ranks). Each
 * keeps an anchor x (the weights every rank last restarted from) and a
 * momentum u, zero at the start, per parameter; with Δ = x - x̄:
 *   slowmo (Wang et al., 2020), base rate γ (the optimizer's rate now):
 *     u = β u + Δ / γ;  x = x - α γ u            (α: lr, β: momentum)
 *   nesterov (DiLoCo, Douillard et al., 2023):
 *     u = μ u + Δ;      x = x - η (Δ + μ u)      (η: lr, μ: momentum)
 * and every replica restarts from the new x. With lr 1 and momentum 0 both
 * are plain averaging. async-epoch: each rank's fold is one outer step on
 * the global copy with that rank's share of a pseudo-gradient, Δ = (s - w) /
 * P, where s is what the rank started its epoch from (its last fold's
 * result) and w its weights now; it restarts from the global copy. */
typedef enum { TSR_OUTER_NONE, TSR_OUTER_SLOWMO, TSR_OUTER_NESTEROV } tsr_outer_kind_t;

typedef struct {
  tsr_outer_kind_t kind;
  float lr;       /* α or η; tsr_outer_init sets the kind's default (1.0, 0.7) */
  float momentum; /* β or μ (0.5, 0.9) */
} tsr_outer_t;

/* How an average over every rank moves its chunks (--allreduce). */
typedef enum {
  /* two-level where there are several nodes and one holds several ranks, one replica per rank,
   * uniform --shares and a policy that sums (not async-epoch); else flat */
  TSR_ALLREDUCE_AUTO,
  TSR_ALLREDUCE_FLAT, /* every rank sends its copy of a chunk to the chunk's home and back */
  /* the ranks of a node first sum each tile on one of them (its local home there), the nodes'
   * sums of each chunk meet on the chunk's home, and the result goes back the same way: a node
   * sends about 2 (N - 1) / N |W| to other nodes, not its ranks' 2 (P - 1) / P |W| each */
  TSR_ALLREDUCE_TWO_LEVEL
} tsr_allreduce_t;

/* A policy and the options orthogonal to its schedule (--outer, --sync-state, --weighting,
 * --deterministic, --sync-bn, --allreduce, --node-size), parsed apart from it. */
typedef struct {
  tsr_sync_schedule_t schedule; /* --sync: tsr_sync_schedule_parse fills only this */
  tsr_outer_t outer;
  bool average_state; /* average optimizer state (momentum, Adam moments) with the weights */
  /* Sum contributions in rank order, in float32: acc = w_0 x_0, then acc = w_q x_q + acc for
   * q = 1 .. P-1 (async-epoch: the folds in rank order); bitwise-reproducible runs. Otherwise
   * contributions are added as they arrive. */
  bool deterministic;
  bool by_samples; /* weight each rank by the samples it processed (else uniform) */
  /* --weighting steps (FedNova, Wang et al. 2020), for averages of weights over all ranks:
   * with x the weights every rank last restarted from, x_q rank q's weights now, tau_q the
   * steps it took since (steps with samples), p_q = samples_q / samples:
   *   x' = x - tau_eff * sum_q p_q (x - x_q) / tau_q,   tau_eff = sum_q p_q tau_q,
   * so a rank that took more steps does not pull the model further. Computed as the mean
   * x~ = sum_q v_q x_q with v_q = (p_q / tau_q) / S, S = sum_q p_q / tau_q, then
   * x' = x + lambda (x~ - x), lambda = tau_eff S (>= 1; 1 when every tau_q is equal, where
   * this is --weighting samples). Implies by_samples. */
  bool by_steps;
  /* --sync-bn: batchnorm layers normalize with the statistics of every rank's batch together
   * (forward) and reduce their backward sums likewise, every step, by StarPU-MPI tasks
   * (synchronized batch normalization); off: each rank's own batch (as DDP without it). Under
   * a grid, every grid column's batch (combined along the grid's rows). Needs several ranks, a
   * model with batchnorm, several grid columns under a grid, and uniform shares
   * (tsr_run_check). */
  bool sync_bn;
  tsr_allreduce_t allreduce; /* --allreduce [auto] */
  /* --node-size G: G consecutive ranks make a node for two-level averaging (to study it on one
   * machine); 0: the nodes MPI sees (ranks that share memory) */
  int node_size;
  /* --bucket-mb M: averages over every rank pack each home's chunks into buckets of at least M
   * MiB (the last of a home's may hold less), each one message a rank where each chunk was one
   * (PyTorch DDP's bucket_cap_mb, 25 there); with two levels between the nodes, and inside a
   * node whole tiles likewise. Not under a grid nor async-epoch. 0: every chunk its own
   * message. */
  float bucket_mb;
} tsr_sync_t;

/* How much of the work each rank gets (--shares): its part of every epoch's samples and,
 * where ranks meet at every step (batch, post-local), of the global batch. A tsr_shares_t owns
 * its weights, one per replica (ranks, or grid columns): tsr_shares_parse and tsr_shares_copy
 * fill one whole, tsr_shares_fini frees what it holds; zeroed (= {0}) it is uniform and holds
 * nothing. */
typedef enum {
  TSR_SHARES_UNIFORM, /* 1 / P each */
  TSR_SHARES_AUTO,    /* measured throughput, re-measured at every epoch end where possible */
  TSR_SHARES_FIXED    /* w[0 .. n) as given, normalized */
} tsr_shares_kind_t;

typedef struct {
  tsr_shares_kind_t kind;
  int n;     /* FIXED: values given; AUTO once measured: the replicas; else 0 */
  double *w; /* owned, [n] (NULL when n is 0): FIXED, AUTO once measured: weights (>= 0, any
              * scale, a positive sum) */
} tsr_shares_t;

/* Fills *s whole (what it held is not freed: tsr_shares_fini it first to reuse one) from
 * "uniform", "auto" or "w0,w1,..." (numbers >= 0 with a positive sum, one per replica: at most
 * TSR_MAX_RANKS of tessera/train.h). Errors name --shares; on one *s holds nothing. TSR_ENOMEM. */
TSR_API int tsr_shares_parse(tsr_shares_t *s, const char *text, tsr_errbuf_t *err);
/* Fills *dst whole (as tsr_shares_parse) with a copy of src that owns its own weights.
 * 0 or TSR_ENOMEM (then *dst holds nothing). */
TSR_API int tsr_shares_copy(tsr_shares_t *dst, const tsr_shares_t *src);
/* Frees what s holds and leaves it uniform (zeroed). NULL: nothing. */
TSR_API void tsr_shares_fini(tsr_shares_t *s);
/* TSR_EINVAL, naming --shares, when a FIXED list does not have one value per rank. */
TSR_API int tsr_shares_check(const tsr_shares_t *s, int ranks, tsr_errbuf_t *err);
/* Each rank's share, summing to 1: share[q] for q < ranks (uniform for UNIFORM, and for AUTO
 * before anything was measured). */
TSR_API void tsr_shares_get(const tsr_shares_t *s, int ranks, double *share);
/* Cuts total into ranks whole parts in proportion to share (largest remainders, ties to the
 * lower rank), each at least min_each (taken from the largest parts; total must be at least
 * ranks x min_each): part[q]. Batches use min_each 1, so that a rank whose share would round
 * to 0 still takes one sample a step. */
TSR_API void tsr_shares_split(const double *share, int ranks, int64_t total, int64_t min_each,
                              int64_t *part);
/* Tile rows for per-rank batches batch[q] such that every rank has the same number of
 * batch-row tiles (replicas sum their training statistics tile by tile): the largest count
 * <= ceil(uniform_batch / uniform_tile_rows) for which each rank's batch cuts into exactly
 * that many tiles; rows[q]. */
TSR_API void tsr_shares_tile_rows(const int64_t *batch, int ranks, int uniform_batch,
                                  int uniform_tile_rows, int *rows);

/* Parses "batch", "every=K", "epoch", "epoch=n", "async-epoch", "post-local:E,K",
 * "hier:K1,K2", "hier:K1,K2,G" (groups of G consecutive ranks instead of nodes) and "none"
 * into *schedule alone, through the registry. Errors name --sync and the forms expected. */
TSR_API int tsr_sync_schedule_parse(tsr_sync_schedule_t *schedule, const char *text,
                                    tsr_errbuf_t *err);
/* The whole of *sync from a policy's text: every other option off (no outer optimizer, uniform
 * weighting, no state averaging, not deterministic), then the schedule as
 * tsr_sync_schedule_parse reads it. */
TSR_API int tsr_sync_parse(tsr_sync_t *sync, const char *text, tsr_errbuf_t *err);
/* The schedule as text, as tsr_sync_schedule_parse reads it back ("every=8", "epoch"). */
TSR_API void tsr_sync_schedule_describe(const tsr_sync_schedule_t *schedule, char *buf, int size);
/* The policy as text: the schedule, and an outer optimizer ("every=8 slowmo(1,0.5)"). */
TSR_API void tsr_sync_describe(const tsr_sync_t *sync, char *buf, int size);
/* The traits of schedule's policy (static; never NULL: an unknown kind reads as none). */
TSR_API const tsr_sync_traits_t *tsr_sync_traits(const tsr_sync_schedule_t *schedule);
/* An outer optimizer by name ("none", "slowmo", "nesterov") with its default rate and momentum. */
TSR_API int tsr_outer_init(tsr_outer_t *outer, const char *name, tsr_errbuf_t *err);
/* TSR_EINVAL with the reason in err when an option does not fit the policy: an outer optimizer
 * (or its rate and momentum out of range) on one that does not average weights, --weighting
 * steps on one that cannot count local steps. */
TSR_API int tsr_sync_check(const tsr_sync_t *sync, tsr_errbuf_t *err);

/* Starts MPI when this process was launched by mpirun (or when force is
 * set); a no-op otherwise. Returns 0 or TSR_ERUNTIME. */
TSR_API int tsr_dist_start(int *argc, char ***argv, bool force);
TSR_API bool tsr_dist_active(void);
/* Whether MPI lets several threads call it at once (MPI_THREAD_MULTIPLE). */
TSR_API bool tsr_dist_thread_multiple(void);
TSR_API int tsr_dist_rank(void); /* 0 without MPI */
TSR_API int tsr_dist_size(void); /* 1 without MPI */
/* Ranks sharing this node and this rank's index among them (placement). */
TSR_API int tsr_dist_local_rank(void);
TSR_API int tsr_dist_local_size(void);

/* Every rank calls this with its own status: the result is the first failing
 * rank's code, with its message prefixed by its rank, on every rank. */
TSR_API int tsr_dist_agree(int rc, const tsr_errbuf_t *mine, tsr_errbuf_t *err);
/* Whether rc, a failure this rank ran into, is every rank's: the last failure tsr_dist_agree
 * returned here (so every rank holds it and can stop cleanly, without tsr_dist_abort). True
 * without MPI or on one rank. */
TSR_API bool tsr_dist_agreed(int rc);
/* A stop on request, agreed by every rank: each passes the signal it got (0: none). Returns
 * the lowest rank that got one (-1: none did), with its signal in *sig and in *ranks how many
 * ranks got one. Collective under MPI (an allgather); without MPI this process's. */
TSR_API int tsr_dist_first_signal(int mine, int *sig, int *ranks);
/* Every rank passes a description of its configuration; ranks that differ
 * from rank 0 are named in err and TSR_EINVAL returned on every rank. */
TSR_API int tsr_dist_check_same(const char *config, tsr_errbuf_t *err);
/* Every rank passes `bytes` bytes; rank 0 receives them all in rank order
 * in all (size x bytes; ignored elsewhere). Plain MPI, collective: for the
 * end of a run, after its transfers (tsr_train's per-rank totals). */
TSR_API int tsr_dist_gather(const void *mine, int bytes, void *all);
/* The same, but every rank receives all (plain MPI, collective): tsr_train's per-epoch exchange
 * of each rank's share, steps and times at the epoch end, where ranks meet anyway. */
TSR_API int tsr_dist_allgather(const void *mine, int bytes, void *all);
/* Every rank's node: node_of[q] (size entries) numbers the node of rank q
 * from 0 in order of the nodes' lowest ranks (MPI_COMM_TYPE_SHARED); returns
 * the number of nodes. Collective; without MPI one node. */
TSR_API int tsr_dist_nodes(int *node_of);
/* Whether any rank passes true (plain MPI, collective; mine without MPI). */
TSR_API bool tsr_dist_any(bool mine);
/* Under MPI: prints msg (prefixed with the rank) and stops every rank with
 * exit status 1 (MPI_Abort). Without MPI it does nothing and returns. */
TSR_API void tsr_dist_abort(const char *msg);
/* The same with another exit status (mpirun exits with it). */
TSR_API void tsr_dist_abort_status(const char *msg, int status);
/* Finalizes MPI if tsr_dist_start started it. */
TSR_API void tsr_dist_stop(void);

TSR_EXTERN_C_END

#endif
