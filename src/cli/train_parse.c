/* tessera train's options as a table: one row per option (its name, its argument's form, how
 * it is read into the configuration, train_config.h, and its help), from which both the
 * parsing and `tessera train --help` come. Each value is checked where it is read, with a
 * message naming the option and what it expects, so that a bad value exits 2 before any data
 * loads; what depends on several options is checked once they are all read. Nothing here
 * starts MPI or the runtime or reads a file. Adding an option: its field in train_config.h,
 * one row below (a generic reader, or a small one of its own beside them). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/train_config.h"
#include "tessera/tessera.h"

static int bad(const char *opt, const char *val, const char *want) {
  fprintf(stderr, "tessera train: %s %s: expected %s (see tessera train --help)\n", opt, val, want);
  return 2;
}

int tsr__cli_kernels(const char *cmd, const char *arg, tsr_kernels_t *kernels) {
  if (tsr_runtime_parse_kernels(arg, kernels)) {
    fprintf(stderr, "tessera %s: --kernels %s: expected auto, onednn, blis or tuned\n", cmd, arg);
    return 2;
  }
  if (*kernels == TSR_KERNELS_ONEDNN && !tsr_runtime_onednn_built()) {
    fprintf(stderr,
            "tessera %s: --kernels onednn: this tessera is built without oneDNN; install "
            "libdnnl-dev and rebuild (meson setup --reconfigure build -Ddnnl=enabled), or use "
            "--kernels blis\n",
            cmd);
    return 2;
  }
  return 0;
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

/* The largest float below 1: the top of a range [0, 1) read into a float. */
#define BELOW_ONE 0.99999994

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

/* ---- Readers ------------------------------------------------------------
 *
 * Each reads one option's argument (NULL for a flag) into the configuration: 0, or 2 (the exit
 * status) after a message. The generic ones put the value at the row's field, checked against
 * its range; the field's type must be theirs (int, int64_t, float, const char *, bool). */

typedef struct {
  tsr_cli_train_config_t *cfg;
  float outer_lr, outer_momentum;       /* given with --outer-lr, --outer-momentum (else -1) */
  bool lr_set, momentum_set, decay_set; /* --lr, --momentum, --weight-decay given */
  bool nesterov;                        /* --nesterov */
} parse_t;

typedef struct row row_t;
struct row {
  const char *name; /* without the leading "--" */
  const char *arg;  /* the argument's form in the help (NULL: a flag) */
  int (*read)(parse_t *p, const row_t *row, const char *arg);
  size_t field;     /* generic readers: where the value goes, offsetof(tsr_cli_train_config_t) */
  double lo, hi;    /* generic readers: the range */
  const char *want; /* what a bad value is told to be */
  const char *help; /* lines separated by '\n'; NULL: made from the library (made_help) */
};

static void *field_of(parse_t *p, const row_t *row) {
  return (char *)p->cfg + row->field;
}

/* "--name arg: expected WANT". */
static int bad_row(const row_t *row, const char *arg) {
  char opt[40];
  snprintf(opt, sizeof opt, "--%s", row->name);
  return bad(opt, arg, row->want);
}

/* arg as a whole number in the row's range: 0, or 2 after the message. */
static int whole(const row_t *row, const char *arg, long *v) {
  return tsr__cli_to_long(arg, (long)row->lo, (long)row->hi, v) ? bad_row(row, arg) : 0;
}

static int read_int(parse_t *p, const row_t *row, const char *arg) {
  long v;
  int rc = whole(row, arg, &v);
  if (rc == 0) *(int *)field_of(p, row) = (int)v;
  return rc;
}

static int read_int64(parse_t *p, const row_t *row, const char *arg) {
  long v;
  int rc = whole(row, arg, &v);
  if (rc == 0) *(int64_t *)field_of(p, row) = v;
  return rc;
}

static int read_float(parse_t *p, const row_t *row, const char *arg) {
  return to_float(arg, row->lo, row->hi, (float *)field_of(p, row)) ? bad_row(row, arg) : 0;
}

static int read_text(parse_t *p, const row_t *row, const char *arg) {
  *(const char **)field_of(p, row) = arg;
  return 0;
}

static int read_true(parse_t *p, const row_t *row, const char *arg) {
  (void)arg;
  *(bool *)field_of(p, row) = true;
  return 0;
}

static int read_false(parse_t *p, const row_t *row, const char *arg) {
  (void)arg;
  *(bool *)field_of(p, row) = false;
  return 0;
}

/* A library error as the command says it: status 2. */
static int refused(int rc, const tsr_errbuf_t *err) {
  if (rc) fprintf(stderr, "tessera train: %s\n", err->msg);
  return rc ? 2 : 0;
}

/* An argument from a list of names: its index, or -1 after the message. */
static int read_choice(const row_t *row, const char *arg, const char *const *names) {
  int i = choice(arg, names);
  if (i < 0) bad_row(row, arg);
  return i;
}

/* A registered optimizer with its defaults; a rate, momentum or decay given before the name
 * stays. */
static int read_optimizer(parse_t *p, const row_t *row, const char *arg) {
  (void)row;
  tsr_optimizer_t o, *opt = &p->cfg->run.net.opt;
  tsr_errbuf_t err = {""};
  if (refused(tsr_optimizer_init(&o, arg, &err), &err)) return 2;
  if (p->lr_set) o.lr = opt->lr;
  if (p->momentum_set) o.momentum = opt->momentum;
  if (p->decay_set) o.weight_decay = opt->weight_decay;
  *opt = o;
  return 0;
}

static int read_nesterov(parse_t *p, const row_t *row, const char *arg) {
  (void)row, (void)arg;
  p->nesterov = true;
  return 0;
}

static int read_lr(parse_t *p, const row_t *row, const char *arg) {
  p->lr_set = true;
  return read_float(p, row, arg);
}

