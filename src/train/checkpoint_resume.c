/* Resuming from a checkpoint (tessera/checkpoint.h, checkpoint_run.h): what a resumed run can
 * take back and what it cannot (tsr_checkpoint_resume_check, said before the run starts), and,
 * once the replicas exist, what each takes: replica q's own optimizer state and step count where
 * the file holds every replica's and the run has as many, the outer momentum where the file
 * holds it, post-local's switch under the same policy. */
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

/* Replica q's (q >= 1: this rank's, or its grid column's) optimizer state and step count, from
 * a file of every replica's (each rank's, or each grid column's where columns). */
static int restore_own_state(tsr_net_t *net, const tsr_st_file_t *f, const char *path, int q,
                             bool columns, tsr_errbuf_t *err) {
  int rc = 0, nstate = tsr__optim_nstate(net->optim);
  for (int i = 0; i < net->n_layers && rc == 0; i++) {
    tsr_layer_t *l = &net->layers[i];
    for (int k = 0; k < l->nparams && rc == 0; k++) {
      char name[96], state[192];
      tsr__ckpt_param_name(l, k, name, sizeof name);
      for (int s = 0; s < nstate && rc == 0; s++) {
        tsr__ckpt_replica_prefix(state, sizeof state, columns, q);
        snprintf(state + strlen(state), sizeof state - strlen(state), "%s.%s", name,
                 tsr__optim_state_name(net->optim, s));
        rc = tsr__ckpt_load_tensor(f, path, state,
                                   tsr__optim_state(net->optim, l->params[k].index, s), err);
      }
    }
    if (rc == 0) rc = tsr__ckpt_load_layer_state(f, path, l, err);
  }
  int64_t steps = -1;
  if (rc == 0) rc = tsr__ckpt_replica_steps(f, path, columns, q, &steps, err);
  if (rc == 0 && steps >= 0) tsr__optim_set_steps(net->optim, steps);
  return rc;
}

/* The whole numbers of metadata key, one per rank, into v[size]. */
static int per_rank(const tsr_st_file_t *f, const char *path, const char *key, int64_t *v,
                    tsr_errbuf_t *err) {
  const char *s = tsr__st_meta(f, key);
  if (!s) return tsr_error_set(err, TSR_EINVAL, "%s: %s is missing", path, key);
  for (int q = 0; q < tsr_dist_size(); q++) {
    TSR_TRY(tsr__ckpt_whole_at(&s, path, key, 0, INT64_MAX, &v[q], err));
    while (*s == ' ')
      s++;
  }
  return tsr__ckpt_at_end(s, path, key, err);
}

/* A file written between averages (a stop there) by as many ranks: this rank's own weights and
 * buffers (rank 0's are the plain ones, loaded already), the anchor, and what every rank counted
 * since the last average. Another number of ranks goes on from rank 0's weights (the resume
 * check said so). */
static int restore_between(tsr_net_t *net, tsr_replicas_t *rep, const tsr_st_file_t *f,
                           const char *path, tsr_errbuf_t *err) {
  int64_t ranks = 0;
  TSR_TRY(tsr__ckpt_meta_int(f, path, "replica_weights", 1, TSR_MAX_RANKS, &ranks, err));
  int size = tsr_dist_size(), q = tsr_dist_rank(), rc = 0;
  if (ranks != size || tsr_net_grid_rows(net) > 1) return 0;
  tsr__replicas_saved_t now;
  TSR_TRY(tsr__replicas_checkpoint(rep, false, &now));
  for (int i = 0; i < net->n_layers && rc == 0; i++) {
    tsr_layer_t *l = &net->layers[i];
    char name[96], full[192];
    for (int k = 0; k < l->nparams + l->nbuffers && rc == 0; k++) {
      if (k < l->nparams)
        tsr__ckpt_param_name(l, k, name, sizeof name);
      else
        tsr__ckpt_state_name(l, k - l->nparams, name, sizeof name);
      tsr_tiles_t *t = k < l->nparams ? l->params[k].w : l->buffers[k - l->nparams];
      tsr__ckpt_replica_weights(full, sizeof full, q, name);
      if (q > 0) rc = tsr__ckpt_load_tensor(f, path, full, t, err);
      if (rc || k >= l->nparams || !now.anchor) continue;
      const float *data = NULL;
      snprintf(full, sizeof full, "anchor.%s", name);
      rc = tsr__ckpt_find_sized(f, path, full, tsr_tiles_rows(t) * tsr_tiles_cols(t), &data, err);
      if (rc == 0 &&
          (rc = tsr__replicas_kept(rep, TSR__KEPT_ANCHOR, l->params[k].index, NULL, data)) != 0)
        tsr_error_set(err, rc, "%s: cannot set %s: %s", path, full, tsr_strerror(rc));
    }
  }
  int64_t *samples = calloc((size_t)size * 2, sizeof *samples);
  if (!samples) return tsr_error_set(err, TSR_ENOMEM, "out of memory reading %s", path);
  if (rc == 0) rc = per_rank(f, path, "average_samples", samples, err);
  if (rc == 0) rc = per_rank(f, path, "average_steps", samples + size, err);
  tsr__replicas_resumed_t between = {.samples = samples, .steps = samples + size};
  if (rc == 0) rc = tsr__replicas_resume(rep, &between);
  free(samples);
  return rc;
}

int tsr__checkpoint_restore_run(tsr_net_t *net, tsr_replicas_t *rep, const char *path,
                                const char *sync, tsr_errbuf_t *err) {
  tsr_st_file_t *f;
  int rc = tsr__ckpt_open_checked(&f, path, err);
  if (rc) return rc;
  tsr_checkpoint_info_t got;
  rc = tsr__ckpt_read_info(f, path, &got, err);
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
      tsr__ckpt_param_name(l, k, name, sizeof name);
      snprintf(full, sizeof full, "outer.%s.momentum", name);
      const float *data = NULL;
      rc = tsr__ckpt_find_sized(f, path, full,
                                tsr_tiles_rows(l->params[k].w) * tsr_tiles_cols(l->params[k].w),
                                &data, err);
      if (rc == 0 && (rc = tsr__replicas_kept(rep, TSR__KEPT_OUTER_MOMENTUM, l->params[k].index,
                                              NULL, data)) != 0)
        tsr_error_set(err, rc, "%s: cannot set %s: %s", path, full, tsr_strerror(rc));
    }
  }
  if (rc == 0 && tsr__st_meta(f, "replica_weights")) rc = restore_between(net, rep, f, path, err);
  int64_t since = 0;
  bool local = rc == 0 && strcmp(got.sync, sync) == 0 && tsr__st_meta(f, "local_since");
  if (local) rc = tsr__ckpt_meta_int(f, path, "local_since", 0, INT64_MAX, &since, err);
  tsr__replicas_resumed_t past = {.local = true, .local_since = since};
  if (local && rc == 0 && (rc = tsr__replicas_resume(rep, &past)) != 0)
    tsr_error_set(err, rc, "%s: cannot resume local SGD: %s", path, tsr_strerror(rc));
  tsr__st_close(&f);
  return rc;
}
