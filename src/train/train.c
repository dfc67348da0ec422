/* The training loop. The main thread only submits: each epoch's batches go
 * to the runtime as tasks, with at most `window` steps in flight so memory
 * stays flat, and the thread waits only where a user sees a result (the
 * epoch's evaluation and log line). */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "nn/layers.h"
#include "nn/net_impl.h"
#include "parallel/replicas.h"
#include "runtime/agree.h"
#include "runtime/observe.h"
#include "runtime/progress.h"
#include "tessera/runtime.h"
#include "tessera/train.h"
#include "train/checkpoint_run.h"
#include "train/setup_impl.h"
#include "try.h"
#include "nn/net_impl.h"

void tsr_train_opts_init(tsr_train_opts_t *o) {
  *o = (tsr_train_opts_t){.epochs = 10,
                          .seed = 1,
                          .lr_schedule = TSR_LR_COSINE,
                          .lr_scaling = TSR_LR_SCALING_AUTO,
                          .window = 8,
                          .shuffle = true};
}

/* The schedule's horizon in epochs: schedule_epochs, or the run's epochs. */
static int horizon(const tsr_train_opts_t *o) {
  return o->schedule_epochs > 0 ? o->schedule_epochs : o->epochs;
}

/* The run's policy: its setup's; NULL: none (no setup). */
static const tsr_sync_t *policy_of(const tsr_train_opts_t *o) {
  return o->setup ? &o->setup->sync : NULL;
}

float tsr_train_base_lr(const tsr_net_t *net, const tsr_train_opts_t *o) {
  tsr_lr_scaling_t s = o->lr_scaling;
  const tsr_sync_t *sync = policy_of(o);
  if (s == TSR_LR_SCALING_AUTO)
    s = sync && tsr_sync_traits(&sync->schedule)->meets_every_step &&
                tsr__optim_kind(net->optim)->lr_scales_with_replicas
            ? TSR_LR_SCALING_LINEAR
            : TSR_LR_SCALING_NONE;
  float lr = tsr_net_base_lr(net);
  /* In float, as the rate is stored: what a caller who scaled the net's lr itself got. */
  /* Replicas: ranks, or under --grid PrxPc the Pc grid columns. */
  int replicas = tsr_dist_size() / tsr_net_grid_rows(net);
  if (s == TSR_LR_SCALING_LINEAR && replicas > 1) lr *= (float)replicas;
  return lr;
}