static int read_momentum(parse_t *p, const row_t *row, const char *arg) {
  p->momentum_set = true;
  return read_float(p, row, arg);
}

static int read_weight_decay(parse_t *p, const row_t *row, const char *arg) {
  p->decay_set = true;
  return read_float(p, row, arg);
}

/* Into buf: each registered optimizer's default of the hyper-parameter at offset in
 * tsr_optimizer_t, "sgd 0.01, sgd-nesterov 0.01, adam 0.001, adamw 0.001". */
static void defaults_of(char *buf, size_t size, size_t offset) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; tsr_optimizer_registered(i) && n < size; i++) {
    tsr_optimizer_t o;
    float v;
    tsr_optimizer_init(&o, tsr_optimizer_registered(i), NULL);
    memcpy(&v, (const char *)&o + offset, sizeof v);
    int c = snprintf(buf + n, size - n, "%s%s %g", i ? ", " : "", o.name, (double)v);
    n += c > 0 ? (size_t)c : 0;
  }
}

static void optimizer_help(char *buf, size_t size) {
  char names[256];
  tsr_optimizer_list(names, sizeof names);
  snprintf(buf, size, "%s [sgd]", names);
}

static void lr_help(char *buf, size_t size) {
  char lr[256];
  defaults_of(lr, sizeof lr, offsetof(tsr_optimizer_t, lr));
  snprintf(buf, size, "learning rate\n[%s]", lr);
}

static void weight_decay_help(char *buf, size_t size) {
  char wd[256];
  defaults_of(wd, sizeof wd, offsetof(tsr_optimizer_t, weight_decay));
  snprintf(buf, size, "weight decay: L2, or decoupled for adamw\n[%s]", wd);
}

static int read_lr_schedule(parse_t *p, const row_t *row, const char *arg) {
  (void)row;
  tsr_errbuf_t err = {""};
  tsr_train_opts_t *t = &p->cfg->train;
  return refused(tsr_lr_schedule_parse(arg, &t->lr_schedule, &t->lr, &err), &err);
}

/* A fraction strictly between 0 and 1: 0 would hold nothing out, 1 leave nothing to train. */
static int read_val_split(parse_t *p, const row_t *row, const char *arg) {
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (end == arg || *end || errno || !(v > 0 && v < 1)) return bad_row(row, arg);
  p->cfg->val_split = v;
  return 0;
}

static int read_standardize(parse_t *p, const row_t *row, const char *arg) {
  static const char *const names[] = {"column", "scalar", "channel", "none", NULL};
  int i = read_choice(row, arg, names);
  if (i < 0) return 2;
  return tsr_standardize_parse(names[i], &p->cfg->standardize) == 0 ? 0 : 2;
}

/* "S:P" or "HxW:P": a crop of S x S (or H x W) after P pixels of padding on each side. */
static int read_crop(parse_t *p, const row_t *row, const char *arg) {
  char size[32];
  const char *colon = strchr(arg, ':');
  if (!colon || (size_t)(colon - arg) >= sizeof size) return bad_row(row, arg);
  memcpy(size, arg, (size_t)(colon - arg));
  size[colon - arg] = '\0';
  long h, w, pad;
  char *x = strchr(size, 'x');
  if (x) *x = '\0';
  if (tsr__cli_to_long(size, 1, 1 << 16, &h) ||
      tsr__cli_to_long(x ? x + 1 : size, 1, 1 << 16, &w) ||
      tsr__cli_to_long(colon + 1, 0, 1 << 15, &pad))
    return bad_row(row, arg);
  tsr_augment_t *a = &p->cfg->augment;
  a->crop_h = (int)h, a->crop_w = (int)w, a->pad = (int)pad;
  return 0;
}

static int read_lr_scaling(parse_t *p, const row_t *row, const char *arg) {
  /* auto is the default, and what a log's config says of a run that did not choose. */
  static const char *const names[] = {"none", "linear", "auto", NULL};
  static const tsr_lr_scaling_t kinds[] = {TSR_LR_SCALING_NONE, TSR_LR_SCALING_LINEAR,
                                           TSR_LR_SCALING_AUTO};
  int i = read_choice(row, arg, names);
  if (i < 0) return 2;
  p->cfg->train.lr_scaling = kinds[i];
  return 0;
}

/* Initialization and shuffling alike. */
static int read_seed(parse_t *p, const row_t *row, const char *arg) {
  long v;
  int rc = whole(row, arg, &v);
  if (rc == 0) p->cfg->run.net.seed = p->cfg->train.seed = (uint64_t)v;
  return rc;
}

static int read_init(parse_t *p, const row_t *row, const char *arg) {
  return tsr_init_from_name(&p->cfg->run.net.init, arg) ? bad_row(row, arg) : 0;
}

/* "N", "RxC" or "auto" (tsr__cli_tile). */
static int read_tile(parse_t *p, const row_t *row, const char *arg) {
  if (tsr__cli_tile(arg, &p->cfg->run.net.tile_rows, &p->cfg->run.net.tile_cols))
    return bad_row(row, arg);
  return 0;
}

static int read_devices(parse_t *p, const row_t *row, const char *arg) {
  (void)row;
  return tsr__cli_devices("train", arg, &p->cfg->runtime.opencl);
}

static int read_kernels(parse_t *p, const row_t *row, const char *arg) {
  static const char *const names[] = {"auto", "onednn", "blis", "tuned", NULL};
  int i = read_choice(row, arg, names);
  if (i < 0) return 2;
  return tsr__cli_kernels("train", names[i], &p->cfg->runtime.kernels);
}

static int read_mpi_progress(parse_t *p, const row_t *row, const char *arg) {
  static const char *const names[] = {"auto", "thread", "worker", NULL};
  static const tsr_mpi_progress_t kinds[] = {TSR_MPI_PROGRESS_AUTO, TSR_MPI_PROGRESS_THREAD,
                                             TSR_MPI_PROGRESS_WORKER};
  int i = read_choice(row, arg, names);
  if (i < 0) return 2;
  p->cfg->runtime.mpi_progress = kinds[i];
  return 0;
}

