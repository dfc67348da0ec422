/* Checkpoints (tessera/checkpoint.h): the network's tensors and the
 * training state, through the safetensors reader and writer of src/io/. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <zlib.h>

#include "io/safetensors.h"
#include "nn/layers.h"
#include "nn/net_impl.h"
#include "tessera/checkpoint.h"
#include "tessera/dist.h"
#include "tessera/train.h"
#include "train/checkpoint_run.h"
#include "try.h"

#define FORMAT "tessera-checkpoint/1"
#define MAX_META 72 /* keys besides the per-tensor checksums */

/* ---- names ---- */

static void param_name(const tsr_layer_t *l, int k, char *buf, size_t size) {
  const char *const *names = l->lay->type->param_names;
  const char *name = names ? names[k] : k == 0 ? "weight" : "bias";
  snprintf(buf, size, "layers.%d.%s.%s", l->index - 1, l->ops->name, name);
}

/* A layer's non-trained state by its type's (PyTorch's) names: buffer k, or the counter (k ==
 * l->nbuffers), layers.<i>.<type>.<name>. */
static void state_name(const tsr_layer_t *l, int k, char *buf, size_t size) {
  const tsr_layer_type_t *t = l->lay->type;
  snprintf(buf, size, "layers.%d.%s.%s", l->index - 1, l->ops->name,
           k < l->nbuffers ? t->buffer_names[k] : t->counter_name);
}

/* Tensors of l's non-trained state: its buffers, and its counter if its type has one. */
static int state_count(const tsr_layer_t *l) {
  return l->nbuffers + (l->lay->type->counter_name ? 1 : 0);
}

/* ---- a growing list of tensors and metadata ---- */

