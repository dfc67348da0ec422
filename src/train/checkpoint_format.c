/* Checkpoints' file format (tessera/checkpoint.h; docs/checkpoints.md): the names of the
 * tensors, a growing list of tensors and metadata to write (a bundle) and the run's metadata in
 * it, and on reading, the file opened and every checksum checked, every number of the metadata
 * range-checked before any cast, the run's metadata, the model and hyper-parameters read back,
 * tensors and counters taken by name; inspect's listing of a file. Through the safetensors
 * reader and writer of src/io/. The state gathered and given back is checkpoint_state.c's, the
 * resume's rules checkpoint_resume.c's. */
#include <assert.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "tessera/runtime.h"
#include "train/checkpoint_impl.h"
#include "try.h"

/* ---- names ---- */

void tsr__ckpt_layout_param_name(const tsr_layout_layer_t *ll, int k, char *buf, size_t size) {
  const char *const *names = ll->type->param_names;
  assert(names && "a layer with parameters names them");
  snprintf(buf, size, "layers.%d.%s.%s", ll->index - 1, ll->type->ops->name, names[k]);
}

void tsr__ckpt_layout_state_name(const tsr_layout_layer_t *ll, int k, char *buf, size_t size) {
  const tsr_layer_type_t *t = ll->type;
  snprintf(buf, size, "layers.%d.%s.%s", ll->index - 1, t->ops->name,
           k < ll->nbuffers ? t->buffer_names[k] : t->counter_name);
}

int tsr__ckpt_layout_state_count(const tsr_layout_layer_t *ll) {
  return ll->nbuffers + (ll->type->counter_name ? 1 : 0);
}

void tsr__ckpt_param_name(const tsr_layer_t *l, int k, char *buf, size_t size) {
  tsr__ckpt_layout_param_name(l->lay, k, buf, size);
}

void tsr__ckpt_state_name(const tsr_layer_t *l, int k, char *buf, size_t size) {
  tsr__ckpt_layout_state_name(l->lay, k, buf, size);
}

int tsr__ckpt_state_count(const tsr_layer_t *l) {
  return tsr__ckpt_layout_state_count(l->lay);
}

void tsr__ckpt_replica_prefix(char *buf, size_t size, bool columns, int q) {
  snprintf(buf, size, "optimizer.%s%d.", columns ? "column" : "rank", q);
}

void tsr__ckpt_replica_weights(char *buf, size_t size, int q, const char *name) {
  snprintf(buf, size, "replica.rank%d.%s", q, name);
}

/* ---- a growing list of tensors and metadata ---- */

int tsr__ckpt_add_meta(tsr__ckpt_bundle_t *b, const char *key, const char *fmt, ...) {
  if (b->nmeta == b->capmeta) return TSR_ENOMEM;
  snprintf(b->keys[b->nmeta], sizeof b->keys[0], "%s", key);
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int len = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  b->values[b->nmeta] = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (b->values[b->nmeta]) vsnprintf(b->values[b->nmeta], (size_t)len + 1, fmt, again);
  va_end(again);
  if (!b->values[b->nmeta]) return TSR_ENOMEM;
  b->meta[b->nmeta] = (tsr_st_meta_t){b->keys[b->nmeta], b->values[b->nmeta]};
  b->nmeta++;
  return 0;
}

int tsr__ckpt_add_data(tsr__ckpt_bundle_t *b, const char *name, int64_t rows, int64_t cols,
                       float *data) {
  if (b->n == b->cap) {
    free(data);
    return TSR_ENOMEM;
  }
  b->owned[b->n] = data;
  snprintf(b->names[b->n], sizeof b->names[0], "%s", name);
  /* A bias (one row) is a vector, as frameworks store it. */
  b->t[b->n] = (tsr_st_tensor_t){.name = b->names[b->n], .ndims = rows == 1 ? 1 : 2, .data = data};
  if (rows == 1)
    b->t[b->n].shape[0] = cols;
  else
    b->t[b->n].shape[0] = rows, b->t[b->n].shape[1] = cols;
  uLong crc = crc32(0L, (const Bytef *)data, (uInt)(sizeof(float) * (size_t)(rows * cols)));
  char key[176];
  snprintf(key, sizeof key, "crc32.%s", name);
  b->n++;
  return tsr__ckpt_add_meta(b, key, "%08lx", (unsigned long)crc);
}

int tsr__ckpt_add_scalar(tsr__ckpt_bundle_t *b, const char *name, double v) {
  float *data = malloc(sizeof *data);
  if (!data) return TSR_ENOMEM;
  *data = (float)v;
  int n = b->n, rc = tsr__ckpt_add_data(b, name, 1, 1, data);
  if (rc == 0) b->t[n].ndims = 0;
  return rc;
}

int tsr__ckpt_add_tensor(tsr__ckpt_bundle_t *b, const char *name, const tsr_tiles_t *t) {
  int64_t rows = tsr_tiles_rows(t), cols = tsr_tiles_cols(t);
  float *data = malloc(sizeof(float) * (size_t)(rows * cols));
  if (!data) return TSR_ENOMEM;
  int rc = tsr_tiles_read(t, data);
  if (rc) {
    free(data);
    return rc;
  }
  return tsr__ckpt_add_data(b, name, rows, cols, data);
}