/* A value that is not a finite number, as the log writes it. */
static const char *nonfinite_text(double v) {
  return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tsr_evaluate(tsr_net_t *net, const tsr_dataset_t *ds, double *loss, double *accuracy) {
  int32_t *idx = malloc(sizeof(int32_t) * (size_t)ds->n);
  if (!idx) return TSR_ENOMEM;
  for (int64_t i = 0; i < ds->n; i++)
    idx[i] = (int32_t)i;
  int rc = 0;
  int b = tsr_net_batch(net);
  for (int64_t s = 0; s < ds->n && rc == 0; s += b)
    rc = tsr_net_eval_step(net, ds, idx + s, (int)(ds->n - s < b ? ds->n - s : b));
  double loss_sum = 0, correct = 0;
  int rc2 = tsr_net_take_stats(net, true, &loss_sum, &correct);
  free(idx);
  if (rc || rc2) return rc ? rc : rc2;
  *loss = loss_sum / (double)ds->n;
  *accuracy = correct / (double)ds->n;
  return 0;
}

int tsr_predict(tsr_net_t *net, const tsr_dataset_t *ds, int32_t *predicted) {
  if (tsr_net_positions(net) != 1) return TSR_EINVAL; /* one class per sample only */
  int b = tsr_net_batch(net), classes = net->classes;
  const tsr_tiles_t *logits = net->layers[net->n_layers - 1].y;
  int32_t *idx = malloc(sizeof(int32_t) * (size_t)b);
  float *z = malloc(sizeof(float) * (size_t)b * (size_t)classes);
  int rc = idx && z ? 0 : TSR_ENOMEM;
  for (int64_t s = 0; s < ds->n && rc == 0; s += b) {
    int n = (int)(ds->n - s < b ? ds->n - s : b);
    for (int i = 0; i < n; i++)
      idx[i] = (int32_t)(s + i);
    rc = tsr_net_eval_step(net, ds, idx, n);
    if (rc == 0) rc = tsr_tiles_read(logits, z); /* waits for the step */
    for (int i = 0; i < n && rc == 0; i++) {
      const float *row = z + (size_t)i * (size_t)classes;
      int best = 0;
      for (int c = 1; c < classes; c++)
        if (row[c] > row[best]) best = c;
      predicted[s + i] = best;
    }
  }
  double loss, correct;
  if (rc == 0) rc = tsr_net_take_stats(net, true, &loss, &correct); /* clears the eval counters */
  free(idx), free(z);
  return rc;
}

/* Replica q's samples per second of compute: a replica is a rank, or under --grid PrxPc a
 * column of Pr ranks (ranks q Pr ... q Pr + Pr - 1), which steps together: its samples over its
 * slowest rank's compute. 0 when nothing was measured. */
static double replica_rate(const tsr_rank_work_t *work, int q, int pr) {
  double seconds = 0;
  for (int p = 0; p < pr; p++)
    seconds = fmax(seconds, work[q * pr + p].compute_seconds);
  return seconds > 0 ? (double)work[q * pr].samples / seconds : 0;
}

/* --shares auto, where shards follow the shares: each replica's rate in the epoch, the same
 * numbers on every rank (exchanged), become the next epoch's shares. A replica is kept at 1% of
 * the even share at least, so that it is measured again. The shares hold one weight per replica
 * once measured (tsr_train_calibrate); unmeasured ones get theirs here, and where that
 * allocation fails keep what they have, as when nothing was measured. */
static void remeasure(tsr_shares_t *shares, const tsr_rank_work_t *work, int ranks, int pr) {
  double sum = 0;
  for (int q = 0; q < ranks; q++) {
    double rate = replica_rate(work, q, pr);
    if (!(rate > 0) || !isfinite(rate)) return; /* nothing measured: keep the shares */
    sum += rate;
  }
  if (shares->n != ranks) {
    double *w = malloc(sizeof *w * (size_t)ranks);
    if (!w) return;
    free(shares->w), shares->w = w, shares->n = ranks;
  }
  for (int q = 0; q < ranks; q++) {
    double w = replica_rate(work, q, pr) / sum;
    shares->w[q] = w < 0.01 / ranks ? 0.01 / ranks : w;
  }
}

/* Under --grid PrxPc a column's ranks take each step together (their tasks exchange data), so
 * the measurement cannot stop on each rank's own clock: every rank takes the same number of
 * steps, enough for `seconds` at the slowest rank's pace in two probing steps (at least 4), and
 * each column is timed on its own. Returns that number; *rc: an error of the probe (after the
 * exchange, which every rank makes). all: room for one double per rank. */
static int64_t grid_steps(tsr_net_t *net, const tsr_dataset_t *ds, int32_t *rows, double seconds,
                          double *all, int *rc) {
  int b = tsr_net_batch(net), ranks = tsr_dist_size();
  double t0 = now();
  for (int k = 0; *rc == 0 && k < 2; k++) {
    for (int i = 0; i < b; i++)
      rows[i] = (int32_t)((k * b + i) % ds->n);
    *rc = tsr_net_eval_step(net, ds, rows, b);
  }
  if (*rc == 0) *rc = tsr_net_wait(net, 0);
  double step = (now() - t0) / 2, slowest = 0;
  int rc2 = tsr_dist_allgather(&step, (int)sizeof step, all);
  for (int q = 0; rc2 == 0 && q < ranks; q++)
    slowest = fmax(slowest, all[q]);
  if (*rc == 0) *rc = rc2;
  double steps = slowest > 0 ? ceil(seconds / slowest) : 4;
  return steps < 4 ? 4 : steps > 1e6 ? 1000000 : (int64_t)steps;
}

int tsr_train_calibrate(tsr_net_t *net, const tsr_dataset_t *ds, double seconds,
                        tsr_shares_t *shares, tsr_errbuf_t *err) {
  int ranks = tsr_dist_size(), b = tsr_net_batch(net), pr = tsr_net_grid_rows(net);
  /* Collective: a rank that cannot measure must not leave before the others' exchanges, so
   * every rank allocates first and all agree whether any failed (the start together). */
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)b);
  double *all = malloc(sizeof(double) * (size_t)ranks);
  tsr_rank_work_t *work = malloc(sizeof *work * (size_t)ranks);
  double *w = malloc(sizeof *w * (size_t)(ranks / pr)); /* one weight per replica */
  int rc = 0;
  if (ds->n <= 0 || !(seconds > 0))
    rc = tsr_error_set(err, TSR_EINVAL, "cannot measure shares: %lld samples, %g s",
                       (long long)ds->n, seconds);
  else if (!rows || !all || !work || !w)
    rc = tsr_error_set(err, TSR_ENOMEM, "out of memory measuring shares");
  if (tsr_dist_any(rc != 0)) {
    free(rows), free(all), free(work), free(w);
    return rc ? rc : tsr_error_set(err, TSR_EINVAL, "another rank could not measure shares");
  }
  int64_t limit = pr > 1 ? grid_steps(net, ds, rows, seconds, all, &rc) : INT64_MAX;
  double t0 = now(), t = t0;
  int64_t samples = 0;
  for (int64_t k = 0; rc == 0 && k < limit && (pr > 1 || t - t0 < seconds); k++) {
    for (int i = 0; i < b; i++)
      rows[i] = (int32_t)((k * b + i) % ds->n);
    rc = tsr_net_eval_step(net, ds, rows, b);
    if (rc == 0 && k % 4 == 3) rc = tsr_net_wait(net, 0);
    samples += b;
    t = now();
  }
  if (rc == 0) rc = tsr_net_wait(net, 0);
  double loss, correct, rate = samples / (now() - t0);
  if (rc == 0) rc = tsr_net_take_stats(net, true, &loss, &correct); /* clears them */
  free(rows);
  int rc2 = tsr_dist_allgather(&rate, (int)sizeof rate, all);
  if (rc == 0 && rc2 == 0) {
    for (int q = 0; q < ranks; q++)
      work[q] = (tsr_rank_work_t){.samples = 1000000, .compute_seconds = 1e6 / all[q]};
    tsr_shares_fini(shares);
    shares->kind = TSR_SHARES_AUTO, shares->w = w, w = NULL;
    tsr_shares_get(NULL, ranks / pr, shares->w), shares->n = ranks / pr;
    remeasure(shares, work, ranks / pr, pr);
  }
  free(all), free(work), free(w);
  rc = rc ? rc : rc2;
  return rc ? tsr_error_set(err, rc, "measuring shares: %s", tsr_strerror(rc)) : 0;
}

/* Samples replica q takes at step k. */
static int shard_take(const tsr_run_setup_t *sh, int q, int64_t k) {
  int64_t b = sh->batch[q], left = sh->lo[q + 1] - sh->lo[q] - k * b;
  return left <= 0 ? 0 : left >= b ? (int)b : (int)left;
}

/* What writing a checkpoint needs from the loop. */
typedef struct {
  tsr_net_t *net;
  tsr_replicas_t *rep;
  const tsr_train_opts_t *o;
  int64_t steps; /* per epoch */
  int ranks;
  float base_lr;
  tsr_errbuf_t *err;
  char where[64];                    /* the last point reached ("epoch 2 step 31") */
  char written[64];                  /* the last point written in this run, or "" */
  const tsr_schedule_state_t *state; /* plateau's and early stopping's, as of the last epoch end */
} checkpoint_t;

/* Writes o->checkpoint_path (if set) with epoch epochs done and step steps
 * of the next: on rank 0, once the replicas agree and hold the whole
 * optimizer state, every rank learning whether it worked. Under MPI a point
 * where replicas differ (local SGD between averages) is skipped, the next
 * agreeing one writing, except at a stop (stop), which writes every
 * replica's weights where the replicas can give them (saved.between). */
