/* The planner: an analytical model of a training step and epoch on P ranks
 * arranged as a Pr x Pc grid (Pr cuts the dense layers' output features,
 * Pc the batch), under a synchronization policy, on a machine that is
 * measured here or described in an INI file (README, "Planning").
 *
 * Compute is counted task by task from the tiles a run would use (a roofline
 * per task: max(flops / rate, bytes / memory bandwidth) plus the task's
 * overhead), scheduled over a rank's workers as max(work / workers, critical
 * path). Communication is counted tile by tile and message by message, as
 * the grid design and src/parallel/sync.c send them, and costed with alpha
 * (seconds per message), beta (seconds per byte) and gamma (seconds per byte
 * reduced). Nothing here starts StarPU or MPI. */
#ifndef TESSERA_PLAN_H
#define TESSERA_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/dist.h"
#include "tessera/error.h"
#include "tessera/net.h"
#include "tessera/train.h"

TSR_EXTERN_C_BEGIN

/* A machine: nodes of identical cores joined by one network. */
typedef struct {
  char name[64];
  char source[1024];  /* where the figures come from, for the output */
  int nodes;          /* nodes available (0: unbounded; a plan for more ranks is warned) */
  int cores_per_node; /* cores per node */
  int ranks_per_node; /* ranks started on a node */
  int workers;        /* CPU workers per rank (StarPU 1.3 runs at most 4) */
  double gemm_gflops; /* one worker's GEMM rate on large tiles, GFLOP/s */
  double conv_gflops; /* one worker's convolution rate, GFLOP/s (0: gemm_gflops) */
  double mem_gbs;     /* one worker's memory bandwidth for memory-bound tasks, GB/s */
  double alpha;       /* seconds per message */
  double beta;        /* seconds per byte (1 / bandwidth) */
  double gamma;       /* seconds per byte reduced (summing received data) */
  /* Between the ranks of one node (keys intra_latency_us, intra_bandwidth_gbits; 0 in a file:
   * as latency_us and bandwidth_gbits; here: the measured alpha and beta, all ranks on one
   * node). Messages to other nodes cost alpha, and a node's ranks share its link: the bytes
   * its ranks send to other nodes together cost beta each. */
  double intra_alpha, intra_beta;
  double task_overhead; /* seconds a task costs besides its kernel (StarPU) */
  bool measure_kernels; /* time each GEMM / convolution tile shape on this machine (cached) */
  char cache[512];      /* measure_kernels: the file measured rates are cached in ("" none) */
} tsr_machine_t;

/* The machine this process runs on: its cores, kernel rates measured on
 * demand, and alpha and beta from the calibration file `calibration` when it
 * exists (written by tsr_plan_calibrate_save), else documented defaults for
 * this machine class (loopback through StarPU-MPI in worker mode, README);
 * *calibrated says which. Borrowed strings; cache may be NULL (no cache). */
TSR_API int tsr_machine_here(tsr_machine_t *m, const char *calibration, const char *cache,
                             bool *calibrated, tsr_errbuf_t *err);
/* A machine described in an INI file (section [cluster]; keys in the
 * README: nodes, cores_per_node, ranks_per_node, workers, gflops_per_core,
 * conv_gflops, mem_gbs, latency_us, bandwidth_gbits, gamma_gbs,
 * task_overhead_us). Unknown keys and bad values are errors naming the file,
 * line and key. */
TSR_API int tsr_machine_load_ini(tsr_machine_t *m, const char *path, tsr_errbuf_t *err);

