/* What the checks under mpirun share (tests/mpi/): the data, the nets, training runs and
 * replicas as the checks set them up, the comparisons across ranks, the grid's nets and byte
 * counts, and main (common.c), which runs the check its first argument names from the table of
 * the concern file linked in with it (mpi_checks), one check per invocation:
 *
 *   mpirun -np P test_mpi_<concern> CHECK [thread|worker]
 *
 * An optional second argument, thread or worker, says who makes StarPU-MPI progress
 * (tsr_mpi_progress_t); the default is auto. Prints "N passed, M failed" and exits non-zero on
 * a failure. A check may use plain MPI to compare ranks; the engine does not. */
#ifndef TSR_TEST_MPI_COMMON_H
#define TSR_TEST_MPI_COMMON_H

#include <math.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/net_impl.h"
#include "parallel/replicas.h"
#include "runtime/progress.h"
#include "runtime/tags.h"
#include "runtime/task_opts.h"
#include "tile/ops.h"

#include <starpu_mpi.h> /* StarPU-MPI's own count of the bytes it sent (the byte checks) */
#include "tessera/tessera.h"

#define TSR_MPI_CHECK_SHARED /* the counts are common.c's */
#include "mpi_check.h"

/* The most ranks a check runs on (tests/meson.build starts at most 16), which sizes the checks'
 * per-rank arrays; main refuses more. */
#define MPI_TEST_MAX_RANKS 64

/* A check of a concern file: its name (the command's argument), what runs it, and what it needs
 * before the runtime starts. */
typedef struct {
  const char *name;
  void (*run)(void);
  unsigned needs;
} mpi_check_t;
#define MPI_CHECK_COMM_STATS 1u /* StarPU-MPI's count of the bytes it sends (STARPU_COMM_STATS) */
/* The lowered convolutions (--kernels blis): the decomposition checks against one process, whose
 * sums over a band's rows are each output pixel's sums over the whole image, in the same order.
 * oneDNN's primitives for a band and for the whole image block their loops otherwise, and the
 * rounding then opened a ReLU or moved a pooling's maximum within 20 steps (cnn rows:2: 3e-3 of
 * the weights' movement off at step 18; syncbngrid: 4.5e-4 against 1e-4). oneDNN on band
 * windows is held to the lowered kernel in test_conv's kernel tests. */
#define MPI_CHECK_LOWERED_CONV 2u
#define MPI_CHECK_OWN_MPI 2u /* MPI started by the test, its node-local variables made wrong */

/* The concern file's checks, ended by {NULL}. */
extern const mpi_check_t mpi_checks[];

/* The number of ranks. */
extern int size;

extern tsr_dataset_t train_set, test_set;

/* Loads the data anew (a check may call it more than once). */
void load(int64_t n);

/* Tiles of the nets below: several per parameter (several homes) by default;
 * WHOLE makes each matrix one tile, so that averaging cuts tiles into bands. */
#define WHOLE (1 << 20)

extern int tile_rows, tile_cols;

/* The model of make_net_opt's nets: mlp:48,24, or this model file's text (a graph), or this
 * shorthand (a language model, on load_tokens's windows, with GPT-2's initialization). */
extern const char *net_model, *net_shorthand;

/* Augmentation of make_net_opt's nets (NULL: none), drawn with epoch 2's key. */
extern const tsr_augment_t *net_augment;

/* make_net_opt's nets' --clip-grad (0: none). */
extern float net_clip;

tsr_net_t *make_net_opt(int batch, const tsr_optimizer_t *opt);

/* SGD, lr 0.05, with the given momentum. */
tsr_net_t *make_net(int batch, float momentum);

/* All parameters, concatenated. */
float *params(tsr_net_t *net, int64_t *count);

void set_params(tsr_net_t *net, const float *all);

double max_rel_diff(const float *a, const float *b, int64_t n);

/* Every rank's x (n floats), rank q's at [q n, (q + 1) n); the caller frees. */
float *gather_all(const float *x, int64_t n);

/* sum over ranks q of weight[q] x_q, in double (weight NULL: uniform); the caller frees. */
float *weighted_mean(const float *x, int64_t n, const double *weight);

/* Replicas agree bit for bit: every rank compares with rank 0's copy. */
bool replicas_equal(const float *w, int64_t n);

typedef struct {
  int epochs;
  bool deterministic, by_samples, shuffle;
  bool average_state;                                         /* --sync-state */
  const char *outer;                                          /* NULL: none */
  const char *shares;                                         /* --shares; NULL: uniform */
  bool by_steps;                                              /* --weighting steps */
  int global_batch;                                           /* with shares under batch */
  tsr_lr_scaling_t lr_scaling;                                /* 0: AUTO */
  int (*on_epoch)(const tsr_epoch_stats_t *stats, void *ctx); /* rank 0 only */
  void *ctx;
} run_t;

int keep_stats(const tsr_epoch_stats_t *stats, void *ctx);

