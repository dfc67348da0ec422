/* The training loop: epochs of shuffled mini-batches submitted as tasks,
 * with a bounded submission window, evaluation on a test set at each epoch
 * end, and a callback per epoch for logging. */
#ifndef TESSERA_TRAIN_H
#define TESSERA_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/checkpoint.h"
#include "tessera/data.h"
#include "tessera/dist.h"
#include "tessera/net.h"

TSR_EXTERN_C_BEGIN

/* One rank's transfers in an epoch under --grid PrxPc: the grid's own inside the rank's grid
 * column (forward all-gathers and backward reduce-scatters of the dense layers, counted from
 * the tiles' owners), the synchronization's across columns (as tsr_epoch_stats_t counts it),
 * and what StarPU-MPI itself sent to the ranks of the column and to the other columns (0
 * unless STARPU_COMM_STATS=1; it also holds the loss statistics sent to rank 0). */
typedef struct {
  int rank;
  uint64_t grid_bytes_sent, grid_bytes_received;
  int64_t grid_messages_sent, grid_messages_received;
  uint64_t sync_bytes_sent, sync_bytes_received;
  int64_t sync_messages_sent, sync_messages_received;
  uint64_t measured_sent_inside, measured_sent_across;
  /* Of grid_bytes_sent, the halo rows of domain-split layers (--domain rows). */
  uint64_t halo_bytes_sent;
  int64_t halo_messages_sent;
} tsr_rank_traffic_t;
/* One rank's work in an epoch (or, in tsr_rank_stats_t, the run) under MPI: what --shares gave
 * it and how its time went. */
typedef struct {
  double share;           /* its part of the epoch's samples (the last epoch's, for a run) */
  int64_t samples, steps; /* samples it trained on; steps with samples */
  double compute_seconds; /* from the epoch's start until its own steps were done (under --sync
                             batch this includes waiting for the others' gradients) */
  double wait_seconds;    /* the rest of the epoch: epoch-end synchronization, waiting for the
                             other ranks */
} tsr_rank_work_t;

typedef struct {
  int epoch; /* 1-based */
  int epochs;
  double loss;           /* mean training loss over the epoch */
  double train_accuracy; /* fraction of training samples predicted right during the epoch */
  double test_loss;      /* NaN when there is no test set (test_samples 0) */
  double test_accuracy;
  double seconds; /* training time of the epoch (evaluation excluded) */
  double eval_seconds;
  double samples_per_s; /* training samples (of all ranks) / seconds */
  int64_t samples;
  double lr_end;           /* learning rate of the epoch's last step (after the schedule) */
  int ranks;               /* MPI ranks training replicas */
  double sync_seconds;     /* rank 0's time in synchronization (waits included) */
  uint64_t bytes_sent;     /* tile bytes rank 0 sent for synchronization */
  uint64_t bytes_received; /* tile bytes rank 0 received */
  int64_t messages_sent;   /* messages (tiles or chunks) rank 0 sent for synchronization */
  int64_t messages_received;
  int64_t averages;         /* weight averages over all ranks this epoch (async-epoch: folds) */
  int64_t group_averages;   /* hier: averages inside rank 0's group this epoch */
  int64_t test_samples;     /* samples evaluated: 0 when there is no test set (test_loss and
                               test_accuracy are NaN then; with a test set, a NaN test_loss means
                               the net diverged) */
  int grid_rows, grid_cols; /* --grid PrxPc (1 x ranks without) */
  const tsr_rank_traffic_t *per_rank; /* under a grid, [ranks] on rank 0: each rank's
                                         transfers this epoch; NULL otherwise */
  const tsr_rank_work_t *work;        /* under MPI: work[q] for each of the ranks (borrowed, valid
                                         during on_epoch); NULL with one process */
  /* The validation set (tsr_train_opts_t.validation), evaluated where the test set is: NaN and
   * 0 samples without one. */
  double val_loss, val_accuracy;
  int64_t val_samples;
  /* predictions per sample (tsr_net_positions): 1, or a language model's T, whose losses are
   * nats per token (bits per byte: loss / ln 2, the tokens being bytes) and whose samples/s
   * times positions is its tokens/s */
  int positions;
  /* Why the run ends after this epoch though epochs remain (early stopping: one sentence
   * without a final period; borrowed, valid during on_epoch), or NULL. */
  const char *stopped;
  bool lr_reduced;  /* reduce-on-plateau lowered the rate at this epoch's end */
  double lr_factor; /* plateau's factor from the next epoch on (1 without plateau) */
} tsr_epoch_stats_t;

