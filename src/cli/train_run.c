/* tessera train's run: a configuration (train_config.h) carried out through the library on
 * every rank under mpirun, printing one line per epoch and a progress line on stderr (redrawn in
 * place on a terminal; on a pipe, as under mpirun, a whole line every few seconds). Ranks agree on
 * each start-up step so that one rank's failure stops all of them with its message, and rank 0
 * alone speaks afterwards. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/train_config.h"
#include "tessera/tessera.h"
#include "try.h"

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

/* A progress line on a pipe (a log file, mpirun's forwarding) every so many seconds: often
 * enough to see a run is alive, rarely enough not to fill the file. */
#define PIPE_PROGRESS_SECONDS 5.0

struct ctx {
  tsr_log_t *log;
  const char *log_path;
  bool quiet, progress, stats;
  bool terminal;         /* stderr is one: the progress line is redrawn in place */
  double progress_shown; /* on a pipe, the epoch's seconds at its last progress line (0: none) */
  int progress_epoch;    /* the epoch progress_shown is of */
  int64_t samples_per_batch; /* over all ranks */
  int epochs;
  tsr_errbuf_t *err; /* why a callback failed (the run's, which tsr_train leaves as it is) */
  int failed;        /* on_ranks could not write the log: a TSR_E* code */
};

/* A log line that could not be written ends the run: the message says which file and why. */
static int log_failed(struct ctx *c, const char *what) {
  return tsr_error_set(c->err, TSR_EIO, "--log %s: cannot write %s: %s", c->log_path, what,
                       strerror(errno));
}

static void on_progress(int epoch, int64_t batch, int64_t batches, double seconds, void *p) {
  struct ctx *c = p;
  if (!c->progress) return;
  /* Training time only: evaluation at each epoch end comes on top. */
  double eta =
      seconds / (double)batch * (double)(batches - batch + (int64_t)(c->epochs - epoch) * batches);
  if (!c->terminal) {
    if (epoch != c->progress_epoch) c->progress_epoch = epoch, c->progress_shown = 0;
    if (seconds - c->progress_shown < PIPE_PROGRESS_SECONDS) return;
    c->progress_shown = seconds;
  }
  fprintf(stderr, "%s  epoch %d/%d  batch %lld/%lld  %.0f samples/s  ETA %.0f s%s",
          c->terminal ? "\r" : "", epoch, c->epochs, (long long)batch, (long long)batches,
          (double)batch * (double)c->samples_per_batch / seconds, eta, c->terminal ? "   " : "\n");
  if (!c->terminal) fflush(stderr);
}

static int on_step(const tsr_step_stats_t *s, void *p) {
  struct ctx *c = p;
  if (!c->log || tsr_log_step(c->log, s) == 0) return 0;
  char what[48];
  snprintf(what, sizeof what, "step %lld's line", (long long)s->step);
  return log_failed(c, what);
}

/* v, but a NaN without its sign: printf shows "nan", as the log and messages do, not "-nan". */
static double fabs_nan(double v) {
  return isnan(v) ? fabs(v) : v;
}

/* --eval-every: a line between epochs' lines, and the log's "eval" line. */
static int on_eval(const tsr_eval_stats_t *s, void *p) {
  struct ctx *c = p;
  if (c->progress && c->terminal) fprintf(stderr, "\r%70s\r", "");
  if (!c->quiet) {
    printf("  step %lld (epoch %d, %lld/%lld)  %s %.2f%% (loss %.4f)", (long long)s->step, s->epoch,
           (long long)s->step_in_epoch, (long long)s->steps, s->set, 100 * s->accuracy,
           fabs_nan(s->loss));
    if (s->positions > 1)
      printf("  %.3f bits/byte  %lld tokens", fabs_nan(s->loss / M_LN2),
             (long long)(s->samples * s->positions));
    else
      printf("  %lld samples", (long long)s->samples);
    printf("%s\n", s->agreed ? "" : "  (rank 0's replica)");
    fflush(stdout);
  }
  if (!c->log || tsr_log_eval(c->log, s) == 0) return 0;
  char what[48];
  snprintf(what, sizeof what, "step %lld's evaluation line", (long long)s->step);
  return log_failed(c, what);
}

static int on_epoch(const tsr_epoch_stats_t *s, void *p) {
  struct ctx *c = p;
  if (c->progress && c->terminal) fprintf(stderr, "\r%70s\r", "");
  if (!c->quiet) {
    printf("epoch %*d/%d  loss %.4f  train %.2f%%", s->epochs >= 10 ? 2 : 1, s->epoch, s->epochs,
           fabs_nan(s->loss), 100 * s->train_accuracy);
    if (s->val_samples > 0)
      printf("  val %.2f%% (loss %.4f)", 100 * s->val_accuracy, fabs_nan(s->val_loss));
    if (s->test_samples > 0)
      printf("  test %.2f%% (loss %.4f)", 100 * s->test_accuracy, fabs_nan(s->test_loss));
    if (s->positions > 1 && s->test_samples > 0)
      printf("  %.3f bits/byte", fabs_nan(s->test_loss / M_LN2));
    if (s->positions > 1)
      printf("  %.2f s  %.0f tokens/s\n", s->seconds, s->samples_per_s * s->positions);
    else
      printf("  %.2f s  %.0f samples/s\n", s->seconds, s->samples_per_s);
    if (s->lr_reduced && s->epoch < s->epochs)
      printf("plateau: the validation loss stopped falling; from epoch %d the rate is %g x the "
             "base rate\n",
             s->epoch + 1, s->lr_factor);
    if (s->stopped) printf("stopped after epoch %d of %d: %s\n", s->epoch, s->epochs, s->stopped);
    fflush(stdout);
  }
  if (c->log && tsr_log_epoch(c->log, s) != 0) {
    char what[48];
    snprintf(what, sizeof what, "epoch %d's line", s->epoch);
    return log_failed(c, what);
  }
  return 0;
}

