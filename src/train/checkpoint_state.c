/* Checkpoints' state gathered and given back (tessera/checkpoint.h, checkpoint_run.h): on saving,
 * every tensor in the order every rank takes part in (a grid column's spread matrices gathered
 * from their tiles' owners to rank 0, every replica's optimizer state under local SGD, the
 * outer momentum from the ranks that home it) and what the replicas hold in the metadata; on
 * loading, the net's tensors, each rank keeping the tiles it owns, so a checkpoint resumes on
 * any grid or number of ranks. The file's format is checkpoint_format.c's. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/dist.h"
#include "train/checkpoint_impl.h"
#include "train/checkpoint_run.h"
#include "try.h"

/* Under MPI with weight averaging every replica's optimizer state is its own: state s of
 * parameter name, matrix t (a grid column's spread over its pr ranks), gathered to rank 0 as
 * <prefix of q><name>.<s> for replicas q >= 1 (replica 0's is the plain optimizer.<name>.<s>);
 * with no state (NULL), the replicas' own copies of tensor name between averages
 * (replica.rank<q>.<name>).
 * Collective, its result the same on every rank; b is rank 0's (NULL elsewhere), *added its
 * own result there. */
static int gather_state(tsr__ckpt_bundle_t *b, const char *name, const char *state,
                        const tsr_tiles_t *t, int pr, int *added) {
  int replicas = tsr_dist_size() / pr;
  int64_t rows = tsr_tiles_rows(t), cols = tsr_tiles_cols(t), count = rows * cols;
  float *every = b ? malloc(sizeof(float) * (size_t)(count * replicas)) : NULL;
  int rc = tsr_dist_any(b && !every) ? TSR_ENOMEM : tsr_tiles_gather_copies(t, pr, every);
  for (int q = 1; rc == 0 && b && q < replicas && *added == 0; q++) {
    char full[192];
    if (state) {
      tsr__ckpt_replica_prefix(full, sizeof full, pr > 1, q);
      snprintf(full + strlen(full), sizeof full - strlen(full), "%s.%s", name, state);
    } else {
      tsr__ckpt_replica_weights(full, sizeof full, q, name);
    }
    float *copy = malloc(sizeof(float) * (size_t)count);
    if (copy) memcpy(copy, every + q * count, sizeof(float) * (size_t)count);
    *added = copy ? tsr__ckpt_add_data(b, full, rows, cols, copy) : TSR_ENOMEM;
  }
  free(every);
  return rc;
}

/* The outer momentum of parameter index (or with anchor the anchor: the weights every rank
 * restarted from at the last average), gathered from its homes to rank 0 as
 * outer.<name>.momentum (anchor.<name>): as gather_state. */
static int gather_outer(tsr__ckpt_bundle_t *b, tsr_replicas_t *rep, const char *name,
                        const tsr_tiles_t *w, int index, bool anchor, int *added) {
  int64_t rows = tsr_tiles_rows(w), cols = tsr_tiles_cols(w);
  float *all = tsr_dist_rank() == 0 ? malloc(sizeof(float) * (size_t)(rows * cols)) : NULL;
  int rc = tsr_dist_any(tsr_dist_rank() == 0 && !all) ? TSR_ENOMEM : 0;
  if (rc == 0)
    rc = tsr__replicas_kept(rep, anchor ? TSR__KEPT_ANCHOR : TSR__KEPT_OUTER_MOMENTUM, index, all,
                            NULL);
  rc = tsr_dist_any(rc != 0) ? (rc ? rc : TSR_ERUNTIME) : 0;
  char full[160];
  snprintf(full, sizeof full, anchor ? "anchor.%s" : "outer.%s.momentum", name);
  if (rc == 0 && b && *added == 0) {
    *added = tsr__ckpt_add_data(b, full, rows, cols, all);
    all = NULL;
  }
  free(all);
  return rc;
}

/* "v[0] v[stride] v[2 stride] ..." of n values, as many as there are (NULL: out of memory;
 * the caller frees it). */