/* Every log_every training steps (tsr_train_opts_t.on_step), on rank 0. */
typedef struct {
  int epoch;             /* 1-based */
  int64_t step;          /* steps of the run so far (1-based: this one's) */
  int64_t step_in_epoch; /* 1-based */
  int64_t steps;         /* steps of the epoch */
  double loss;           /* mean training loss of rank 0's replica's samples since the last call */
  double accuracy;       /* fraction of them predicted right */
  double lr;             /* learning rate of this step (after the schedule) */
  double samples_per_s;  /* training samples of all ranks since the last call / its seconds */
  double seconds;        /* since the epoch began */
} tsr_step_stats_t;

/* Every eval_every training steps (tsr_train_opts_t.on_eval), on rank 0: rank 0's replica
 * evaluated on the validation set, or on the test set without one, between two steps. */
typedef struct {
  int epoch;             /* 1-based */
  int64_t step;          /* steps of the run so far (1-based: the one just taken) */
  int64_t step_in_epoch; /* 1-based */
  int64_t steps;         /* steps of the epoch */
  int64_t samples;       /* training samples of all replicas so far in the run (this process's
                            start: a resumed run counts from where it resumed) */
  int positions;         /* predictions per sample (tsr_net_positions): tokens = samples x it */
  const char *set;       /* "val" or "test" */
  int64_t evaluated;     /* its samples */
  double loss, accuracy; /* per prediction (a language model: per token) */
  /* Every replica held these weights (one process, batch, post-local before its switch, a
   * weight-averaging policy right after an average); else rank 0's alone. */
  bool agreed;
  double seconds; /* the evaluation's */
} tsr_eval_stats_t;

/* One rank's part of a whole run under MPI (tsr_train_opts_t.on_ranks), so
 * that imbalance between ranks shows without a trace. */
typedef struct {
  int rank;
  double seconds;      /* training time, evaluation excluded */
  double sync_seconds; /* the main thread's time in synchronization: submitting it, and
                          waiting at synchronization points */
  uint64_t bytes_sent, bytes_received;      /* tile bytes moved for synchronization */
  int64_t messages_sent, messages_received; /* messages (tiles or chunks) */
  tsr_rank_work_t work;                     /* totals over the run; share: the last epoch's */
} tsr_rank_stats_t;

/* Whether the base rate grows with the number of MPI ranks. Averaging gradients over P ranks
 * makes one step of P times the batch; the linear scaling rule (Goyal et al. 2017) keeps the step
 * size per sample, as PyTorch DDP users and Horovod's guide do by hand; post-local SGD keeps
 * that rate after it switches to local steps (Lin et al. 2020). Local SGD (every, epoch,
 * async-epoch, hier) steps with each rank's own batch and keeps the rate. */
typedef enum {
  TSR_LR_SCALING_AUTO,   /* LINEAR where ranks meet at every step (batch, post-local:
                            tsr_sync_traits_t.meets_every_step) with an optimizer whose rate
                            scales with the replicas (sgd, sgd-nesterov: tessera/optim.h), else
                            NONE */
  TSR_LR_SCALING_LINEAR, /* the net's base rate times the ranks (when several train) */
  TSR_LR_SCALING_NONE    /* the net's base rate as it is */
} tsr_lr_scaling_t;

/* A run's per-rank setup (below, tsr_run_setup). */
typedef struct tsr_run_setup tsr_run_setup_t;