/* Rank 0, after the last epoch under MPI: every rank's totals, to the log and
 * with --stats to stdout. */
static void on_ranks(const tsr_rank_stats_t *ranks, int n, void *p) {
  struct ctx *c = p;
  if (c->stats) tsr_rank_stats_print(stdout, ranks, n);
  if (c->log && tsr_log_ranks(c->log, ranks, n) != 0) c->failed = log_failed(c, "the ranks' line");
}

/* What a run holds from start-up to its end. */
typedef struct {
  const tsr_cli_train_config_t *cfg;
  bool speaker;              /* rank 0: evaluates, prints and logs */
  bool quiet;                /* no banner or epoch lines: --quiet, or not rank 0 */
  bool on_text;              /* trains on --text or the default text, not --data */
  char command[4096];        /* the command line, for checkpoints (cut with "...") */
  tsr_dataset_t train, test; /* owned, standardized with the training statistics */
  tsr_dataset_t val;         /* owned: --val-split's, held out of the training set */
  tsr_model_spec_t spec;     /* from --model */
  /* What the run is, as the library's setup reads it: cfg's run (the options) with its sync
   * and shares pointing at cfg's; once loaded, the model and the data's shapes
   * (run_describe_data); --domain auto's choice (plan_domain). */
  tsr_run_config_t run;
  tsr_train_opts_t train_opts; /* cfg's, with the run's setup */
  tsr_net_t *net;              /* owned */
  tsr_log_t *log;              /* owned, rank 0 with --log */
  bool started;                /* the runtime */
  /* Refused for an option the loaded data or model cannot take (--crop on tabular data, --sync-bn
   * without a batchnorm): bad usage, exit status 2 as before loading. */
  bool usage;
  char desc[256], sync_text[64]; /* desc: the model as the banner shows it (cut with "...") */
  int tile_rows, tile_cols;
  float lr; /* the rate tsr_train uses: --lr, scaled by the ranks as --lr-scaling says */
  tsr_standardization_t standardization; /* fitted to the training set, owned */
  float *fill; /* owned, (channels) with --crop: a black pixel standardized, the padding */
  tsr_checkpoint_info_t ckpt; /* what checkpoints say the run is (model, data, standardization) */
  tsr_checkpoint_info_t resumed; /* --resume: where the checkpoint's run stood */
  tsr_run_setup_t setup;         /* each rank's batch and shard, shares as measured, from the
                                    library */
  char domain_plan[128]; /* --domain auto: what the planner chose, for the banner ("": none) */
  tsr_errbuf_t err;
  double start_time; /* when the command started, seconds since 1970 (the log's run line) */
} run_t;

/* SIGINT/SIGTERM: the first asks training to stop (it finishes the tasks in
 * flight, writes the checkpoint if one was asked for, and the command exits
 * 128 + the signal); a second ends the process at once, by that signal.
 * Once the run is over (leaving), a signal ends the process with its status. */
static volatile sig_atomic_t stop_signal, leaving, leave_status;
/* Seconds (monotonic) of the last SIGCONT and of the stop signal: Open MPI's mpirun, signalled,
 * sends its ranks SIGCONT a second before SIGTERM, and answers no MPI_Finalize after. */
static volatile sig_atomic_t cont_at = -100, stop_at;

static sig_atomic_t seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (sig_atomic_t)ts.tv_sec;
}

/* The command's exit status for what the run returned (docs/training.md's table); a stop on
 * request is 128 + the signal, which only the ranks together know (stop_line). */
static int exit_status(int rc) {
  return rc == TSR_EDIVERGED ? 3 : rc ? 1 : 0;
}

static void on_signal(int sig) {
  if (sig == SIGCONT) {
    cont_at = seconds_now();
    return;
  }
  if (leaving) _exit(leave_status);
  if (stop_signal) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  stop_signal = sig, stop_at = seconds_now();
}

static bool should_stop(void *ctx) {
  (void)ctx;
  return stop_signal != 0;
}

static void catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sa.sa_flags = SA_RESTART; /* SIGCONT's own action, continuing, stays */
  sigaction(SIGCONT, &sa, NULL);
}

/* The end of the command with status: under MPI after a stop signal that a signalled mpirun sent
 * (a SIGCONT came at most 2 s before it), without MPI_Finalize, whose last exchange waits for
 * mpirun, which no longer answers (the ranks waited there until its SIGKILL, a second after
 * their SIGTERM); a signal during MPI_Finalize ends the process with status too. Every rank has
 * agreed and written what it had to before. */
static int leave(int status) {
  fflush(NULL);
  leave_status = status, leaving = 1;
  if (stop_signal && tsr_dist_size() > 1 && stop_at - cont_at <= 2) _exit(status);
  tsr_dist_stop();
  return status;
}

/* The exit status once training is over, from rc, the run's result as every rank has it
 * (collective). After a stop on request (rc TSR_ESTOPPED on every rank), or a run that ended
 * (rc 0), which signal stopped it and on which rank, agreed by every rank, for rank 0's one
 * line: 128 + the lowest signalled rank's signal after a stop; 0, said, when a signal came too
 * late to stop anything (after the last step, or, under MPI, the last step's agreement).
 * *signalled: whether any rank had got a signal (the same on every rank). */