void tsr__ckpt_bundle_fini(tsr__ckpt_bundle_t *b) {
  for (int i = 0; i < b->n; i++)
    free(b->owned[i]);
  for (int i = 0; b->values && i < b->nmeta; i++)
    free(b->values[i]);
  free(b->t), free(b->owned), free(b->names), free(b->meta), free(b->keys), free(b->values);
}

int tsr__ckpt_bundle_init(tsr__ckpt_bundle_t *b, int tensors) {
  *b = (tsr__ckpt_bundle_t){.cap = tensors, .capmeta = TSR_CKPT_MAX_META + tensors};
  b->t = calloc((size_t)b->cap, sizeof *b->t);
  b->owned = calloc((size_t)b->cap, sizeof *b->owned);
  b->names = calloc((size_t)b->cap, sizeof *b->names);
  b->meta = calloc((size_t)b->capmeta, sizeof *b->meta);
  b->keys = calloc((size_t)b->capmeta, sizeof *b->keys);
  b->values = calloc((size_t)b->capmeta, sizeof *b->values);
  return b->t && b->owned && b->names && b->meta && b->keys && b->values ? 0 : TSR_ENOMEM;
}

/* ---- the run's metadata ---- */

/* "v0 v1 ...", each %.9g (reads back to the same float32), as an owned string; NULL when out of
 * memory. */
static char *floats_text(const float *v, int64_t n) {
  size_t size = 16 * (size_t)(n > 0 ? n : 1) + 1, at = 0;
  char *text = malloc(size);
  for (int64_t j = 0; text && j < n; j++)
    at += (size_t)snprintf(text + at, size - at, "%s%.9g", j ? " " : "", (double)v[j]);
  if (text && n == 0) text[0] = '\0';
  return text;
}

/* The warm-up, the validation split and the schedules' state, each only where the run had it
 * (a run without them writes the keys of before). */
static int add_validation(tsr__ckpt_bundle_t *b, const tsr_checkpoint_info_t *in) {
  int rc = in->lr.warmup > 0 ? tsr__ckpt_add_meta(b, "lr_warmup", "%d", in->lr.warmup) : 0;
  if (rc == 0 && in->early_stop > 0) rc = tsr__ckpt_add_meta(b, "early_stop", "%d", in->early_stop);
  if (rc == 0 && in->val_split > 0) rc = tsr__ckpt_add_meta(b, "val_split", "%.17g", in->val_split);
  if (rc == 0 && in->val_split > 0)
    rc = tsr__ckpt_add_meta(b, "val_samples", "%" PRId64, in->val_samples);
  if (rc == 0 && in->val_split > 0) rc = tsr__ckpt_add_meta(b, "val_data", "%s", in->val_data);
  if (rc == 0 && in->val_split > 0)
    rc = tsr__ckpt_add_meta(b, "val_from", "%" PRId64, in->val_from);
  const tsr_schedule_state_t *z = &in->schedule_state;
  if (rc == 0 && in->has_schedule_state)
    rc = tsr__ckpt_add_meta(b, "schedule_state",
                            "lr_factor %.17g plateau_best %.17g plateau_bad %d early_best %.17g "
                            "early_best_epoch %d early_bad %d",
                            z->lr_factor, z->plateau_best, z->plateau_bad, z->early_best,
                            z->early_best_epoch, z->early_bad);
  return rc;
}

/* input_mean and input_std: in's scalar, or the standardization's numbers (one per column);
 * a standardization of none writes 0 and 1, which read as none by a tessera of before. */
static int add_input_stats(tsr__ckpt_bundle_t *b, const tsr_checkpoint_info_t *in) {
  const tsr_standardization_t *z = in->standardization;
  if (!z || z->kind == TSR_STANDARDIZE_SCALAR) {
    float mean = z ? z->mean[0] : in->input_mean, std = z ? z->std[0] : in->input_std;
    int rc = tsr__ckpt_add_meta(b, "input_mean", "%.9g", (double)mean);
    return rc ? rc : tsr__ckpt_add_meta(b, "input_std", "%.9g", (double)std);
  }
  if (z->n == 0) {
    int rc = tsr__ckpt_add_meta(b, "input_mean", "0");
    return rc ? rc : tsr__ckpt_add_meta(b, "input_std", "1");
  }
  char *mean = floats_text(z->mean, z->n), *std = floats_text(z->std, z->n);
  int rc = mean && std ? tsr__ckpt_add_meta(b, "input_mean", "%s", mean) : TSR_ENOMEM;
  rc = rc ? rc : tsr__ckpt_add_meta(b, "input_std", "%s", std);
  free(mean), free(std);
  return rc;
}

/* What decides the rest of the run besides the keys of before: the schedule's horizon, the
 * batch, gradient clipping, label smoothing. */
static int add_settings(tsr__ckpt_bundle_t *b, const tsr_net_t *net,
                        const tsr_checkpoint_info_t *in) {
  int horizon = in->schedule_epochs > 0 ? in->schedule_epochs : in->epochs; /* 0: unknown */
  int rc = tsr__ckpt_add_meta(b, "schedule_epochs", "%d", horizon > 0 ? horizon : 0);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "batch", "%d", in->batch > 0 ? in->batch : net->opts.batch);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "clip_grad", "%.9g", (double)net->opts.clip_grad);
  return rc ? rc
            : tsr__ckpt_add_meta(b, "label_smoothing", "%.9g", (double)net->opts.label_smoothing);
}