static char *number_list(const int64_t *v, int n, int stride) {
  size_t size = (size_t)n * 21 + 1, at = 0; /* 20 characters at most and a space each */
  char *text = malloc(size);
  if (!text) return NULL;
  text[0] = '\0';
  for (int q = 0; q < n; q++)
    at += (size_t)snprintf(text + at, size - at, "%s%" PRId64, q ? " " : "",
                           v[(size_t)q * (size_t)stride]);
  return text;
}

/* Between averages (a stop there), what the replicas counted since the last average, each
 * rank's: the samples (the weights of the next average) and the local steps (FedNova's). */
static int add_between_meta(tsr__ckpt_bundle_t *b, const tsr__replicas_saved_t *saved) {
  char *samples = number_list(saved->samples, tsr_dist_size(), 1);
  char *steps = number_list(saved->steps, tsr_dist_size(), 1);
  int rc = samples && steps ? tsr__ckpt_add_meta(b, "replica_weights", "%d", tsr_dist_size())
                            : TSR_ENOMEM;
  if (rc == 0) rc = tsr__ckpt_add_meta(b, "average_samples", "%s", samples);
  if (rc == 0) rc = tsr__ckpt_add_meta(b, "average_steps", "%s", steps);
  free(samples), free(steps);
  return rc;
}

/* What the replicas hold beyond the net, in the metadata (rank 0's b), under MPI only (a file
 * of one process is as it was): how the optimizer state is kept (per replica: each rank's, or
 * under a grid of pr rows each column's), the outer momentum, the switch of post-local, each
 * replica's step count (steps: every rank's; a column's ranks count alike). */
static int add_replicas_meta(tsr__ckpt_bundle_t *b, bool per_replica, int pr, bool outer,
                             const tsr__replicas_saved_t *saved, const int64_t *steps) {
  const char *kept = !per_replica ? "shared" : pr > 1 ? "per-column" : "per-rank";
  int rc = tsr__ckpt_add_meta(b, "optimizer_state", "%s", kept);
  if (rc == 0 && outer) rc = tsr__ckpt_add_meta(b, "outer_state", "momentum");
  if (rc == 0 && saved->final_extra) rc = tsr__ckpt_add_meta(b, "final_average", "1");
  if (rc == 0 && saved->local)
    rc = tsr__ckpt_add_meta(b, "local_since", "%" PRId64, saved->local_since);
  if (rc == 0 && per_replica) {
    char *text = number_list(steps, tsr_dist_size() / pr, pr);
    rc = text ? tsr__ckpt_add_meta(b, pr > 1 ? "optimizer_steps_columns" : "optimizer_steps_ranks",
                                   "%s", text)
              : TSR_ENOMEM;
    free(text);
  }
  return rc == 0 && saved->between ? add_between_meta(b, saved) : rc;
}

/* Adds matrix t as tensor name on the writer (b; NULL elsewhere). Collective (every rank
 * calls it for every tensor, in the same order): a grid column's spread matrix is gathered
 * from the ranks that own its tiles (column 0's: every column holds the same weights where a
 * checkpoint is written), another read on the writer. Returns the gathering's result, the
 * same on every rank; the writer's own (out of room in b) in *added. */
static int add_gathered(tsr__ckpt_bundle_t *b, const char *name, const tsr_tiles_t *t, int *added) {
  int64_t rows = tsr_tiles_rows(t), cols = tsr_tiles_cols(t);
  float *data = b && *added == 0 ? malloc(sizeof(float) * (size_t)(rows * cols)) : NULL;
  int rc = tsr_tiles_gather(t, data);
  if (rc == 0 && data)
    *added = tsr__ckpt_add_data(b, name, rows, cols, data);
  else
    free(data);
  return rc;
}

/* The tensors, in the order every rank takes part in: each layer's parameters with their
 * optimizer state (every replica's under local SGD: each rank's, or each grid column's of pr
 * ranks), the outer momentum, then its buffers (rank 0's: under --sync batch each replica's
 * own, as DDP saves rank 0's). b is the writer's (NULL elsewhere), its own result in *rc; the
 * collectives' result returned, the same everywhere. */