static int stop_line(const run_t *r, int rc, bool *signalled) {
  int sig, ranks, first = tsr_dist_first_signal(stop_signal, &sig, &ranks);
  *signalled = first >= 0;
  if (rc != 0 && rc != TSR_ESTOPPED) return exit_status(rc);
  if (first < 0 && rc == 0) return 0;
  char who[96] = "";
  if (first >= 0 && tsr_dist_size() > 1)
    snprintf(who, sizeof who,
             ranks == tsr_dist_size() ? " on every rank"
             : ranks > 1              ? " on rank %d and %d other ranks"
                                      : " on rank %d",
             first, ranks - 1);
  const char *name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
  if (rc == 0) {
    if (r->speaker)
      fprintf(stderr,
              "tessera train: %s%s: nothing was left to stop, every epoch was trained%s%s\n", name,
              who, r->cfg->checkpoint ? " and the checkpoint holds the end: " : "",
              r->cfg->checkpoint ? r->cfg->checkpoint : "");
    return 0;
  }
  if (r->speaker) {
    if (first >= 0)
      fprintf(stderr, "tessera train: %s%s: %s\n", name, who, r->err.msg);
    else
      fprintf(stderr, "tessera train: %s\n", r->err.msg);
  }
  return 128 + (sig ? sig : SIGINT);
}

/* Classes inferred from the largest label that have no training sample: a stray label (200 in a
 * 10-class set) silently builds a far larger output layer. Said with the empty ranges. */
static void warn_empty_classes(const tsr_dataset_t *train) {
  int64_t *counts = malloc(sizeof *counts * (size_t)train->classes);
  if (!counts) return;
  tsr_dataset_class_counts(train, counts);
  char ranges[160] = "";
  int empty = 0, n = 0, shown = 0;
  for (int c = 0; c < train->classes; c++) {
    if (counts[c]) continue;
    int last = c;
    while (last + 1 < train->classes && !counts[last + 1])
      last++;
    empty += last - c + 1;
    if (shown++ < 4 && n < (int)sizeof ranges)
      n += last > c ? snprintf(ranges + n, sizeof ranges - (size_t)n, "%s%d to %d", n ? ", " : "",
                               c, last)
                    : snprintf(ranges + n, sizeof ranges - (size_t)n, "%s%d", n ? ", " : "", c);
    c = last;
  }
  if (empty)
    fprintf(stderr,
            "tessera train: warning: the training labels go up to %d, so the model has %d "
            "classes, but %d of them have no training sample (%s%s); if a label is wrong, "
            "--classes N makes every label >= N an error\n",
            train->classes - 1, train->classes, empty, ranges, shown > 4 ? ", ..." : "");
  free(counts);
}

/* --val-split: the held-out samples, from the run's seed (a resumed run's: the checkpoint's),
 * which a resumed run must hold out as its checkpoint's did. */
static int hold_out(run_t *r) {
  const tsr_cli_train_config_t *cfg = r->cfg;
  uint64_t seed = cfg->train.seed;
  if (cfg->resume) {
    tsr_checkpoint_info_t was;
    TSR_TRY(tsr_checkpoint_read(cfg->resume, &was, NULL, NULL, NULL, NULL, &r->err));
    seed = was.seed;
    if (was.val_split != cfg->val_split) {
      char asked[48] = "no --val-split", given[48] = "no --val-split";
      if (cfg->val_split > 0) snprintf(asked, sizeof asked, "--val-split %g", cfg->val_split);
      if (was.val_split > 0) snprintf(given, sizeof given, "--val-split %g", was.val_split);
      return tsr_error_set(&r->err, TSR_EINVAL,
                           "--resume %s: its run held out %lld training samples (%s), this one "
                           "asks for %s: resume with %s, so that it trains and validates on the "
                           "same samples",
                           cfg->resume, (long long)was.val_samples, given, asked, given);
    }
  }
  if (!(cfg->val_split > 0)) return 0;
  r->ckpt.val_from = r->train.n;
  TSR_TRY(tsr_validation_split(&r->train, &r->val, cfg->val_split, seed, &r->err));
  r->ckpt.val_split = cfg->val_split, r->ckpt.val_samples = r->val.n;
  tsr_dataset_fingerprint(&r->val, r->ckpt.val_data, sizeof r->ckpt.val_data);
  return 0;
}

/* --crop and --flip against the data (images only; exit 2 otherwise), and the padding's value:
 * a black pixel standardized as the images are, as PyTorch pads raw pixels and normalizes. */
static int augment_data(run_t *r) {
  const tsr_augment_t *a = &r->cfg->augment;
  if (a->crop_h == 0 && !a->flip) return 0;
  char opt[48];
  if (a->crop_h == 0)
    snprintf(opt, sizeof opt, "--flip");
  else if (a->crop_h == a->crop_w)
    snprintf(opt, sizeof opt, "--crop %d:%d", a->crop_h, a->pad);
  else
    snprintf(opt, sizeof opt, "--crop %dx%d:%d", a->crop_h, a->crop_w, a->pad);
  const tsr_dataset_t *t = &r->train;
  tsr_errbuf_t why = {""};
  int rc = tsr_augment_check(a, t->channels, t->height, t->width, &why);
  if (rc == 0 && a->crop_h > 0) {
    r->fill = malloc(sizeof *r->fill * (size_t)t->channels);
    rc =
        r->fill ? tsr_augment_fill(r->fill, t->channels, &r->standardization, t, &why) : TSR_ENOMEM;
  }
  if (rc == TSR_ENOMEM) return tsr_error_set(&r->err, rc, "%s: out of memory", opt);
  if (rc) {
    r->usage = true;
    return tsr_error_set(&r->err, rc, "%s: %s: %s", opt, r->cfg->data_dir, why.msg);
  }
  return 0;
}