typedef struct {
  int epochs;
  /* The schedule's horizon in epochs: cosine decays to 0 over schedule_epochs x the steps of an
   * epoch, whatever epochs is (0: epochs). A resumed run keeps its checkpoint's
   * (docs/training.md, "Resuming"); past it the cosine rises again, as PyTorch's
   * CosineAnnealingLR past T_max. Step decay, plateau and the warm-up count no horizon. */
  int schedule_epochs;
  uint64_t seed;                 /* shuffling */
  tsr_lr_schedule_t lr_schedule; /* around the base rate, tsr_train_base_lr */
  tsr_lr_opts_t lr;              /* the warm-up, step's and plateau's parameters */
  /* Held-out samples (borrowed; NULL: none), evaluated at every epoch end where the test set is
   * (rank 0's grid column), for the epoch's stats and the schedules below. */
  const tsr_dataset_t *validation;
  /* Early stopping: the run ends after this many epochs in a row without a validation loss
   * below the lowest so far (0: never); tsr_train returns 0 and the last epoch's stats say
   * why. Needs validation, as TSR_LR_PLATEAU does. */
  int early_stop;
  /* Resuming: plateau's and early stopping's state from the checkpoint (borrowed; NULL: from
   * the start). */
  const tsr_schedule_state_t *start_state;
  tsr_lr_scaling_t lr_scaling; /* of the net's optimizer lr by the ranks */
  int window;                  /* training steps in flight at most (bounded submission) */
  bool shuffle; /* epoch e visits tsr_dataset_epoch_order(seed, e); false: 0..n-1 every epoch */
  /* This rank's setup (tsr_run_setup, tsr_run_build; borrowed): how the run is spread over the
   * ranks, read from it alone: the policy, the shares, each replica's batch and shard (the
   * options of tsr_run_config_t, "The run's setup" below). NULL: tsr_train sets the run up
   * itself as tsr_run_setup does for the net (tsr_run_config_from_net) with no policy and
   * uniform shares: one process, or ranks whose replicas train apart. */
  const tsr_run_setup_t *setup;
  /* Called on the main thread after each epoch (under MPI on rank 0). A non-zero return stops
   * training: tsr_train returns it (a positive value as TSR_EINVAL) and leaves err as the
   * callback may have filled it, e.g. with why a log line could not be written. Under MPI the
   * ranks agree on it at the epoch end (tsr_dist_agree): every rank returns it. */
  int (*on_epoch)(const tsr_epoch_stats_t *stats, void *ctx);
  /* Called every few batches with the batches done in this epoch (progress display). */
  void (*on_progress)(int epoch, int64_t batch, int64_t batches, double seconds, void *ctx);
  /* With log_every > 0, called on rank 0 after every log_every-th step of the run, once that
   * step has run (each call waits for rank 0's steps in flight: a pipeline drain; a few hundred
   * steps apart it costs nothing measurable). A non-zero return stops training as on_epoch's. */
  int log_every;
  int (*on_step)(const tsr_step_stats_t *stats, void *ctx);
  /* With eval_every > 0, after every eval_every-th step of the run that is not an epoch's last
   * (the epoch end evaluates anyway): the validation set (the test set without one) evaluated
   * by rank 0's grid column, on_eval called on rank 0 (each waits for the evaluating ranks'
   * steps in flight, as on_step's calls do). Its return stops training as on_epoch's. */
  int64_t eval_every;
  int (*on_eval)(const tsr_eval_stats_t *stats, void *ctx);
  /* With bn_recompute > 0, at every epoch end, after the epoch's synchronization and before its
   * evaluation and checkpoint: each batchnorm layer's running statistics recomputed under the
   * weights as they are then, as the mean of the batch statistics of this rank's first
   * bn_recompute batches of the epoch (fewer where a shard is shorter; every rank's batches
   * together under --sync-bn), by tsr_net_stats_step, every rank taking them at once. Weight
   * averaging averages weights and statistics apart, and the averaged weights' activations
   * match neither replica's statistics (docs/distributed.md). Training is unchanged (running
   * statistics are only read in evaluation); the time counts as the epoch's evaluation. */
  int bn_recompute;
  /* Under MPI, called once on rank 0 after the last epoch with every rank's totals,
   * ranks[q] for rank q (n ranks). */
  void (*on_ranks)(const tsr_rank_stats_t *ranks, int n, void *ctx);
  /* Checkpoints (README, "Checkpoints"): with a path, written every checkpoint_every epochs
   * (steps with checkpoint_in_steps), at the end, and when stopped; checkpoint_info (borrowed)
   * says what the run is (model, data, standardization), tsr_train fills in where it stands.
   * Under MPI rank 0 writes, at points where the replicas agree (batch: any; every=K: after
   * an average; epoch=n: after its average; async-epoch: the end), and at a stop. */
  const char *checkpoint_path;
  int checkpoint_every;
  bool checkpoint_in_steps;
  const tsr_checkpoint_info_t *checkpoint_info;
  /* Resuming: the first epoch to run (1-based; 0 or 1: from the start) and the steps of it
   * already taken, from a loaded checkpoint (its epoch + 1 and step_in_epoch). */
  int start_epoch;
  int64_t start_step;
  /* The checkpoint loaded into the net (tsr_checkpoint_load), or NULL: under MPI, once the
   * replicas exist, each rank's optimizer state, the outer momentum and post-local's switch
   * are restored from it where it holds them (tsr_checkpoint_resume_check says what not). */
  const char *resume_path;
  /* Polled after every step and at every epoch end: when it returns true, training stops
   * after that step (under MPI on any rank: the ranks learn it a step later, every rank
   * stopping after the same step; no barrier), writes a checkpoint if asked (under MPI between
   * averages of a policy with no state of its own besides the step count, every rank's
   * weights), and tsr_train returns TSR_ESTOPPED. Under MPI every rank passes one or none.
   * NULL: never. */
  bool (*should_stop)(void *ctx);
  void *ctx;
} tsr_train_opts_t;