static int write_checkpoint(checkpoint_t *cp, int epoch, int64_t step, bool stop) {
  snprintf(cp->where, sizeof cp->where, step ? "epoch %d step %lld" : "epoch %d", epoch + !!step,
           (long long)step);
  if (!cp->o->checkpoint_path) return 0;
  tsr__replicas_saved_t saved = {.agreed = true};
  int rc = cp->rep ? tsr__replicas_checkpoint(cp->rep, true, &saved) : 0;
  saved.between = !saved.agreed && stop && saved.between;
  if (!saved.agreed && !saved.between) return 0;
  if (rc == 0) rc = tsr_net_wait(cp->net, 0);
  tsr_checkpoint_info_t info = {0};
  if (cp->o->checkpoint_info) info = *cp->o->checkpoint_info;
  info.epoch = epoch, info.step_in_epoch = step, info.epochs = cp->o->epochs;
  info.schedule_epochs = horizon(cp->o);
  info.seed = cp->o->seed, info.lr_schedule = cp->o->lr_schedule, info.base_lr = cp->base_lr;
  info.ranks = cp->ranks;
  info.lr = cp->o->lr, info.early_stop = cp->o->early_stop;
  info.has_schedule_state = cp->o->lr_schedule == TSR_LR_PLATEAU || cp->o->early_stop > 0;
  info.schedule_state = *cp->state;
  if (policy_of(cp->o) && cp->ranks > 1)
    tsr_sync_describe(policy_of(cp->o), info.sync, sizeof info.sync);
  else
    snprintf(info.sync, sizeof info.sync, "none");
  tsr_errbuf_t mine = {""};
  if (rc == 0)
    rc = tsr__checkpoint_save_run(cp->net, cp->rep, cp->rep ? &saved : NULL, &info,
                                  cp->o->checkpoint_path, &mine);
  if (cp->rep)
    rc = tsr_dist_agree(rc, &mine, cp->err);
  else if (rc && cp->err)
    *cp->err = mine;
  if (rc == 0) snprintf(cp->written, sizeof cp->written, "%s", cp->where);
  return rc;
}

/* What a resumed run's replicas hold beyond the net, from o->resume_path: every rank agreeing. */
static int restore(tsr_replicas_t *rep, tsr_net_t *net, const tsr_train_opts_t *o,
                   tsr_errbuf_t *err) {
  char sync[64] = "none";
  if (policy_of(o)) tsr_sync_describe(policy_of(o), sync, sizeof sync);
  tsr_errbuf_t mine = {""};
  int rc = tsr__checkpoint_restore_run(net, rep, o->resume_path, sync, &mine);
  return tsr_dist_agree(rc, &mine, err);
}

/* Under a grid, every rank's transfers of the epoch on rank 0 (all[size], ignored elsewhere):
 * the grid's since *grid_seen (moved on), the synchronization's ss, StarPU-MPI's own count
 * since *measured_seen (moved on; [size]) split by the peer's grid column. Collective. */
static int epoch_traffic(tsr_net_t *net, const tsr_sync_stats_t *ss, tsr_rank_traffic_t *grid_seen,
                         uint64_t *measured_seen, tsr_rank_traffic_t *all) {
  int me = tsr_dist_rank(), size = tsr_dist_size(), pr = tsr_net_grid_rows(net);
  tsr_rank_traffic_t now_ = {.rank = me};
  tsr_net_grid_traffic(net, &now_.grid_bytes_sent, &now_.grid_bytes_received,
                       &now_.grid_messages_sent, &now_.grid_messages_received);
  tsr_net_halo_traffic(net, &now_.halo_bytes_sent, &now_.halo_messages_sent);
  tsr_rank_traffic_t mine = {
      .rank = me,
      .grid_bytes_sent = now_.grid_bytes_sent - grid_seen->grid_bytes_sent,
      .grid_bytes_received = now_.grid_bytes_received - grid_seen->grid_bytes_received,
      .grid_messages_sent = now_.grid_messages_sent - grid_seen->grid_messages_sent,
      .grid_messages_received = now_.grid_messages_received - grid_seen->grid_messages_received,
      .sync_bytes_sent = ss->bytes_sent,
      .sync_bytes_received = ss->bytes_received,
      .sync_messages_sent = ss->messages_sent,
      .sync_messages_received = ss->messages_received,
      .halo_bytes_sent = now_.halo_bytes_sent - grid_seen->halo_bytes_sent,
      .halo_messages_sent = now_.halo_messages_sent - grid_seen->halo_messages_sent};
  *grid_seen = now_;
  uint64_t *sent = malloc(sizeof(uint64_t) * (size_t)size);
  if (!sent) return TSR_ENOMEM;
  /* What the epoch submitted has been sent (evaluation's sends on column 0 are never waited for
   * otherwise), so StarPU-MPI's count covers the same transfers. */
  int rc = tsr__progress_wait_all();
  tsr_runtime_bytes_sent(sent);
  for (int q = 0; q < size; q++) {
    uint64_t d = sent[q] - measured_seen[q];
    measured_seen[q] = sent[q];
    if (q == me) continue;
    if (q / pr == me / pr)
      mine.measured_sent_inside += d;
    else
      mine.measured_sent_across += d;
  }
  free(sent);
  return rc ? rc : tsr_dist_gather(&mine, (int)sizeof mine, all);
}

/* Every rank's totals of the run on rank 0, for o->on_ranks. */
static int report_ranks(const tsr_rank_stats_t *mine, const tsr_train_opts_t *o) {
  int n = tsr_dist_size();
  tsr_rank_stats_t *all = malloc(sizeof *all * (size_t)n);
  if (!all) return TSR_ENOMEM;
  int rc = tsr_dist_gather(mine, (int)sizeof *mine, all);
  if (rc == 0 && tsr_dist_rank() == 0 && o->on_ranks) o->on_ranks(all, n, o->ctx);
  free(all);
  return rc;
}

/* *s: o->setup checked against this run (its combinations checked again with o's checkpoint,
 * tsr_run_check), or without one the setup tsr_run_setup makes for the net alone (no policy,
 * uniform shares). */