typedef struct {
  int inputs, classes; /* features of a sample and classes (784, 10 for Fashion-MNIST) */
  int64_t samples;     /* training samples per epoch */
  int batch;           /* samples per step of one replica (a grid column), as train's --batch */
  int ranks;           /* P */
  int pr, pc;          /* the grid; 0 and 0: every shape Pr x Pc = P */
  bool all_policies;   /* compare batch, every=8 and epoch instead of `sync` */
  tsr_sync_schedule_t sync; /* a policy the planner models (tsr_sync_traits(...)->plannable:
                               batch, every=K, epoch[=n]), as tsr_plan_sync_parse reads it */
  int nstate;               /* optimizer state per parameter, tsr_optimizer_nstate (sgd: 1) */
  int tile_rows, tile_cols; /* as train's --tile (0: chosen) */
  int in_channels, in_height, in_width; /* input sample shape; 0s: as the network infers it */
  tsr_allreduce_t allreduce; /* as train's --allreduce: auto is two-level where several nodes
                                hold several ranks (the engine's rule) */
  int node_size;             /* ranks per node (0: the machine's ranks_per_node) */
  float bucket_mb;           /* as train's --bucket-mb: flat averages in buckets (0: none) */
  /* As train's --domain, for grids with Pr > 1: convolutions, pooling and batchnorm computed
   * whole on every rank of a column (NONE), cut into bands of image rows with halos (ROWS), or
   * AUTO: every choice priced (none, the first K for each K, all), the fastest kept for each
   * grid. */
  enum { TSR_PLAN_DOMAIN_NONE, TSR_PLAN_DOMAIN_ROWS, TSR_PLAN_DOMAIN_AUTO } domain;
  int domain_layers; /* ROWS: the first K convolutions and poolings cut (--domain rows:K; 0: all) */
} tsr_plan_opts_t;

/* Defaults: Fashion-MNIST (784 inputs, 10 classes, 60000 samples), batch 64,
 * 1 rank, every grid shape, batch averaging, SGD with momentum. */
TSR_API void tsr_plan_opts_init(tsr_plan_opts_t *o);
/* The options that plan the run c describes (borrowed, read now) on `ranks` ranks, derived from
 * it: tsr_plan_opts_init's defaults, then c's inputs, classes, samples, batch, grid (Pr as c->net
 * has it, Pc the rest), tiles, input shape, optimizer (its state count), domain (rows as c->net
 * has it, or none) and, with c->sync, its policy where the planner models it (else the default),
 * all-reduce, node size and buckets; one policy. tsr_plan_domain_auto plans a run with them. */
TSR_API void tsr_plan_opts_from_run(tsr_plan_opts_t *o, const tsr_run_config_t *c, int ranks);

/* One prediction: a grid and a policy. Times are seconds; bytes and
 * messages are those the busiest rank sends. */
typedef struct {
  int pr, pc;
  tsr_sync_schedule_t sync;
  int tile_rows, tile_cols; /* the tiles a rank would use */
  int64_t steps_per_epoch;
  double flops_step;      /* one rank's flops per step */
  double compute_s;       /* one rank's compute per step (roofline tasks over its workers) */
  double grid_s;          /* per step: all-gathers and reduce-scatters inside a grid column */
  double sync_s;          /* per step: the averaging across columns, before overlap */
  double exposed_sync_s;  /* per step: the part of sync_s the backward pass does not hide */
  double step_s;          /* per step: compute + grid + exposed sync */
  double average_s;       /* one weight average (every, epoch) */
  double epoch_s;         /* steps x step_s + the epoch's weight averages */
  double grid_bytes_step; /* bytes sent inside the column per step */
  double grid_messages_step;
  bool domain;            /* convolutions and pooling cut into bands of image rows (--domain) */
  int domain_layers;      /* with domain: how many of them are cut (the first, in run order) */
  int splittable;         /* the convolutions and poolings that could be (domain_layers of them:
                           * --domain rows; fewer: rows:K) */
  double halo_bytes_step; /* of grid_bytes_step, the halo rows the busiest rank sends */
  double sync_bytes_step; /* bytes sent for averaging per step (batch) or per average */
  double sync_messages_step;
  bool two_level;             /* averages go through the nodes (--allreduce) */
  int64_t buckets;            /* flat averages in buckets (--bucket-mb): how many; 0: none */
  int nodes, node_size;       /* the ranks in nodes of node_size (the last may hold fewer) */
  double node_bytes_step;     /* bytes the busiest node sends to other nodes per step (batch) or
                                 per average */
  double inter_messages_step; /* the most messages a rank sends to other nodes, likewise */
  double
      sync_bytes_epoch; /* bytes sent for averaging per epoch (what the log's bytes_sent counts) */
  double sync_messages_epoch;
  double bytes_epoch;  /* all bytes sent per epoch: grid and averaging */
  double memory_bytes; /* per rank: parameters, gradients, optimizer state, activations,
                        * averaging buffers */
  bool best;           /* the recommended choice: fewest seconds per epoch */
} tsr_plan_row_t;

/* Predicts every configuration opts asks for (a grid shape and policy each;
 * every divisor pair of P when pr and pc are 0, the three policies with
 * all_policies), into rows (at most max_rows, caller-owned); *n_rows says how
 * many. Errors: a model that does not fit the inputs (named as
 * tsr_net_create names it), a grid whose Pr x Pc is not P. */
