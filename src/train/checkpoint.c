/* Checkpoints (tessera/checkpoint.h): the network's tensors and the
 * training state, through the safetensors reader and writer of src/io/. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <zlib.h>

#include "io/safetensors.h"
#include "nn/net_impl.h"
#include "tessera/checkpoint.h"

#define FORMAT "tessera-checkpoint/1"
#define MAX_META 64 /* keys besides the per-tensor checksums */

/* ---- names ---- */

static void param_name(const tsr_layer_t *l, int k, char *buf, size_t size) {
  snprintf(buf, size, "layers.%d.%s.%s", l->index - 1, l->ops->name, k == 0 ? "weight" : "bias");
}

/* ---- a growing list of tensors and metadata ---- */

typedef struct {
  tsr_st_tensor_t *t;
  float **owned; /* the copies of the tensors' data */
  char (*names)[128];
  int n, cap;
  tsr_st_meta_t *meta;
  char (*keys)[160], **values; /* values: owned, each of its own length */
  int nmeta, capmeta;
} bundle_t;

static int add_meta(bundle_t *b, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int add_meta(bundle_t *b, const char *key, const char *fmt, ...) {
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

/* Adds a copy of matrix t (read through the runtime) as tensor name, and its checksum. */
static int add_tensor(bundle_t *b, const char *name, const tsr_tiles_t *t) {
  if (b->n == b->cap) return TSR_ENOMEM;
  int64_t rows = tsr_tiles_rows(t), cols = tsr_tiles_cols(t);
  float *data = malloc(sizeof(float) * (size_t)(rows * cols));
  if (!data) return TSR_ENOMEM;
  int rc = tsr_tiles_read(t, data);
  if (rc) {
    free(data);
    return rc;
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
  char key[160];
  snprintf(key, sizeof key, "crc32.%s", name);
  b->n++;
  return add_meta(b, key, "%08lx", (unsigned long)crc);
}

static void bundle_fini(bundle_t *b) {
  for (int i = 0; i < b->n; i++)
    free(b->owned[i]);
  for (int i = 0; b->values && i < b->nmeta; i++)
    free(b->values[i]);
  free(b->t), free(b->owned), free(b->names), free(b->meta), free(b->keys), free(b->values);
}

static int bundle_init(bundle_t *b, int tensors) {
  *b = (bundle_t){.cap = tensors, .capmeta = MAX_META + tensors};
  b->t = calloc((size_t)b->cap, sizeof *b->t);
  b->owned = calloc((size_t)b->cap, sizeof *b->owned);
  b->names = calloc((size_t)b->cap, sizeof *b->names);
  b->meta = calloc((size_t)b->capmeta, sizeof *b->meta);
  b->keys = calloc((size_t)b->capmeta, sizeof *b->keys);
  b->values = calloc((size_t)b->capmeta, sizeof *b->values);
  return b->t && b->owned && b->names && b->meta && b->keys && b->values ? 0 : TSR_ENOMEM;
}

/* ---- saving ---- */

static int add_state_meta(bundle_t *b, const tsr_net_t *net, const tsr_checkpoint_info_t *in) {
  const tsr_optimizer_t *hp = &net->opts.opt;
  char model[256];
  tsr_model_describe(&net->spec, net->inputs, model, sizeof model);
  /* The model file as long as it takes (a graph's names and inputs). */
  char *ini = NULL;
  for (size_t size = 8192;; size *= 2) {
    char *more = realloc(ini, size);
    if (!more) {
      free(ini);
      return TSR_ENOMEM;
    }
    ini = more;
    if (tsr_model_to_ini(&net->spec, ini, size) == 0) break;
  }
  const tsr_layer_t *first = &net->layers[0];
  int rc = add_meta(b, "format", FORMAT);
  rc = rc ? rc : add_meta(b, "tessera_version", "%s", TSR_VERSION);
  rc = rc ? rc : add_meta(b, "model", "%s", model);
  rc = rc ? rc : add_meta(b, "model_ini", "%s", ini);
  free(ini);
  rc = rc ? rc : add_meta(b, "inputs", "%d", net->inputs);
  rc = rc ? rc : add_meta(b, "classes", "%d", net->classes);
  rc =
      rc ? rc : add_meta(b, "input_shape", "%d %d %d", first->geom.c, first->geom.h, first->geom.w);
  rc = rc ? rc : add_meta(b, "input_mean", "%.9g", (double)in->input_mean);
  rc = rc ? rc : add_meta(b, "input_std", "%.9g", (double)in->input_std);
  rc = rc ? rc : add_meta(b, "data", "%s", in->data);
  rc = rc ? rc : add_meta(b, "net_seed", "%" PRIu64, net->opts.seed);
  rc = rc ? rc : add_meta(b, "optimizer", "%s", tsr_optimizer_name(hp));
  rc = rc ? rc
          : add_meta(b, "optimizer_hyper",
                     "lr %.9g momentum %.9g weight_decay %.9g beta1 %.9g "
                     "beta2 %.9g eps %.9g",
                     (double)hp->lr, (double)hp->momentum, (double)hp->weight_decay,
                     (double)hp->beta1, (double)hp->beta2, (double)hp->eps);
  rc = rc ? rc : add_meta(b, "optimizer_steps", "%" PRId64, tsr__optim_steps(net->optim));
  rc = rc ? rc : add_meta(b, "epoch", "%d", in->epoch);
  rc = rc ? rc : add_meta(b, "step_in_epoch", "%" PRId64, in->step_in_epoch);
  rc = rc ? rc : add_meta(b, "epochs", "%d", in->epochs);
  rc = rc ? rc : add_meta(b, "seed", "%" PRIu64, in->seed);
  rc = rc ? rc
          : add_meta(b, "lr_schedule", "%s",
                     in->lr_schedule == TSR_LR_COSINE ? "cosine" : "constant");
  rc = rc ? rc : add_meta(b, "base_lr", "%.9g", (double)in->base_lr);
  rc = rc ? rc : add_meta(b, "sync", "%s", in->sync[0] ? in->sync : "none");
  rc = rc ? rc : add_meta(b, "ranks", "%d", in->ranks > 0 ? in->ranks : 1);
  char calls[1024] = "";
  int n = 0;
  for (int i = 0; i < net->n_layers && n < (int)sizeof calls - 32; i++)
    if (net->layers[i].calls)
      n += snprintf(calls + n, sizeof calls - (size_t)n, "%s%d:%" PRIu64, n ? " " : "",
                    net->layers[i].index - 1, net->layers[i].calls);
  rc = rc ? rc : add_meta(b, "dropout_calls", "%s", calls);
  return rc;
}

int tsr_checkpoint_save(const tsr_net_t *net, const tsr_checkpoint_info_t *info, const char *path,
                        tsr_errbuf_t *err) {
  int nstate = tsr__optim_nstate(net->optim), ntensors = tsr_net_n_params(net) * (1 + nstate);
  bundle_t b;
  int rc = bundle_init(&b, ntensors);
  for (int i = 0; i < net->n_layers && rc == 0; i++) {
    const tsr_layer_t *l = &net->layers[i];
    for (int k = 0; k < l->nparams && rc == 0; k++) {
      char name[96], state[128];
      param_name(l, k, name, sizeof name);
      rc = add_tensor(&b, name, l->params[k].w);
      for (int s = 0; s < nstate && rc == 0; s++) {
        snprintf(state, sizeof state, "optimizer.%s.%s", name,
                 tsr__optim_state_name(net->optim, s));
        rc = add_tensor(&b, state, tsr__optim_state(net->optim, l->params[k].index, s));
      }
    }
  }
  if (rc == 0) rc = add_state_meta(&b, net, info);
  if (rc == 0)
    rc = tsr__st_write(path, b.t, b.n, b.meta, b.nmeta, err);
  else
    tsr_error_set(err, rc, "%s: cannot gather the checkpoint: %s", path, tsr_strerror(rc));
  bundle_fini(&b);
  return rc;
}

/* ---- loading ---- */

static int meta_int(const tsr_st_file_t *f, const char *key, int64_t *v) {
  const char *s = tsr__st_meta(f, key);
  char *end;
  if (!s) return TSR_EFORMAT;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (end == s || *end || errno) return TSR_EFORMAT;
  *v = x;
  return 0;
}

static int meta_float(const tsr_st_file_t *f, const char *key, float *v) {
  const char *s = tsr__st_meta(f, key);
  char *end;
  if (!s) return TSR_EFORMAT;
  double x = strtod(s, &end);
  if (end == s || *end) return TSR_EFORMAT;
  *v = (float)x;
  return 0;
}

/* 0 when name (the file's "optimizer", may be NULL) is registered, filling *opt (may be NULL)
 * with its defaults; else a message naming it and the known ones. */
static int known_optimizer(const char *name, const char *path, tsr_optimizer_t *opt,
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

/* Opens path, checks that it is a tessera checkpoint and every tensor's checksum. */
static int open_checked(tsr_st_file_t **out, const char *path, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = tsr__st_open(&f, path, err);
  if (rc) return rc;
  const char *format = tsr__st_meta(f, "format");
  if (!format || strcmp(format, FORMAT) != 0) {
    /* The message first: format points into f. */
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: a safetensors file, but not a tessera checkpoint (format %s, want %s)",
                       path, format ? format : "missing", FORMAT);
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

static int read_info(const tsr_st_file_t *f, const char *path, tsr_checkpoint_info_t *info,
                     tsr_errbuf_t *err) {
  memset(info, 0, sizeof *info);
  int64_t epoch, step, epochs, seed, ranks;
  int rc = meta_int(f, "epoch", &epoch) || meta_int(f, "step_in_epoch", &step) ||
                   meta_int(f, "epochs", &epochs) || meta_int(f, "seed", &seed) ||
                   meta_int(f, "ranks", &ranks) || meta_float(f, "base_lr", &info->base_lr) ||
                   meta_float(f, "input_mean", &info->input_mean) ||
                   meta_float(f, "input_std", &info->input_std)
               ? TSR_EFORMAT
               : 0;
  const char *sched = tsr__st_meta(f, "lr_schedule");
  if (rc || !sched)
    return tsr_error_set(err, TSR_EFORMAT, "%s: the training state in the metadata is incomplete",
                         path);
  info->epoch = (int)epoch, info->step_in_epoch = step, info->epochs = (int)epochs;
  info->seed = (uint64_t)seed, info->ranks = (int)ranks;
  info->lr_schedule = strcmp(sched, "cosine") == 0 ? TSR_LR_COSINE : TSR_LR_CONSTANT;
  const char *s;
  if ((s = tsr__st_meta(f, "sync"))) snprintf(info->sync, sizeof info->sync, "%s", s);
  if ((s = tsr__st_meta(f, "model"))) snprintf(info->model, sizeof info->model, "%s", s);
  if ((s = tsr__st_meta(f, "data"))) snprintf(info->data, sizeof info->data, "%s", s);
  if ((s = tsr__st_meta(f, "tessera_version")))
    snprintf(info->version, sizeof info->version, "%s", s);
  return 0;
}

/* Copies tensor name of f into matrix t, whose shape it must have. */
static int load_tensor(const tsr_st_file_t *f, const char *path, const char *name, tsr_tiles_t *t,
                       tsr_errbuf_t *err) {
  int i = tsr__st_find(f, name);
  if (i < 0) return tsr_error_set(err, TSR_EFORMAT, "%s: no tensor %s", path, name);
  tsr_st_tensor_t x;
  tsr__st_tensor(f, i, &x);
  bool vector = tsr_tiles_rows(t) == 1;
  bool fits =
      vector ? x.ndims == 1 && x.shape[0] == tsr_tiles_cols(t)
             : x.ndims == 2 && x.shape[0] == tsr_tiles_rows(t) && x.shape[1] == tsr_tiles_cols(t);
  if (!fits) {
    char want[64];
    if (vector)
      snprintf(want, sizeof want, "[%lld]", (long long)tsr_tiles_cols(t));
    else
      snprintf(want, sizeof want, "[%lld, %lld]", (long long)tsr_tiles_rows(t),
               (long long)tsr_tiles_cols(t));
    return tsr_error_set(err, TSR_EFORMAT, "%s: tensor %s is not of shape %s", path, name, want);
  }
  int rc = tsr_tiles_write(t, x.data);
  return rc ? tsr_error_set(err, rc, "%s: cannot set %s: %s", path, name, tsr_strerror(rc)) : 0;
}

int tsr_checkpoint_load(tsr_net_t *net, const char *path, const char *data,
                        tsr_checkpoint_info_t *info, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = open_checked(&f, path, err);
  if (rc) return rc;
  tsr_checkpoint_info_t got;
  rc = read_info(f, path, &got, err);
  char model[256];
  tsr_model_describe(&net->spec, net->inputs, model, sizeof model);
  const char *opt = tsr__st_meta(f, "optimizer");
  if (rc == 0 && strcmp(got.model, model) != 0)
    rc = tsr_error_set(err, TSR_EINVAL,
                       "%s was written for model %s; this run builds %s (give the same --model)",
                       path, got.model, model);
  const char *mine = tsr_optimizer_name(&net->opts.opt);
  if (rc == 0) rc = known_optimizer(opt, path, NULL, err);
  if (rc == 0 && strcmp(opt, mine) != 0)
    rc = tsr_error_set(err, TSR_EINVAL,
                       "%s holds %s's state; this run uses %s (give the same optimizer: "
                       "--optimizer %s)",
                       path, opt, mine, opt);
  if (rc == 0 && data && data[0] && strcmp(got.data, data) != 0)
    rc = tsr_error_set(err, TSR_EINVAL,
                       "%s was trained on data %s; this run has %s (give the same --data and "
                       "limits)",
                       path, got.data, data);
  int nstate = tsr__optim_nstate(net->optim);
  for (int i = 0; i < net->n_layers && rc == 0; i++) {
    tsr_layer_t *l = &net->layers[i];
    for (int k = 0; k < l->nparams && rc == 0; k++) {
      char name[96], state[160];
      param_name(l, k, name, sizeof name);
      rc = load_tensor(f, path, name, l->params[k].w, err);
      for (int s = 0; s < nstate && rc == 0; s++) {
        snprintf(state, sizeof state, "optimizer.%s.%s", name,
                 tsr__optim_state_name(net->optim, s));
        rc = load_tensor(f, path, state, tsr__optim_state(net->optim, l->params[k].index, s), err);
      }
    }
  }
  int64_t steps = 0;
  if (rc == 0 && meta_int(f, "optimizer_steps", &steps))
    rc = tsr_error_set(err, TSR_EFORMAT, "%s: no optimizer step count", path);
  if (rc == 0) tsr__optim_set_steps(net->optim, steps);
  /* Dropout masks depend on each dropout layer's training passes so far. */
  const char *calls = tsr__st_meta(f, "dropout_calls");
  for (const char *p = calls; rc == 0 && p && *p;) {
    int index, used;
    unsigned long long n;
    if (sscanf(p, "%d:%llu%n", &index, &n, &used) != 2) break;
    for (int i = 0; i < net->n_layers; i++)
      if (net->layers[i].index - 1 == index) net->layers[i].calls = n;
    p += used;
    while (*p == ' ')
      p++;
  }
  tsr__st_close(&f);
  if (rc == 0 && info) *info = got;
  return rc;
}

int tsr_checkpoint_read(const char *path, tsr_checkpoint_info_t *info, tsr_model_spec_t *spec,
                        tsr_net_opts_t *opts, int *inputs, int *classes, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = open_checked(&f, path, err);
  if (rc) return rc;
  tsr_checkpoint_info_t got;
  rc = read_info(f, path, &got, err);
  int64_t in = 0, cls = 0, seed = 0;
  if (rc == 0 && (meta_int(f, "inputs", &in) || meta_int(f, "classes", &cls) ||
                  meta_int(f, "net_seed", &seed)))
    rc = tsr_error_set(err, TSR_EFORMAT, "%s: no inputs, classes or seed in the metadata", path);
  tsr_model_spec_t s;
  tsr_model_spec_init(&s);
  const char *ini = tsr__st_meta(f, "model_ini");
  if (rc == 0 && !ini) rc = tsr_error_set(err, TSR_EFORMAT, "%s: no model in the metadata", path);
  if (rc == 0) rc = tsr_model_parse_ini_text(&s, ini, path, err);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  const char *opt = tsr__st_meta(f, "optimizer"), *hyper = tsr__st_meta(f, "optimizer_hyper");
  const char *shape = tsr__st_meta(f, "input_shape");
  if (rc == 0) rc = known_optimizer(opt, path, &o.opt, err);
  if (rc == 0 &&
      (!hyper || !shape ||
       sscanf(hyper, "lr %f momentum %f weight_decay %f beta1 %f beta2 %f eps %f", &o.opt.lr,
              &o.opt.momentum, &o.opt.weight_decay, &o.opt.beta1, &o.opt.beta2, &o.opt.eps) != 6 ||
       sscanf(shape, "%d %d %d", &o.in_channels, &o.in_height, &o.in_width) != 3))
    rc = tsr_error_set(err, TSR_EFORMAT, "%s: no optimizer or input shape in the metadata", path);
  o.seed = (uint64_t)seed;
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

int tsr_checkpoint_print(FILE *out, const char *path, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = open_checked(&f, path, err);
  if (rc) return rc;
  fprintf(out, "%s: %d tensors\n", path, tsr__st_count(f));
  for (int i = 0; i < tsr__st_count(f); i++) {
    tsr_st_tensor_t t;
    tsr__st_tensor(f, i, &t);
    fprintf(out, "  %-52s F32 [", t.name);
    for (int d = 0; d < t.ndims; d++)
      fprintf(out, "%s%lld", d ? ", " : "", (long long)t.shape[d]);
    fprintf(out, "]\n");
  }
  fprintf(out, "metadata:\n");
  for (int k = 0; k < tsr__st_nmeta(f); k++) {
    tsr_st_meta_t m = tsr__st_meta_at(f, k);
    if (strncmp(m.key, "crc32.", 6) == 0) continue;
    if (strchr(m.value, '\n')) {
      fprintf(out, "  %s:\n    ", m.key);
      for (const char *c = m.value; *c; c++)
        fputs(*c == '\n' && c[1] ? "\n    " : (char[2]){*c, 0}, out);
      fputc('\n', out);
    } else {
      fprintf(out, "  %-16s %s\n", m.key, m.value);
    }
  }
  tsr__st_close(&f);
  return 0;
}

int tsr_checkpoint_print_json(FILE *out, const char *path, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = open_checked(&f, path, err);
  if (rc) return rc;
  cJSON *o = cJSON_CreateObject();
  cJSON *ts =
      o && cJSON_AddStringToObject(o, "file", path) ? cJSON_AddArrayToObject(o, "tensors") : NULL;
  double params = 0;
  for (int i = 0; ts && i < tsr__st_count(f); i++) {
    tsr_st_tensor_t t;
    tsr__st_tensor(f, i, &t);
    cJSON *x = cJSON_CreateObject(), *shape = x ? cJSON_AddArrayToObject(x, "shape") : NULL;
    if (!shape) break;
    double n = 1;
    for (int d = 0; d < t.ndims; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t.shape[d])), n *= (double)t.shape[d];
    params += n;
    cJSON_AddItemToObject(x, "name", cJSON_CreateString(t.name));
    cJSON_AddItemToObject(x, "dtype", cJSON_CreateString("F32"));
    cJSON_AddItemToArray(ts, x);
  }
  cJSON *meta = o ? cJSON_AddObjectToObject(o, "metadata") : NULL;
  for (int k = 0; meta && k < tsr__st_nmeta(f); k++) {
    tsr_st_meta_t m = tsr__st_meta_at(f, k);
    if (strncmp(m.key, "crc32.", 6) != 0) cJSON_AddStringToObject(meta, m.key, m.value);
  }
  tsr__st_close(&f);
  char *text = NULL;
  if (meta && cJSON_AddNumberToObject(o, "parameters", params)) text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!text) return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory for the JSON", path);
  fprintf(out, "%s\n", text);
  cJSON_free(text);
  return 0;
}