/* Whether --model is a language model (a layer with a context, the window length): a model file
 * as read, a shorthand parsed aside (it is parsed for the data's classes after the data). */
static bool language_model(const run_t *r) {
  if (r->cfg->model_file) return tsr__cli_model_context(&r->spec) > 0;
  tsr_model_spec_t spec;
  int context = 0;
  if (tsr_model_parse(&spec, r->cfg->model, TSR_TEXT_VOCAB, NULL) == 0)
    context = tsr__cli_model_context(&spec);
  tsr_model_spec_fini(&spec);
  return context > 0;
}

/* What a text set's token ids cannot take: 0, or bad usage (exit 2) naming the option. */
static int check_text_options(run_t *r, const char *opt) {
  const tsr_cli_train_config_t *cfg = r->cfg;
  const char *why = NULL;
  if (tsr__cli_model_context(&r->spec) == 0)
    why = "the model has no layer with a context, the window length T: use --model "
          "gpt:L,D,H,T, or give the model file's embedding layer context = T";
  else if (cfg->classes)
    why = "--classes: the vocabulary is the 256 byte values; leave --classes out";
  else if (cfg->standardize != TSR_STANDARDIZE_AUTO && cfg->standardize != TSR_STANDARDIZE_NONE)
    why = "--standardize: the inputs are token ids, which must stay exact; leave it out (none)";
  else if (cfg->augment.crop_h || cfg->augment.flip)
    why = "--crop and --flip are for images; leave them out";
  if (!why) return 0;
  r->usage = true;
  return tsr_error_set(&r->err, TSR_EINVAL, "%s: %s", opt, why);
}

/* The command line as one string (its words joined by spaces) for the checkpoints. */
static void command_line(run_t *r) {
  size_t n = 0, size = sizeof r->command;
  /* main passes its argv from "train" on: [-1] is the program */
  for (int i = -1; i < r->cfg->argc && n < size; i++)
    n += (size_t)snprintf(r->command + n, size - n, "%s%s", i > -1 ? " " : "", r->cfg->argv[i]);
  if (n >= size) memcpy(r->command + size - 4, "...", 4);
  r->ckpt.command = r->command;
}

/* A language model's data: the model first (a shorthand with the 256 bytes as its vocabulary),
 * whose context is the windows' length T, then the text, the last TSR_CLI_TEXT_TEST_FRACTION of
 * its windows the test set. */
static int load_text(run_t *r) {
  const tsr_cli_train_config_t *cfg = r->cfg;
  const char *opt = cfg->text ? "--text" : "a language model without --data";
  if (!cfg->model_file) TSR_TRY(tsr_model_parse(&r->spec, cfg->model, TSR_TEXT_VOCAB, &r->err));
  TSR_TRY(check_text_options(r, opt));
  int rc =
      tsr__cli_load_text(cfg->text, tsr__cli_model_context(&r->spec), &r->train, &r->test, &r->err);
  if (rc == TSR_EINVAL && strstr(r->err.msg, "an empty file name")) r->usage = true; /* exit 2 */
  return rc;
}

/* The output files checked, the model description (a model file first: it fails faster than the
 * data loads), and this rank's data, cut to the limits and standardized. */