TSR_API int tsr_plan_run(const tsr_model_spec_t *spec, const tsr_plan_opts_t *opts,
                         const tsr_machine_t *m, tsr_plan_row_t *rows, int max_rows, int *n_rows,
                         tsr_errbuf_t *err);

/* One layer of a plan's step, as a trace's tasks of that layer add up (tessera trace-summary, a
 * task's "layer" is its index + 1): the seconds of its tasks on one rank, all its workers' added
 * up (before they are spread over the workers), forward and backward (its parameters' update,
 * and the sums of its output's gradients where several layers read it, included), and their
 * flops. */
typedef struct {
  char name[TSR_NAME_MAX]; /* the model's section name (layer<N> when unnamed) */
  const char *type;        /* the layer type's name: "conv", "dense", ... (static) */
  double forward_s, backward_s, flops;
} tsr_plan_layer_t;

/* The step of row (one that tsr_plan_run returned for spec, opts and m) layer by layer, in the
 * order the layout runs them, into out (at most max, caller-owned; *n: how many). TSR_EINVAL
 * when the model has more layers than max. */
TSR_API int tsr_plan_layers(const tsr_model_spec_t *spec, const tsr_plan_opts_t *opts,
                            const tsr_machine_t *m, const tsr_plan_row_t *row,
                            tsr_plan_layer_t *out, int max, int *n, tsr_errbuf_t *err);

/* --domain auto's choice for a run (tsr_plan_domain_auto). */
typedef struct {
  bool domain;       /* convolutions and pooling cut into bands of image rows: tsr_net_opts_t's */
  int domain_layers; /* with domain, the first K of them cut (0: all): tsr_net_opts_t's */
  int splittable;    /* the model's convolutions and poolings that could be cut */
  double step_s;     /* planned seconds per step with the choice */
  double whole_s;    /* and with none cut */
} tsr_plan_domain_t;

/* --domain auto for the run c describes (its model, inputs, classes, samples, and in c->net its
 * batch, tiles, grid rows, optimizer and input geometry; c->sync's policy where the planner
 * models it, else batch, with its --allreduce, --node-size and --bucket-mb) on tsr_dist_size()
 * ranks: rank 0 plans it as `tessera plan --domain auto` does, on this machine (tsr_machine_here
 * with calibration and cache, NULL: tessera-machine.ini and tessera-plan-rates.txt in
 * $STARPU_HOME, else ~/.starpu, as tessera plan reads them; tsr_runtime_ncpus() workers), and
 * every rank takes rank 0's choice into *choice. Collective under MPI: every rank calls it,
 * after tsr_runtime_init, and one rank's failure is every rank's (tsr_dist_agree). Set
 * c->net.domain and domain_layers from *choice before tsr_run_build. Borrowed arguments. */
TSR_API int tsr_plan_domain_auto(const tsr_run_config_t *c, const char *calibration,
                                 const char *cache, tsr_plan_domain_t *choice, tsr_errbuf_t *err);
/* A choice in words, as tessera train's banner says it: "--domain auto: the first 2 (rows:2) of
 * 4 convolutions and poolings cut, planned 1.2 ms per step against 1.5 ms with none cut". */
TSR_API void tsr_plan_domain_describe(const tsr_plan_domain_t *choice, char *buf, size_t size);

/* --sync as the planner takes it: the policy registry's parse (tsr_sync_schedule_parse), and
 * TSR_EINVAL naming the policies it models for one it does not (post-local, hier, async-epoch,
 * none) or an unknown one. Describe a row's policy with tsr_sync_schedule_describe. */
TSR_API int tsr_plan_sync_parse(tsr_sync_schedule_t *sync, const char *text, tsr_errbuf_t *err);

/* Under mpirun with 2 ranks (StarPU-MPI started by tsr_runtime_init):
 * alpha and beta from a StarPU-MPI ping-pong between ranks 0 and 1 (4 KB and
 * 1 MB round trips), saved by rank 0 to `path` for tsr_machine_here. Kernel
 * rates are not part of it: tsr_machine_here times them on demand. */
TSR_API int tsr_plan_calibrate_save(const char *path, tsr_errbuf_t *err);

TSR_EXTERN_C_END

#endif