int tsr__ckpt_add_state_meta(tsr__ckpt_bundle_t *b, const tsr_net_t *net,
                             const tsr_checkpoint_info_t *in) {
  const tsr_optimizer_t *hp = &net->opts.opt;
  /* The description and the model file, as long as they take (a graph's names and inputs). */
  char *model = tsr_model_description(&net->spec, net->inputs);
  if (!model) return TSR_ENOMEM;
  char *ini = NULL;
  for (size_t size = 8192;; size *= 2) {
    char *more = realloc(ini, size);
    if (!more) {
      free(ini), free(model);
      return TSR_ENOMEM;
    }
    ini = more;
    if (tsr_model_to_ini(&net->spec, ini, size) == 0) break;
  }
  const tsr_layer_t *first = &net->layers[0];
  int rc = tsr__ckpt_add_meta(b, "format", TSR_CKPT_FORMAT);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "tessera_version", "%s", TSR_VERSION);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "tessera_commit", "%s", tsr_version_git());
  char written[32] = "";
  time_t now = time(NULL);
  struct tm utc;
  if (gmtime_r(&now, &utc)) strftime(written, sizeof written, "%Y-%m-%dT%H:%M:%SZ", &utc);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "written", "%s", written);
  if (in->command) rc = rc ? rc : tsr__ckpt_add_meta(b, "command", "%s", in->command);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "model", "%s", model);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "model_ini", "%s", ini);
  free(ini), free(model);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "inputs", "%d", net->inputs);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "classes", "%d", net->classes);
  rc = rc ? rc
          : tsr__ckpt_add_meta(b, "input_shape", "%d %d %d", first->geom.c, first->geom.h,
                               first->geom.w);
  rc = rc ? rc : add_input_stats(b, in);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "data", "%s", in->data);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "net_seed", "%" PRIu64, net->opts.seed);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "init", "%s", tsr_init_name(net->opts.init));
  rc = rc ? rc : tsr__ckpt_add_meta(b, "optimizer", "%s", tsr_optimizer_name(hp));
  rc = rc ? rc
          : tsr__ckpt_add_meta(b, "optimizer_hyper",
                               "lr %.9g momentum %.9g weight_decay %.9g beta1 %.9g "
                               "beta2 %.9g eps %.9g",
                               (double)hp->lr, (double)hp->momentum, (double)hp->weight_decay,
                               (double)hp->beta1, (double)hp->beta2, (double)hp->eps);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "optimizer_steps", "%" PRId64, tsr__optim_steps(net->optim));
  rc = rc ? rc : tsr__ckpt_add_meta(b, "epoch", "%d", in->epoch);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "step_in_epoch", "%" PRId64, in->step_in_epoch);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "epochs", "%d", in->epochs);
  rc = rc ? rc : add_settings(b, net, in);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "seed", "%" PRIu64, in->seed);
  char sched[256];
  tsr_lr_schedule_describe(in->lr_schedule, &in->lr, sched, sizeof sched);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "lr_schedule", "%s", sched);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "base_lr", "%.9g", (double)in->base_lr);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "sync", "%s", in->sync[0] ? in->sync : "none");
  rc = rc ? rc : tsr__ckpt_add_meta(b, "ranks", "%d", in->ranks > 0 ? in->ranks : 1);
  rc = rc ? rc : add_validation(b, in);
  char calls[1024] = "";
  int n = 0;
  for (int i = 0; i < net->n_layers && n < (int)sizeof calls - 32; i++)
    if (net->layers[i].calls)
      n += snprintf(calls + n, sizeof calls - (size_t)n, "%s%d:%" PRIu64, n ? " " : "",
                    net->layers[i].index - 1, net->layers[i].calls);
  rc = rc ? rc : tsr__ckpt_add_meta(b, "dropout_calls", "%s", calls);
  /* Only when augmenting: a checkpoint without reads as every one of before. */
  char augment[64];
  tsr__net_augment_describe(net, augment, sizeof augment);
  if (rc == 0 && strcmp(augment, "none") != 0) rc = tsr__ckpt_add_meta(b, "augment", "%s", augment);
  const tsr_standardization_t *z = in->standardization;
  /* Last, and only when not scalar: a scalar checkpoint reads as every one of before. */
  if (rc == 0 && z && z->kind != TSR_STANDARDIZE_SCALAR)
    rc = tsr__ckpt_add_meta(b, "input_standardize", "%s", tsr_standardize_name(z->kind));
  return rc;
}

/* ---- numbers of the metadata, each range-checked before any cast ----
 *
 * A number out of range (1e300 for an int, inf, nan, a float's subnormal) is refused with the
 * key that holds it, rather than cast into undefined behaviour or a wrong value. */

int tsr__ckpt_whole_at(const char **s, const char *path, const char *key, int64_t lo, int64_t hi,
                       int64_t *v, tsr_errbuf_t *err) {
  char *end;
  errno = 0;
  long long x = strtoll(*s, &end, 10);
  if (end == *s || errno || x < lo || x > hi) {
    int len = (int)strcspn(*s, " ");
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: metadata %s holds '%.*s', not a whole number in [%lld, %lld]; the "
                         "file is damaged or not tessera's",
                         path, key, len > 40 ? 40 : len, *s, (long long)lo, (long long)hi);
  }
  *s = end, *v = x;
  return 0;
}

