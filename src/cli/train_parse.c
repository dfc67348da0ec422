/* tessera train's options: each one read into the configuration (train_config.h), checked
 * where it is read, with a message naming the option and what it expects, so that a bad value
 * exits 2 before any data loads. Nothing here starts MPI or the runtime or reads a file. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/train_config.h"
#include "tessera/tessera.h"

void tsr__cli_train_usage(FILE *out) {
  fprintf(out,
          "usage: tessera train [options]\n\n"
          "  --data DIR          dataset folder: IDX files (MNIST family, .gz or plain) or\n"
          "                      train.csv/test.csv [%s]\n"
          "  --model SPEC|FILE   mlp (784-512-512-10), mlp:W1,W2,..., linear, cnn (conv 3x3 32,\n"
          "                      maxpool 2, conv 3x3 64, maxpool 2, dense 128; padding 1),\n"
          "                      or an INI\n"
          "                      model file with one section per layer [mlp]\n"
          "  --epochs N          epochs, 1 or more [10]\n"
          "  --batch N           samples per step [64]\n"
          "  --optimizer NAME    sgd or adam [sgd]\n"
          "  --lr X              learning rate [0.01 for sgd, 0.001 for adam]\n"
          "  --lr-schedule S     cosine (decay to 0 over the run) or constant [cosine]\n"
          "  --lr-scaling S      under mpirun, linear (--lr times the ranks, for the ranks'\n"
          "                      larger combined batch) or none [linear for sgd with --sync\n"
          "                      batch, else none]\n"
          "  --momentum X        SGD momentum [0.9]\n"
          "  --weight-decay X    L2 weight decay [0]\n"
          "  --seed N            seed for initialization and shuffling [1]\n"
          "  --tile N | RxC      tile size: N for both, or R batch rows x C features\n"
          "                      [chosen from the shapes]\n"
          "  --sched NAME        StarPU scheduling policy [%s, or %s with --devices\n"
          "                      opencl[:N]]; `tessera info --sched-list`\n"
          "  --workers N         CPU workers [all cores StarPU may use]\n"
          "  --devices D         OpenCL devices beside the CPU workers: opencl (every one\n"
          "                      StarPU finds, at least one), opencl:N (exactly N) or none\n"
          "                      [what StarPU finds; CPU devices such as PoCL need\n"
          "                      STARPU_OPENCL_ON_CPUS=1]\n"
          "  --window N          training steps in flight at most [8]\n"
          "  --train-limit N     use only the first N training samples\n"
          "  --test-limit N      use only the first N test samples\n"
          "  --classes N         classes (labels 0 to N-1; a label >= N is an error)\n"
          "                      [1 + the largest training label]\n",
          TSR_DEFAULT_DATA_DIR, TSR_DEFAULT_SCHED, TSR_DEVICES_SCHED);
  /* Two strings: ISO C promises string literals of 4095 characters, no more. */
  fputs("  --sync POLICY       under mpirun: batch, every=K, epoch[=n], async-epoch,\n"
        "                      post-local:E,K (batch for E epochs, then every=K) or\n"
        "                      hier:K1,K2[,G] (a node's ranks, or G consecutive ranks,\n"
        "                      average every K1 steps, all ranks every K2) [batch]\n"
        "  --outer NAME        what a weight average does with the mean: none (take it),\n"
        "                      slowmo or nesterov (an outer optimizer step towards it) [none]\n"
        "  --outer-lr X        the outer rate [1 for slowmo, 0.7 for nesterov]\n"
        "  --outer-momentum X  the outer momentum [0.5 for slowmo, 0.9 for nesterov]\n"
        "  --sync-state        average optimizer state with the weights (every, epoch)\n"
        "  --weighting W       uniform, samples or steps (samples, normalized by each rank's\n"
        "                      local steps: FedNova): how ranks count in averages [uniform]\n"
        "  --shares S          under mpirun, each rank's part of the work: uniform, auto\n"
        "                      (measured throughput) or w0,w1,... (one per rank) [uniform]\n"
        "  --deterministic     sum rank contributions in a fixed order (reproducible bits)\n"
        "  --grid PrxPc        under mpirun with Pr x Pc ranks: each grid column of Pr\n"
        "                      consecutive ranks holds one replica, its dense layers'\n"
        "                      feature tiles spread over them; the Pc columns split the\n"
        "                      batch and --sync averages across them [1xP]\n"
        "  --mpi-progress M    under mpirun, who polls StarPU-MPI: thread (its own thread),\n"
        "                      worker (that thread also runs a worker's tasks), or auto:\n"
        "                      worker wherever MPI allows it [auto]\n"
        "  --log FILE.jsonl    write one JSON object per epoch (rank 0)\n"
        "  --checkpoint FILE   write the network, optimizer state and training state\n"
        "                      (safetensors) at every --checkpoint-every, at the end and\n"
        "                      when stopped by SIGINT/SIGTERM\n"
        "  --checkpoint-every N[epochs|steps]  how often [1 epoch]\n"
        "  --resume FILE       continue a checkpoint's run: --epochs stays the total\n"
        "  --no-priorities     every task priority 0 (default: critical path first)\n"
        "  --stats             per-worker statistics at the end (and in the log)\n"
        "  --trace FILE.json   timeline of every task on every worker of every rank,\n"
        "                      Chrome trace-event format (Perfetto, chrome://tracing)\n"
        "  --quiet             no per-epoch lines\n"
        "  --help              this text\n",
        out);
}