static int load(run_t *r) {
  const tsr_cli_train_config_t *cfg = r->cfg;
  command_line(r);
  /* Rank 0 writes the log, the trace and checkpoints: a path it cannot create fails now, not after
   * training. */
  int rc = r->speaker && cfg->log_path ? tsr_output_check(cfg->log_path, "--log", &r->err) : 0;
  if (rc == 0 && r->speaker && cfg->trace_path)
    rc = tsr_output_check(cfg->trace_path, "--trace", &r->err);
  /* The checkpoint too: it is written beside itself and renamed, so its folder must take a new
   * file; found out at the first checkpoint, an epoch was lost. */
  if (rc == 0 && r->speaker && cfg->checkpoint)
    rc = tsr_output_check(cfg->checkpoint, "--checkpoint", &r->err);
  if (rc == 0 && cfg->model_from_checkpoint) /* --resume without --model */
    rc = tsr_checkpoint_read(cfg->resume, NULL, &r->spec, NULL, NULL, NULL, &r->err);
  else if (rc == 0 && cfg->model_file)
    rc = tsr_model_load_ini(&r->spec, cfg->model, &r->err);
  /* The run trains on text with --text, or with a language model and no --data. */
  bool text = rc == 0 && (cfg->text || (!cfg->data_given && language_model(r)));
  r->on_text = text;
  if (rc == 0)
    rc = text ? load_text(r) : tsr_dataset_load_dir(&r->train, &r->test, cfg->data_dir, &r->err);
  /* PyTorch's default for an embedding table is nn.Embedding's normal(0, 1): tied to the head,
   * logits of about sqrt(D) and a loss far above the uniform's (measured 12.7 nats per token
   * after an epoch against ln 256 = 5.5, on gpt:1,32,2,16). A language model starts as GPT-2
   * unless --init says otherwise. */
  if (rc == 0 && text && !cfg->init_given) r->run.net.init = TSR_INIT_GPT2;
  if (rc == 0 && cfg->classes) { /* before --train-limit: every label of the files is checked */
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "--classes %d: the training set in %s", cfg->classes,
             cfg->data_dir);
    rc = tsr_dataset_set_classes(&r->train, cfg->classes, what, &r->err);
    snprintf(what, sizeof what, "--classes %d: the test set in %s", cfg->classes, cfg->data_dir);
    if (rc == 0) rc = tsr_dataset_set_classes(&r->test, cfg->classes, what, &r->err);
  }
  if (rc == 0 && !cfg->classes && r->speaker && !text) warn_empty_classes(&r->train);
  if (rc == 0 && cfg->train_limit > 0 && cfg->train_limit < r->train.n)
    rc = tsr_dataset_truncate(&r->train, cfg->train_limit);
  if (rc == 0 && cfg->test_limit >= 0 && cfg->test_limit < r->test.n)
    rc = tsr_dataset_truncate(&r->test, cfg->test_limit);
  if (rc == 0) {
    /* What a checkpoint records of the data: the raw training set (held-out samples included:
     * the split has keys of its own), and the standardization, fitted to what trains. */
    tsr_dataset_fingerprint(&r->train, r->ckpt.data, sizeof r->ckpt.data);
    r->ckpt.batch = cfg->run.net.batch;
    if (cfg->val_split > 0 || cfg->resume) rc = hold_out(r);
    if (rc == 0)
      rc = tsr_standardization_fit(&r->standardization, cfg->standardize, &r->train, &r->err);
    if (rc == 0)
      rc = tsr_standardization_apply(&r->standardization, &r->train, "the training set", &r->err);
    if (rc == 0)
      rc = tsr_standardization_apply(&r->standardization, &r->test, "the test set", &r->err);
    if (rc == 0 && r->val.n > 0)
      rc = tsr_standardization_apply(&r->standardization, &r->val, "the validation set", &r->err);
    r->ckpt.standardization = &r->standardization;
    const tsr_standardization_t *z = &r->standardization;
    bool scalar = z->kind == TSR_STANDARDIZE_SCALAR;
    r->ckpt.input_mean = scalar ? z->mean[0] : 0.0f, r->ckpt.input_std = scalar ? z->std[0] : 1.0f;
  }
  if (rc == 0) rc = augment_data(r);
  if (rc == 0 && cfg->model_file) {
    tsr_model_bind_classes(&r->spec, r->train.classes); /* units = classes */
    rc = tsr_model_check_classes(&r->spec, r->train.classes,
                                 cfg->model_from_checkpoint ? cfg->resume : cfg->model, &r->err);
  } else if (rc == 0 && !text) /* load_text parsed the shorthand already */
    rc = tsr_model_parse(&r->spec, cfg->model, r->train.classes, &r->err);
  return rc;
}

/* The run as the options describe it, before any data: cfg's run with its policy and shares. */
static void run_from_options(run_t *r) {
  const tsr_cli_train_config_t *cfg = r->cfg;
  r->run = cfg->run;
  r->run.sync = &cfg->sync, r->run.shares = &cfg->shares;
  r->run.checkpoint = cfg->checkpoint || cfg->resume;
}

/* The model and the data's shapes into the run, once both are loaded. */
static void run_describe_data(run_t *r) {
  r->run.spec = &r->spec, r->run.inputs = (int)r->train.features;
  r->run.classes = r->train.classes, r->run.samples = r->train.n;
  if (r->train.height > 1) { /* image geometry known (IDX); else the net infers it */
    r->run.net.in_channels = r->train.channels;
    r->run.net.in_height = r->train.height;
    r->run.net.in_width = r->train.width;
  }
}

/* --domain auto: the library's choice (rank 0 plans the run, every rank takes its choice) into
 * the run, and the banner's words for it. */
static int plan_domain(run_t *r) {
  tsr_plan_domain_t choice;
  TSR_TRY(tsr_plan_domain_auto(&r->run, NULL, NULL, &choice, &r->err));
  r->run.net.domain = choice.domain, r->run.net.domain_layers = choice.domain_layers;
  tsr_plan_domain_describe(&choice, r->domain_plan, sizeof r->domain_plan);
  return 0;
}

/* Every rank: the data and model, the same configuration as rank 0, the runtime, the net. */
static int start(run_t *r, int argc, char **argv) {
  int rc = tsr_dist_agree(load(r), &r->err, &r->err);
  if (rc == 0) {
    char config[1024];
    describe_config(config, sizeof config, argc, argv, &r->train, &r->test);
    rc = tsr_dist_check_same(config, &r->err);
  }
  if (rc == 0) rc = tsr_dist_agree(tsr_runtime_init(&r->cfg->runtime, &r->err), &r->err, &r->err);
  r->started = rc == 0;
  run_describe_data(r);
  if (rc == 0 && r->cfg->domain_auto) rc = plan_domain(r);
  /* A resumed run goes on with the checkpoint's seeds (sample orders, dropout masks). */
  tsr_net_opts_t saved;
  if (rc == 0 && r->cfg->resume)
    rc = tsr_dist_agree(
        tsr_checkpoint_read(r->cfg->resume, &r->resumed, NULL, &saved, NULL, NULL, &r->err),
        &r->err, &r->err);
  if (rc == 0 && r->cfg->resume) r->run.net.seed = saved.seed, r->train_opts.seed = r->resumed.seed;
  /* The setup (memory, each rank's batch and shard under --shares) and the net: collective. */
  if (rc == 0) {
    /* What the model's layers refuse of the options (--batch 1 under a per-feature batchnorm,
     * --sync-bn without one) is bad usage, as before loading. */
    rc = tsr_dist_agree(tsr_run_check(&r->run, &r->err), &r->err, &r->err);
    r->usage = rc != 0;
    if (rc == 0) rc = tsr_run_build(&r->setup, &r->net, &r->run, &r->train, &r->err);
    for (int i = 0; r->speaker && i < r->setup.n_warnings; i++)
      fprintf(stderr, "tessera train: warning: %s\n", r->setup.warnings[i]);
  }
  if (rc == 0) {
    tsr_augment_t a = r->cfg->augment;
    a.fill = r->fill;
    rc = tsr_dist_agree(tsr_net_set_augment(r->net, &a, &r->err), &r->err, &r->err);
  }
  if (rc == 0 && r->cfg->resume) {
    rc = tsr_dist_agree(
        tsr_checkpoint_load(r->net, r->cfg->resume, r->ckpt.data, &r->resumed, &r->err), &r->err,
        &r->err);
    r->train_opts.start_epoch = r->resumed.epoch + 1;
    r->train_opts.start_step = r->resumed.step_in_epoch;
    if (r->resumed.has_schedule_state) r->train_opts.start_state = &r->resumed.schedule_state;
  }
  /* What the checkpoint cannot give back: a note, or a refusal where digits are promised. */
  char why[256];
  if (rc == 0 && r->cfg->resume &&
      tsr_checkpoint_resume_check(r->net, &r->resumed, &r->cfg->sync, tsr_dist_size(), why,
                                  sizeof why)) {
    if (r->cfg->sync.deterministic)
      rc = tsr_error_set(&r->err, TSR_EINVAL,
                         "--resume %s --deterministic: %s, so the resumed run would not be the "
                         "uninterrupted one; resume without --deterministic",
                         r->cfg->resume, why);
    else if (r->speaker)
      fprintf(stderr, "tessera train: note: --resume %s: %s\n", r->cfg->resume, why);
  }
  return rc;
}