/* The number at *s (moved past it), finite and a float that is 0 or normal. */
static int real_at(const char **s, const char *path, const char *key, float *v, tsr_errbuf_t *err) {
  char *end;
  double x = strtod(*s, &end), m = fabs(x);
  if (end == *s || !isfinite(x) || m > FLT_MAX || (m != 0 && m < FLT_MIN)) {
    int len = (int)strcspn(*s, " ");
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: metadata %s holds '%.*s', not a finite number a float holds "
                         "(0, or between %g and %g in size); the file is damaged or not tessera's",
                         path, key, len > 40 ? 40 : len, *s, (double)FLT_MIN, (double)FLT_MAX);
  }
  *s = end, *v = (float)x;
  return 0;
}

static int meta_text(const tsr_st_file_t *f, const char *path, const char *key, const char **s,
                     tsr_errbuf_t *err) {
  *s = tsr__st_meta(f, key);
  return *s ? 0 : tsr_error_set(err, TSR_EFORMAT, "%s: no %s in the metadata", path, key);
}

int tsr__ckpt_at_end(const char *s, const char *path, const char *key, tsr_errbuf_t *err) {
  return *s ? tsr_error_set(err, TSR_EFORMAT, "%s: metadata %s ends in '%.40s', not a number", path,
                            key, s)
            : 0;
}

/* Reads n space-separated numbers of metadata key's text into v (n entries), each range-checked
 * as real_at does; 0, or TSR_EFORMAT naming the key. */
static int read_floats(const char *text, const char *path, const char *key, float *v, int64_t n,
                       tsr_errbuf_t *err) {
  const char *p = text;
  for (int64_t j = 0; j < n; j++)
    TSR_TRY(real_at(&p, path, key, &v[j], err));
  while (*p == ' ')
    p++;
  return tsr__ckpt_at_end(p, path, key, err);
}

int tsr__ckpt_meta_int(const tsr_st_file_t *f, const char *path, const char *key, int64_t lo,
                       int64_t hi, int64_t *v, tsr_errbuf_t *err) {
  const char *s;
  TSR_TRY(meta_text(f, path, key, &s, err));
  TSR_TRY(tsr__ckpt_whole_at(&s, path, key, lo, hi, v, err));
  return tsr__ckpt_at_end(s, path, key, err);
}

static int meta_float(const tsr_st_file_t *f, const char *path, const char *key, float *v,
                      tsr_errbuf_t *err) {
  const char *s;
  TSR_TRY(meta_text(f, path, key, &s, err));
  TSR_TRY(real_at(&s, path, key, v, err));
  return tsr__ckpt_at_end(s, path, key, err);
}

/* A seed: any 64-bit unsigned number. */
static int meta_seed(const tsr_st_file_t *f, const char *path, const char *key, uint64_t *v,
                     tsr_errbuf_t *err) {
  const char *s;
  TSR_TRY(meta_text(f, path, key, &s, err));
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (s[0] < '0' || s[0] > '9' || end == s || *end || errno)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: metadata %s holds '%.40s', not a whole number in [0, 2^64); the "
                         "file is damaged or not tessera's",
                         path, key, s);
  *v = (uint64_t)x;
  return 0;
}

int tsr__ckpt_known_optimizer(const char *name, const char *path, tsr_optimizer_t *opt,
                              tsr_errbuf_t *err) {
  tsr_optimizer_t o;
  if (!name) return tsr_error_set(err, TSR_EFORMAT, "%s: no optimizer in the metadata", path);
  if (tsr_optimizer_init(opt ? opt : &o, name, NULL) == 0) return 0;
  char names[256];
  tsr_optimizer_list(names, sizeof names);
  return tsr_error_set(err, TSR_EFORMAT,
                       "%s holds the state of optimizer %s, which this tessera does not know "
                       "(known: %s); use the tessera that wrote it",
                       path, name, names);
}

/* ---- reading ---- */

int tsr__ckpt_open_checked(tsr_st_file_t **out, const char *path, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = tsr__st_open(&f, path, err);
  if (rc) return rc;
  const char *format = tsr__st_meta(f, "format");
  if (!format || strcmp(format, TSR_CKPT_FORMAT) != 0) {
    /* The message first: format points into f. */
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: a safetensors file, but not a tessera checkpoint (format %s, want %s)",
                       path, format ? format : "missing", TSR_CKPT_FORMAT);
    tsr__st_close(&f);
    return rc;
  }
  for (int i = 0; i < tsr__st_count(f) && rc == 0; i++) {
    tsr_st_tensor_t t;
    tsr__st_tensor(f, i, &t);
    int64_t n = 1;
    for (int d = 0; d < t.ndims; d++)
      n *= t.shape[d];
    char key[160];
    snprintf(key, sizeof key, "crc32.%s", t.name);
    const char *want = tsr__st_meta(f, key);
    char got[16];
    snprintf(got, sizeof got, "%08lx",
             (unsigned long)crc32(0L, (const Bytef *)t.data, (uInt)(sizeof(float) * (size_t)n)));
    if (!want || strcmp(want, got) != 0)
      rc = tsr_error_set(err, TSR_EFORMAT,
                         "%s: tensor %s is damaged (checksum %s, recorded %s); use an older "
                         "checkpoint",
                         path, t.name, got, want ? want : "none");
  }
  if (rc) {
    tsr__st_close(&f);
    return rc;
  }
  *out = f;
  return 0;
}