static int set_up(tsr_run_setup_t *s, const tsr_net_t *net, const tsr_dataset_t *train,
                  const tsr_train_opts_t *o, tsr_errbuf_t *err) {
  tsr_run_config_t c;
  tsr_run_config_from_net(&c, net, train->n);
  c.checkpoint = o->checkpoint_path != NULL;
  if (!o->setup) {
    TSR_TRY(tsr_run_setup(s, &c, err));
  } else {
    TSR_TRY(tsr__run_setup_copy(s, o->setup, err));
    c.sync = &s->sync, c.shares = &s->shares;
    TSR_TRY(tsr_run_check(&c, err));
    if (s->ranks != tsr_dist_size() || s->rank != tsr_dist_rank() || s->samples != train->n ||
        s->replicas != tsr_dist_size() / c.net.grid_rows)
      return tsr_error_set(err, TSR_EINVAL,
                           "the run was set up for rank %d of %d ranks, %d replicas and %lld "
                           "training samples, but this is rank %d of %d, %d replicas, %lld "
                           "samples: set it up again for this run",
                           s->rank, s->ranks, s->replicas, (long long)s->samples, tsr_dist_rank(),
                           tsr_dist_size(), tsr_dist_size() / c.net.grid_rows, (long long)train->n);
  }
  if (s->batch[s->replica] > c.net.batch)
    return tsr_error_set(err, TSR_EINVAL,
                         "--shares give rank %d a batch of %lld, but its net was built for %d: "
                         "build each rank's net with its share of the global batch",
                         s->replica, (long long)s->batch[s->replica], c.net.batch);
  return 0;
}

/* ---- The loop, in phases ----------------------------------------------
 *
 * tsr_train: check the options; set the run up (the setup, the replicas, the buffers); then
 * each epoch: its beginning (the order of samples, the policy's hook), its steps, its end (the
 * policy's epoch end, the statistics, evaluation and report, the checkpoint); then finish. */

/* What a training run holds from its setup to its end. */
typedef struct {
  tsr_net_t *net;
  const tsr_dataset_t *train, *test;
  const tsr_train_opts_t *o;
  tsr_errbuf_t *err;
  tsr_run_setup_t *sh;                    /* owned copy: AUTO's shares move at epoch ends */
  tsr_replicas_t *rep;                    /* NULL with one process */
  tsr_rank_work_t *work;                  /* under MPI: [size], every rank's, grid rows included */
  int32_t *idx;                           /* [train->n] the epoch's order of samples */
  tsr_rank_traffic_t *traffic, grid_seen; /* under a grid: each epoch's transfers per rank (on
                                             rank 0), and what was counted so far */
  uint64_t *measured_seen;                /* under a grid: [size] StarPU-MPI's count so far */
  int pr, size;
  bool speaker;    /* rank 0 reports and logs */
  bool evaluator;  /* its grid column evaluates (rank 0 alone without) */
  bool remeasured; /* --shares auto re-measured at every epoch end (shards follow the shares) */
  double base_lr;
  int64_t total_steps;        /* of the run: the schedule's T */
  int first;                  /* the first epoch to run */
  int64_t step;               /* steps taken in the run */
  int64_t seen_before;        /* samples of all replicas in the epochs before this one */
  bool started;               /* start_run succeeded */
  bool stopped;               /* on request, before the last epoch */
  bool told;                  /* err says why training stopped */
  bool ended;                 /* early stopping ended the run (every rank agreeing) */
  tsr_schedule_state_t state; /* plateau's and early stopping's (rank 0's, every rank's copy) */
  char why_ended[200];        /* rank 0: why early stopping ended it */
  tsr_rank_stats_t totals;    /* this rank's totals (under MPI) */
  checkpoint_t cp;
  int *counts; /* [size] samples each rank takes in the current step */
} run_t;

/* One epoch's running numbers. */
typedef struct {
  int e;
  const int32_t *mine;          /* this replica's shard of the order */
  int64_t my_samples, my_steps; /* this rank's */
  int64_t seen;                 /* samples of all replicas */
  double t0, last_progress, computed;
  /* At the last step line (on_step): the time, the samples of all replicas, rank 0's sums. */
  double line_t;
  int64_t line_seen;
  double line_loss, line_correct, line_samples;
} epoch_t;

static int check_opts(const tsr_train_opts_t *o, tsr_errbuf_t *err) {
  if (o->epochs < 0 || o->window < 1 || o->schedule_epochs < 0)
    return tsr_error_set(err, TSR_EINVAL,
                         "epochs and schedule_epochs must be >= 0 and the window >= 1");
  bool validated = o->validation && o->validation->n > 0;
  if (!validated && (o->lr_schedule == TSR_LR_PLATEAU || o->early_stop > 0))
    return tsr_error_set(err, TSR_EINVAL,
                         "%s follows the validation loss, but the run has no validation set: "
                         "hold part of the training set out (--val-split F, e.g. 0.1)",
                         o->early_stop > 0 ? "early stopping" : "the plateau schedule");
  if (o->lr.warmup < 0 || o->early_stop < 0)
    return tsr_error_set(err, TSR_EINVAL, "the warm-up and early stopping's patience must be >= 0");
  if ((unsigned)o->lr_scaling > TSR_LR_SCALING_NONE)
    return tsr_error_set(err, TSR_EINVAL,
                         "lr_scaling %d: expected TSR_LR_SCALING_AUTO, _LINEAR or _NONE",
                         (int)o->lr_scaling);
  return 0;
}