/* The banner, and the log opened on rank 0 (every rank learns whether it could be). */
static int announce(run_t *r) {
  const tsr_cli_train_config_t *cfg = r->cfg;
  const char *optimizer = tsr_optimizer_name(&cfg->run.net.opt);
  snprintf(r->sync_text, sizeof r->sync_text, "none");
  if (tsr_dist_size() > 1) tsr_sync_describe(&cfg->sync, r->sync_text, sizeof r->sync_text);
  tsr_model_describe(&r->spec, (int)r->train.features, r->desc, sizeof r->desc);
  tsr_net_tiles(r->net, &r->tile_rows, &r->tile_cols);
  r->lr = tsr_train_base_lr(r->net, &r->train_opts);
  /* StarPU takes at most tsr_runtime_max_ncpus() workers, and STARPU_NCPU overrides the
   * configuration: what runs is said when it is not what was asked. */
  if (r->speaker && cfg->runtime.ncpus > 0 && tsr_runtime_ncpus() != cfg->runtime.ncpus)
    fprintf(stderr,
            "tessera train: warning: --workers %d: StarPU runs %d CPU workers (at most %d per "
            "process with this StarPU; STARPU_NCPU, when set, overrides --workers)%s\n",
            cfg->runtime.ncpus, tsr_runtime_ncpus(), tsr_runtime_max_ncpus(),
            cfg->runtime.ncpus > tsr_runtime_max_ncpus() ? "; more cores: run several MPI ranks"
                                                         : "");
  if (!r->quiet) {
    char val[48] = "";
    if (r->val.n > 0) snprintf(val, sizeof val, " / %lld validation", (long long)r->val.n);
    printf("tessera: model %s (%lld parameters), %lld train%s / %lld test samples, batch %d, "
           "%s lr %g, tiles %dx%d%s, %d workers, scheduler %s, kernels %s",
           r->desc, (long long)tsr_net_param_count(r->net), (long long)r->train.n, val,
           (long long)r->test.n, cfg->run.net.batch, optimizer, (double)r->lr, r->tile_rows,
           r->tile_cols, cfg->run.net.tile_rows || cfg->run.net.tile_cols ? "" : " (auto)",
           tsr_runtime_ncpus(), tsr_runtime_sched(),
           tsr_runtime_kernels_name(tsr_runtime_kernels()));
    if (tsr_runtime_nopencl() > 0) printf(", %d OpenCL device(s)", tsr_runtime_nopencl());
    bool grid = tsr_dist_size() > 1 && cfg->run.net.grid_rows > 1;
    if (grid)
      printf(", %d ranks as a %dx%d grid (sync %s across columns%s%s, MPI progress: %s), batch "
             "%d per grid column",
             tsr_dist_size(), cfg->run.net.grid_rows, r->setup.replicas, r->sync_text,
             r->setup.averaging[0] ? ", averaging " : "", r->setup.averaging,
             tsr_runtime_mpi_progress(), cfg->run.net.batch);
    else if (tsr_dist_size() > 1)
      printf(", %d ranks (sync %s%s%s, MPI progress: %s), batch %d per rank", tsr_dist_size(),
             r->sync_text, r->setup.averaging[0] ? ", averaging " : "", r->setup.averaging,
             tsr_runtime_mpi_progress(), cfg->run.net.batch);
    if (grid && r->run.net.domain && r->run.net.domain_layers > 0)
      printf(", the first %d convolutions and poolings in bands of image rows",
             r->run.net.domain_layers);
    else if (grid && r->run.net.domain)
      printf(", convolutions and pooling in bands of image rows");
    if (r->lr != cfg->run.net.opt.lr)
      printf(", lr %g x %d %s (--lr-scaling linear)", (double)cfg->run.net.opt.lr,
             r->setup.replicas, cfg->run.net.grid_rows > 1 ? "grid columns" : "ranks");
    if (cfg->augment.crop_h || cfg->augment.flip) {
      char aug[64];
      tsr_augment_describe(&cfg->augment, aug, sizeof aug);
      printf(", augmented: %s", aug);
    }
    if (cfg->resume)
      printf(", resuming %s after epoch %d%s", cfg->resume, r->resumed.epoch,
             r->resumed.step_in_epoch ? " and some steps" : "");
    printf("; tessera %s (git %s)\n", tsr_version(), tsr_version_git());
    if (r->domain_plan[0]) printf("%s\n", r->domain_plan);
    const tsr_run_setup_t *s = &r->setup;
    if (s->ranks > 1 && s->shares.kind != TSR_SHARES_UNIFORM) {
      bool automatic = s->shares.kind == TSR_SHARES_AUTO;
      printf("shares (%s%s):", automatic ? "auto, measured" : "given",
             automatic && !s->step_sync ? ", re-measured every epoch" : "");
      for (int q = 0; q < s->replicas; q++) { /* under a grid: the columns' */
        printf(" %s %d %.3f", s->replicas < s->ranks ? "column" : "rank", q, s->share[q]);
        if (s->step_sync) printf(" (batch %lld)", (long long)s->batch[q]);
        printf(q + 1 < s->replicas ? "," : "\n");
      }
    }
  }
  /* Resuming under another policy than the checkpoint's is allowed (the weights are whole at
   * every point a checkpoint is written), but never silently. */
  if (cfg->resume && r->speaker && r->resumed.sync[0] && strcmp(r->resumed.sync, r->sync_text))
    fprintf(stderr,
            "tessera train: note: %s was written under sync %s on %d rank(s); this run "
            "synchronizes with %s on %d: it goes on from the checkpoint's weights\n",
            cfg->resume, r->resumed.sync, r->resumed.ranks, r->sync_text, tsr_dist_size());
  /* Every rank's host, for the run line (collective: every rank knows whether there is a log). */
  char host[64] = "", *hosts = NULL;
  const char **host_of = NULL;
  if (cfg->log_path) {
    gethostname(host, sizeof host - 1);
    if (r->speaker) {
      hosts = calloc((size_t)tsr_dist_size(), sizeof host);
      host_of = malloc(sizeof *host_of * (size_t)tsr_dist_size());
    }
    /* Without room on rank 0 the run line goes without hosts (the others learn it: the
     * gathering is collective). */
    if (tsr_dist_any(r->speaker && (!hosts || !host_of)) ||
        tsr_dist_gather(host, (int)sizeof host, hosts))
      free(hosts), hosts = NULL;
  }
  for (int q = 0; hosts && q < tsr_dist_size(); q++)
    host_of[q] = hosts + (size_t)q * sizeof host;
  tsr_cli_train_fields_t *fields = r->speaker && cfg->log_path ? malloc(sizeof *fields) : NULL;
  if (fields) { /* with the domain as the run takes it (--domain auto: the planner's choice) */
    tsr_cli_train_config_t shown = *cfg;
    shown.run.net.domain = r->run.net.domain,
    shown.run.net.domain_layers = r->run.net.domain_layers;
    /* What the run trained on: the text (the default one by name), not --data's default. */
    if (r->on_text) shown.data_dir = NULL, shown.text = cfg->text ? cfg->text : "default";
    tsr__cli_train_fields(&shown, fields);
  }
  int rc = 0;
  if (cfg->log_path && r->speaker) {
    char *model = tsr_model_description(&r->spec, (int)r->train.features);
    tsr_run_info_t run = {.model = model ? model : r->desc, /* whole in the log */
                          .sched = tsr_runtime_sched(),
                          .optimizer = optimizer,
                          .sync = r->sync_text,
                          .mpi_progress = tsr_runtime_mpi_progress(),
                          .batch = cfg->run.net.batch,
                          .tile_rows = r->tile_rows,
                          .tile_cols = r->tile_cols,
                          .workers = tsr_runtime_ncpus(),
                          .lr = r->lr,
                          .seed = cfg->run.net.seed,
                          .no_priorities = !cfg->runtime.priorities,
                          /* main passes its argv from "train" on: [-1] is the program */
                          .argc = cfg->argc + 1,
                          .argv = cfg->argv - 1,
                          .ranks = tsr_dist_size(),
                          .hosts = hosts ? host_of : NULL,
                          .started = r->start_time,
                          .config = fields ? fields->field : NULL,
                          .nconfig = fields ? fields->n : 0,
                          .resumed = cfg->resume,
                          .resumed_epoch = r->resumed.epoch,
                          .resumed_step = r->resumed.step_in_epoch};
    bool held = false;
    rc = tsr_log_open(&r->log, cfg->log_path, &run, &held, &r->err);
    free(model);
    /* A log grows: a resumed run's lines follow its first part's; a new run's another run's. */
    if (rc == 0 && held && !cfg->resume)
      fprintf(stderr,
              "tessera train: note: --log %s holds an earlier run's lines; this run's follow "
              "them, from its own run line\n",
              cfg->log_path);
  }
  free(fields);
  free(hosts), free(host_of);
  return tsr_dist_agree(rc, &r->err, &r->err);
}