/* info's input_mean and input_std: the scalar, or 0 and 1 when the file standardized per column
 * or not at all (tsr_checkpoint_read_standardization reads those). */
static int read_input_stats(const tsr_st_file_t *f, const char *path, tsr_checkpoint_info_t *info,
                            tsr_errbuf_t *err) {
  if (!tsr__st_meta(f, "input_standardize")) {
    TSR_TRY(meta_float(f, path, "input_mean", &info->input_mean, err));
    return meta_float(f, path, "input_std", &info->input_std, err);
  }
  info->input_mean = 0.0f, info->input_std = 1.0f;
  const char *s;
  TSR_TRY(meta_text(f, path, "input_mean", &s, err));
  return meta_text(f, path, "input_std", &s, err);
}

/* The channels of input_shape ("C H W"): the entries of a channel standardization. */
static int input_channels(const tsr_st_file_t *f, const char *path, int64_t *n, tsr_errbuf_t *err) {
  const char *s;
  TSR_TRY(meta_text(f, path, "input_shape", &s, err));
  long long c;
  if (sscanf(s, "%lld", &c) != 1 || c < 1 || c > INT_MAX)
    return tsr_error_set(err, TSR_EFORMAT, "%s: input_shape '%s' does not start with the channels",
                         path, s);
  *n = c;
  return 0;
}

int tsr_checkpoint_read_standardization(const char *path, tsr_standardization_t *s,
                                        tsr_errbuf_t *err) {
  *s = (tsr_standardization_t){0};
  tsr_st_file_t *f;
  int rc = tsr__ckpt_open_checked(&f, path, err);
  if (rc) return rc;
  const char *kind = tsr__st_meta(f, "input_standardize");
  const char *mean = tsr__st_meta(f, "input_mean"), *std = tsr__st_meta(f, "input_std");
  tsr_standardize_t k = TSR_STANDARDIZE_SCALAR;
  int64_t n = 1;
  if (kind && (tsr_standardize_parse(kind, &k) || k == TSR_STANDARDIZE_AUTO))
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: input_standardize is '%s'; expected column, channel or none (or no "
                       "key: scalar)",
                       path, kind);
  if (rc == 0 && k == TSR_STANDARDIZE_NONE) n = 0;
  if (rc == 0 && k == TSR_STANDARDIZE_COLUMN)
    rc = tsr__ckpt_meta_int(f, path, "inputs", 1, INT_MAX, &n, err);
  if (rc == 0 && k == TSR_STANDARDIZE_CHANNEL) rc = input_channels(f, path, &n, err);
  s->kind = k, s->n = n;
  s->mean = rc == 0 && n ? malloc(sizeof *s->mean * (size_t)n) : NULL;
  s->std = rc == 0 && n ? malloc(sizeof *s->std * (size_t)n) : NULL;
  if (rc == 0 && n && (!s->mean || !s->std)) rc = TSR_ENOMEM;
  if (rc == 0 && n && (!mean || !std))
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: no input_mean or input_std in the metadata (the %s "
                       "standardization)",
                       path, tsr_standardize_name(k));
  if (rc == 0 && n) rc = read_floats(mean, path, "input_mean", s->mean, n, err);
  if (rc == 0 && n) rc = read_floats(std, path, "input_std", s->std, n, err);
  tsr__st_close(&f);
  if (rc) tsr_standardization_fini(s);
  return rc;
}

/* What add_validation wrote, range-checked, with --lr-schedule's text: a key that is absent
 * reads as a run without it. */
static int read_validation(const tsr_st_file_t *f, const char *path, const char *sched,
                           tsr_checkpoint_info_t *info, tsr_errbuf_t *err) {
  tsr_errbuf_t why = {""};
  if (tsr_lr_schedule_parse(sched, &info->lr_schedule, &info->lr, &why))
    return tsr_error_set(err, TSR_EFORMAT, "%s: metadata lr_schedule: %s", path, why.msg);
  int64_t v;
  if (tsr__st_meta(f, "lr_warmup")) {
    TSR_TRY(tsr__ckpt_meta_int(f, path, "lr_warmup", 1, INT_MAX, &v, err));
    info->lr.warmup = (int)v;
  }
  if (tsr__st_meta(f, "early_stop")) {
    TSR_TRY(tsr__ckpt_meta_int(f, path, "early_stop", 1, INT_MAX, &v, err));
    info->early_stop = (int)v;
  }
  const char *s = tsr__st_meta(f, "val_split");
  if (s) {
    char *end;
    info->val_split = strtod(s, &end);
    if (end == s || *end || !(info->val_split > 0 && info->val_split < 1))
      return tsr_error_set(err, TSR_EFORMAT,
                           "%s: metadata val_split holds '%.40s', not a fraction in (0, 1); the "
                           "file is damaged or not tessera's",
                           path, s);
    TSR_TRY(tsr__ckpt_meta_int(f, path, "val_samples", 1, INT64_MAX, &info->val_samples, err));
    TSR_TRY(tsr__ckpt_meta_int(f, path, "val_from", info->val_samples + 1, INT64_MAX,
                               &info->val_from, err));
    if ((s = tsr__st_meta(f, "val_data"))) snprintf(info->val_data, sizeof info->val_data, "%s", s);
  }
  tsr_schedule_state_init(&info->schedule_state);
  if (!(s = tsr__st_meta(f, "schedule_state"))) return 0;
  tsr_schedule_state_t *z = &info->schedule_state;
  int end = -1;
  sscanf(s,
         "lr_factor %lf plateau_best %lf plateau_bad %d early_best %lf early_best_epoch %d "
         "early_bad %d%n",
         &z->lr_factor, &z->plateau_best, &z->plateau_bad, &z->early_best, &z->early_best_epoch,
         &z->early_bad, &end);
  if (end < 0 || s[end] || !(z->lr_factor > 0 && z->lr_factor <= 1) || isnan(z->plateau_best) ||
      isnan(z->early_best) || z->plateau_bad < 0 || z->early_best_epoch < 0 || z->early_bad < 0)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: metadata schedule_state holds '%.120s', not 'lr_factor F "
                         "plateau_best L plateau_bad N early_best L early_best_epoch E early_bad "
                         "N' with 0 < F <= 1 and N, E >= 0; the file is damaged or not tessera's",
                         path, s);
  info->has_schedule_state = true;
  return 0;
}