static int add_tensors(tsr__ckpt_bundle_t *b, const tsr_net_t *net, tsr_replicas_t *rep,
                       bool collective, bool per_replica, bool outer,
                       const tsr__replicas_saved_t *between, int *rc) {
  int pr = tsr_net_grid_rows(net);
  int nstate = tsr__optim_nstate(net->optim), crc = 0;
  for (int i = 0; i < net->n_layers && crc == 0; i++) {
    const tsr_layer_t *l = &net->layers[i];
    for (int k = 0; k < l->nparams && crc == 0; k++) {
      char name[96], state[128];
      tsr__ckpt_param_name(l, k, name, sizeof name);
      if (collective)
        crc = add_gathered(b, name, l->params[k].w, rc);
      else if (*rc == 0)
        *rc = tsr__ckpt_add_tensor(b, name, l->params[k].w);
      if (between && crc == 0) crc = gather_state(b, name, NULL, l->params[k].w, pr, rc);
      if (between && between->anchor && crc == 0)
        crc = gather_outer(b, rep, name, l->params[k].w, l->params[k].index, true, rc);
      for (int s = 0; s < nstate && crc == 0; s++) {
        const tsr_tiles_t *t = tsr__optim_state(net->optim, l->params[k].index, s);
        const char *sname = tsr__optim_state_name(net->optim, s);
        snprintf(state, sizeof state, "optimizer.%s.%s", name, sname);
        if (collective)
          crc = add_gathered(b, state, t, rc);
        else if (*rc == 0)
          *rc = tsr__ckpt_add_tensor(b, state, t);
        if (per_replica && crc == 0) crc = gather_state(b, name, sname, t, pr, rc);
      }
      if (outer && crc == 0)
        crc = gather_outer(b, rep, name, l->params[k].w, l->params[k].index, false, rc);
    }
    for (int k = 0; k < tsr__ckpt_state_count(l) && crc == 0; k++) {
      char name[96];
      tsr__ckpt_state_name(l, k, name, sizeof name);
      if (k == l->nbuffers) {
        if (b && *rc == 0) *rc = tsr__ckpt_add_scalar(b, name, (double)l->batches_tracked);
      } else if (collective) {
        crc = add_gathered(b, name, l->buffers[k], rc);
        if (between && crc == 0) crc = gather_state(b, name, NULL, l->buffers[k], pr, rc);
      } else if (*rc == 0) {
        *rc = tsr__ckpt_add_tensor(b, name, l->buffers[k]);
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
  /* Between averages (a stop), every replica's weights and buffers, and the anchor. */
  const tsr__replicas_saved_t *between = rep && saved->between && pr == 1 ? saved : NULL;
  int ntensors =
      tsr_net_n_params(net) * (1 + nstate * (per_replica ? replicas : 1) + (outer ? 1 : 0) +
                               (between ? replicas - 1 : 0) + (between && between->anchor ? 1 : 0));
  for (int i = 0; i < net->n_layers; i++)
    ntensors += tsr__ckpt_state_count(&net->layers[i]) +
                (between ? (replicas - 1) * net->layers[i].nbuffers : 0);
  tsr__ckpt_bundle_t b = {0};
  /* rc: the writer's own; crc: the collectives', the same on every rank. */
  int rc = writer ? tsr__ckpt_bundle_init(&b, ntensors) : 0, crc = 0;
  /* Every rank's step count on the writer; a failed allocation there is every rank's error. */
  int64_t *steps = NULL, mine = tsr__optim_steps(net->optim);
  if (per_replica) {
    steps = writer ? calloc((size_t)ranks, sizeof *steps) : NULL;
    crc = tsr_dist_any(writer && !steps) ? TSR_ENOMEM
                                         : tsr_dist_gather(&mine, (int)sizeof mine, steps);
  }
  if (crc == 0)
    crc = add_tensors(writer ? &b : NULL, net, rep, collective, per_replica, outer, between, &rc);
  rc = rc ? rc : crc;
  if (writer && rc == 0) rc = tsr__ckpt_add_state_meta(&b, net, info);
  if (writer && rc == 0 && pr > 1) rc = tsr__ckpt_add_meta(&b, "grid", "%dx%d", pr, replicas);
  if (writer && rc == 0 && rep) rc = add_replicas_meta(&b, per_replica, pr, outer, saved, steps);
  if (writer && rc == 0)
    rc = tsr__st_write(path, b.t, b.n, b.meta, b.nmeta, err);
  else if (rc)
    tsr_error_set(err, rc, "%s: cannot gather the checkpoint: %s", path, tsr_strerror(rc));
  if (writer) tsr__ckpt_bundle_fini(&b);
  free(steps);
  return rc;
}

int tsr_checkpoint_save(const tsr_net_t *net, const tsr_checkpoint_info_t *info, const char *path,
                        tsr_errbuf_t *err) {
  return tsr__checkpoint_save_run(net, NULL, NULL, info, path, err);
}

int tsr_checkpoint_load(tsr_net_t *net, const char *path, const char *data,
                        tsr_checkpoint_info_t *info, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = tsr__ckpt_open_checked(&f, path, err);
  if (rc) return rc;
  tsr_checkpoint_info_t got;
  rc = tsr__ckpt_read_info(f, path, &got, err);
  char *model = tsr_model_description(&net->spec, net->inputs);
  if (rc == 0 && !model) rc = TSR_ENOMEM;
  const char *opt = tsr__st_meta(f, "optimizer");
  /* The whole descriptions; a file of before kept only the first 255 characters of its own. */
  const char *stored = tsr__st_meta(f, "model");
  stored = stored ? stored : "";
  size_t cut = strlen(stored);
  if (rc == 0 && strcmp(stored, model) != 0 && (cut != 255 || strncmp(stored, model, cut) != 0))
    rc = tsr_error_set(err, TSR_EINVAL,
                       "%s was written for model %s; this run builds %s (give the same --model)",
                       path, got.model, model);
  free(model);
  const char *mine = tsr_optimizer_name(&net->opts.opt);
  if (rc == 0) rc = tsr__ckpt_known_optimizer(opt, path, NULL, err);
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
      tsr__ckpt_param_name(l, k, name, sizeof name);
      rc = tsr__ckpt_load_tensor(f, path, name, l->params[k].w, err);
      for (int s = 0; s < nstate && rc == 0; s++) {
        snprintf(state, sizeof state, "optimizer.%s.%s", name,
                 tsr__optim_state_name(net->optim, s));
        rc = tsr__ckpt_load_tensor(f, path, state,
                                   tsr__optim_state(net->optim, l->params[k].index, s), err);
      }
    }
    if (rc == 0) rc = tsr__ckpt_load_layer_state(f, path, l, err);
  }
  int64_t steps = 0;
  if (rc == 0) rc = tsr__ckpt_meta_int(f, path, "optimizer_steps", 0, INT64_MAX, &steps, err);
  if (rc == 0) tsr__optim_set_steps(net->optim, steps);
  /* Dropout masks depend on each dropout layer's training passes so far: "index:calls ...". */
  const char *p = tsr__st_meta(f, "dropout_calls");
  while (rc == 0 && p && *p) {
    int64_t index = 0, n = 0;
    rc = tsr__ckpt_whole_at(&p, path, "dropout_calls", 0, INT_MAX, &index, err);
    if (rc == 0 && *p++ != ':') rc = tsr__ckpt_at_end(p - 1, path, "dropout_calls", err);
    if (rc == 0) rc = tsr__ckpt_whole_at(&p, path, "dropout_calls", 0, INT64_MAX, &n, err);
    for (int i = 0; rc == 0 && i < net->n_layers; i++)
      if (net->layers[i].index - 1 == index) net->layers[i].calls = (uint64_t)n;
    while (rc == 0 && *p == ' ')
      p++;
  }
  tsr__st_close(&f);
  if (rc == 0 && info) *info = got;
  return rc;
}