static int read_allreduce(parse_t *p, const row_t *row, const char *arg) {
  static const char *const names[] = {"auto", "flat", "two-level", NULL};
  static const tsr_allreduce_t kinds[] = {TSR_ALLREDUCE_AUTO, TSR_ALLREDUCE_FLAT,
                                          TSR_ALLREDUCE_TWO_LEVEL};
  int i = read_choice(row, arg, names);
  if (i < 0) return 2;
  p->cfg->sync.allreduce = kinds[i];
  return 0;
}

/* The schedule alone: the options orthogonal to it stay as they are. */
static int read_sync(parse_t *p, const row_t *row, const char *arg) {
  (void)row;
  tsr_errbuf_t err = {""};
  return refused(tsr_sync_schedule_parse(&p->cfg->sync.schedule, arg, &err), &err);
}

static int read_outer(parse_t *p, const row_t *row, const char *arg) {
  (void)row;
  tsr_outer_t o;
  tsr_errbuf_t err = {""};
  if (refused(tsr_outer_init(&o, arg, &err), &err)) return 2;
  /* A rate or momentum given before the name stays. */
  if (p->outer_lr > 0) o.lr = p->outer_lr;
  if (p->outer_momentum >= 0) o.momentum = p->outer_momentum;
  p->cfg->sync.outer = o;
  return 0;
}

static int read_outer_lr(parse_t *p, const row_t *row, const char *arg) {
  if (to_float(arg, row->lo, row->hi, &p->outer_lr)) return bad_row(row, arg);
  p->cfg->sync.outer.lr = p->outer_lr;
  return 0;
}

static int read_outer_momentum(parse_t *p, const row_t *row, const char *arg) {
  if (to_float(arg, row->lo, row->hi, &p->outer_momentum)) return bad_row(row, arg);
  p->cfg->sync.outer.momentum = p->outer_momentum;
  return 0;
}

static int read_weighting(parse_t *p, const row_t *row, const char *arg) {
  static const char *const names[] = {"uniform", "samples", "steps", NULL};
  int i = read_choice(row, arg, names);
  if (i < 0) return 2;
  p->cfg->sync.by_samples = i >= 1, p->cfg->sync.by_steps = i == 2;
  return 0;
}

static int read_shares(parse_t *p, const row_t *row, const char *arg) {
  (void)row;
  tsr_errbuf_t err = {""};
  tsr_shares_fini(&p->cfg->shares); /* --shares given again: the last one counts */
  return refused(tsr_shares_parse(&p->cfg->shares, arg, &err), &err);
}

static int read_grid(parse_t *p, const row_t *row, const char *arg) {
  (void)row;
  long pr, pc;
  char *x = strchr(arg, 'x');
  if (!x)
    return bad("--grid", arg, "PrxPc, e.g. 2x4 (Pr ranks split each layer, Pc split the batch)");
  *x = '\0';
  int e1 = tsr__cli_to_long(arg, 1, TSR_MAX_RANKS, &pr),
      e2 = tsr__cli_to_long(x + 1, 1, TSR_MAX_RANKS, &pc);
  *x = 'x';
  if (e1 || e2 || pr * pc > TSR_MAX_RANKS)
    return bad("--grid", arg,
               "PrxPc with integers Pr, Pc from 1 and Pr x Pc at most 32768, e.g. 2x4");
  p->cfg->run.net.grid_rows = (int)pr, p->cfg->run.grid_cols = (int)pc;
  return 0;
}

/* none, rows, rows:K (the first K convolutions and poolings cut, the rest whole), or auto (the
 * run asks the planner once the data is loaded: net.domain until then). */
static int read_domain(parse_t *p, const row_t *row, const char *arg) {
  (void)row;
  long k = 0;
  const char *want = "none, rows, rows:K (K >= 1: the first K convolutions and poolings) or auto";
  bool automatic = strcmp(arg, "auto") == 0;
  if (strncmp(arg, "rows:", 5) == 0) {
    if (tsr__cli_to_long(arg + 5, 1, 1 << 20, &k)) return bad("--domain", arg, want);
  } else if (strcmp(arg, "rows") != 0 && strcmp(arg, "none") != 0 && !automatic) {
    return bad("--domain", arg, want);
  }
  p->cfg->run.net.domain = strcmp(arg, "none") != 0, p->cfg->run.net.domain_layers = (int)k;
  p->cfg->domain_auto = automatic;
  return 0;
}

static int read_checkpoint_every(parse_t *p, const row_t *row, const char *arg) {
  char *end;
  errno = 0;
  long n = strtol(arg, &end, 10);
  bool steps = strcmp(end, "steps") == 0 || strcmp(end, "step") == 0;
  if (end == arg || errno || n < 1 || n > 1L << 30 ||
      !(steps || !*end || strcmp(end, "epochs") == 0 || strcmp(end, "epoch") == 0))
    return bad_row(row, arg);
  p->cfg->checkpoint_every = (int)n, p->cfg->checkpoint_in_steps = steps;
  return 0;
}

static int read_trace(parse_t *p, const row_t *row, const char *arg) {
  if (!ends_with(arg, ".json")) return bad_row(row, arg);
  p->cfg->trace_path = arg, p->cfg->runtime.trace = true;
  return 0;
}

/* "A-B", 1 <= A <= B. */
static int read_trace_steps(parse_t *p, const row_t *row, const char *arg) {
  long a = 0, b = 0;
  char *dash = strchr(arg, '-');
  if (dash) *dash = '\0';
  int e1 = tsr__cli_to_long(arg, 1, 1L << 40, &a),
      e2 = dash ? tsr__cli_to_long(dash + 1, 1, 1L << 40, &b) : -1;
  if (dash) *dash = '-';
  if (e1 || e2 || a > b) return bad_row(row, arg);
  p->cfg->runtime.trace_from = a, p->cfg->runtime.trace_to = b;
  return 0;
}