/* The setup, the replicas (under MPI) and the buffers; the rate and where the run starts. */
static int start_run(run_t *r) {
  const tsr_train_opts_t *o = r->o;
  r->pr = tsr_net_grid_rows(r->net), r->size = tsr_dist_size();
  if (!(r->sh = calloc(1, sizeof *r->sh)))
    return tsr_error_set(r->err, TSR_ENOMEM, "out of memory for the run's setup");
  TSR_TRY(set_up(r->sh, r->net, r->train, o, r->err));
  const tsr_run_setup_t *sh = r->sh;
  r->remeasured = sh->shares.kind == TSR_SHARES_AUTO && !sh->step_sync && sh->replicas > 1;
  if (r->size > 1 && !(r->work = calloc((size_t)r->size, sizeof *r->work)))
    return tsr_error_set(r->err, TSR_ENOMEM, "out of memory for the ranks' work");
  if (r->size > 1) {
    /* Uneven shares: each rank homes chunks in proportion to its share. */
    bool uneven = sh->shares.kind != TSR_SHARES_UNIFORM && sh->shares.n == sh->replicas;
    TSR_TRY(tsr__replicas_create(&r->rep, r->net, &sh->sync, uneven ? sh->share : NULL, r->err));
    if (o->resume_path) TSR_TRY(restore(r->rep, r->net, o, r->err));
  }
  r->idx = malloc(sizeof(int32_t) * (size_t)r->train->n);
  r->counts = malloc(sizeof *r->counts * (size_t)r->size);
  if (r->pr > 1) {
    r->traffic = calloc((size_t)r->size, sizeof *r->traffic);
    r->measured_seen = calloc((size_t)r->size, sizeof *r->measured_seen);
    if (r->traffic && r->measured_seen) tsr_runtime_bytes_sent(r->measured_seen);
  }
  if (!r->idx || !r->counts || (r->pr > 1 && (!r->traffic || !r->measured_seen)))
    return tsr_error_set(r->err, TSR_ENOMEM, "out of memory for the sample order");
  r->speaker = tsr_dist_rank() == 0;
  r->evaluator = sh->replica == 0;
  r->base_lr = tsr_train_base_lr(r->net, o);
  r->total_steps = sh->steps * horizon(o);
  tsr_net_set_lr(r->net, (float)r->base_lr); /* a constant schedule's rate */
  r->first = o->start_epoch > 1 ? o->start_epoch : 1;
  r->step = (int64_t)(r->first - 1) * sh->steps + o->start_step;
  r->totals = (tsr_rank_stats_t){.rank = tsr_dist_rank()};
  if (o->start_state)
    r->state = *o->start_state;
  else
    tsr_schedule_state_init(&r->state);
  r->cp = (checkpoint_t){r->net, r->rep, o,  sh->steps, r->size, (float)r->base_lr,
                         r->err, "",     "", &r->state};
  return 0;
}

/* The epoch's order and shard, and the policy's hook; the step it starts from in *k. */
static int begin_epoch(run_t *r, epoch_t *ep, int e, int64_t *k) {
  const tsr_train_opts_t *o = r->o;
  if (r->remeasured && e > r->first) { /* the shares measured in the last epoch */
    TSR_TRY(tsr__run_shard(r->sh, r->err));
    r->cp.steps = r->sh->steps, r->total_steps = r->sh->steps * horizon(o);
  }
  *ep = (epoch_t){.e = e, .mine = r->idx + r->sh->lo[r->sh->replica]};
  tsr_dataset_epoch_order(r->idx, r->train->n, o->seed, o->shuffle ? e : 0);
  tsr_net_set_epoch(r->net, e); /* the epoch's augmentation draws (tessera/augment.h) */
  ep->t0 = ep->last_progress = ep->line_t = now();
  *k = e == r->first ? o->start_step : 0;
  return r->rep ? tsr__replicas_epoch_begin(r->rep, e, r->step) : 0;
}

/* on_step after step k of the epoch: rank 0's loss since the last line, once its steps ran. */
static int step_line(run_t *r, epoch_t *ep, int64_t k) {
  double loss_sum, correct, t;
  TSR_TRY(tsr_net_read_stats(r->net, false, &loss_sum, &correct));
  t = now();
  double n = ep->line_samples > 0 ? ep->line_samples : 1;
  tsr_step_stats_t s = {.epoch = ep->e,
                        .step = r->step,
                        .step_in_epoch = k + 1,
                        .steps = r->sh->steps,
                        .loss = (loss_sum - ep->line_loss) / n,
                        .accuracy = (correct - ep->line_correct) / n,
                        .lr = tsr_net_lr(r->net),
                        .samples_per_s = (double)(ep->seen - ep->line_seen) / (t - ep->line_t),
                        .seconds = t - ep->t0};
  ep->line_t = t, ep->line_seen = ep->seen, ep->line_samples = 0;
  ep->line_loss = loss_sum, ep->line_correct = correct;
  int rc = r->o->on_step(&s, r->o->ctx);
  return rc > 0 ? TSR_EINVAL : rc;
}

/* Whether every replica holds the same weights now (none: one replica). */
static bool agreed(tsr_replicas_t *rep) {
  tsr__replicas_saved_t now;
  return !rep || (tsr__replicas_checkpoint(rep, false, &now) == 0 && now.agreed);
}

/* --eval-every after step k of the epoch: the validation set (else the test set) evaluated by
 * the evaluating column, on_eval on rank 0. */
static int eval_line(run_t *r, epoch_t *ep, int64_t k) {
  const tsr_train_opts_t *o = r->o;
  const tsr_dataset_t *set = o->validation && o->validation->n > 0 ? o->validation : r->test;
  if (!r->evaluator || !set || set->n == 0) return 0;
  double t0 = now(), s0 = tsr__observe_now();
  tsr__net_label_step(r->net, 0);
  tsr_eval_stats_t s = {.epoch = ep->e,
                        .step = r->step,
                        .step_in_epoch = k + 1,
                        .steps = r->sh->steps,
                        .samples = r->seen_before + ep->seen,
                        .positions = tsr_net_positions(r->net),
                        .set = set == r->test ? "test" : "val",
                        .evaluated = set->n,
                        .agreed = agreed(r->rep)};
  TSR_TRY(tsr_evaluate(r->net, set, &s.loss, &s.accuracy));
  s.seconds = now() - t0;
  if (r->speaker) tsr__observe_span("evaluation", s0, tsr__observe_now());
  if (!r->speaker || !o->on_eval) return 0;
  int rc = o->on_eval(&s, o->ctx);
  if (rc) r->told = true;
  return rc > 0 ? TSR_EINVAL : rc;
}

/* Step k of the epoch: every rank's samples, the rate, the step, the policy's hook, the window,
 * progress, an evaluation, and a checkpoint or a stop between steps. */