static int train(run_t *r) {
  const tsr_cli_train_config_t *cfg = r->cfg;
  struct ctx cx = {.log = r->log,
                   .log_path = cfg->log_path,
                   .quiet = r->quiet,
                   .progress = !r->quiet,
                   .terminal = isatty(STDERR_FILENO),
                   .stats = cfg->runtime.stats,
                   .samples_per_batch = (int64_t)cfg->run.net.batch * r->setup.replicas,
                   .epochs = cfg->train.epochs,
                   .err = &r->err};
  tsr_train_opts_t to = r->train_opts;
  to.on_epoch = on_epoch, to.on_progress = on_progress, to.on_ranks = on_ranks, to.ctx = &cx;
  to.on_step = on_step, to.log_every = cfg->log_every;
  to.on_eval = on_eval, to.eval_every = cfg->eval_every;
  to.should_stop = should_stop;
  to.checkpoint_path = cfg->checkpoint, to.checkpoint_every = cfg->checkpoint_every;
  to.checkpoint_in_steps = cfg->checkpoint_in_steps, to.checkpoint_info = &r->ckpt;
  to.resume_path = cfg->resume;
  if (cfg->resume && r->resumed.epoch >= cfg->train.epochs) {
    if (r->speaker)
      printf("tessera train: %s already holds %d epochs; --epochs %d is the total, so there is "
             "nothing to train\n",
             cfg->resume, r->resumed.epoch, cfg->train.epochs);
    return 0;
  }
  int rc = tsr_train(r->net, &r->train, &r->test, &to, &r->err);
  if (rc == 0) rc = cx.failed;
  /* Past start-up the ranks' task graphs are tied together: a rank that
   * fails mid-run alone stops them all rather than leaving them waiting. A
   * stop on request and the errors the ranks agreed on (divergence, a
   * checkpoint that could not be written) are every rank's: they all end
   * cleanly, with rank 0's message. */
  if (rc && rc != TSR_ESTOPPED && tsr_dist_size() > 1 && !tsr_dist_agreed(rc))
    tsr_dist_abort_status(r->err.msg[0] ? r->err.msg : tsr_strerror(rc), exit_status(rc));
  return rc;
}