/* What add_settings wrote: all of it, or (a file of before issue 40) none. */
static int read_settings(const tsr_st_file_t *f, const char *path, tsr_checkpoint_info_t *info,
                         tsr_errbuf_t *err) {
  if (!tsr__st_meta(f, "schedule_epochs")) return 0;
  int64_t horizon, batch;
  TSR_TRY(tsr__ckpt_meta_int(f, path, "schedule_epochs", 0, INT_MAX, &horizon, err));
  TSR_TRY(tsr__ckpt_meta_int(f, path, "batch", 1, INT_MAX, &batch, err));
  TSR_TRY(meta_float(f, path, "clip_grad", &info->clip_grad, err));
  TSR_TRY(meta_float(f, path, "label_smoothing", &info->label_smoothing, err));
  if (info->clip_grad < 0 || !(info->label_smoothing >= 0 && info->label_smoothing < 1))
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: metadata clip_grad %g or label_smoothing %g out of range (>= 0, and "
                         "in [0, 1)); the file is damaged or not tessera's",
                         path, (double)info->clip_grad, (double)info->label_smoothing);
  info->schedule_epochs = (int)horizon, info->batch = (int)batch, info->settings = true;
  return 0;
}

int tsr__ckpt_read_info(const tsr_st_file_t *f, const char *path, tsr_checkpoint_info_t *info,
                        tsr_errbuf_t *err) {
  memset(info, 0, sizeof *info);
  int64_t epoch = 0, step = 0, epochs = 0, ranks = 0;
  int rc = tsr__ckpt_meta_int(f, path, "epoch", 0, INT_MAX, &epoch, err);
  if (rc == 0) rc = tsr__ckpt_meta_int(f, path, "step_in_epoch", 0, INT64_MAX, &step, err);
  if (rc == 0) rc = tsr__ckpt_meta_int(f, path, "epochs", 0, INT_MAX, &epochs, err);
  if (rc == 0) rc = meta_seed(f, path, "seed", &info->seed, err);
  if (rc == 0) rc = tsr__ckpt_meta_int(f, path, "ranks", 1, TSR_MAX_RANKS, &ranks, err);
  if (rc == 0) rc = meta_float(f, path, "base_lr", &info->base_lr, err);
  if (rc == 0) rc = read_input_stats(f, path, info, err);
  const char *sched = NULL;
  if (rc == 0) rc = meta_text(f, path, "lr_schedule", &sched, err);
  if (rc) return rc;
  info->epoch = (int)epoch, info->step_in_epoch = step, info->epochs = (int)epochs;
  info->ranks = (int)ranks;
  TSR_TRY(read_validation(f, path, sched, info, err));
  TSR_TRY(read_settings(f, path, info, err));
  const char *s;
  /* "PrxPc", for information; a file without was written without a grid. */
  int grid_rows = 1, grid_cols = 1, end = -1;
  s = tsr__st_meta(f, "grid");
  if (s && (sscanf(s, "%dx%d%n", &grid_rows, &grid_cols, &end) != 2 || s[end] || grid_rows < 1 ||
            grid_cols < 1 || (int64_t)grid_rows * grid_cols != ranks))
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: metadata grid holds '%.40s', not PrxPc with Pr x Pc = %lld ranks; "
                         "the file is damaged or not tessera's",
                         path, s, (long long)ranks);
  info->grid_rows = grid_rows;
  if ((s = tsr__st_meta(f, "sync"))) snprintf(info->sync, sizeof info->sync, "%s", s);
  if ((s = tsr__st_meta(f, "model")) &&
      snprintf(info->model, sizeof info->model, "%s", s) >= (int)sizeof info->model)
    memcpy(info->model + sizeof info->model - 4, "...", 4); /* the whole one is in the file */
  if ((s = tsr__st_meta(f, "data"))) snprintf(info->data, sizeof info->data, "%s", s);
  if ((s = tsr__st_meta(f, "tessera_version")))
    snprintf(info->version, sizeof info->version, "%s", s);
  /* Written before issue 20: 0, unknown (rank 0's state under weight averaging). */
  if ((s = tsr__st_meta(f, "optimizer_state"))) {
    info->state_columns = strcmp(s, "per-column") == 0;
    info->state_ranks = strcmp(s, "per-rank") == 0 ? info->ranks
                        : info->state_columns      ? info->ranks / grid_rows
                                                   : 1;
  }
  info->outer_momentum = (s = tsr__st_meta(f, "outer_state")) && strcmp(s, "momentum") == 0;
  info->final_average = tsr__st_meta(f, "final_average") != NULL;
  s = tsr__st_meta(f, "augment");
  snprintf(info->augment, sizeof info->augment, "%s", s ? s : "none");
  return 0;
}