static int take_step(run_t *r, epoch_t *ep, int64_t k) {
  const tsr_train_opts_t *o = r->o;
  const tsr_run_setup_t *sh = r->sh;
  tsr_net_t *net = r->net;
  int e = ep->e, pr = r->pr, rc = 0;
  for (int q = 0; q < r->size; q++) {
    r->counts[q] = shard_take(sh, q / pr, k);
    if (q % pr == 0) ep->seen += r->counts[q];
  }
  int here = r->counts[tsr_dist_rank()];
  ep->my_samples += here, ep->my_steps += here > 0;
  /* Averaging gradients, a rank's empty step still updates the chunks it homes. */
  bool homes_update = r->rep && tsr__replicas_count(r->rep, r->counts);
  if (o->lr_schedule != TSR_LR_CONSTANT || o->lr.warmup > 0) {
    int64_t t = (int64_t)((e - 1) * sh->steps + k);
    tsr_net_set_lr(net, (float)tsr_lr_at(o->lr_schedule, &o->lr, r->base_lr, t, e, r->total_steps,
                                         r->state.lr_factor));
  }
  tsr__net_label_step(net, (int64_t)(e - 1) * sh->steps + k + 1);
  /* An empty step of weight averaging takes no update (momentum and decay would still move the
   * weights), and is skipped where no other rank waits for it (a grid column's ranks skip it
   * together); under --sync-bn the others wait for its statistics, so it runs without one. */
  if (here > 0 || sh->step_sync)
    rc = tsr_net_train_step(net, r->train, ep->mine + k * sh->batch[sh->replica], here,
                            here > 0 || !r->rep || homes_update);
  if (rc == 0 && r->rep) rc = tsr__replicas_after_step(r->rep, r->step + 1);
  r->step++;
  if (rc == 0 && k >= o->window) {
    double w0 = tsr__observe_now();
    rc = tsr_net_wait(net, o->window);
    tsr__observe_span("window wait", w0, tsr__observe_now());
  }
  ep->line_samples += here;
  if (rc == 0 && r->speaker && o->on_step && o->log_every > 0 && r->step % o->log_every == 0)
    rc = step_line(r, ep, k);
  if (r->speaker && o->on_progress && now() - ep->last_progress > 0.5) {
    ep->last_progress = now();
    o->on_progress(e, k + 1, sh->steps, ep->last_progress - ep->t0, o->ctx);
  }
  bool mid = k + 1 < sh->steps; /* the epoch end writes its own */
  if (rc == 0 && mid && o->eval_every > 0 && r->step % o->eval_every == 0) rc = eval_line(r, ep, k);
  if (rc == 0 && mid && o->checkpoint_in_steps && o->checkpoint_every > 0 &&
      r->step % o->checkpoint_every == 0)
    rc = write_checkpoint(&r->cp, e - 1, k + 1, false);
  /* A stop on request: one process stops after this step; ranks learn every rank's wish a
   * step late (agreed without a barrier: runtime/agree.h), all at the same step, and write
   * each replica's weights where they differ (between averages). The epoch's last step leaves
   * it to the epoch end. */
  if (rc == 0 && o->should_stop) {
    bool stop = o->should_stop(o->ctx);
    if (r->rep) rc = tsr__dist_any_lagged(stop, &stop);
    if (rc == 0 && stop && mid) {
      r->stopped = true;
      rc = write_checkpoint(&r->cp, e - 1, k + 1, true);
    }
  }
  return rc;
}

/* The epoch's synchronization once this rank's steps are done (their time is its compute
 * time, which --shares auto measures), and its training statistics into *st. */
static int epoch_sums(run_t *r, epoch_t *ep, tsr_epoch_stats_t *st) {
  int rc = r->rep ? tsr_net_wait(r->net, 0) : 0;
  ep->computed = now() - ep->t0;
  double s0 = tsr__observe_now();
  if (rc == 0 && r->rep) rc = tsr__replicas_epoch_end(r->rep, ep->e, ep->e == r->o->epochs);
  if (r->rep) tsr__observe_span("epoch-end synchronization", s0, tsr__observe_now());
  if (rc) return rc;
  double loss_sum, correct; /* both wait for the epoch */
  s0 = tsr__observe_now();
  rc = r->rep ? tsr__replicas_reduce_stats(r->rep, &loss_sum, &correct)
              : tsr_net_take_stats(r->net, false, &loss_sum, &correct);
  tsr__observe_span(r->rep ? "epoch end: reduce stats" : "epoch end: wait", s0, tsr__observe_now());
  double t1 = now();
  /* A resumed epoch reports the steps it ran. */
  *st = (tsr_epoch_stats_t){.epoch = ep->e,
                            .epochs = r->o->epochs,
                            .loss = loss_sum / (double)ep->seen,
                            .train_accuracy = correct / (double)ep->seen,
                            .test_loss = NAN,
                            .test_accuracy = NAN,
                            .val_loss = NAN,
                            .val_accuracy = NAN,
                            .lr_factor = r->state.lr_factor,
                            .seconds = t1 - ep->t0,
                            .samples = ep->seen,
                            .samples_per_s = (double)ep->seen / (t1 - ep->t0),
                            .positions = tsr_net_positions(r->net),
                            .ranks = r->size,
                            .grid_rows = r->pr,
                            .grid_cols = r->size / r->pr,
                            .lr_end = tsr_net_lr(r->net)};
  return rc;
}

/* Under MPI: every rank's work, on every rank (the log's, and --shares auto's measurement), and
 * the synchronization's statistics of the epoch (into *seen too), added to the run's totals. */