/* ---- Values for the log (shown) ---------------------------------------- */

static void show_text(tsr_log_field_t *f, char *text, size_t size, const char *value) {
  snprintf(text, size, "%s", value);
  f->kind = TSR_LOG_TEXT, f->text = text;
}

static void show_optimizer(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                           size_t size) {
  show_text(f, text, size, tsr_optimizer_name(&cfg->run.net.opt));
}

static void show_seed(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                      size_t size) {
  (void)text, (void)size;
  f->kind = TSR_LOG_INT, f->number = (double)cfg->run.net.seed;
}

/* What the run cuts: none, rows or rows:K (under --domain auto, the planner's choice). */
static void show_domain(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                        size_t size) {
  if (!cfg->run.net.domain)
    show_text(f, text, size, "none");
  else if (cfg->run.net.domain_layers > 0)
    snprintf(text, size, "rows:%d", cfg->run.net.domain_layers), f->kind = TSR_LOG_TEXT,
                                                                 f->text = text;
  else
    show_text(f, text, size, "rows");
}

static void show_lr_schedule(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                             size_t size) {
  tsr_lr_schedule_describe(cfg->train.lr_schedule, &cfg->train.lr, text, size);
  f->kind = TSR_LOG_TEXT, f->text = text;
}

/* The horizon the run takes: --schedule-epochs, or --epochs. */
static void show_schedule_epochs(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                                 size_t size) {
  (void)text, (void)size;
  int n = cfg->train.schedule_epochs;
  f->kind = TSR_LOG_INT, f->number = n > 0 ? n : cfg->train.epochs;
}

static void show_val_split(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                           size_t size) {
  (void)text, (void)size;
  if (cfg->val_split > 0) f->kind = TSR_LOG_FLOAT, f->number = cfg->val_split;
}

static void show_lr_scaling(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                            size_t size) {
  tsr_lr_scaling_t s = cfg->train.lr_scaling;
  show_text(f, text, size,
            s == TSR_LR_SCALING_LINEAR ? "linear"
            : s == TSR_LR_SCALING_NONE ? "none"
                                       : "auto");
}

static void show_sync(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                      size_t size) {
  tsr_sync_schedule_describe(&cfg->sync.schedule, text, (int)size);
  f->kind = TSR_LOG_TEXT, f->text = text;
}

static void show_weighting(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                           size_t size) {
  show_text(f, text, size,
            cfg->sync.by_steps     ? "steps"
            : cfg->sync.by_samples ? "samples"
                                   : "uniform");
}

static void show_checkpoint_every(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text,
                                  size_t size) {
  if (!cfg->checkpoint) return; /* null */
  snprintf(text, size, "%d%s", cfg->checkpoint_every,
           cfg->checkpoint_in_steps ? "steps" : "epochs");
  f->kind = TSR_LOG_TEXT, f->text = text;
}

/* ---- The table ---------------------------------------------------------- */

#define AT(member) offsetof(tsr_cli_train_config_t, member)