int tsr__ckpt_find_shaped(const tsr_st_file_t *f, const char *path, const char *name, int64_t rows,
                          int64_t cols, const float **data, tsr_errbuf_t *err) {
  int i = tsr__st_find(f, name);
  if (i < 0) return tsr_error_set(err, TSR_EFORMAT, "%s: no tensor %s", path, name);
  tsr_st_tensor_t x;
  tsr__st_tensor(f, i, &x);
  bool vector = rows == 1;
  bool fits = vector ? x.ndims == 1 && x.shape[0] == cols
                     : x.ndims == 2 && x.shape[0] == rows && x.shape[1] == cols;
  if (!fits) {
    char want[64];
    if (vector)
      snprintf(want, sizeof want, "[%lld]", (long long)cols);
    else
      snprintf(want, sizeof want, "[%lld, %lld]", (long long)rows, (long long)cols);
    return tsr_error_set(err, TSR_EFORMAT, "%s: tensor %s is not of shape %s", path, name, want);
  }
  *data = x.data;
  return 0;
}

int tsr__ckpt_load_tensor(const tsr_st_file_t *f, const char *path, const char *name,
                          tsr_tiles_t *t, tsr_errbuf_t *err) {
  const float *data = NULL;
  TSR_TRY(tsr__ckpt_find_shaped(f, path, name, tsr_tiles_rows(t), tsr_tiles_cols(t), &data, err));
  /* A grid column's spread matrix keeps this rank's tiles; a local one takes every tile. */
  int rc = tsr_tiles_write_owned(t, data);
  return rc ? tsr_error_set(err, rc, "%s: cannot set %s: %s", path, name, tsr_strerror(rc)) : 0;
}

int tsr__ckpt_find_sized(const tsr_st_file_t *f, const char *path, const char *name, int64_t count,
                         const float **data, tsr_errbuf_t *err) {
  int i = tsr__st_find(f, name);
  if (i < 0) return tsr_error_set(err, TSR_EFORMAT, "%s: no tensor %s", path, name);
  tsr_st_tensor_t x;
  tsr__st_tensor(f, i, &x);
  int64_t n = 1;
  for (int d = 0; d < x.ndims; d++)
    n *= x.shape[d];
  if (n != count)
    return tsr_error_set(err, TSR_EFORMAT, "%s: tensor %s holds %lld values, not %lld", path, name,
                         (long long)n, (long long)count);
  *data = x.data;
  return 0;
}

int tsr__ckpt_load_counter(const tsr_st_file_t *f, const char *path, const char *name, int64_t *n,
                           tsr_errbuf_t *err) {
  const float *data = NULL;
  TSR_TRY(tsr__ckpt_find_sized(f, path, name, 1, &data, err));
  double v = (double)data[0];
  if (!(v >= 0.0 && v <= 16777216.0) || v != floor(v))
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: tensor %s is not one whole number in [0, 2^24] (a batch count)", path,
                         name);
  *n = (int64_t)v;
  return 0;
}

int tsr__ckpt_load_layer_state(const tsr_st_file_t *f, const char *path, tsr_layer_t *l,
                               tsr_errbuf_t *err) {
  int rc = 0;
  for (int k = 0; k < tsr__ckpt_state_count(l) && rc == 0; k++) {
    char name[96];
    tsr__ckpt_state_name(l, k, name, sizeof name);
    rc = k < l->nbuffers ? tsr__ckpt_load_tensor(f, path, name, l->buffers[k], err)
                         : tsr__ckpt_load_counter(f, path, name, &l->batches_tracked, err);
  }
  return rc;
}

int tsr__ckpt_replica_steps(const tsr_st_file_t *f, const char *path, bool columns, int q,
                            int64_t *steps, tsr_errbuf_t *err) {
  const char *key = columns ? "optimizer_steps_columns" : "optimizer_steps_ranks";
  const char *s = tsr__st_meta(f, key);
  *steps = -1;
  int64_t v = 0;
  for (int r = 0; s && r <= q; r++)
    TSR_TRY(tsr__ckpt_whole_at(&s, path, key, 0, INT64_MAX, &v, err));
  if (s) *steps = v;
  return 0;
}

/* The optimizer's hyper-parameters ("lr X momentum X ...", checked as the command line's are)
 * and the input shape ("C H W") into o. */