static int epoch_work(run_t *r, const epoch_t *ep, tsr_epoch_stats_t *st, tsr_sync_stats_t *seen) {
  tsr_rank_stats_t *totals = &r->totals;
  tsr_rank_work_t mine_w = {.share = r->sh->share[r->sh->replica],
                            .samples = ep->my_samples,
                            .steps = ep->my_steps,
                            .compute_seconds = ep->computed,
                            .wait_seconds = st->seconds - ep->computed};
  TSR_TRY(tsr_dist_allgather(&mine_w, (int)sizeof mine_w, r->work));
  st->work = r->work;
  totals->work.share = mine_w.share;
  totals->work.samples += ep->my_samples, totals->work.steps += ep->my_steps;
  totals->work.compute_seconds += ep->computed, totals->work.wait_seconds += mine_w.wait_seconds;
  if (r->remeasured) remeasure(&r->sh->shares, r->work, r->sh->replicas, r->pr);
  tsr_sync_stats_t ss;
  tsr__replicas_take_stats(r->rep, &ss);
  st->sync_seconds = ss.seconds;
  st->bytes_sent = ss.bytes_sent, st->bytes_received = ss.bytes_received;
  st->messages_sent = ss.messages_sent, st->messages_received = ss.messages_received;
  st->averages = ss.averages, st->group_averages = ss.group_averages;
  totals->seconds += st->seconds, totals->sync_seconds += ss.seconds;
  totals->bytes_sent += ss.bytes_sent, totals->bytes_received += ss.bytes_received;
  totals->messages_sent += ss.messages_sent, totals->messages_received += ss.messages_received;
  *seen = ss;
  return 0;
}

/* Rank 0, once the epoch's validation loss is known: plateau's rate and early stopping, into
 * r->state and st (the other ranks learn them at the epoch end, agree_schedules). */
static void follow_validation(run_t *r, tsr_epoch_stats_t *st) {
  const tsr_train_opts_t *o = r->o;
  if (o->lr_schedule == TSR_LR_PLATEAU)
    st->lr_reduced = tsr_lr_plateau_update(&r->state, &o->lr, r->base_lr, st->val_loss);
  st->lr_factor = r->state.lr_factor;
  if (o->early_stop > 0 &&
      tsr_early_stop_update(&r->state, o->early_stop, st->val_loss, st->epoch) &&
      st->epoch < o->epochs) {
    r->ended = true;
    char since[32] = "the epoch";
    if (o->early_stop > 1) snprintf(since, sizeof since, "the %d epochs", o->early_stop);
    snprintf(r->why_ended, sizeof r->why_ended,
             "early stopping: no validation loss below %.6g (epoch %d's) in %s since",
             r->state.early_best, r->state.early_best_epoch, since);
    st->stopped = r->why_ended;
  }
}

/* Under MPI, rank 0's schedule state and early stop become every rank's. Collective. */
static int agree_schedules(run_t *r) {
  typedef struct {
    tsr_schedule_state_t state;
    int ended;
  } decision_t;
  decision_t mine = {r->state, r->ended}, *all = malloc(sizeof *all * (size_t)r->size);
  if (!all) return tsr_error_set(r->err, TSR_ENOMEM, "out of memory for the schedules' state");
  int rc = tsr_dist_allgather(&mine, (int)sizeof mine, all);
  if (rc == 0) r->state = all[0].state, r->ended = all[0].ended != 0;
  free(all);
  return rc;
}

/* --bn-recompute: the batchnorm statistics of the weights as they are at the epoch end, from
 * the first batches of each rank's shard of the epoch, only steps where every rank has samples
 * (each pass then weighs the same in every rank's mean). Every rank, at once. */
static int recompute_stats(run_t *r, const epoch_t *ep) {
  const tsr_run_setup_t *sh = r->sh;
  int64_t n = r->o->bn_recompute < sh->steps ? r->o->bn_recompute : sh->steps;
  for (int q = 0; q < sh->replicas; q++) /* a shard's samples come first: trim its empty steps */
    while (n > 0 && shard_take(sh, q, n - 1) == 0)
      n--;
  for (int64_t k = 0; k < n; k++) {
    int here = shard_take(sh, sh->replica, k); /* --sync-bn's forward needs no counts */
    TSR_TRY(
        tsr_net_stats_step(r->net, r->train, ep->mine + k * sh->batch[sh->replica], here, (int)k));
  }
  return 0;
}

/* The batchnorm statistics (--bn-recompute), the evaluation, the grid's transfers, on_epoch,
 * and whether the run diverged. */
static int epoch_report(run_t *r, const epoch_t *ep, tsr_epoch_stats_t *st,
                        const tsr_sync_stats_t *sync_seen) {
  const tsr_train_opts_t *o = r->o;
  tsr_net_t *net = r->net;
  const tsr_dataset_t *test = r->test;
  int rc = 0, e = st->epoch;
  tsr__net_label_step(net, 0);
  double t1 = now(), s0 = tsr__observe_now();
  if (o->bn_recompute > 0) rc = recompute_stats(r, ep);
  if (rc == 0 && r->evaluator && test && test->n > 0) {
    rc = tsr_evaluate(net, test, &st->test_loss, &st->test_accuracy);
    st->test_samples = test->n;
  }
  const tsr_dataset_t *val = o->validation;
  if (rc == 0 && r->evaluator && val && val->n > 0) {
    rc = tsr_evaluate(net, val, &st->val_loss, &st->val_accuracy);
    st->val_samples = val->n;
  }
  if (r->speaker && ((test && test->n > 0) || st->val_samples > 0))
    tsr__observe_span("evaluation", s0, tsr__observe_now());
  st->eval_seconds = now() - t1;
  if (rc == 0 && r->speaker && st->val_samples > 0) follow_validation(r, st);
  /* Grid: the epoch's transfers per rank, its evaluation's (column 0) included. */
  if (r->traffic && rc == 0)
    rc = epoch_traffic(net, sync_seen, &r->grid_seen, r->measured_seen, r->traffic);
  if (r->traffic) st->per_rank = r->traffic;
  if (rc == 0 && r->speaker && o->on_epoch && (rc = o->on_epoch(st, o->ctx)) != 0) {
    r->told = true; /* the callback says why, in err if it wants to */
    if (rc > 0) rc = TSR_EINVAL;
  }
  /* Checked once the epoch's line is out, from the sums the epoch end reads anyway: which step
   * went first would cost a wait per step. */
  bool train_bad = !isfinite(st->loss), test_bad = st->test_samples > 0 && !isfinite(st->test_loss);
  bool val_bad = st->val_samples > 0 && !isfinite(st->val_loss);
  if (rc == 0 && r->speaker && (train_bad || test_bad || val_bad)) {
    rc = tsr_error_set(r->err, TSR_EDIVERGED,
                       "training diverged in epoch %d (steps %lld to %lld): the mean %s loss is "
                       "%s: weights or activations overflowed (a lower learning rate usually "
                       "helps)",
                       e, (long long)((e - 1) * r->sh->steps + 1), (long long)(e * r->sh->steps),
                       train_bad  ? "training"
                       : test_bad ? "test"
                                  : "validation",
                       nonfinite_text(train_bad  ? st->loss
                                      : test_bad ? st->test_loss
                                                 : st->val_loss));
    r->told = true;
  }
  return rc; /* under MPI this rank's alone, maybe: its caller stops the others */
}