typedef struct {
  tsr_st_tensor_t *t;
  float **owned; /* the copies of the tensors' data */
  char (*names)[160];
  int n, cap;
  tsr_st_meta_t *meta;
  char (*keys)[176], **values; /* values: owned, each of its own length */
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

/* Adds data ((rows, cols), taken) as tensor name, and its checksum. */
static int add_data(bundle_t *b, const char *name, int64_t rows, int64_t cols, float *data) {
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
  return add_meta(b, key, "%08lx", (unsigned long)crc);
}

/* Adds v as a scalar tensor name (shape [], as PyTorch stores a counter), and its checksum;
 * exact below 2^24. */
static int add_scalar(bundle_t *b, const char *name, double v) {
  float *data = malloc(sizeof *data);
  if (!data) return TSR_ENOMEM;
  *data = (float)v;
  int n = b->n, rc = add_data(b, name, 1, 1, data);
  if (rc == 0) b->t[n].ndims = 0;
  return rc;
}

/* Adds a copy of matrix t (read through the runtime) as tensor name, and its checksum. */
static int add_tensor(bundle_t *b, const char *name, const tsr_tiles_t *t) {
  int64_t rows = tsr_tiles_rows(t), cols = tsr_tiles_cols(t);
  float *data = malloc(sizeof(float) * (size_t)(rows * cols));
  if (!data) return TSR_ENOMEM;
  int rc = tsr_tiles_read(t, data);
  if (rc) {
    free(data);
    return rc;
  }
  return add_data(b, name, rows, cols, data);
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

/* ---- the inputs' standardization (CSV columns: issue 21) ---- */

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
static int add_validation(bundle_t *b, const tsr_checkpoint_info_t *in) {
  int rc = in->lr.warmup > 0 ? add_meta(b, "lr_warmup", "%d", in->lr.warmup) : 0;
  if (rc == 0 && in->early_stop > 0) rc = add_meta(b, "early_stop", "%d", in->early_stop);
  if (rc == 0 && in->val_split > 0) rc = add_meta(b, "val_split", "%.17g", in->val_split);
  if (rc == 0 && in->val_split > 0) rc = add_meta(b, "val_samples", "%" PRId64, in->val_samples);
  if (rc == 0 && in->val_split > 0) rc = add_meta(b, "val_data", "%s", in->val_data);
  if (rc == 0 && in->val_split > 0) rc = add_meta(b, "val_from", "%" PRId64, in->val_from);
  const tsr_schedule_state_t *z = &in->schedule_state;
  if (rc == 0 && in->has_schedule_state)
    rc = add_meta(b, "schedule_state",
                  "lr_factor %.17g plateau_best %.17g plateau_bad %d early_best %.17g "
                  "early_best_epoch %d early_bad %d",
                  z->lr_factor, z->plateau_best, z->plateau_bad, z->early_best, z->early_best_epoch,
                  z->early_bad);
  return rc;
}

/* input_mean and input_std: in's scalar, or the standardization's numbers (one per column);
 * a standardization of none writes 0 and 1, which read as none by a tessera of before. */
static int add_input_stats(bundle_t *b, const tsr_checkpoint_info_t *in) {
  const tsr_standardization_t *z = in->standardization;
  if (!z || z->kind == TSR_STANDARDIZE_SCALAR) {
    float mean = z ? z->mean[0] : in->input_mean, std = z ? z->std[0] : in->input_std;
    int rc = add_meta(b, "input_mean", "%.9g", (double)mean);
    return rc ? rc : add_meta(b, "input_std", "%.9g", (double)std);
  }
  if (z->n == 0) {
    int rc = add_meta(b, "input_mean", "0");
    return rc ? rc : add_meta(b, "input_std", "1");
  }
  char *mean = floats_text(z->mean, z->n), *std = floats_text(z->std, z->n);
  int rc = mean && std ? add_meta(b, "input_mean", "%s", mean) : TSR_ENOMEM;
  rc = rc ? rc : add_meta(b, "input_std", "%s", std);
  free(mean), free(std);
  return rc;
}

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
  rc = rc ? rc : add_input_stats(b, in);
  rc = rc ? rc : add_meta(b, "data", "%s", in->data);
  rc = rc ? rc : add_meta(b, "net_seed", "%" PRIu64, net->opts.seed);
  rc = rc ? rc : add_meta(b, "init", "%s", tsr_init_name(net->opts.init));
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
  char sched[256];
  tsr_lr_schedule_describe(in->lr_schedule, &in->lr, sched, sizeof sched);
  rc = rc ? rc : add_meta(b, "lr_schedule", "%s", sched);
  rc = rc ? rc : add_meta(b, "base_lr", "%.9g", (double)in->base_lr);
  rc = rc ? rc : add_meta(b, "sync", "%s", in->sync[0] ? in->sync : "none");
  rc = rc ? rc : add_meta(b, "ranks", "%d", in->ranks > 0 ? in->ranks : 1);
  rc = rc ? rc : add_validation(b, in);
  char calls[1024] = "";
  int n = 0;
  for (int i = 0; i < net->n_layers && n < (int)sizeof calls - 32; i++)
    if (net->layers[i].calls)
      n += snprintf(calls + n, sizeof calls - (size_t)n, "%s%d:%" PRIu64, n ? " " : "",
                    net->layers[i].index - 1, net->layers[i].calls);
  rc = rc ? rc : add_meta(b, "dropout_calls", "%s", calls);
  /* Only when augmenting: a checkpoint without reads as every one of before. */
  char augment[64];
  tsr__net_augment_describe(net, augment, sizeof augment);
  if (rc == 0 && strcmp(augment, "none") != 0) rc = add_meta(b, "augment", "%s", augment);
  const tsr_standardization_t *z = in->standardization;
  /* Last, and only when not scalar: a scalar checkpoint reads as every one of before. */
  if (rc == 0 && z && z->kind != TSR_STANDARDIZE_SCALAR)
    rc = add_meta(b, "input_standardize", "%s", tsr_standardize_name(z->kind));
  return rc;
}

/* The prefix of replica q's optimizer state in a file whose states are per replica: ranks
 * without a grid, grid columns under one (optimizer.rank<q>. or optimizer.column<q>.). */
static void replica_prefix(char *buf, size_t size, bool columns, int q) {
  snprintf(buf, size, "optimizer.%s%d.", columns ? "column" : "rank", q);
}

/* Under MPI with weight averaging every replica's optimizer state is its own: state s of
 * parameter name, matrix t (a grid column's spread over its pr ranks), gathered to rank 0 as
 * <prefix of q><name>.<s> for replicas q >= 1 (replica 0's is the plain optimizer.<name>.<s>).
 * Collective, its result the same on every rank; b is rank 0's (NULL elsewhere), *added its
 * own result there. */
static int gather_state(bundle_t *b, const char *name, const char *state, const tsr_tiles_t *t,
                        int pr, int *added) {
  int replicas = tsr_dist_size() / pr;
  int64_t rows = tsr_tiles_rows(t), cols = tsr_tiles_cols(t), count = rows * cols;
  float *every = b ? malloc(sizeof(float) * (size_t)(count * replicas)) : NULL;
  int rc = tsr_dist_any(b && !every) ? TSR_ENOMEM : tsr_tiles_gather_copies(t, pr, every);
  for (int q = 1; rc == 0 && b && q < replicas && *added == 0; q++) {
    char full[192];
    replica_prefix(full, sizeof full, pr > 1, q);
    snprintf(full + strlen(full), sizeof full - strlen(full), "%s.%s", name, state);
    float *copy = malloc(sizeof(float) * (size_t)count);
    if (copy) memcpy(copy, every + q * count, sizeof(float) * (size_t)count);
    *added = copy ? add_data(b, full, rows, cols, copy) : TSR_ENOMEM;
  }
  free(every);
  return rc;
}

/* The outer momentum of parameter index, gathered from its homes to rank 0 as
 * outer.<name>.momentum: as gather_state. */
static int gather_outer(bundle_t *b, tsr_replicas_t *rep, const char *name, const tsr_tiles_t *w,
                        int index, int *added) {
  int64_t rows = tsr_tiles_rows(w), cols = tsr_tiles_cols(w);
  float *all = tsr_dist_rank() == 0 ? malloc(sizeof(float) * (size_t)(rows * cols)) : NULL;
  int rc = tsr_dist_any(tsr_dist_rank() == 0 && !all) ? TSR_ENOMEM : 0;
  if (rc == 0) rc = tsr__replicas_outer(rep, index, all, NULL);
  rc = tsr_dist_any(rc != 0) ? (rc ? rc : TSR_ERUNTIME) : 0;
  char full[160];
  snprintf(full, sizeof full, "outer.%s.momentum", name);
  if (rc == 0 && b && *added == 0) {
    *added = add_data(b, full, rows, cols, all);
    all = NULL;
  }
  free(all);
  return rc;
}

/* What the replicas hold beyond the net, in the metadata (rank 0's b), under MPI only (a file
 * of one process is as it was): how the optimizer state is kept (per replica: each rank's, or
 * under a grid of pr rows each column's), the outer momentum, the switch of post-local, each
 * replica's step count (steps: every rank's; a column's ranks count alike). */
static int add_replicas_meta(bundle_t *b, bool per_replica, int pr, bool outer,
                             const tsr__replicas_saved_t *saved, const int64_t *steps) {
  const char *kept = !per_replica ? "shared" : pr > 1 ? "per-column" : "per-rank";
  int rc = add_meta(b, "optimizer_state", "%s", kept);
  if (rc == 0 && outer) rc = add_meta(b, "outer_state", "momentum");
  if (rc == 0 && saved->final_extra) rc = add_meta(b, "final_average", "1");
  if (rc == 0 && saved->local) rc = add_meta(b, "local_since", "%" PRId64, saved->local_since);
  char text[1024] = "";
  int n = 0;
  for (int q = 0; per_replica && q < tsr_dist_size() / pr && n < (int)sizeof text - 24; q++)
    n += snprintf(text + n, sizeof text - (size_t)n, "%s%" PRId64, q ? " " : "", steps[q * pr]);
  if (rc == 0 && per_replica)
    rc = add_meta(b, pr > 1 ? "optimizer_steps_columns" : "optimizer_steps_ranks", "%s", text);
  return rc;
}

/* Adds matrix t as tensor name on the writer (b; NULL elsewhere). Collective (every rank
 * calls it for every tensor, in the same order): a grid column's spread matrix is gathered
 * from the ranks that own its tiles (column 0's: every column holds the same weights where a
 * checkpoint is written), another read on the writer. Returns the gathering's result, the
 * same on every rank; the writer's own (out of room in b) in *added. */
static int add_gathered(bundle_t *b, const char *name, const tsr_tiles_t *t, int *added) {
  int64_t rows = tsr_tiles_rows(t), cols = tsr_tiles_cols(t);
  float *data = b && *added == 0 ? malloc(sizeof(float) * (size_t)(rows * cols)) : NULL;
  int rc = tsr_tiles_gather(t, data);
  if (rc == 0 && data)
    *added = add_data(b, name, rows, cols, data);
  else
    free(data);
  return rc;
}

/* The tensors, in the order every rank takes part in: each layer's parameters with their
 * optimizer state (every replica's under local SGD: each rank's, or each grid column's of pr
 * ranks), the outer momentum, then its buffers (rank 0's: under --sync batch each replica's
 * own, as DDP saves rank 0's). b is the writer's (NULL elsewhere), its own result in *rc; the
 * collectives' result returned, the same everywhere. */
static int add_tensors(bundle_t *b, const tsr_net_t *net, tsr_replicas_t *rep, bool collective,
                       bool per_replica, bool outer, int *rc) {
  int pr = tsr_net_grid_rows(net);
  int nstate = tsr__optim_nstate(net->optim), crc = 0;
  for (int i = 0; i < net->n_layers && crc == 0; i++) {
    const tsr_layer_t *l = &net->layers[i];
    for (int k = 0; k < l->nparams && crc == 0; k++) {
      char name[96], state[128];
      param_name(l, k, name, sizeof name);
      if (collective)
        crc = add_gathered(b, name, l->params[k].w, rc);
      else if (*rc == 0)
        *rc = add_tensor(b, name, l->params[k].w);
      for (int s = 0; s < nstate && crc == 0; s++) {
        const tsr_tiles_t *t = tsr__optim_state(net->optim, l->params[k].index, s);
        const char *sname = tsr__optim_state_name(net->optim, s);
        snprintf(state, sizeof state, "optimizer.%s.%s", name, sname);
        if (collective)
          crc = add_gathered(b, state, t, rc);
        else if (*rc == 0)
          *rc = add_tensor(b, state, t);
        if (per_replica && crc == 0) crc = gather_state(b, name, sname, t, pr, rc);
      }
      if (outer && crc == 0)
        crc = gather_outer(b, rep, name, l->params[k].w, l->params[k].index, rc);
    }
    for (int k = 0; k < state_count(l) && crc == 0; k++) {
      char name[96];
      state_name(l, k, name, sizeof name);
      if (k == l->nbuffers) {
        if (b && *rc == 0) *rc = add_scalar(b, name, (double)l->batches_tracked);
      } else if (collective) {
        crc = add_gathered(b, name, l->buffers[k], rc);
      } else if (*rc == 0) {
        *rc = add_tensor(b, name, l->buffers[k]);
      }
    }
  }
  return crc;
}

int tsr__checkpoint_save_run(const tsr_net_t *net, tsr_replicas_t *rep,
                             const tsr__replicas_saved_t *saved, const tsr_checkpoint_info_t *info,
                             const char *path, tsr_errbuf_t *err) {
  /* Under MPI (replicas, or a grid's spread tiles) every rank takes part, rank 0 writing. */
  int pr = tsr_net_grid_rows(net);
  bool collective = rep || (pr > 1 && tsr_dist_active());
  bool writer = !collective || tsr_dist_rank() == 0;
  int ranks = collective ? tsr_dist_size() : 1, replicas = ranks / pr;
  int nstate = tsr__optim_nstate(net->optim);
  /* Local SGD: each replica's optimizer state is its own (batch shares it before this). */
  bool per_replica = rep && replicas > 1 && nstate > 0 && saved->per_replica;
  bool outer = rep && saved->outer;
  int ntensors =
      tsr_net_n_params(net) * (1 + nstate * (per_replica ? replicas : 1) + (outer ? 1 : 0));
  for (int i = 0; i < net->n_layers; i++)
    ntensors += state_count(&net->layers[i]);
  bundle_t b = {0};
  /* rc: the writer's own; crc: the collectives', the same on every rank. */
  int rc = writer ? bundle_init(&b, ntensors) : 0, crc = 0;
  int64_t steps[TSR_MAX_RANKS] = {0}, mine = tsr__optim_steps(net->optim);
  if (per_replica && ranks <= TSR_MAX_RANKS) crc = tsr_dist_gather(&mine, (int)sizeof mine, steps);
  if (crc == 0)
    crc = add_tensors(writer ? &b : NULL, net, rep, collective, per_replica, outer, &rc);
  rc = rc ? rc : crc;
  if (writer && rc == 0) rc = add_state_meta(&b, net, info);
  if (writer && rc == 0 && pr > 1) rc = add_meta(&b, "grid", "%dx%d", pr, replicas);
  if (writer && rc == 0 && rep) rc = add_replicas_meta(&b, per_replica, pr, outer, saved, steps);
  if (writer && rc == 0)
    rc = tsr__st_write(path, b.t, b.n, b.meta, b.nmeta, err);
  else if (rc)
    tsr_error_set(err, rc, "%s: cannot gather the checkpoint: %s", path, tsr_strerror(rc));
  if (writer) bundle_fini(&b);
  return rc;
}

int tsr_checkpoint_save(const tsr_net_t *net, const tsr_checkpoint_info_t *info, const char *path,
                        tsr_errbuf_t *err) {
  return tsr__checkpoint_save_run(net, NULL, NULL, info, path, err);
}

/* ---- loading ---- */

/* ---- numbers of the metadata, each range-checked before any cast ----
 *
 * A number out of range (1e300 for an int, inf, nan, a float's subnormal) is refused with the
 * key that holds it, rather than cast into undefined behaviour or a wrong value. */

/* The whole number at *s (moved past it) in [lo, hi]. */
static int whole_at(const char **s, const char *path, const char *key, int64_t lo, int64_t hi,
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

/* The end of a value read: nothing after the number. */
static int at_end(const char *s, const char *path, const char *key, tsr_errbuf_t *err) {
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
  return at_end(p, path, key, err);
}

static int meta_int(const tsr_st_file_t *f, const char *path, const char *key, int64_t lo,
                    int64_t hi, int64_t *v, tsr_errbuf_t *err) {
  const char *s;
  TSR_TRY(meta_text(f, path, key, &s, err));
  TSR_TRY(whole_at(&s, path, key, lo, hi, v, err));
  return at_end(s, path, key, err);
}

static int meta_float(const tsr_st_file_t *f, const char *path, const char *key, float *v,
                      tsr_errbuf_t *err) {
  const char *s;
  TSR_TRY(meta_text(f, path, key, &s, err));
  TSR_TRY(real_at(&s, path, key, v, err));
  return at_end(s, path, key, err);
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
  int rc = open_checked(&f, path, err);
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
  if (rc == 0 && k == TSR_STANDARDIZE_COLUMN) rc = meta_int(f, path, "inputs", 1, INT_MAX, &n, err);
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
    TSR_TRY(meta_int(f, path, "lr_warmup", 1, INT_MAX, &v, err));
    info->lr.warmup = (int)v;
  }
  if (tsr__st_meta(f, "early_stop")) {
    TSR_TRY(meta_int(f, path, "early_stop", 1, INT_MAX, &v, err));
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
    TSR_TRY(meta_int(f, path, "val_samples", 1, INT64_MAX, &info->val_samples, err));
    TSR_TRY(meta_int(f, path, "val_from", info->val_samples + 1, INT64_MAX, &info->val_from, err));
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

static int read_info(const tsr_st_file_t *f, const char *path, tsr_checkpoint_info_t *info,
                     tsr_errbuf_t *err) {
  memset(info, 0, sizeof *info);
  int64_t epoch = 0, step = 0, epochs = 0, ranks = 0;
  int rc = meta_int(f, path, "epoch", 0, INT_MAX, &epoch, err);
  if (rc == 0) rc = meta_int(f, path, "step_in_epoch", 0, INT64_MAX, &step, err);
  if (rc == 0) rc = meta_int(f, path, "epochs", 0, INT_MAX, &epochs, err);
  if (rc == 0) rc = meta_seed(f, path, "seed", &info->seed, err);
  if (rc == 0) rc = meta_int(f, path, "ranks", 1, TSR_MAX_RANKS, &ranks, err);
  if (rc == 0) rc = meta_float(f, path, "base_lr", &info->base_lr, err);
  if (rc == 0) rc = read_input_stats(f, path, info, err);
  const char *sched = NULL;
  if (rc == 0) rc = meta_text(f, path, "lr_schedule", &sched, err);
  if (rc) return rc;
  info->epoch = (int)epoch, info->step_in_epoch = step, info->epochs = (int)epochs;
  info->ranks = (int)ranks;
  TSR_TRY(read_validation(f, path, sched, info, err));
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
  if ((s = tsr__st_meta(f, "model"))) snprintf(info->model, sizeof info->model, "%s", s);
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
  /* A grid column's spread matrix keeps this rank's tiles; a local one takes every tile. */
  int rc = tsr_tiles_write_owned(t, x.data);
  return rc ? tsr_error_set(err, rc, "%s: cannot set %s: %s", path, name, tsr_strerror(rc)) : 0;
}

/* The tensor name of f into the (rows, cols) row-major buffer *data (borrowed from f), after
 * checking its size. */
static int find_sized(const tsr_st_file_t *f, const char *path, const char *name, int64_t count,
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

/* *n = the scalar tensor name of f: a whole number in [0, 2^24] (what a float holds exactly). */
static int load_counter(const tsr_st_file_t *f, const char *path, const char *name, int64_t *n,
                        tsr_errbuf_t *err) {
  const float *data = NULL;
  TSR_TRY(find_sized(f, path, name, 1, &data, err));
  double v = (double)data[0];
  if (!(v >= 0.0 && v <= 16777216.0) || v != floor(v))
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: tensor %s is not one whole number in [0, 2^24] (a batch count)", path,
                         name);
  *n = (int64_t)v;
  return 0;
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
    for (int k = 0; k < state_count(l) && rc == 0; k++) {
      char name[96];
      state_name(l, k, name, sizeof name);
      rc = k < l->nbuffers ? load_tensor(f, path, name, l->buffers[k], err)
                           : load_counter(f, path, name, &l->batches_tracked, err);
    }
  }
  int64_t steps = 0;
  if (rc == 0) rc = meta_int(f, path, "optimizer_steps", 0, INT64_MAX, &steps, err);
  if (rc == 0) tsr__optim_set_steps(net->optim, steps);
  /* Dropout masks depend on each dropout layer's training passes so far: "index:calls ...". */
  const char *p = tsr__st_meta(f, "dropout_calls");
  while (rc == 0 && p && *p) {
    int64_t index = 0, n = 0;
    rc = whole_at(&p, path, "dropout_calls", 0, INT_MAX, &index, err);
    if (rc == 0 && *p++ != ':') rc = at_end(p - 1, path, "dropout_calls", err);
    if (rc == 0) rc = whole_at(&p, path, "dropout_calls", 0, INT64_MAX, &n, err);
    for (int i = 0; rc == 0 && i < net->n_layers; i++)
      if (net->layers[i].index - 1 == index) net->layers[i].calls = (uint64_t)n;
    while (rc == 0 && *p == ' ')
      p++;
  }
  tsr__st_close(&f);
  if (rc == 0 && info) *info = got;
  return rc;
}

/* Replica q's (q >= 1: this rank's, or its grid column's) optimizer state and step count, from
 * a file of every replica's (each rank's, or each grid column's where columns). */
static int restore_own_state(tsr_net_t *net, const tsr_st_file_t *f, const char *path, int q,
                             bool columns, tsr_errbuf_t *err) {
  int rc = 0, nstate = tsr__optim_nstate(net->optim);
  for (int i = 0; i < net->n_layers && rc == 0; i++) {
    tsr_layer_t *l = &net->layers[i];
    for (int k = 0; k < l->nparams && rc == 0; k++) {
      char name[96], state[192];
      param_name(l, k, name, sizeof name);
      for (int s = 0; s < nstate && rc == 0; s++) {
        replica_prefix(state, sizeof state, columns, q);
        snprintf(state + strlen(state), sizeof state - strlen(state), "%s.%s", name,
                 tsr__optim_state_name(net->optim, s));
        rc = load_tensor(f, path, state, tsr__optim_state(net->optim, l->params[k].index, s), err);
      }
    }
    for (int k = 0; k < state_count(l) && rc == 0; k++) {
      char name[96];
      state_name(l, k, name, sizeof name);
      rc = k < l->nbuffers ? load_tensor(f, path, name, l->buffers[k], err)
                           : load_counter(f, path, name, &l->batches_tracked, err);
    }
  }
  const char *key = columns ? "optimizer_steps_columns" : "optimizer_steps_ranks";
  const char *steps = tsr__st_meta(f, key);
  int64_t v = 0;
  for (int r = 0; rc == 0 && steps && r <= q; r++)
    rc = whole_at(&steps, path, key, 0, INT64_MAX, &v, err);
  if (rc == 0 && steps) tsr__optim_set_steps(net->optim, v);
  return rc;
}

int tsr__checkpoint_restore_run(tsr_net_t *net, tsr_replicas_t *rep, const char *path,
                                const char *sync, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = open_checked(&f, path, err);
  if (rc) return rc;
  tsr_checkpoint_info_t got;
  rc = read_info(f, path, &got, err);
  /* The states are the replicas' (ranks, or grid columns), taken over one by one by a run of
   * as many replicas, whichever they are: replica q is this rank, or its grid column. */
  int pr = tsr_net_grid_rows(net), q = tsr_dist_rank() / pr;
  if (rc == 0 && got.state_ranks > 1 && got.state_ranks == tsr_dist_size() / pr && q > 0)
    rc = restore_own_state(net, f, path, q, got.state_columns, err);
  tsr__replicas_saved_t now;
  if (rc == 0) rc = tsr__replicas_checkpoint(rep, false, &now);
  for (int i = 0; rc == 0 && got.outer_momentum && now.outer && i < net->n_layers; i++) {
    tsr_layer_t *l = &net->layers[i];
    for (int k = 0; k < l->nparams && rc == 0; k++) {
      char name[96], full[160];
      param_name(l, k, name, sizeof name);
      snprintf(full, sizeof full, "outer.%s.momentum", name);
      const float *data = NULL;
      rc = find_sized(f, path, full,
                      tsr_tiles_rows(l->params[k].w) * tsr_tiles_cols(l->params[k].w), &data, err);
      if (rc == 0 && (rc = tsr__replicas_outer(rep, l->params[k].index, NULL, data)) != 0)
        tsr_error_set(err, rc, "%s: cannot set %s: %s", path, full, tsr_strerror(rc));
    }
  }
  int64_t since = 0;
  bool local = rc == 0 && strcmp(got.sync, sync) == 0 && tsr__st_meta(f, "local_since");
  if (local) rc = meta_int(f, path, "local_since", 0, INT64_MAX, &since, err);
  if (local && rc == 0 && (rc = tsr__replicas_resume(rep, since)) != 0)
    tsr_error_set(err, rc, "%s: cannot resume local SGD: %s", path, tsr_strerror(rc));
  tsr__st_close(&f);
  return rc;
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
  TSR_TRY(at_end(s, path, "optimizer_hyper", err));
  tsr_errbuf_t why = {""};
  if (tsr_optimizer_check(&o->opt, &why))
    return tsr_error_set(err, TSR_EFORMAT, "%s: metadata optimizer_hyper: %s", path, why.msg);
  TSR_TRY(meta_text(f, path, "input_shape", &s, err));
  int *dims[] = {&o->in_channels, &o->in_height, &o->in_width};
  for (int k = 0; k < 3; k++) {
    int64_t v = 0;
    TSR_TRY(whole_at(&s, path, "input_shape", 1, 1 << 20, &v, err));
    *dims[k] = (int)v;
  }
  return at_end(s, path, "input_shape", err);
}

int tsr_checkpoint_read(const char *path, tsr_checkpoint_info_t *info, tsr_model_spec_t *spec,
                        tsr_net_opts_t *opts, int *inputs, int *classes, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = open_checked(&f, path, err);
  if (rc) return rc;
  tsr_checkpoint_info_t got;
  rc = read_info(f, path, &got, err);
  int64_t in = 0, cls = 0;
  uint64_t seed = 0;
  if (rc == 0) rc = meta_int(f, path, "inputs", 1, INT_MAX, &in, err);
  if (rc == 0) rc = meta_int(f, path, "classes", 1, INT_MAX, &cls, err);
  if (rc == 0) rc = meta_seed(f, path, "net_seed", &seed, err);
  tsr_model_spec_t s;
  tsr_model_spec_init(&s);
  const char *ini = tsr__st_meta(f, "model_ini");
  if (rc == 0 && !ini) rc = tsr_error_set(err, TSR_EFORMAT, "%s: no model in the metadata", path);
  if (rc == 0) rc = tsr_model_parse_ini_text(&s, ini, path, err);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  const char *opt = tsr__st_meta(f, "optimizer");
  if (rc == 0) rc = known_optimizer(opt, path, &o.opt, err);
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

int tsr_checkpoint_resume_check(const tsr_net_t *net, const tsr_checkpoint_info_t *info,
                                const tsr_sync_t *sync, int ranks, char *why, size_t size) {
  /* The checkpoint's policy: its schedule, then the outer optimizer if any ("every=4
   * slowmo(1,0.5)"). */
  char schedule[64];
  snprintf(schedule, sizeof schedule, "%s", info->sync);
  char *space = strchr(schedule, ' ');
  bool outer_then = space != NULL;
  if (space) *space = '\0';
  tsr_sync_schedule_t then;
  bool averaged_weights = info->ranks > 1 && tsr_sync_schedule_parse(&then, schedule, NULL) == 0 &&
                          tsr_sync_traits(&then)->averages_weights;
  bool stateful = tsr__optim_nstate(net->optim) > 0;
  if (info->final_average) {
    snprintf(why, size,
             "the checkpoint holds the final average of a finished run (--sync %s), which the "
             "uninterrupted run does not take after epoch %d: the resumed run continues from it",
             info->sync, info->epoch);
    return 1;
  }
  if (stateful && averaged_weights && info->state_ranks == 0) {
    snprintf(why, size,
             "the checkpoint holds rank 0's optimizer state only (written before every rank's "
             "was saved): every rank resumes from it");
    return 1;
  }
  int pr = tsr_net_grid_rows(net), then_pr = info->grid_rows > 1 ? info->grid_rows : 1;
  if (stateful && info->state_ranks > 1 && info->state_ranks != ranks / pr) {
    const char *whose = info->state_columns ? "grid columns" : "ranks";
    snprintf(why, size,
             "the checkpoint holds the optimizer states of its %d replicas (%s), which a run of "
             "%d replica%s cannot take over one by one: every replica resumes from the first's",
             info->state_ranks, whose, ranks / pr, ranks / pr == 1 ? "" : "s");
    return 1;
  }
  /* Replicas take contiguous shards of the epoch's order: another number of them takes other
   * samples at a step, so the rest of a cut epoch is not the rest of the checkpoint's. */
  if (info->step_in_epoch > 0 && info->ranks / then_pr != ranks / pr) {
    snprintf(why, size,
             "the checkpoint stopped %lld steps into epoch %d with %d replicas (grid columns or "
             "ranks) and this run has %d, which cut the epoch's order into other shards (until "
             "the epoch ends some samples are taken twice, some not at all)",
             (long long)info->step_in_epoch, info->epoch + 1, info->ranks / then_pr, ranks / pr);
    return 1;
  }
  if (ranks > 1 && sync->outer.kind != TSR_OUTER_NONE && outer_then && !info->outer_momentum) {
    snprintf(why, size,
             "the checkpoint holds no outer momentum (written before it was saved): it restarts "
             "from zero");
    return 1;
  }
  char augment[64];
  tsr__net_augment_describe(net, augment, sizeof augment);
  const char *then_augment = info->augment[0] ? info->augment : "none";
  if (strcmp(augment, then_augment) != 0) {
    snprintf(why, size,
             "the checkpoint was trained with augmentation %s and this run augments with %s, "
             "so its batches are not the uninterrupted run's",
             then_augment, augment);
    return 1;
  }
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