/* 10 epochs, seed 1, cosine learning-rate decay, automatic rate scaling, window 8, shuffled. */
TSR_API void tsr_train_opts_init(tsr_train_opts_t *opts);

/* The base learning rate tsr_train uses for net with opts on this run's ranks (call it after
 * tsr_dist_start): the net's optimizer lr (tsr_net_base_lr), multiplied in float by
 * tsr_dist_size() when opts->lr_scaling is, or for AUTO resolves to (by opts->setup's policy;
 * none without a setup), LINEAR and several ranks train. The schedule runs around it; a
 * constant schedule takes every step at it. */
TSR_API float tsr_train_base_lr(const tsr_net_t *net, const tsr_train_opts_t *opts);

/* The most MPI ranks a run may have: a sanity bound, not a size. Nothing is sized by it (every
 * per-rank array is allocated for the run's ranks); it bounds the counts of ranks read from
 * options (--grid's Pr and Pc and their product, --node-size), from a checkpoint's metadata
 * (a damaged file cannot ask for 2^31 ranks' buffers) and from tsr_run_config_t (tsr_run_check),
 * so that products of them stay within an int. 32,768: 4 times the 8,192 ranks the planner's
 * largest case plans for, and the most whose rank numbers a trace record's 16-bit owner field
 * holds (src/runtime/observe.c). It bounds --shares' values too (one per replica). */
#define TSR_MAX_RANKS 32768

/* ---- Schedules (docs/training.md, "Learning-rate schedules") ------------ */

/* Reads --lr-schedule's text: "cosine", "constant", "step:E1,E2,...:FACTOR" (epochs 1-based and
 * strictly increasing, at most TSR_LR_MILESTONES, FACTOR > 0) or "plateau[:PATIENCE[:FACTOR]]"
 * (PATIENCE >= 0 [10], 0 < FACTOR < 1 [0.1]; threshold 1e-4 relative, PyTorch's). Sets *kind
 * and lr's fields of that kind (warmup untouched). TSR_EINVAL with what is wrong and what is
 * expected; *kind and *lr untouched then. */
TSR_API int tsr_lr_schedule_parse(const char *text, tsr_lr_schedule_t *kind, tsr_lr_opts_t *lr,
                                  tsr_errbuf_t *err);
/* The text tsr_lr_schedule_parse reads back to kind and lr (warm-up left out). */
TSR_API void tsr_lr_schedule_describe(tsr_lr_schedule_t kind, const tsr_lr_opts_t *lr, char *buf,
                                      size_t size);
/* The rate of step t (0-based, of the run) in epoch `epoch` (1-based) of a run of total steps,
 * around base, with plateau's reductions so far (lr_factor): docs/training.md's formulas. */
TSR_API double tsr_lr_at(tsr_lr_schedule_t kind, const tsr_lr_opts_t *lr, double base, int64_t t,
                         int epoch, int64_t total, double lr_factor);
/* Factor 1, no loss seen, no epoch counted. */
TSR_API void tsr_schedule_state_init(tsr_schedule_state_t *s);
/* Reduce-on-plateau after an epoch whose validation loss is loss, on a run of rate base: as
 * PyTorch's ReduceLROnPlateau (mode min, relative threshold, cooldown 0, min_lr 0, eps 1e-8):
 * a loss below best * (1 - threshold) is the new best, else one more bad epoch; more than
 * patience of them multiply s->lr_factor by factor (unless the rate would move by 1e-8 or
 * less) and start the count again. True when it reduced the rate. A NaN is a bad epoch. */
TSR_API bool tsr_lr_plateau_update(tsr_schedule_state_t *s, const tsr_lr_opts_t *lr, double base,
                                   double loss);