/* The epoch's end: synchronization, statistics, report; then a stop on request (every rank
 * agreeing) and the checkpoint when one is due. */
static int end_epoch(run_t *r, epoch_t *ep) {
  const tsr_train_opts_t *o = r->o;
  tsr_epoch_stats_t st;
  tsr_sync_stats_t sync_seen = {0};
  int e = ep->e;
  TSR_TRY(epoch_sums(r, ep, &st));
  if (r->rep) TSR_TRY(epoch_work(r, ep, &st, &sync_seen));
  /* What rank 0 decided (divergence, a log line that could not be written) becomes every
   * rank's, with its message: all of them stop here, cleanly, with the same error. */
  int report_rc = epoch_report(r, ep, &st, &sync_seen);
  if (r->rep) report_rc = tsr_dist_agree(report_rc, r->err, r->err);
  if (report_rc) return report_rc;
  if (r->rep && (o->lr_schedule == TSR_LR_PLATEAU || o->early_stop > 0))
    TSR_TRY(agree_schedules(r));
  bool stop = o->should_stop && o->should_stop(o->ctx);
  if (r->rep) stop = tsr__dist_any_settle(stop); /* the last step's agreement too */
  /* Every N epochs, or every N steps where the N-th falls on the epoch's last step (take_step
   * leaves that one to the epoch's end: skipped, a kill there lost up to 2N - 1 steps). */
  bool due =
      e == o->epochs || stop || r->ended ||
      (o->checkpoint_every > 0 && (o->checkpoint_in_steps ? r->step % o->checkpoint_every == 0
                                                          : e % o->checkpoint_every == 0));
  int rc = due ? write_checkpoint(&r->cp, e, 0, stop) : 0;
  r->stopped = stop && e < o->epochs;
  return rc;
}

static int train_epoch(run_t *r, int e) {
  epoch_t ep;
  int64_t k;
  int rc = begin_epoch(r, &ep, e, &k);
  for (; k < r->sh->steps && rc == 0 && !r->stopped; k++)
    rc = take_step(r, &ep, k);
  if (rc || r->stopped) return rc;
  r->seen_before += ep.seen;
  return end_epoch(r, &ep);
}

/* Every rank's totals reported, the replicas and buffers released, and what tsr_train returns
 * for rc: a stop on request, an error said once. */
static int finish_run(run_t *r, int rc) {
  const tsr_train_opts_t *o = r->o;
  tsr_errbuf_t *err = r->err;
  free(r->idx), free(r->counts), free(r->traffic), free(r->measured_seen), free(r->work);
  tsr_run_setup_fini(r->sh), free(r->sh);
  if (rc == 0 && r->rep) rc = report_ranks(&r->totals, o);
  /* Releasing the replicas waits for every rank (StarPU-MPI's barrier): after an error on this
   * rank alone the others never come, so they are left to the caller's tsr_dist_abort. A
   * failed start is every rank's (the setup's checks are the same everywhere), and so is an
   * error the ranks agreed on (a checkpoint that could not be written, divergence). */
  if (rc == 0 || !r->rep || !r->started || tsr_dist_agreed(rc)) tsr__replicas_destroy(&r->rep);
  if (rc == 0 && r->stopped) {
    if (o->checkpoint_path && !r->cp.written[0])
      return tsr_error_set(err, TSR_ESTOPPED,
                           "stopped on request after %s; the replicas differed there and at every "
                           "point since the start (between averages), so this run wrote no "
                           "checkpoint to %s",
                           r->cp.where, o->checkpoint_path);
    if (o->checkpoint_path)
      return tsr_error_set(err, TSR_ESTOPPED,
                           "stopped on request; the checkpoint %s holds %s: continue with --resume "
                           "%s",
                           o->checkpoint_path, r->cp.written, o->checkpoint_path);
    return tsr_error_set(err, TSR_ESTOPPED, "stopped on request after %s (no checkpoint asked for)",
                         r->cp.where);
  }
  if (rc && (r->told || (err && err->msg[0]))) return rc; /* already said what went wrong */
  if (rc) return tsr_error_set(err, rc, "training stopped: %s", tsr_strerror(rc));
  return 0;
}

/* --bn-recompute needs statistics to recompute. */
static int check_net(const tsr_net_t *net, const tsr_train_opts_t *o, tsr_errbuf_t *err) {
  int stats = 0;
  for (int i = 0; i < net->n_layers; i++)
    stats += net->layers[i].lay->type->batch_stats;
  if (o->bn_recompute > 0 && stats == 0)
    return tsr_error_set(err, TSR_EINVAL,
                         "--bn-recompute: the model has no batchnorm layer, so there are no "
                         "running statistics to recompute; leave --bn-recompute out");
  return 0;
}

int tsr_train(tsr_net_t *net, const tsr_dataset_t *train, const tsr_dataset_t *test,
              const tsr_train_opts_t *o, tsr_errbuf_t *err) {
  TSR_TRY(check_opts(o, err));
  TSR_TRY(check_net(net, o, err));
  run_t *r = calloc(1, sizeof *r);
  if (!r) return tsr_error_set(err, TSR_ENOMEM, "out of memory for the run");
  *r = (run_t){.net = net, .train = train, .test = test, .o = o, .err = err};
  int rc = start_run(r);
  r->started = rc == 0;
  for (int e = r->first; rc == 0 && e <= o->epochs && !r->stopped && !r->ended; e++)
    rc = train_epoch(r, e);
  rc = finish_run(r, rc);
  free(r);
  return rc;
}