static int bad(const char *opt, const char *val, const char *want) {
  fprintf(stderr, "tessera train: %s %s: expected %s (see tessera train --help)\n", opt, val, want);
  return 2;
}

int tsr__cli_devices(const char *cmd, const char *arg, int *opencl) {
  if (tsr_runtime_parse_devices(arg, opencl)) {
    fprintf(stderr,
            "tessera %s: --devices %s: expected opencl, opencl:N (N from 1 to 64) or none (see "
            "tessera %s --help)\n",
            cmd, arg, cmd);
    return 2;
  }
  if (*opencl != 0 && !tsr_runtime_opencl_built()) {
    fprintf(stderr,
            "tessera %s: --devices %s: this tessera is built without OpenCL; install "
            "ocl-icd-opencl-dev and libclblast-dev and rebuild (meson -Dopencl=enabled), or use "
            "--devices none\n",
            cmd, arg);
    return 2;
  }
  return 0;
}

int tsr__cli_to_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int to_float(const char *s, double lo, double hi, float *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi) return -1;
  *out = (float)v;
  return 0;
}

/* Index of s in names (NULL-terminated), or -1. */
static int choice(const char *s, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

int tsr__cli_train_parse(tsr_cli_train_config_t *cfg, int argc, char **argv) {
  enum {
    O_DATA = 256,
    O_MODEL,
    O_EPOCHS,
    O_BATCH,
    O_OPT,
    O_LR,
    O_MOM,
    O_WD,
    O_SEED,
    O_TILE,
    O_SCHED,
    O_WORKERS,
    O_WINDOW,
    O_TRAIN_LIMIT,
    O_TEST_LIMIT,
    O_LOG,
    O_QUIET,
    O_SCHEDULE,
    O_SYNC,
    O_SYNC_STATE,
    O_WEIGHTING,
    O_DETERMINISTIC,
    O_NO_PRIO,
    O_STATS,
    O_TRACE,
    O_MPI_PROGRESS,
    O_LR_SCALING,
    O_CHECKPOINT,
    O_CHECKPOINT_EVERY,
    O_RESUME,
    O_OUTER,
    O_OUTER_LR,
    O_OUTER_MOM,
    O_CLASSES,
    O_GRID,
    O_DEVICES,
    O_SHARES
  };
  static const struct option longopts[] = {
      {"data", required_argument, 0, O_DATA},
      {"model", required_argument, 0, O_MODEL},
      {"epochs", required_argument, 0, O_EPOCHS},
      {"batch", required_argument, 0, O_BATCH},
      {"optimizer", required_argument, 0, O_OPT},
      {"lr", required_argument, 0, O_LR},
      {"momentum", required_argument, 0, O_MOM},
      {"weight-decay", required_argument, 0, O_WD},
      {"seed", required_argument, 0, O_SEED},
      {"tile", required_argument, 0, O_TILE},
      {"sched", required_argument, 0, O_SCHED},
      {"workers", required_argument, 0, O_WORKERS},
      {"window", required_argument, 0, O_WINDOW},
      {"train-limit", required_argument, 0, O_TRAIN_LIMIT},
      {"test-limit", required_argument, 0, O_TEST_LIMIT},
      {"lr-schedule", required_argument, 0, O_SCHEDULE},
      {"sync", required_argument, 0, O_SYNC},
      {"sync-state", no_argument, 0, O_SYNC_STATE},
      {"weighting", required_argument, 0, O_WEIGHTING},
      {"deterministic", no_argument, 0, O_DETERMINISTIC},
      {"log", required_argument, 0, O_LOG},
      {"quiet", no_argument, 0, O_QUIET},
      {"no-priorities", no_argument, 0, O_NO_PRIO},
      {"stats", no_argument, 0, O_STATS},
      {"trace", required_argument, 0, O_TRACE},
      {"mpi-progress", required_argument, 0, O_MPI_PROGRESS},
      {"lr-scaling", required_argument, 0, O_LR_SCALING},
      {"checkpoint", required_argument, 0, O_CHECKPOINT},
      {"checkpoint-every", required_argument, 0, O_CHECKPOINT_EVERY},
      {"resume", required_argument, 0, O_RESUME},
      {"outer", required_argument, 0, O_OUTER},
      {"outer-lr", required_argument, 0, O_OUTER_LR},
      {"outer-momentum", required_argument, 0, O_OUTER_MOM},
      {"classes", required_argument, 0, O_CLASSES},
      {"grid", required_argument, 0, O_GRID},
      {"devices", required_argument, 0, O_DEVICES},
      {"shares", required_argument, 0, O_SHARES},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};

  *cfg = (tsr_cli_train_config_t){.data_dir = TSR_DEFAULT_DATA_DIR,
                                  .model = "mlp",
                                  .train_limit = -1,
                                  .test_limit = -1,
                                  .argc = argc,
                                  .argv = argv};
  tsr_net_opts_init(&cfg->net);
  tsr_train_opts_init(&cfg->train);
  tsr_runtime_opts_init(&cfg->runtime);
  tsr_sync_parse(&cfg->sync, "batch", NULL);
  tsr_errbuf_t err = {""};
  float outer_lr = -1, outer_momentum = -1; /* given with --outer-lr, --outer-momentum */
  bool lr_set = false;
  long v;
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case O_DATA: cfg->data_dir = optarg; break;
    case O_MODEL: cfg->model = optarg; break;
    case O_EPOCHS:
      /* 0 would train nothing and say nothing of it. */
      if (tsr__cli_to_long(optarg, 1, 100000, &v))
        return bad("--epochs", optarg, "an integer from 1 to 100000");
      cfg->train.epochs = (int)v;
      break;
    case O_BATCH:
      if (tsr__cli_to_long(optarg, 1, 1 << 20, &v))
        return bad("--batch", optarg, "an integer from 1 to 1048576");
      cfg->net.batch = (int)v;
      break;
    case O_OPT: {
      static const char *const names[] = {"sgd", "adam", NULL};
      static const tsr_optimizer_kind_t kinds[] = {TSR_OPT_SGD, TSR_OPT_ADAM};
      int i = choice(optarg, names);
      if (i < 0) return bad("--optimizer", optarg, "sgd or adam");
      cfg->net.opt.kind = kinds[i];
      break;
    }
    case O_LR:
      if (to_float(optarg, 1e-12, 1e6, &cfg->net.opt.lr))
        return bad("--lr", optarg, "a number from 1e-12 to 1e6");
      lr_set = true;
      break;
    case O_SYNC: {
      tsr_sync_t before = cfg->sync;
      if (tsr_sync_parse(&cfg->sync, optarg, &err)) {
        fprintf(stderr, "tessera train: %s\n", err.msg);
        return 2;
      }
      cfg->sync.average_state = before.average_state, cfg->sync.outer = before.outer;
      cfg->sync.deterministic = before.deterministic, cfg->sync.by_samples = before.by_samples;
      cfg->sync.by_steps = before.by_steps;
      break;
    }
    case O_OUTER: {
      tsr_outer_t o;
      if (tsr_outer_init(&o, optarg, &err)) {
        fprintf(stderr, "tessera train: %s\n", err.msg);
        return 2;
      }
      /* A rate or momentum given before the name stays. */
      if (outer_lr > 0) o.lr = outer_lr;
      if (outer_momentum >= 0) o.momentum = outer_momentum;
      cfg->sync.outer = o;
      break;
    }
    case O_OUTER_LR:
      if (to_float(optarg, 1e-6f, 100.0f, &outer_lr))
        return bad("--outer-lr", optarg, "a number in [1e-6, 100]");
      cfg->sync.outer.lr = outer_lr;
      break;
    case O_OUTER_MOM:
      if (to_float(optarg, 0, 0.999999f, &outer_momentum))
        return bad("--outer-momentum", optarg, "a number in [0, 1)");
      cfg->sync.outer.momentum = outer_momentum;
      break;
    case O_SYNC_STATE: cfg->sync.average_state = true; break;
    case O_DETERMINISTIC: cfg->sync.deterministic = true; break;
    case O_WEIGHTING: {
      static const char *const names[] = {"uniform", "samples", "steps", NULL};
      int i = choice(optarg, names);
      if (i < 0) return bad("--weighting", optarg, "uniform, samples or steps");
      cfg->sync.by_samples = i >= 1, cfg->sync.by_steps = i == 2;
      break;
    }
    case O_SHARES:
      if (tsr_shares_parse(&cfg->shares, optarg, &err)) {
        fprintf(stderr, "tessera train: %s\n", err.msg);
        return 2;
      }
      break;
    case O_SCHEDULE: {
      static const char *const names[] = {"cosine", "constant", NULL};
      static const tsr_lr_schedule_t kinds[] = {TSR_LR_COSINE, TSR_LR_CONSTANT};
      int i = choice(optarg, names);
      if (i < 0) return bad("--lr-schedule", optarg, "cosine or constant");
      cfg->train.lr_schedule = kinds[i];
      break;
    }
    case O_MOM:
      if (to_float(optarg, 0, 0.999999, &cfg->net.opt.momentum))
        return bad("--momentum", optarg, "a number in [0, 1)");
      break;
    case O_WD:
      if (to_float(optarg, 0, 1e6, &cfg->net.opt.weight_decay))
        return bad("--weight-decay", optarg, "a number from 0 to 1e6");
      break;
    case O_SEED:
      if (tsr__cli_to_long(optarg, 0, 0x7fffffffL, &v))
        return bad("--seed", optarg, "an integer from 0 to 2147483647");
      cfg->net.seed = cfg->train.seed = (uint64_t)v;
      break;
    case O_TILE: {
      long r = 0, cc = 0;
      char *x = strchr(optarg, 'x');
      if (x) {
        *x = '\0';
        int e1 = tsr__cli_to_long(optarg, 1, 1 << 20, &r),
            e2 = tsr__cli_to_long(x + 1, 1, 1 << 20, &cc);
        *x = 'x';
        if (e1 || e2) return bad("--tile", optarg, "N or RxC, integers from 1 to 1048576");
      } else if (tsr__cli_to_long(optarg, 1, 1 << 20, &r)) {
        return bad("--tile", optarg, "N or RxC, integers from 1 to 1048576");
      } else {
        cc = r;
      }
      cfg->net.tile_rows = (int)r, cfg->net.tile_cols = (int)cc;
      break;
    }
    case O_SCHED: cfg->runtime.sched = optarg; break;
    case O_LR_SCALING: {
      static const char *const names[] = {"none", "linear", NULL};
      static const tsr_lr_scaling_t kinds[] = {TSR_LR_SCALING_NONE, TSR_LR_SCALING_LINEAR};
      int i = choice(optarg, names);
      if (i < 0) return bad("--lr-scaling", optarg, "linear or none");
      cfg->train.lr_scaling = kinds[i];
      break;
    }
    case O_MPI_PROGRESS: {
      static const char *const names[] = {"auto", "thread", "worker", NULL};
      static const tsr_mpi_progress_t kinds[] = {TSR_MPI_PROGRESS_AUTO, TSR_MPI_PROGRESS_THREAD,
                                                 TSR_MPI_PROGRESS_WORKER};
      int i = choice(optarg, names);
      if (i < 0) return bad("--mpi-progress", optarg, "auto, thread or worker");
      cfg->runtime.mpi_progress = kinds[i];
      break;
    }
    case O_WORKERS:
      if (tsr__cli_to_long(optarg, 1, 4096, &v))
        return bad("--workers", optarg, "an integer from 1 to 4096");
      cfg->runtime.ncpus = (int)v;
      break;
    case O_WINDOW:
      if (tsr__cli_to_long(optarg, 1, 1 << 16, &v))
        return bad("--window", optarg, "an integer from 1 to 65536");
      cfg->train.window = (int)v;
      break;
    case O_TRAIN_LIMIT:
      if (tsr__cli_to_long(optarg, 1, 0x7fffffffL, &v))
        return bad("--train-limit", optarg, "an integer from 1 to 2147483647");
      cfg->train_limit = v;
      break;
    case O_TEST_LIMIT:
      if (tsr__cli_to_long(optarg, 0, 0x7fffffffL, &v))
        return bad("--test-limit", optarg, "an integer from 0 to 2147483647");
      cfg->test_limit = v;
      break;
    case O_DEVICES:
      if (tsr__cli_devices("train", optarg, &cfg->runtime.opencl)) return 2;
      break;
    case O_CLASSES:
      if (tsr__cli_to_long(optarg, 2, 1 << 24, &v))
        return bad("--classes", optarg, "an integer from 2 to 16777216");
      cfg->classes = (int)v;
      break;
    case O_GRID: {
      long pr, pc;
      char *x = strchr(optarg, 'x');
      if (!x)
        return bad("--grid", optarg,
                   "PrxPc, e.g. 2x4 (Pr ranks split each layer, Pc split the batch)");
      *x = '\0';
      int e1 = tsr__cli_to_long(optarg, 1, TSR_MAX_RANKS, &pr),
          e2 = tsr__cli_to_long(x + 1, 1, TSR_MAX_RANKS, &pc);
      *x = 'x';
      if (e1 || e2)
        return bad("--grid", optarg, "PrxPc with integers Pr, Pc from 1 to 1024, e.g. 2x4");
      cfg->net.grid_rows = (int)pr, cfg->grid_cols = (int)pc;
      break;
    }
    case O_LOG: cfg->log_path = optarg; break;
    case O_CHECKPOINT: cfg->checkpoint = optarg; break;
    case O_RESUME: cfg->resume = optarg; break;
    case O_CHECKPOINT_EVERY: {
      char *end;
      errno = 0;
      long n = strtol(optarg, &end, 10);
      bool steps = strcmp(end, "steps") == 0 || strcmp(end, "step") == 0;
      if (end == optarg || errno || n < 1 || n > 1L << 30 ||
          !(steps || !*end || strcmp(end, "epochs") == 0 || strcmp(end, "epoch") == 0))
        return bad("--checkpoint-every", optarg, "N, Nepochs or Nsteps with N >= 1");
      cfg->checkpoint_every = (int)n, cfg->checkpoint_in_steps = steps;
      break;
    }
    case O_QUIET: cfg->quiet = true; break;
    case O_NO_PRIO: cfg->runtime.priorities = false; break;
    case O_STATS: cfg->runtime.stats = true; break;
    case O_TRACE:
      if (!ends_with(optarg, ".json")) return bad("--trace", optarg, "a file name ending in .json");
      cfg->trace_path = optarg, cfg->runtime.trace = true;
      break;
    case 'h': cfg->help = true; return 0;
    default: return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "tessera train: unexpected argument '%s' (see tessera train --help)\n",
            argv[optind]);
    return 2;
  }
  if (!lr_set && cfg->net.opt.kind == TSR_OPT_ADAM) cfg->net.opt.lr = 0.001f;
  if (cfg->runtime.sched && !tsr_sched_known(cfg->runtime.sched)) {
    fprintf(stderr, "tessera train: --sched %s: unknown policy; this StarPU offers:\n",
            cfg->runtime.sched);
    tsr_sched_list(stderr);
    return 2;
  }
  const char *broken = cfg->runtime.sched ? tsr_sched_broken(cfg->runtime.sched) : NULL;
  if (broken) {
    fprintf(stderr,
            "tessera train: --sched %s: this policy %s; choose another (%s is the default)\n",
            cfg->runtime.sched, broken, TSR_DEFAULT_SCHED);
    return 2;
  }
  cfg->model_file = ends_with(cfg->model, ".ini");
  if (cfg->checkpoint_every && !cfg->checkpoint) {
    fprintf(stderr, "tessera train: --checkpoint-every needs --checkpoint FILE\n");
    return 2;
  }
  if (cfg->checkpoint && !cfg->checkpoint_every) cfg->checkpoint_every = 1; /* every epoch */
  if ((outer_lr > 0 || outer_momentum >= 0) && cfg->sync.outer.kind == TSR_OUTER_NONE) {
    fprintf(stderr, "tessera train: --outer-lr and --outer-momentum need --outer slowmo or "
                    "--outer nesterov\n");
    return 2;
  }
  if (tsr_sync_check(&cfg->sync, &err)) {
    fprintf(stderr, "tessera train: %s\n", err.msg);
    return 2;
  }
  /* A shorthand is checked here, with a stand-in for the classes the data will give; a model file
   * is read by the run, before the data (a file's problems exit 1). */
  tsr_model_spec_t spec;
  if (!cfg->model_file && tsr_model_parse(&spec, cfg->model, 2, &err)) {
    fprintf(stderr, "tessera train: %s\n", err.msg);
    return 2;
  }
  if (!cfg->model_file) tsr_model_spec_fini(&spec);
  return 0;
}