static const row_t rows[] = {
    {"data", "DIR", read_text, AT(data_dir),
     .help = "dataset folder: IDX files (MNIST family, "
             ".gz or plain),\n"
             "CIFAR-10/100 binary batches, x_train.npy/y_train.npy\n"
             "(NumPy), or train.csv/test.csv; or a .npz file\n"
             "[" TSR_DEFAULT_DATA_DIR "]"},
    {"text", "FILE[,FILE...]", read_text, AT(text),
     .help = "text files for a language model (--model gpt:L,D,H,T),\n"
             "byte-level (256 tokens), concatenated in order and cut into\n"
             "windows of the model's context T; the last 10% of the\n"
             "windows are the test set. default: the plain files of\n"
             "Debian's fortunes package (" TSR_DEFAULT_TEXT_DIR ")\n"
             "[default for a language model without --data]"},
    {"model", "SPEC|FILE", read_text, AT(model),
     .help = "mlp (784-512-512-10), mlp:W1,W2,..., linear, cnn (conv 3x3 32,\n"
             "maxpool 2, conv 3x3 64, maxpool 2, dense 128; padding 1),\n"
             "a model of the zoo by name (resnet20, resnet32, resnet56,\n"
             "resnet18, resnet50, vgg11, vgg16, alexnet, googlenet), or an INI\n"
             "model file with one section per layer; a bare NAME.ini is\n"
             "looked up in the installed share/tessera/models/ [mlp]"},
    /* 0 would train nothing and say nothing of it. */
    {"epochs", "N", read_int, AT(train.epochs), 1, 100000, "an integer from 1 to 100000",
     "epochs, 1 or more [10]"},
    {"batch", "N", read_int, AT(run.net.batch), 1, 1 << 20, "an integer from 1 to 1048576",
     "samples per step [64]"},
    /* The optimizers by name, from the library's registry. */
    {"optimizer", "NAME", read_optimizer, .help = NULL},
    {"nesterov", NULL, read_nesterov,
     .help = "Nesterov momentum: with --optimizer sgd, sgd-nesterov\n"
             "(PyTorch's nesterov=True; needs --momentum > 0)"},
    {"lr", "X", read_lr, AT(run.net.opt.lr), 1e-12, 1e6, "a number from 1e-12 to 1e6", NULL},
    {"lr-schedule", "S", read_lr_schedule,
     .help = "cosine (decay to 0 over the run), constant,\n"
             "step:E1,E2,...:F (the rate times F after each epoch Ei) or\n"
             "plateau[:PATIENCE[:F]] (times F [0.1] after more than\n"
             "PATIENCE [10] epochs without a lower validation loss; needs\n"
             "--val-split) [cosine]"},
    {"schedule-epochs", "N", read_int, AT(train.schedule_epochs), 1, 100000,
     "an integer from 1 to 100000",
     "the cosine schedule's horizon: it decays to 0 over N epochs\n"
     "(past them it rises again, as PyTorch's CosineAnnealingLR);\n"
     "a resumed run keeps its checkpoint's [--epochs]"},
    {"warmup", "N", read_int, AT(train.lr.warmup), 1, 1 << 30, "an integer from 1 to 1073741824",
     "steps of linear warm-up before the schedule: step t < N\n"
     "(0-based) at lr (t + 1) / N [none]"},
    {"val-split", "F", read_val_split, .want = "a fraction in (0, 1), e.g. 0.1",
     .help = "hold the fraction F of the training set out for validation\n"
             "(chosen from --seed; evaluated every epoch) [none]"},
    {"early-stop", "N", read_int, AT(train.early_stop), 1, 100000, "an integer from 1 to 100000",
     "stop after N epochs in a row without a lower validation\n"
     "loss (needs --val-split) [never]"},
    {"lr-scaling", "S", read_lr_scaling, .want = "linear, none or auto",
     .help = "under mpirun, linear (--lr times the ranks, for the ranks'\n"
             "larger combined batch), none, or auto: linear for sgd and\n"
             "sgd-nesterov with --sync batch, else none [auto]"},
    {"momentum", "X", read_momentum, AT(run.net.opt.momentum), 0, BELOW_ONE, "a number in [0, 1)",
     "SGD momentum [0.9]"},
    {"weight-decay", "X", read_weight_decay, AT(run.net.opt.weight_decay), 0, 1e6,
     "a number from 0 to 1e6", NULL},
    {"seed", "N", read_seed, 0, 0, 0x7fffffffL, "an integer from 0 to 2147483647",
     "seed for initialization and shuffling [1]"},
    {"clip-grad", "X", read_float, AT(run.net.clip_grad), 0, 1e30, "a number from 0 to 1e30",
     "scale the gradients by min(1, X / (norm + 1e-6)) before each\n"
     "update, norm the 2-norm of all of them together (PyTorch's\n"
     "clip_grad_norm_; --sync batch: of the averaged gradient) [0:\n"
     "none]"},
    {"label-smoothing", "EPS", read_float, AT(run.net.label_smoothing), 0, BELOW_ONE,
     "a number in [0, 1)",
     "PyTorch's label smoothing: the loss, training's and the test\n"
     "loss, against (1 - EPS) one-hot + EPS / classes [0]"},
    {"init", "I", read_init, .want = "pytorch, he or gpt2",
     .help = "how weights and biases start: pytorch (U(+-1/sqrt(fan_in)),\n"
             "PyTorch's defaults), he (He-uniform weights, zero biases) or\n"
             "gpt2 (normal std 0.02, residual projections / sqrt(2L), zero\n"
             "biases, layer norms 1 and 0) [pytorch; a language model: gpt2]"},
    {"tile", "N | RxC | auto", read_tile, .want = "N or RxC (integers from 1 to 1048576) or auto",
     .help = "tile size: N for both, or R batch rows x C features, or auto:\n"
             "feature tiles from the widest layer and the workers, a batch-\n"
             "row tile per worker but no typical task under 16 MFLOP\n"
             "[auto; the banner says what it chose]"},
    {"sched", "NAME", read_text, AT(runtime.sched),
     .help = "StarPU scheduling policy [" TSR_DEFAULT_SCHED ", or " TSR_DEVICES_SCHED
             " with --devices\n"
             "opencl[:N]]; `tessera info --sched-list`"},
    {"workers", "N", read_int, AT(runtime.ncpus), 1, 4096, "an integer from 1 to 4096",
     "CPU workers [all cores StarPU may use]"},
    {"devices", "D", read_devices,
     .help = "OpenCL devices beside the CPU workers: opencl (every one\n"
             "StarPU finds, at least one), opencl:N (exactly N) or none\n"
             "[what StarPU finds; CPU devices such as PoCL need\n"
             "STARPU_OPENCL_ON_CPUS=1]"},
    {"kernels", "K", read_kernels, .want = "auto, onednn, blis or tuned",
     .help = "the convolutions' and the tile GEMMs' CPU kernels: auto\n"
             "(both registered, StarPU chooses: dmda and dmdas by each\n"
             "one's measured time, the other policies oneDNN), onednn,\n"
             "blis (BLIS's GEMMs, over the lowered input for a\n"
             "convolution), or tuned (both timed on each shape's first\n"
             "tasks, the faster kept; runs may differ in the last digits)\n"
             "[auto]; `tessera info` lists them"},
    {"window", "N", read_int, AT(train.window), 1, 1 << 16, "an integer from 1 to 65536",
     "training steps in flight at most [8]"},
    {"train-limit", "N", read_int64, AT(train_limit), 1, 0x7fffffffL,
     "an integer from 1 to 2147483647", "use only the first N training samples"},
    {"test-limit", "N", read_int64, AT(test_limit), 0, 0x7fffffffL,
     "an integer from 0 to 2147483647", "use only the first N test samples"},
    {"standardize", "S", read_standardize, .want = "column, scalar, channel or none",
     .help = "inputs standardized with the training set's mean and std per\n"
             "feature column, over every feature (scalar), per colour\n"
             "channel (channel), or not at all [column for CSV data, scalar\n"
             "for one-channel images, channel for colour images, none for\n"
             "text]"},
    {"crop", "S:P", read_crop,
     .want = "S:P or HxW:P, the image's size and the padding (integers, P >= 0), e.g. 32:4",
     .help = "in training, a random S x S crop (HxW:P: H x W) of each image\n"
             "padded by P pixels of black on each side; S must be the\n"
             "image's size (torchvision's RandomCrop(S, padding=P))"},
    {"flip", NULL, read_true, AT(augment.flip),
     .help = "in training, mirror each image left-right with probability\n"
             "1/2 (RandomHorizontalFlip)"},
    {"classes", "N", read_int, AT(classes), 2, 1 << 24, "an integer from 2 to 16777216",
     "classes (labels 0 to N-1; a label >= N is an error)\n"
     "[1 + the largest training label]"},
    {"sync", "POLICY", read_sync,
     .help = "under mpirun: batch, every=K, epoch[=n], async-epoch,\n"
             "post-local:E,K (batch for E epochs, then every=K) or\n"
             "hier:K1,K2[,G] (a node's ranks, or G consecutive ranks,\n"
             "average every K1 steps, all ranks every K2) or grow=K\n"
             "(after steps K, 3K, 7K ...: the period doubling) [batch]"},
    {"outer", "NAME", read_outer,
     .help = "what a weight average does with the mean: none (take it),\n"
             "slowmo or nesterov (an outer optimizer step towards it) [none]"},
    {"outer-lr", "X", read_outer_lr, AT(sync.outer.lr), 1e-6f, 100.0f, "a number in [1e-6, 100]",
     "the outer rate [1 for slowmo, 0.7 for nesterov]"},
    {"outer-momentum", "X", read_outer_momentum, AT(sync.outer.momentum), 0, BELOW_ONE,
     "a number in [0, 1)", "the outer momentum [0.5 for slowmo, 0.9 for nesterov]"},
    {"sync-state", NULL, read_true, AT(sync.average_state),
     .help = "average optimizer state with the weights (every, epoch)"},
    {"weighting", "W", read_weighting, .want = "uniform, samples or steps",
     .help = "uniform, samples or steps (samples, normalized by each rank's\n"
             "local steps: FedNova): how ranks count in averages [uniform]"},
    {"shares", "S", read_shares,
     .help = "under mpirun, each rank's part of the work: uniform, auto\n"
             "(measured throughput) or w0,w1,... (one per rank; under\n"
             "--grid, one per grid column) [uniform]"},
    {"deterministic", NULL, read_true, AT(sync.deterministic),
     .help = "sum rank contributions in a fixed order (reproducible bits)"},
    {"allreduce", "A", read_allreduce, .want = "auto, flat or two-level",
     .help = "under mpirun, how averages over every rank travel: flat (each\n"
             "rank to each chunk's home and back), two-level (a node's ranks\n"
             "sum first, the nodes reduce among themselves, the result is\n"
             "spread inside each node) or auto: two-level where several\n"
             "nodes hold several ranks [auto]"},
    {"node-size", "G", read_int, AT(sync.node_size), 1, TSR_MAX_RANKS, "an integer from 1 to 32768",
     "with two-level averaging, G consecutive ranks are a node (to\n"
     "study it on one machine) [the ranks that share memory]"},
    {"bucket-mb", "M", read_float, AT(sync.bucket_mb), 0, 1e6, "a number of MiB from 0 to 1e6",
     "under mpirun, pack each home's chunks into buckets of at least\n"
     "M MiB, one message each, as PyTorch DDP's bucket_cap_mb (25);\n"
     "with two levels inside and between nodes [0: a message a chunk]"},
    {"sync-bn", NULL, read_true, AT(sync.sync_bn),
     .help = "under mpirun, batchnorm statistics over every rank's batch\n"
             "(forward and backward, every step) [each rank's own]"},
    {"grid", "PrxPc", read_grid,
     .help = "under mpirun with Pr x Pc ranks: each grid column of Pr\n"
             "consecutive ranks holds one replica, its dense layers'\n"
             "feature tiles spread over them; the Pc columns split the\n"
             "batch and --sync averages across them [1xP]"},
    {"domain", "D", read_domain,
     .help = "under --grid PrxPc: rows cuts each convolution's and pooling's\n"
             "images into bands of rows over a column's Pr ranks, with\n"
             "halo rows exchanged; rows:K the first K of them only, the\n"
             "rest whole on every rank from the bands gathered; none\n"
             "computes them all whole on every rank of the column; auto\n"
             "takes the choice tessera plan --domain auto makes [none]"},
    {"mpi-progress", "M", read_mpi_progress, .want = "auto, thread or worker",
     .help = "under mpirun, who polls StarPU-MPI: thread (its own thread),\n"
             "worker (that thread also runs a worker's tasks), or auto:\n"
             "worker wherever MPI allows it [auto]"},
    {"log", "FILE.jsonl", read_text, AT(log_path),
     .help = "write one JSON object per epoch (rank 0), after a first one\n"
             "that says what ran (version, command, hosts, configuration)"},
    {"log-every", "N", read_int, AT(log_every), 1, 1 << 30, "an integer from 1 to 1073741824",
     "with --log, a step line every N steps (loss, lr, samples/s;\n"
     "each waits for the steps in flight) [none]"},
    {"eval-every", "N", read_int, AT(eval_every), 1, 1 << 30, "an integer from 1 to 1073741824",
     "evaluate every N steps too, on the validation set (the test\n"
     "set without --val-split), printed and logged (\"eval\"\n"
     "lines) [epoch ends only]"},
    {"bn-recompute", "N", read_int, AT(train.bn_recompute), 1, 1 << 30,
     "an integer from 1 to 1073741824",
     "at every epoch end, before evaluating: batchnorm running\n"
     "statistics recomputed under the weights as they are then,\n"
     "the mean over the epoch's first N batches (for weight\n"
     "averaging, whose averaged weights match neither replica's\n"
     "statistics) [the running statistics as trained]"},
    {"checkpoint", "FILE", read_text, AT(checkpoint),
     .help = "write the network, optimizer state and training state\n"
             "(safetensors) at every --checkpoint-every, at the end and\n"
             "at the step where SIGINT/SIGTERM stopped the run"},
    {"checkpoint-every", "N[epochs|steps]", read_checkpoint_every,
     .want = "N, Nepochs or Nsteps with N >= 1", .help = "how often [1 epoch]"},
    {"resume", "FILE|auto", read_text, AT(resume),
     .help = "continue a checkpoint's run: its model, and its settings\n"
             "where not given (a given one that differs is refused);\n"
             "--epochs stays the total. auto: the --checkpoint FILE if it\n"
             "exists, else a new run (a requeued batch job)"},
    {"no-priorities", NULL, read_false, AT(runtime.priorities),
     .help = "every task priority 0 (default: critical path first)"},
    {"stats", NULL, read_true, AT(runtime.stats),
     .help = "per-worker statistics at the end (and in the log)"},
    {"trace", "FILE.json", read_trace, .want = "a file name ending in .json",
     .help = "timeline of every task on every worker of every rank,\n"
             "Chrome trace-event format (Perfetto, chrome://tracing)"},
    {"trace-steps", "A-B", read_trace_steps, .want = "A-B, steps with 1 <= A <= B, e.g. 100-110",
     .help = "with --trace, only training steps A to B (1-based) [all]"},
    {"verbose", NULL, read_true, AT(runtime.verbose),
     .help = "StarPU's own messages on stderr (calibration, warnings) [off]"},
    {"quiet", NULL, read_true, AT(quiet), .help = "no per-epoch lines and no progress line"},
    {"help", NULL, read_true, AT(help), .help = "this text"},
};
#define NROWS ((int)(sizeof rows / sizeof *rows))
_Static_assert(NROWS <= TSR_CLI_MAX_OPTIONS, "raise TSR_CLI_MAX_OPTIONS in train_config.h");

