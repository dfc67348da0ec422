/* tessera train: parses options, loads the data and model, and calls the
 * library's training loop, printing one line per epoch (and a progress line
 * while stderr is a terminal). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tessera/tessera.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: tessera train [options]\n\n"
          "  --data DIR          dataset folder: IDX files (MNIST family, .gz or plain) or\n"
          "                      train.csv/test.csv [%s]\n"
          "  --model SPEC|FILE   mlp (784-512-512-10), mlp:W1,W2,..., linear, cnn (conv 3x3 32,\n"
          "                      maxpool 2, conv 3x3 64, maxpool 2, dense 128; padding 1),\n"
          "                      or an INI\n"
          "                      model file with one section per layer [mlp]\n"
          "  --epochs N          epochs [10]\n"
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
          "  --sched NAME        StarPU scheduling policy [%s]; `tessera info --sched-list`\n"
          "  --workers N         CPU workers [all cores StarPU may use]\n"
          "  --window N          training steps in flight at most [8]\n"
          "  --train-limit N     use only the first N training samples\n"
          "  --test-limit N      use only the first N test samples\n"
          "  --sync POLICY       under mpirun: batch, every=K, epoch[=n], async-epoch [batch]\n"
          "  --sync-state        average optimizer state with the weights (every, epoch)\n"
          "  --weighting W       uniform or samples: how ranks count in averages [uniform]\n"
          "  --deterministic     sum rank contributions in a fixed order (reproducible bits)\n"
          "  --mpi-progress M    under mpirun, who polls StarPU-MPI: thread (its own thread),\n"
          "                      worker (that thread also runs a worker's tasks), or auto:\n"
          "                      worker when the ranks' workers take every core [auto]\n"
          "  --log FILE.jsonl    write one JSON object per epoch (rank 0)\n"
          "  --no-priorities     every task priority 0 (default: critical path first)\n"
          "  --stats             per-worker statistics at the end (and in the log)\n"
          "  --trace FILE.json   timeline of every task on every worker of every rank,\n"
          "                      Chrome trace-event format (Perfetto, chrome://tracing)\n"
          "  --quiet             no per-epoch lines\n"
          "  --help              this text\n",
          TSR_DEFAULT_DATA_DIR, TSR_DEFAULT_SCHED);
}

static int bad(const char *opt, const char *val, const char *want) {
  fprintf(stderr, "tessera train: %s %s: expected %s (see tessera train --help)\n", opt, val, want);
  return 2;
}

static int to_long(const char *s, long lo, long hi, long *out) {
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

/* What must be equal on every rank: the options and the data (sizes and a
 * sample of values), so replicas never silently train different things. */
static void describe_config(char *buf, size_t size, int argc, char **argv,
                            const tsr_dataset_t *train, const tsr_dataset_t *test) {
  double sum = 0;
  for (int64_t i = 0; i < train->n * train->features; i += 997)
    sum += train->x[i];
  for (int64_t i = 0; i < train->n; i += 7)
    sum += train->y[i];
  int n = snprintf(buf, size, "data %lld/%lld x %lld, %d classes, checksum %.6g; options",
                   (long long)train->n, (long long)test->n, (long long)train->features,
                   train->classes, sum);
  for (int i = 1; i < argc && n < (int)size; i++)
    n += snprintf(buf + n, size - (size_t)n, " %s", argv[i]);
}

struct ctx {
  tsr_log_t *log;
  bool quiet, progress;
  int64_t samples_per_batch; /* over all ranks */
  int epochs;
};

static void on_progress(int epoch, int64_t batch, int64_t batches, double seconds, void *p) {
  struct ctx *c = p;
  if (!c->progress) return;
  /* Training time only: evaluation at each epoch end comes on top. */
  double eta =
      seconds / (double)batch * (double)(batches - batch + (int64_t)(c->epochs - epoch) * batches);
  fprintf(stderr, "\r  epoch %d/%d  batch %lld/%lld  %.0f samples/s  ETA %.0f s   ", epoch,
          c->epochs, (long long)batch, (long long)batches,
          (double)batch * (double)c->samples_per_batch / seconds, eta);
}