/* Early stopping after epoch `epoch` with validation loss loss: a loss below the lowest so far
 * is the new lowest, else one more epoch without improvement; true when patience of them came
 * in a row (stop now). */
TSR_API bool tsr_early_stop_update(tsr_schedule_state_t *s, int patience, double loss, int epoch);

/* ---- Validation split ----------------------------------------------------- */

/* Moves round(fraction * train->n) samples of train into *val (the caller's to fini,
 * tsr_dataset_fini), chosen by a permutation of the sample indices seeded by seed alone, so
 * every rank and every number of ranks holds out the same ones; both keep the file order.
 * val gets train's classes and geometry. 0 < fraction < 1 and at least one sample on each
 * side, else TSR_EINVAL naming --val-split and the fix; TSR_ENOMEM. */
TSR_API int tsr_validation_split(tsr_dataset_t *train, tsr_dataset_t *val, double fraction,
                                 uint64_t seed, tsr_errbuf_t *err);

/* ---- The run's setup ----------------------------------------------------
 *
 * What every rank of a run trains with, worked out from what the run is asked to be, or one
 * error that names the option and the fix: what a grid cannot do, --shares against the ranks,
 * the policy's options, whether the network fits this rank's memory (with the largest --batch
 * that would); and each rank's batch, batch-row tiles and shard of every epoch. tessera train,
 * the benchmarks and tsr_train itself set runs up through these calls.
 *
 * In two phases, because --shares auto measures the ranks with a network: tsr_run_setup needs
 * no net and gives the options to build one with (s.net); tsr_run_setup_net, given that net,
 * measures auto shares and, where ranks meet at every step, gives each rank its batch of the
 * global one and says when this rank's net must be built again with s.net (s.rebuild).
 * tsr_run_build does both phases with the building in between. A program:
 *
 *   tsr_run_config_t c;
 *   tsr_run_config_init(&c);
 *   c.spec = &spec, c.inputs = (int)train.features, c.classes = train.classes;
 *   c.samples = train.n, c.net = net_opts, c.sync = &sync, c.shares = &shares;
 *   tsr_run_setup_t s = {0};
 *   tsr_net_t *net;
 *   int rc = tsr_run_build(&s, &net, &c, &train, &err); // collective under MPI
 *   for (int i = 0; i < s.n_warnings && tsr_dist_rank() == 0; i++)
 *     fprintf(stderr, "warning: %s\n", s.warnings[i]);
 *   tsr_train_opts_t o;
 *   tsr_train_opts_init(&o);
 *   o.setup = &s;
 *   if (rc == 0) rc = tsr_train(net, &train, &test, &o, &err);
 *   tsr_run_setup_fini(&s), tsr_shares_fini(&shares);
 */

/* What a run is asked to be. Borrowed pointers must outlive the calls that take c. */
typedef struct {
  const tsr_model_spec_t *spec; /* the model: needed by tsr_run_build and the memory check */
  int inputs, classes;          /* features of a sample; classes */
  int64_t samples;              /* training samples every rank holds (the whole set) */
  tsr_net_opts_t net; /* as asked: batch per replica (a rank, or a grid column), tiles, grid_rows
                         (Pr), optimizer, seed, input geometry */
  int grid_cols;      /* Pc of --grid PrxPc as asked (0: none asked, the ranks / Pr) */
  const tsr_sync_t *sync; /* how replicas agree when several MPI ranks train (NULL: none) */
  /* Ranks of different speed (NULL: uniform). Where ranks meet at every step (batch,
   * post-local) each rank's batch is its share of global_batch (tsr_shares_split, at least 1)
   * and its net must be built with at least that batch and with batch-row tiles as
   * tsr_shares_tile_rows says (tsr_run_setup_net, tsr_run_build); elsewhere each rank's shard
   * of every epoch follows the shares, with the net's batch, and a rank whose shard is used up
   * skips its steps. AUTO: measured by tsr_run_setup_net (tsr_train_calibrate), and, where
   * shards follow them, re-measured by tsr_train at every epoch end from each rank's samples /
   * compute_seconds (all ranks agree on the numbers). Under --grid PrxPc the replicas are the
   * Pc columns: one share per column, whose ranks take its batch and shard together (a
   * column's rate: its slowest rank's). Borrowed: a setup keeps a copy of its own. */
  const tsr_shares_t *shares;
  int global_batch;   /* with shares, where ranks meet at every step; 0: replicas x batch */
  bool checkpoint;    /* checkpoints are written or resumed */
  double calibration; /* seconds --shares auto measures for (0: 0.5) */
  /* Bytes this rank may still allocate: 0 reads what the system says
   * (tsr_runtime_memory_available); < 0 skips the memory check. */
  int64_t memory;
  const char *memory_source; /* where a given memory comes from, for messages (NULL: "given") */
  int ranks, rank;           /* 0: this run's (tsr_dist_size, tsr_dist_rank) */
} tsr_run_config_t;