/* ---- Help and parsing from the table ------------------------------------- */

/* The help of the rows that say what the library's registries hold: the optimizers' names and
 * defaults. */
static const struct {
  const char *name;
  void (*make)(char *buf, size_t size);
} made_help[] = {
    {"optimizer", optimizer_help},
    {"lr", lr_help},
    {"weight-decay", weight_decay_help},
};

static const char *help_of(const row_t *row, char *buf, size_t size) {
  if (row->help) return row->help;
  for (size_t k = 0; k < sizeof made_help / sizeof *made_help; k++)
    if (strcmp(row->name, made_help[k].name) == 0) made_help[k].make(buf, size);
  return buf;
}

bool tsr__cli_train_option(int i, const char **name, const char **arg, const char **help, char *buf,
                           size_t size) {
  if (i < 0 || i >= NROWS) return false;
  *name = rows[i].name, *arg = rows[i].arg, *help = help_of(&rows[i], buf, size);
  return true;
}

/* The rows whose value for the log's run line is not at a field of a generic reader; any other
 * row's is, for a flag, whether it was given, else the argument as given (null when not given:
 * the default). A new option with a reader of its own and a value the run decides gets a line
 * here. */
static const struct {
  const char *name;
  void (*show)(const tsr_cli_train_config_t *cfg, tsr_log_field_t *f, char *text, size_t size);
} shown[] = {
    {"optimizer", show_optimizer},     {"seed", show_seed},
    {"lr-schedule", show_lr_schedule}, {"val-split", show_val_split},
    {"lr-scaling", show_lr_scaling},   {"sync", show_sync},
    {"weighting", show_weighting},     {"checkpoint-every", show_checkpoint_every},
    {"domain", show_domain},           {"schedule-epochs", show_schedule_epochs},
};