/* --stats and --trace, once the runtime has stopped. Collective under MPI: every rank that
 * trained takes part. */
static int report(run_t *r) {
  const tsr_cli_train_config_t *cfg = r->cfg;
  int rc = 0, log_rc = 0; /* a collective step failed; rank 0 could not write the log */
  if (cfg->runtime.stats) {
    tsr_run_stats_t st;
    rc = tsr_runtime_stats(&st, &r->err);
    if (rc == 0 && r->speaker) {
      tsr_run_stats_print(stdout, &st);
      if (r->log && tsr_log_stats(r->log, &st) != 0) {
        log_rc = TSR_EIO;
        fprintf(stderr, "tessera train: --log %s: cannot write the statistics' line: %s\n",
                cfg->log_path, strerror(errno));
      }
    }
    tsr_run_stats_fini(&st);
    if (rc && r->speaker) fprintf(stderr, "tessera train: %s\n", r->err.msg);
  }
  if (rc == 0 && cfg->trace_path) { /* collective: every rank, whatever the log did */
    rc = tsr_runtime_trace_write(cfg->trace_path, &r->err);
    if (rc && r->speaker) fprintf(stderr, "tessera train: %s\n", r->err.msg);
  }
  return rc ? rc : log_rc;
}

int tsr__cli_train_run(const tsr_cli_train_config_t *cfg) {
  int argc = cfg->argc;
  char **argv = cfg->argv;
  struct timeval t0;
  gettimeofday(&t0, NULL);
  if (tsr_dist_start(&argc, &argv, false)) {
    fprintf(stderr, "tessera train: cannot start MPI\n");
    return 1;
  }
  if (tsr__cli_launch_check("train")) {
    tsr_dist_stop();
    return 2;
  }
  /* --resume: the checkpoint's settings where not given; a given one that differs refused. */
  tsr_cli_train_config_t resolved = *cfg;
  int refused = tsr__cli_train_resume(&resolved, tsr_dist_rank() == 0);
  if (refused) {
    tsr_dist_stop();
    return refused;
  }
  cfg = &resolved;
  /* What the run cannot be is refused before anything loads (bad usage: status 2). */
  run_t r = {.cfg = cfg,
             .speaker = tsr_dist_rank() == 0,
             .start_time = (double)t0.tv_sec + 1e-6 * (double)t0.tv_usec};
  run_from_options(&r);
  if (tsr_run_check(&r.run, &r.err)) {
    if (r.speaker) fprintf(stderr, "tessera train: %s\n", r.err.msg);
    tsr_dist_stop();
    return 2;
  }
  r.quiet = cfg->quiet || !r.speaker;
  r.train_opts = cfg->train;
  r.train_opts.setup = &r.setup; /* the policy and shares, once start has set the run up */
  r.train_opts.validation = &r.val;
  catch_signals();
  int rc = start(&r, argc, argv);
  if (rc == 0) rc = announce(&r);
  if (rc == 0) rc = train(&r);
  if (rc && rc != TSR_ESTOPPED && r.speaker)
    fprintf(stderr, "tessera train: %s\n", r.err.msg[0] ? r.err.msg : tsr_strerror(rc));
  /* Said before the runtime stops: under mpirun a signalled job's ranks are killed a second
   * after their SIGTERM (docs/checkpoints.md, "Signalling mpirun"). */
  bool signalled = false;
  int status = r.usage ? 2 : stop_line(&r, rc, &signalled);
  tsr_net_destroy(&r.net);
  if (r.started) tsr_runtime_fini();
  if (rc == 0 && report(&r) != 0) status = 1;
  if (rc == 0 && !signalled) (void)stop_line(&r, 0, &signalled); /* one in the teardown */
  tsr_log_close(&r.log);
  tsr_run_setup_fini(&r.setup);
  tsr_model_spec_fini(&r.spec);
  tsr_dataset_fini(&r.train);
  tsr_dataset_fini(&r.test);
  tsr_dataset_fini(&r.val);
  tsr_standardization_fini(&r.standardization);
  free(r.fill);
  return leave(status);
}