#define TSR_RUN_WARNINGS 4

struct tsr_run_setup {
  int ranks, rank;       /* MPI ranks; this one */
  int replicas, replica; /* replicas that split the data (the ranks, or the Pc grid columns);
                            this rank's (under a grid every rank of a column has its column's) */
  int64_t samples;       /* training samples the shards cut */
  tsr_net_opts_t net;    /* this rank's net: build it with these */
  tsr_sync_t sync;       /* the policy (none when the config had none) */
  tsr_shares_t shares;   /* as asked (its own copy; uniform without), auto's once measured */
  int uniform_batch;     /* the batch asked for (c->net.batch): every replica's without shares */
  int global_batch;      /* where ranks meet at every step: the samples of all replicas a step */
  double calibration;    /* seconds --shares auto measures for */
  bool step_sync;        /* ranks meet at every step (tsr_sync_traits_t.meets_every_step, or
                            --sync-bn under mpirun) */
  bool measure;          /* --shares auto: tsr_run_setup_net measures with the net */
  bool rebuild;          /* after tsr_run_setup_net: build this rank's net again with net */
  /* Per replica q < replicas: its share of the work (sums to 1), the samples it takes a step,
   * and its shard of every epoch's shuffled order, [lo[q], lo[q + 1]). Every replica takes
   * `steps` steps an epoch (the largest shard's); a shorter shard's last steps are empty.
   * Owned by the setup, as many entries as replicas (lo: one more); NULL before a setup. */
  double *share;
  int64_t *batch;
  int64_t *lo;
  int64_t steps;
  tsr_net_memory_t memory; /* the estimate for net (zero when not checked) */
  /* How averages over every replica travel, as tsr_run_build decides it by the engine's rule:
   * "flat", "flat, buckets of 25 MiB" or "two-level, 2 nodes of 4 ranks[, buckets of ...]" (under
   * a grid "two-level, each grid row on 2 nodes of 2 ranks[, ...]"; "" with one replica or
   * --sync none). */
  char averaging[96];
  /* What rank 0 should say (no prefix, no newline): a batch larger than a shard, a network
   * taking more than half the memory, a policy that needs several ranks on one process. */
  int n_warnings;
  char warnings[TSR_RUN_WARNINGS][400];
};

/* Defaults: nothing borrowed, memory read from the system, this run's ranks. */
TSR_API void tsr_run_config_init(tsr_run_config_t *c);
/* tsr_run_config_init's defaults for a net already built (borrowed, read now), as tsr_train
 * takes it without a setup: the net's options with its batch and grid rows, samples, and no
 * memory check (the net exists); sync, shares and the rest are the caller's to set. For a
 * program that builds its net itself, then sets the run up with tsr_run_setup. */
TSR_API void tsr_run_config_from_net(tsr_run_config_t *c, const tsr_net_t *net, int64_t samples);
/* Frees what a setup holds (its per-replica arrays) and zeroes it, whether its setup succeeded
 * or not. A setup is caller-owned and starts zeroed (= {0}, calloc); tsr_run_setup and
 * tsr_run_build free what it held before, so one can be set up again and again, then finished
 * once. NULL: nothing. */
TSR_API void tsr_run_setup_fini(tsr_run_setup_t *s);
/* The combinations alone, before any data is read: the policy's options (tsr_sync_check), at
 * most TSR_MAX_RANKS ranks, --grid's Pr x Pc against the ranks, what a grid does not support
 * (checkpoints of each column's own optimizer state; --shares and --weighting steps; under
 * several columns the policies without tsr_sync_traits_t.grid_columns), --shares against the
 * ranks (or grid columns). TSR_EINVAL with a message naming the options and the fix (tessera
 * train exits 2 on it); TSR_ENOMEM. */