/* The value of a row with a generic reader, at its field; false for another reader. */
static bool show_field(const tsr_cli_train_config_t *cfg, const row_t *row, tsr_log_field_t *f) {
  const void *at = (const char *)cfg + row->field;
  if (row->read == read_int)
    f->kind = TSR_LOG_INT, f->number = *(const int *)at;
  else if (row->read == read_int64)
    f->kind = TSR_LOG_INT, f->number = (double)*(const int64_t *)at;
  else if (row->read == read_float || row->read == read_lr || row->read == read_momentum ||
           row->read == read_weight_decay || row->read == read_outer_lr ||
           row->read == read_outer_momentum)
    f->kind = TSR_LOG_FLOAT, f->number = *(const float *)at;
  else if (row->read == read_text)
    f->kind = TSR_LOG_TEXT, f->text = *(const char *const *)at;
  else if (row->read == read_true || row->read == read_false)
    f->kind = TSR_LOG_BOOL, f->number = *(const bool *)at == (row->read == read_true);
  else
    return false;
  /* A number outside the option's range is its "not given" default (0 for --warmup, -1 for
   * --workers, an outer rate without --outer): null, so that a logged configuration replays. */
  bool number = f->kind == TSR_LOG_INT || f->kind == TSR_LOG_FLOAT;
  if (number && row->lo < row->hi && (f->number < row->lo || f->number > row->hi))
    f->kind = TSR_LOG_NULL;
  if (number && cfg->sync.outer.kind == TSR_OUTER_NONE &&
      (row->read == read_outer_lr || row->read == read_outer_momentum))
    f->kind = TSR_LOG_NULL;
  return true;
}

void tsr__cli_train_fields(const tsr_cli_train_config_t *cfg, tsr_cli_train_fields_t *out) {
  out->n = 0;
  for (int i = 0; i < NROWS && i < TSR_CLI_MAX_OPTIONS; i++) {
    const row_t *row = &rows[i];
    if (row->read == read_true && row->field == AT(help)) continue;
    tsr_log_field_t *f = &out->field[out->n];
    *f = (tsr_log_field_t){.key = row->name, .kind = TSR_LOG_NULL};
    bool done = false;
    for (size_t k = 0; k < sizeof shown / sizeof *shown && !done; k++)
      if ((done = strcmp(row->name, shown[k].name) == 0))
        shown[k].show(cfg, f, out->text[out->n], sizeof out->text[out->n]);
    if (!done && !show_field(cfg, row, f)) {
      if (!row->arg) /* a flag: whether it was given */
        f->kind = TSR_LOG_BOOL, f->number = cfg->given[i] != NULL;
      else if (cfg->given[i])
        f->kind = TSR_LOG_TEXT, f->text = cfg->given[i];
    }
    out->n++;
  }
}