static int read_hyper(const tsr_st_file_t *f, const char *path, tsr_net_opts_t *o,
                      tsr_errbuf_t *err) {
  static const char *const names[] = {"lr", "momentum", "weight_decay", "beta1", "beta2", "eps"};
  float *to[] = {&o->opt.lr,    &o->opt.momentum, &o->opt.weight_decay,
                 &o->opt.beta1, &o->opt.beta2,    &o->opt.eps};
  const char *s;
  TSR_TRY(meta_text(f, path, "optimizer_hyper", &s, err));
  for (int k = 0; k < 6; k++) {
    char key[48];
    snprintf(key, sizeof key, "optimizer_hyper's %s", names[k]);
    size_t len = strlen(names[k]);
    while (*s == ' ')
      s++;
    if (strncmp(s, names[k], len) != 0 || s[len] != ' ')
      return tsr_error_set(err, TSR_EFORMAT, "%s: metadata optimizer_hyper has no %s", path,
                           names[k]);
    s += len;
    TSR_TRY(real_at(&s, path, key, to[k], err));
  }
  TSR_TRY(tsr__ckpt_at_end(s, path, "optimizer_hyper", err));
  tsr_errbuf_t why = {""};
  if (tsr_optimizer_check(&o->opt, &why))
    return tsr_error_set(err, TSR_EFORMAT, "%s: metadata optimizer_hyper: %s", path, why.msg);
  TSR_TRY(meta_text(f, path, "input_shape", &s, err));
  int *dims[] = {&o->in_channels, &o->in_height, &o->in_width};
  for (int k = 0; k < 3; k++) {
    int64_t v = 0;
    TSR_TRY(tsr__ckpt_whole_at(&s, path, "input_shape", 1, 1 << 20, &v, err));
    *dims[k] = (int)v;
  }
  return tsr__ckpt_at_end(s, path, "input_shape", err);
}

int tsr_checkpoint_read(const char *path, tsr_checkpoint_info_t *info, tsr_model_spec_t *spec,
                        tsr_net_opts_t *opts, int *inputs, int *classes, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = tsr__ckpt_open_checked(&f, path, err);
  if (rc) return rc;
  tsr_checkpoint_info_t got;
  rc = tsr__ckpt_read_info(f, path, &got, err);
  int64_t in = 0, cls = 0;
  uint64_t seed = 0;
  if (rc == 0) rc = tsr__ckpt_meta_int(f, path, "inputs", 1, INT_MAX, &in, err);
  if (rc == 0) rc = tsr__ckpt_meta_int(f, path, "classes", 1, INT_MAX, &cls, err);
  if (rc == 0) rc = meta_seed(f, path, "net_seed", &seed, err);
  tsr_model_spec_t s;
  tsr_model_spec_init(&s);
  const char *ini = tsr__st_meta(f, "model_ini");
  if (rc == 0 && !ini) rc = tsr_error_set(err, TSR_EFORMAT, "%s: no model in the metadata", path);
  if (rc == 0) rc = tsr_model_parse_ini_text(&s, ini, path, err);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  const char *opt = tsr__st_meta(f, "optimizer");
  if (rc == 0) rc = tsr__ckpt_known_optimizer(opt, path, &o.opt, err);
  if (rc == 0) rc = read_hyper(f, path, &o, err);
  o.seed = seed;
  /* Files from before --init were all He-initialized. */
  const char *init = tsr__st_meta(f, "init");
  if (rc == 0 && tsr_init_from_name(&o.init, init ? init : "he"))
    rc = tsr_error_set(err, TSR_EFORMAT, "%s: unknown initialization '%s' in the metadata", path,
                       init);
  tsr__st_close(&f);
  if (rc) tsr_model_spec_fini(&s);
  if (rc) return rc;
  if (info) *info = got;
  if (spec)
    *spec = s; /* the caller's now */
  else
    tsr_model_spec_fini(&s);
  if (opts) *opts = o;
  if (inputs) *inputs = (int)in;
  if (classes) *classes = (int)cls;
  return 0;
}

/* ---- inspect: a file's tensors and metadata ---- */

_Static_assert(TSR_CHECKPOINT_MAX_DIMS == TSR_ST_MAX_DIMS, "a listed shape holds a stored one");

int tsr_checkpoint_list(tsr_checkpoint_listing_t *l, const char *path, tsr_errbuf_t *err) {
  memset(l, 0, sizeof *l);
  tsr_st_file_t *f;
  TSR_TRY(tsr__ckpt_open_checked(&f, path, err));
  int nt = tsr__st_count(f), nm = tsr__st_nmeta(f);
  l->tensors = calloc((size_t)nt + 1, sizeof *l->tensors);
  l->metadata = calloc((size_t)nm + 1, sizeof *l->metadata);
  bool ok = l->tensors && l->metadata;
  for (int i = 0; ok && i < nt; i++, l->n_tensors++) {
    tsr_st_tensor_t t;
    tsr__st_tensor(f, i, &t);
    tsr_checkpoint_tensor_t *x = &l->tensors[i];
    x->ndims = t.ndims;
    for (int d = 0; d < t.ndims; d++)
      x->shape[d] = t.shape[d];
    ok = (x->name = strdup(t.name)) != NULL;
  }
  for (int k = 0; ok && k < nm; k++) {
    tsr_st_meta_t m = tsr__st_meta_at(f, k);
    if (strncmp(m.key, "crc32.", 6) == 0) continue;
    tsr_checkpoint_entry_t *e = &l->metadata[l->n_metadata++];
    e->key = strdup(m.key), e->value = strdup(m.value);
    ok = e->key && e->value;
  }
  tsr__st_close(&f);
  if (ok) return 0;
  tsr_checkpoint_listing_fini(l);
  return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory for its listing", path);
}

void tsr_checkpoint_listing_fini(tsr_checkpoint_listing_t *l) {
  for (int i = 0; l->tensors && i < l->n_tensors; i++)
    free((char *)l->tensors[i].name);
  for (int k = 0; l->metadata && k < l->n_metadata; k++)
    free((char *)l->metadata[k].key), free((char *)l->metadata[k].value);
  free(l->tensors), free(l->metadata);
  memset(l, 0, sizeof *l);
}