TSR_API int tsr_run_check(const tsr_run_config_t *c, tsr_errbuf_t *err);
/* Phase one: tsr_run_check, the memory check (with c->spec and a memory: TSR_ENOMEM naming
 * the estimate's parts and the largest --batch that fits), and the per-rank numbers as far as
 * they are known without a net (auto shares read as uniform until measured). s->net is c->net.
 * s: zeroed, or set up before (what it held is freed); tsr_run_setup_fini frees it. Not
 * collective. The runtime must be started when the memory is checked (tiles follow its
 * workers). */
TSR_API int tsr_run_setup(tsr_run_setup_t *s, const tsr_run_config_t *c, tsr_errbuf_t *err);
/* Phase two, with net built from s->net (borrowed): --shares auto measured on train (every
 * rank at once: collective under MPI, tsr_train_calibrate), and where ranks meet at every step
 * each rank's batch of the global one with batch-row tiles that give every rank as many tiles
 * (tsr_shares_tile_rows): when this rank's differ from net's, s->net has them and s->rebuild
 * is set. Otherwise a no-op. train is read only to measure auto shares (else it may be NULL). */
TSR_API int tsr_run_setup_net(tsr_run_setup_t *s, tsr_net_t *net, const tsr_dataset_t *train,
                              tsr_errbuf_t *err);
/* Both phases and the net: tsr_run_setup, tsr_net_create(c->spec, ...), tsr_run_setup_net and
 * the rebuild it may ask for. Collective under MPI: every rank calls it, and one rank's
 * failure is every rank's error, with its message (tsr_dist_agree). *net: owned by the caller
 * (NULL after an error); s as tsr_run_setup takes it, its warnings filled even when it fails. */
TSR_API int tsr_run_build(tsr_run_setup_t *s, tsr_net_t **net, const tsr_run_config_t *c,
                          const tsr_dataset_t *train, tsr_errbuf_t *err);

/* Trains net on train (whose samples must match the net's inputs) for
 * opts->epochs epochs, evaluating on test (may be NULL) after each. The
 * last batch of an epoch may be short; every sample is used every epoch.
 * Under MPI (tsr_dist_start), every rank calls this with the same arguments:
 * each trains its replica on its shard of every epoch's shuffled order, the
 * replicas agree through opts->setup's policy, and rank 0 evaluates and reports. The
 * rate is tsr_train_base_lr's (scaled by the ranks as opts->lr_scaling says)
 * under opts->lr_schedule. An epoch whose mean training loss, or test loss, is
 * not a finite number stops the run after its on_epoch call with
 * TSR_EDIVERGED: NaN weights stay NaN, so no later epoch could recover. Under
 * MPI the ranks agree on what rank 0 decides at an epoch end (divergence,
 * on_epoch's failure) and on a checkpoint that could not be written: every
 * rank returns that error and tsr_dist_agreed(rc) is true, so they can stop
 * cleanly. Any other error may be this rank's alone (a failed step): the
 * other ranks keep waiting for it, so the caller stops them all with
 * tsr_dist_abort (the replicas, whose release is collective, are not released
 * then). */
TSR_API int tsr_train(tsr_net_t *net, const tsr_dataset_t *train, const tsr_dataset_t *test,
                      const tsr_train_opts_t *opts, tsr_errbuf_t *err);

/* --shares auto's measurement, collective under MPI: every rank runs forward passes of net
 * (weights unchanged) on ds for `seconds`, all at once so that ranks sharing cores share
 * them as in training, and shares gets every replica's samples per second (kind AUTO, n the
 * replicas: the ranks, or under a grid the columns, each at its slowest rank's rate; what
 * shares held before is freed, and it owns the new weights: tsr_shares_fini). One process: one
 * share. */
TSR_API int tsr_train_calibrate(tsr_net_t *net, const tsr_dataset_t *ds, double seconds,
                                tsr_shares_t *shares, tsr_errbuf_t *err);

/* Evaluates net on ds: mean loss and accuracy. */
TSR_API int tsr_evaluate(tsr_net_t *net, const tsr_dataset_t *ds, double *loss, double *accuracy);
/* The class net predicts for each sample of ds (the argmax of its logits, the
 * first on ties, as the accuracy counts): predicted[0 .. ds->n). TSR_EINVAL for a net that
 * predicts per position (tsr_net_positions > 1: a language model). */
TSR_API int tsr_predict(tsr_net_t *net, const tsr_dataset_t *ds, int32_t *predicted);

TSR_EXTERN_C_END

#endif