const char *tsr__cli_train_given(const tsr_cli_train_config_t *cfg, const char *name) {
  for (int i = 0; i < NROWS; i++)
    if (strcmp(rows[i].name, name) == 0) return cfg->given[i];
  return NULL;
}

static bool given(const tsr_cli_train_config_t *cfg, const char *name) {
  return tsr__cli_train_given(cfg, name) != NULL;
}

/* What depends on several options, once all are read: 0, or 2 after a message. */
static int check_together(parse_t *p) {
  tsr_cli_train_config_t *cfg = p->cfg;
  tsr_errbuf_t err = {""};
  cfg->data_given = given(cfg, "data");
  cfg->init_given = given(cfg, "init");
  if (cfg->text && cfg->data_given) {
    fprintf(stderr, "tessera train: --text and --data: a run trains on one of them; leave the "
                    "other out\n");
    return 2;
  }
  if (p->nesterov && tsr_optimizer_variant(&cfg->run.net.opt, "nesterov", &err)) {
    fprintf(stderr, "tessera train: --nesterov: %s\n", err.msg);
    return 2;
  }
  if (refused(tsr_optimizer_check(&cfg->run.net.opt, &err), &err)) return 2;
  if (cfg->runtime.trace_from && !cfg->runtime.trace) {
    fprintf(stderr, "tessera train: --trace-steps needs --trace FILE.json\n");
    return 2;
  }
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
  if (cfg->resume && strcmp(cfg->resume, "auto") == 0 && !cfg->checkpoint) {
    fprintf(stderr, "tessera train: --resume auto resumes from the --checkpoint FILE when it "
                    "exists: give --checkpoint FILE\n");
    return 2;
  }
  if (cfg->run.net.clip_grad > 0 && cfg->run.net.grid_rows > 1) {
    fprintf(stderr, "tessera train: --clip-grad with --grid is not implemented (the grid spreads "
                    "the dense layers' gradients over a column's ranks); leave one of them out\n");
    return 2;
  }
  if (cfg->run.net.domain && cfg->run.net.grid_rows < 2) {
    fprintf(stderr,
            "tessera train: --domain %s splits images over a grid column's ranks: it "
            "needs --grid PrxPc with Pr > 1 (e.g. --grid 2x1)\n",
            cfg->domain_auto ? "auto" : "rows");
    return 2;
  }
  if (cfg->log_every && !cfg->log_path) {
    fprintf(stderr, "tessera train: --log-every needs --log FILE.jsonl\n");
    return 2;
  }
  if ((p->outer_lr > 0 || p->outer_momentum >= 0) && cfg->sync.outer.kind == TSR_OUTER_NONE) {
    fprintf(stderr, "tessera train: --outer-lr and --outer-momentum need --outer slowmo or "
                    "--outer nesterov\n");
    return 2;
  }
  if (refused(tsr_sync_check(&cfg->sync, &err), &err)) return 2;
  bool plateau = cfg->train.lr_schedule == TSR_LR_PLATEAU;
  if ((plateau || cfg->train.early_stop) && !(cfg->val_split > 0)) {
    fprintf(stderr,
            "tessera train: %s follows the validation loss: add --val-split F (e.g. 0.1) to hold "
            "that fraction of the training set out for it\n",
            plateau ? "--lr-schedule plateau" : "--early-stop");
    return 2;
  }
  /* A shorthand is checked here, with a stand-in for the classes the data will give; a model file
   * is read by the run, before the data (a file's problems exit 1). */
  if (cfg->model_file) return 0;
  tsr_model_spec_t spec;
  int rc = refused(tsr_model_parse(&spec, cfg->model, 2, &err), &err);
  tsr_model_spec_fini(&spec); /* left empty on an error */
  return rc;
}

int tsr__cli_train_parse(tsr_cli_train_config_t *cfg, int argc, char **argv) {
  /* getopt_long's table from ours: an option's value is 256 + its row. */
  static struct option longopts[NROWS + 1];
  for (int i = 0; i < NROWS; i++)
    longopts[i] =
        (struct option){rows[i].name, rows[i].arg ? required_argument : no_argument, 0, 256 + i};
  *cfg = (tsr_cli_train_config_t){.data_dir = TSR_DEFAULT_DATA_DIR,
                                  .model = "mlp",
                                  .train_limit = -1,
                                  .test_limit = -1,
                                  .argc = argc,
                                  .argv = argv};
  tsr_run_config_init(&cfg->run);
  tsr_train_opts_init(&cfg->train);
  tsr_runtime_opts_init(&cfg->runtime);
  tsr_sync_parse(&cfg->sync, "batch", NULL);
  parse_t p = {.cfg = cfg, .outer_lr = -1, .outer_momentum = -1};
  int c;
  while ((c = tsr__cli_getopt("train", argc, argv, longopts)) != -1) {
    if (c < 256 || c >= 256 + NROWS) return 2; /* tsr__cli_getopt said what is wrong */
    const row_t *row = &rows[c - 256];
    if (row->read(&p, row, optarg)) return 2;
    cfg->given[c - 256] = optarg ? optarg : row->name;
    if (cfg->help) return 0;
  }
  if (optind < argc) {
    fprintf(stderr, "tessera train: unexpected argument '%s' (see tessera train --help)\n",
            argv[optind]);
    return 2;
  }
  return check_together(&p);
}