static int on_epoch(const tsr_epoch_stats_t *s, void *p) {
  struct ctx *c = p;
  if (c->progress) fprintf(stderr, "\r%70s\r", "");
  if (!c->quiet) {
    printf("epoch %*d/%d  loss %.4f  train %.2f%%", s->epochs >= 10 ? 2 : 1, s->epoch, s->epochs,
           s->loss, 100 * s->train_accuracy);
    if (!isnan(s->test_accuracy))
      printf("  test %.2f%% (loss %.4f)", 100 * s->test_accuracy, s->test_loss);
    printf("  %.2f s  %.0f samples/s\n", s->seconds, s->samples_per_s);
    fflush(stdout);
  }
  if (c->log && tsr_log_epoch(c->log, s) != 0) {
    fprintf(stderr, "tessera train: cannot write the log: %s\n", strerror(errno));
    return 1;
  }
  return 0;
}

int tsr_cli_train(int argc, char **argv) {
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
    O_LR_SCALING
  };
  static const struct option longopts[] = {{"data", required_argument, 0, O_DATA},
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
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};

  const char *data_dir = TSR_DEFAULT_DATA_DIR, *model = "mlp", *log_path = NULL, *trace_path = NULL;
  tsr_net_opts_t no;
  tsr_net_opts_init(&no);
  tsr_train_opts_t to;
  tsr_train_opts_init(&to);
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  bool lr_set = false, quiet = false;
  tsr_sync_t sync;
  tsr_sync_parse(&sync, "batch", NULL);
  tsr_errbuf_t err = {""};
  long v, train_limit = -1, test_limit = -1;
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case O_DATA: data_dir = optarg; break;
    case O_MODEL: model = optarg; break;
    case O_EPOCHS:
      if (to_long(optarg, 0, 100000, &v)) return bad("--epochs", optarg, "an integer >= 0");
      to.epochs = (int)v;
      break;
    case O_BATCH:
      if (to_long(optarg, 1, 1 << 20, &v)) return bad("--batch", optarg, "an integer >= 1");
      no.batch = (int)v;
      break;
    case O_OPT: {
      static const char *const names[] = {"sgd", "adam", NULL};
      static const tsr_optimizer_kind_t kinds[] = {TSR_OPT_SGD, TSR_OPT_ADAM};
      int i = choice(optarg, names);
      if (i < 0) return bad("--optimizer", optarg, "sgd or adam");
      no.opt.kind = kinds[i];
      break;
    }
    case O_LR:
      if (to_float(optarg, 1e-12, 1e6, &no.opt.lr)) return bad("--lr", optarg, "a number > 0");
      lr_set = true;
      break;
    case O_SYNC: {
      bool state = sync.average_state, det = sync.deterministic, by = sync.by_samples;
      if (tsr_sync_parse(&sync, optarg, &err)) {
        fprintf(stderr, "tessera train: %s\n", err.msg);
        return 2;
      }
      sync.average_state = state, sync.deterministic = det, sync.by_samples = by;
      break;
    }
    case O_SYNC_STATE: sync.average_state = true; break;
    case O_DETERMINISTIC: sync.deterministic = true; break;
    case O_WEIGHTING: {
      static const char *const names[] = {"uniform", "samples", NULL};
      int i = choice(optarg, names);
      if (i < 0) return bad("--weighting", optarg, "uniform or samples");
      sync.by_samples = i == 1;
      break;
    }
    case O_SCHEDULE: {
      static const char *const names[] = {"cosine", "constant", NULL};
      static const tsr_lr_schedule_t kinds[] = {TSR_LR_COSINE, TSR_LR_CONSTANT};
      int i = choice(optarg, names);
      if (i < 0) return bad("--lr-schedule", optarg, "cosine or constant");
      to.lr_schedule = kinds[i];
      break;
    }
    case O_MOM:
      if (to_float(optarg, 0, 0.999999, &no.opt.momentum))
        return bad("--momentum", optarg, "a number in [0, 1)");
      break;
    case O_WD:
      if (to_float(optarg, 0, 1e6, &no.opt.weight_decay))
        return bad("--weight-decay", optarg, "a number >= 0");
      break;
    case O_SEED:
      if (to_long(optarg, 0, 0x7fffffffL, &v)) return bad("--seed", optarg, "an integer >= 0");
      no.seed = to.seed = (uint64_t)v;
      break;
    case O_TILE: {
      long r, cc;
      char *x = strchr(optarg, 'x');
      if (x) {
        *x = '\0';
        int e1 = to_long(optarg, 1, 1 << 20, &r), e2 = to_long(x + 1, 1, 1 << 20, &cc);
        *x = 'x';
        if (e1 || e2) return bad("--tile", optarg, "N or RxC with positive integers");
      } else if (to_long(optarg, 1, 1 << 20, &r)) {
        return bad("--tile", optarg, "N or RxC with positive integers");
      } else {
        cc = r;
      }
      no.tile_rows = (int)r, no.tile_cols = (int)cc;
      break;
    }
    case O_SCHED: ro.sched = optarg; break;
    case O_LR_SCALING: {
      static const char *const names[] = {"none", "linear", NULL};
      static const tsr_lr_scaling_t kinds[] = {TSR_LR_SCALING_NONE, TSR_LR_SCALING_LINEAR};
      int i = choice(optarg, names);
      if (i < 0) return bad("--lr-scaling", optarg, "linear or none");
      to.lr_scaling = kinds[i];
      break;
    }
    case O_MPI_PROGRESS: {
      static const char *const names[] = {"auto", "thread", "worker", NULL};
      static const tsr_mpi_progress_t kinds[] = {TSR_MPI_PROGRESS_AUTO, TSR_MPI_PROGRESS_THREAD,
                                                 TSR_MPI_PROGRESS_WORKER};
      int i = choice(optarg, names);
      if (i < 0) return bad("--mpi-progress", optarg, "auto, thread or worker");
      ro.mpi_progress = kinds[i];
      break;
    }
    case O_WORKERS:
      if (to_long(optarg, 1, 4096, &v)) return bad("--workers", optarg, "an integer >= 1");
      ro.ncpus = (int)v;
      break;
    case O_WINDOW:
      if (to_long(optarg, 1, 1 << 16, &v)) return bad("--window", optarg, "an integer >= 1");
      to.window = (int)v;
      break;
    case O_TRAIN_LIMIT:
      if (to_long(optarg, 1, 0x7fffffffL, &train_limit))
        return bad("--train-limit", optarg, "an integer >= 1");
      break;
    case O_TEST_LIMIT:
      if (to_long(optarg, 0, 0x7fffffffL, &test_limit))
        return bad("--test-limit", optarg, "an integer >= 0");
      break;
    case O_LOG: log_path = optarg; break;
    case O_QUIET: quiet = true; break;
    case O_NO_PRIO: ro.priorities = false; break;
    case O_STATS: ro.stats = true; break;
    case O_TRACE:
      if (!ends_with(optarg, ".json")) return bad("--trace", optarg, "a file name ending in .json");
      trace_path = optarg, ro.trace = true;
      break;
    case 'h': usage(stdout); return 0;
    default: return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "tessera train: unexpected argument '%s' (see tessera train --help)\n",
            argv[optind]);
    return 2;
  }
  if (!lr_set && no.opt.kind == TSR_OPT_ADAM) no.opt.lr = 0.001f;
  if (ro.sched && !tsr_sched_known(ro.sched)) {
    fprintf(stderr, "tessera train: --sched %s: unknown policy; this StarPU offers:\n", ro.sched);
    tsr_sched_list(stderr);
    return 2;
  }

  /* Under mpirun every rank runs this; ranks agree on each start-up step so
   * that one rank's failure stops all of them with its message, and rank 0
   * alone speaks afterwards. */
  if (tsr_dist_start(&argc, &argv, false)) {
    fprintf(stderr, "tessera train: cannot start MPI\n");
    return 1;
  }
  bool speaker = tsr_dist_rank() == 0;
  if (!speaker) quiet = true;
  to.sync = &sync;
  tsr_dataset_t train = {0}, test = {0};
  tsr_model_spec_t spec;
  tsr_net_t *net = NULL;
  tsr_log_t *log = NULL;
  int rc = tsr_dataset_load_dir(&train, &test, data_dir, &err);
  if (rc == 0 && train_limit > 0 && train_limit < train.n)
    rc = tsr_dataset_truncate(&train, train_limit);
  if (rc == 0 && test_limit >= 0 && test_limit < test.n)
    rc = tsr_dataset_truncate(&test, test_limit);
  if (rc == 0) {
    tsr_dataset_standardize(&train, &test);
    rc = ends_with(model, ".ini") ? tsr_model_load_ini(&spec, model, &err)
                                  : tsr_model_parse(&spec, model, train.classes, &err);
  }
  rc = tsr_dist_agree(rc, &err, &err);
  if (rc == 0) {
    char config[1024];
    describe_config(config, sizeof config, argc, argv, &train, &test);
    rc = tsr_dist_check_same(config, &err);
  }
  if (rc == 0) rc = tsr_dist_agree(tsr_runtime_init(&ro, &err), &err, &err);
  bool started = rc == 0;
  if (train.height > 1) /* image geometry known (IDX); else the net infers it */
    no.in_channels = train.channels, no.in_height = train.height, no.in_width = train.width;
  if (rc == 0)
    rc = tsr_dist_agree(tsr_net_create(&net, &spec, (int)train.features, train.classes, &no, &err),
                        &err, &err);
  char desc[256] = "", sync_text[32] = "none";
  int tr = 0, tc = 0;
  float lr = 0; /* the rate tsr_train uses: --lr, scaled by the ranks as --lr-scaling says */
  if (tsr_dist_size() > 1) tsr_sync_describe(&sync, sync_text, sizeof sync_text);
  if (rc == 0) {
    tsr_model_describe(&spec, (int)train.features, desc, sizeof desc);
    tsr_net_tiles(net, &tr, &tc);
    lr = tsr_train_base_lr(net, &to);
    if (!quiet)
      printf("tessera: model %s (%lld parameters), %lld train / %lld test samples, batch %d, "
             "%s lr %g, tiles %dx%d, %d workers, scheduler %s",
             desc, (long long)tsr_net_param_count(net), (long long)train.n, (long long)test.n,
             no.batch, no.opt.kind == TSR_OPT_ADAM ? "adam" : "sgd", (double)lr, tr, tc,
             tsr_runtime_ncpus(), tsr_runtime_sched());
    if (!quiet && tsr_dist_size() > 1)
      printf(", %d ranks (sync %s, MPI progress: %s), batch %d per rank", tsr_dist_size(),
             sync_text, tsr_runtime_mpi_progress(), no.batch);
    if (!quiet && lr != no.opt.lr)
      printf(", lr %g x %d ranks (--lr-scaling linear)", (double)no.opt.lr, tsr_dist_size());
    if (!quiet) printf("\n");
  }
  if (rc == 0) {
    int lrc = 0;
    if (log_path && speaker) {
      tsr_run_info_t run = {.model = desc,
                            .sched = tsr_runtime_sched(),
                            .optimizer = no.opt.kind == TSR_OPT_ADAM ? "adam" : "sgd",
                            .sync = sync_text,
                            .mpi_progress = tsr_runtime_mpi_progress(),
                            .batch = no.batch,
                            .tile_rows = tr,
                            .tile_cols = tc,
                            .workers = tsr_runtime_ncpus(),
                            .lr = lr,
                            .seed = no.seed,
                            .no_priorities = !ro.priorities};
      lrc = tsr_log_open(&log, log_path, &run, &err);
    }
    rc = tsr_dist_agree(lrc, &err, &err);
  }
  if (rc == 0) {
    struct ctx cx = {log, quiet, !quiet && isatty(STDERR_FILENO),
                     (int64_t)no.batch * tsr_dist_size(), to.epochs};
    to.on_epoch = on_epoch, to.on_progress = on_progress, to.ctx = &cx;
    rc = tsr_train(net, &train, &test, &to, &err);
    /* Past start-up the ranks' task graphs are tied together: a rank that
     * fails mid-run stops them all rather than leaving them waiting. */
    if (rc && tsr_dist_size() > 1) tsr_dist_abort(err.msg[0] ? err.msg : tsr_strerror(rc));
  }
  if (rc && speaker)
    fprintf(stderr, "tessera train: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
  tsr_net_destroy(&net);
  if (started) tsr_runtime_fini();
  /* Collective under MPI: every rank that trained takes part. */
  if (rc == 0 && ro.stats) {
    tsr_run_stats_t st;
    rc = tsr_runtime_stats(&st, &err);
    if (rc == 0 && speaker) {
      tsr_run_stats_print(stdout, &st);
      if (log && tsr_log_stats(log, &st) != 0)
        fprintf(stderr, "tessera train: cannot write the log: %s\n", strerror(errno));
    }
    tsr_run_stats_fini(&st);
    if (rc && speaker) fprintf(stderr, "tessera train: %s\n", err.msg);
  }
  if (rc == 0 && trace_path) {
    rc = tsr_runtime_trace_write(trace_path, &err);
    if (rc && speaker) fprintf(stderr, "tessera train: %s\n", err.msg);
  }
  tsr_log_close(&log);
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
  tsr_dist_stop();
  return rc ? 1 : 0;
}