/* --allreduce and --node-size of every run and set of replicas below (test_two_level). */
extern tsr_allreduce_t allreduce;

extern int node_size;

extern float bucket_mb;

/* s (zeroed, or set up before) set up for training net on train_set under sync and shares
 * (NULL: uniform), as a program that built its net itself does (tsr_run_config_from_net,
 * tsr_run_setup); the caller finishes it (tsr_run_setup_fini). */
void set_up_run(tsr_run_setup_t *s, const tsr_net_t *net, const tsr_sync_t *sync,
                const tsr_shares_t *shares, int global_batch);

void train_with(tsr_net_t *net, const char *policy, run_t run);

void train(tsr_net_t *net, const char *policy, int epochs, bool deterministic);

/* The replicas of net under policy, weighted by samples, by local steps (FedNova) or evenly,
 * with an outer optimizer or none (NULL). */
tsr_replicas_t *replicas_weighted(tsr_net_t *net, const char *policy, bool by_samples,
                                  bool by_steps, const char *outer);

tsr_replicas_t *replicas_with(tsr_net_t *net, const char *policy, bool by_samples,
                              const char *outer);

tsr_replicas_t *replicas(tsr_net_t *net, const char *policy, bool by_samples);

/* Step k's global batch is rows[k P B ...], rank q's part of it rows[(k P + q) B ...]. */
int32_t *batch_rows(int B, int steps);
/* counts[q] = B for every rank q: each takes B samples a step (tsr__replicas_count). */
void equal_counts(int *counts, int B);

/* Step k (from 1) of both the synchronized net (then its replicas' after-step) and the
 * replica trained alone, on this rank's part of the step's rows (batch_rows). */
void step_pair(tsr_replicas_t *rep, tsr_net_t *net, tsr_net_t *alone, const int32_t *rows, int B,
               int k, const int *counts);

/* One unshuffled epoch of net alone on this rank's shard of batch steps x b samples (rank q
 * takes rows q b steps ...), as tsr_train runs it without shuffling. */
void shard_epoch(tsr_net_t *net, int b, int steps);

/* The float32 sum, in rank order (reversed: from the last rank), of (1/P) x_q. */
void ordered_mean(const float *all, int64_t n, bool reversed, float *out);

/* A CNN small enough for seconds: conv 3x3 4 (padded) - ReLU - maxpool 2 - dense 32 - ReLU -
 * dense 10; the convolution is replicated in a grid column, the dense layers spread. */
extern const char grid_cnn[];

/* A graph for the grid: two residual adds of dense layers (spread over the grid column, as their
 * sums and the ReLU after the first are), a's output read by b and s1, s1's by d and s2. Layers
 * of two column tiles, so that a rank's partial input gradients add up in the order one process
 * adds them: the grid then follows one process bit for bit. */
extern const char grid_graph[];

extern bool grid_graph_net;

/* The net of spec (finished here) and o, or every rank aborts with the message. */
tsr_net_t *net_or_abort(tsr_model_spec_t *spec, const tsr_net_opts_t *o);

/* The grid nets: mlp:64,32 (784-64-32-10), grid_cnn or grid_graph, in tile_rows x tile_cols
 * tiles (16 x 16 unless a check says otherwise), so that each dense layer has several column
 * tiles to spread over a column's Pr ranks. */
tsr_net_t *make_grid_net(int batch, int grid_rows, bool cnn);

/* All parameters of a grid net, whole, on every rank: each rank's own tiles, summed over ranks
 * and divided by the copies (each column holds a dense layer once, each rank a convolution). */
float *grid_params(tsr_net_t *net, int columns, int64_t *count);

/* Bytes this rank has sent, as StarPU-MPI counted them, to the other ranks of its grid column
 * (inside) and to the ranks of other columns (across). */
void bytes_by_peer(int grid_rows, uint64_t *inside, uint64_t *across);

/* The buffers of every layer that has them (batchnorm: running mean and variance), concatenated;
 * with set, written from *all instead. */
float *buffers(tsr_net_t *net, int64_t *count, const float *set);

/* Per step under --sync batch with this rank's node of G consecutive ranks, without a grid (pr
 * 1, make_net) or on --grid pr x (P / pr) (make_grid_net, each node holding G / pr whole grid
 * columns, whose own transfers stay on it): the bytes every node sent to other nodes
 * (StarPU-MPI's count, summed over each node's ranks; the busiest node's), and the weights at
 * the end (all of them, each from its owners under a grid). Also this rank's bytes to other grid
 * columns (without a grid, to every other rank) against the engine's count of its averaging, and
 * the bytes it received from them (the senders' StarPU-MPI counts) against the engine's count of
 * what it received, within 64 bytes a step (a home's own node's partial counted as well as the
 * other nodes'). */
typedef struct {
  double node_bytes, rank_bytes, messages; /* per step: busiest node, busiest rank, most sent */
  float *w;
  int64_t n; /* weights */
} levels_run_t;

levels_run_t levels_run(tsr_allreduce_t mode, int g, int tr, int tc, int pr);

#endif
