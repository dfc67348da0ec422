/* The training loop. The main thread only submits: each epoch's batches go
 * to the runtime as tasks, with at most `window` steps in flight so memory
 * stays flat, and the thread waits only where a user sees a result (the
 * epoch's evaluation and log line). */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "parallel/replicas.h"
#include "runtime/observe.h"
#include "runtime/progress.h"
#include "tessera/runtime.h"
#include "tessera/train.h"
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

/* The run's policy: its setup's, or opts'; NULL: none. */
static const tsr_sync_t *policy_of(const tsr_train_opts_t *o) {
  return o->setup ? &o->setup->sync : o->sync;
}

float tsr_train_base_lr(const tsr_net_t *net, const tsr_train_opts_t *o) {
  tsr_lr_scaling_t s = o->lr_scaling;
  const tsr_sync_t *sync = policy_of(o);
  if (s == TSR_LR_SCALING_AUTO)
    s = sync && tsr_sync_traits(&sync->schedule)->meets_every_step &&
                net->opts.opt.kind == TSR_OPT_SGD
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

/* --shares auto, where shards follow the shares: each rank's samples per second of compute in
 * the epoch, the same numbers on every rank (exchanged), become the next epoch's shares. A
 * rank is kept at 1% of the even share at least, so that it is measured again. */
static void remeasure(tsr_shares_t *shares, const tsr_rank_work_t *work, int ranks) {
  double rate[TSR_MAX_RANKS], sum = 0;
  for (int q = 0; q < ranks; q++) {
    rate[q] = work[q].compute_seconds > 0 ? (double)work[q].samples / work[q].compute_seconds : 0;
    if (!(rate[q] > 0) || !isfinite(rate[q])) return; /* nothing measured: keep the shares */
    sum += rate[q];
  }
  for (int q = 0; q < ranks; q++) {
    double w = rate[q] / sum;
    shares->w[q] = w < 0.01 / ranks ? 0.01 / ranks : w;
  }
  shares->n = ranks;
}

int tsr_train_calibrate(tsr_net_t *net, const tsr_dataset_t *ds, double seconds,
                        tsr_shares_t *shares, tsr_errbuf_t *err) {
  int ranks = tsr_dist_size(), b = tsr_net_batch(net);
  if (ranks > TSR_SHARES_MAX || ds->n <= 0 || !(seconds > 0))
    return tsr_error_set(err, TSR_EINVAL, "cannot measure shares: %d ranks, %lld samples, %g s",
                         ranks, (long long)ds->n, seconds);
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)b);
  if (!rows) return tsr_error_set(err, TSR_ENOMEM, "out of memory measuring shares");
  (void)tsr_dist_any(false); /* start together */
  double t0 = now(), t = t0;
  int64_t samples = 0;
  int rc = 0;
  for (int64_t k = 0; rc == 0 && t - t0 < seconds; k++) {
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
  double *all = malloc(sizeof(double) * (size_t)ranks);
  if (!all) return tsr_error_set(err, TSR_ENOMEM, "out of memory measuring shares");
  int rc2 = tsr_dist_allgather(&rate, (int)sizeof rate, all);
  if (rc == 0 && rc2 == 0) {
    tsr_rank_work_t work[TSR_SHARES_MAX];
    for (int q = 0; q < ranks; q++)
      work[q] = (tsr_rank_work_t){.samples = 1000000, .compute_seconds = 1e6 / all[q]};
    shares->kind = TSR_SHARES_AUTO;
    tsr_shares_get(NULL, ranks, shares->w), shares->n = ranks;
    remeasure(shares, work, ranks);
  }
  free(all);
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
  char where[64]; /* the last point reached ("epoch 2 step 31") */
} checkpoint_t;

/* Writes o->checkpoint_path (if set) with epoch epochs done and step steps
 * of the next: on rank 0, once the replicas agree and hold the whole
 * optimizer state, every rank learning whether it worked. Under MPI a point
 * where replicas differ (local SGD between averages) is skipped: the next
 * agreeing one writes. */
static int write_checkpoint(checkpoint_t *cp, int epoch, int64_t step) {
  snprintf(cp->where, sizeof cp->where, step ? "epoch %d step %lld" : "epoch %d", epoch + !!step,
           (long long)step);
  if (!cp->o->checkpoint_path) return 0;
  if (cp->rep && !tsr__replicas_agree(cp->rep)) return 0;
  int rc = cp->rep ? tsr__replicas_share_state(cp->rep) : 0;
  if (rc == 0) rc = tsr_net_wait(cp->net, 0);
  tsr_checkpoint_info_t info = {0};
  if (cp->o->checkpoint_info) info = *cp->o->checkpoint_info;
  info.epoch = epoch, info.step_in_epoch = step, info.epochs = cp->o->epochs;
  info.seed = cp->o->seed, info.lr_schedule = cp->o->lr_schedule, info.base_lr = cp->base_lr;
  info.ranks = cp->ranks;
  if (policy_of(cp->o) && cp->ranks > 1)
    tsr_sync_describe(policy_of(cp->o), info.sync, sizeof info.sync);
  else
    snprintf(info.sync, sizeof info.sync, "none");
  tsr_errbuf_t mine = {""};
  if (rc == 0 && tsr_dist_rank() == 0)
    rc = tsr_checkpoint_save(cp->net, &info, cp->o->checkpoint_path, &mine);
  if (cp->rep) return tsr_dist_agree(rc, &mine, cp->err);
  if (rc && cp->err) *cp->err = mine;
  return rc;
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
  tsr_rank_traffic_t mine = {
      .rank = me,
      .grid_bytes_sent = now_.grid_bytes_sent - grid_seen->grid_bytes_sent,
      .grid_bytes_received = now_.grid_bytes_received - grid_seen->grid_bytes_received,
      .grid_messages_sent = now_.grid_messages_sent - grid_seen->grid_messages_sent,
      .grid_messages_received = now_.grid_messages_received - grid_seen->grid_messages_received,
      .sync_bytes_sent = ss->bytes_sent,
      .sync_bytes_received = ss->bytes_received,
      .sync_messages_sent = ss->messages_sent,
      .sync_messages_received = ss->messages_received};
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
 * tsr_run_check), or the setup tsr_run_setup makes from the net, o's policy and shares. */
static int set_up(tsr_run_setup_t *s, const tsr_net_t *net, const tsr_dataset_t *train,
                  const tsr_train_opts_t *o, tsr_errbuf_t *err) {
  tsr_run_config_t c;
  tsr_run_config_init(&c);
  c.net = net->opts;
  c.net.batch = tsr_net_batch(net), c.net.grid_rows = tsr_net_grid_rows(net);
  c.samples = train->n, c.checkpoint = o->checkpoint_path != NULL;
  c.memory = -1; /* the net is built */
  if (!o->setup) {
    c.sync = o->sync, c.shares = o->shares, c.global_batch = o->global_batch;
    TSR_TRY(tsr_run_setup(s, &c, err));
  } else {
    *s = *o->setup;
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

int tsr_train(tsr_net_t *net, const tsr_dataset_t *train, const tsr_dataset_t *test,
              const tsr_train_opts_t *o, tsr_errbuf_t *err) {
  if (o->epochs < 0 || o->window < 1)
    return tsr_error_set(err, TSR_EINVAL, "epochs must be >= 0 and the window >= 1");
  if ((unsigned)o->lr_scaling > TSR_LR_SCALING_NONE)
    return tsr_error_set(err, TSR_EINVAL,
                         "lr_scaling %d: expected TSR_LR_SCALING_AUTO, _LINEAR or _NONE",
                         (int)o->lr_scaling);
  int pr = tsr_net_grid_rows(net), size = tsr_dist_size();
  /* The run's setup: the caller's, or one made here; a copy, since AUTO's shares move at epoch
   * ends. */
  tsr_run_setup_t *sh = malloc(sizeof *sh);
  if (!sh) return tsr_error_set(err, TSR_ENOMEM, "out of memory for the run's setup");
  int rc = set_up(sh, net, train, o, err);
  if (rc) {
    free(sh);
    return rc;
  }
  bool remeasured = sh->shares.kind == TSR_SHARES_AUTO && !sh->step_sync && sh->replicas > 1;
  /* Every rank's, grid rows included (gathered from all ranks). */
  tsr_rank_work_t *work = size > 1 ? calloc((size_t)size, sizeof *work) : NULL;
  if (size > 1 && !work) {
    free(sh);
    return tsr_error_set(err, TSR_ENOMEM, "out of memory for the ranks' work");
  }
  tsr_replicas_t *rep = NULL;
  if (size > 1) {
    /* Uneven shares: each rank homes chunks in proportion to its share. */
    bool uneven = sh->shares.kind != TSR_SHARES_UNIFORM && sh->shares.n == sh->replicas;
    rc = tsr__replicas_create(&rep, net, &sh->sync, uneven ? sh->share : NULL, err);
    if (rc) {
      free(sh), free(work);
      return rc;
    }
  }
  int32_t *idx = malloc(sizeof(int32_t) * (size_t)train->n);
  /* Under a grid: each epoch's transfers per rank (on rank 0), and what was counted so far. */
  tsr_rank_traffic_t *traffic = NULL, grid_seen = {0};
  uint64_t *measured_seen = NULL;
  if (pr > 1) {
    traffic = calloc((size_t)size, sizeof *traffic);
    measured_seen = calloc((size_t)size, sizeof *measured_seen);
    if (traffic && measured_seen) tsr_runtime_bytes_sent(measured_seen);
    if (!traffic || !measured_seen) free(idx), idx = NULL;
  }
  if (!idx) {
    free(traffic), free(measured_seen);
    tsr__replicas_destroy(&rep);
    free(sh), free(work);
    return tsr_error_set(err, TSR_ENOMEM, "out of memory for the sample order");
  }

  int counts[TSR_MAX_RANKS];
  bool speaker = tsr_dist_rank() == 0; /* rank 0 reports and logs */
  bool evaluator = sh->replica == 0;   /* its grid column evaluates (rank 0 alone without) */
  double base_lr = tsr_train_base_lr(net, o);
  int64_t total_steps = sh->steps * o->epochs;
  tsr_net_set_lr(net, (float)base_lr); /* a constant schedule's rate */
  int first = o->start_epoch > 1 ? o->start_epoch : 1;
  int64_t step = (int64_t)(first - 1) * sh->steps + o->start_step; /* steps taken in the run */
  bool stopped = false;
  bool told = false;                                   /* err says why training stopped */
  tsr_rank_stats_t totals = {.rank = tsr_dist_rank()}; /* this rank's totals (under MPI) */
  checkpoint_t cp = {net, rep, o, sh->steps, size, (float)base_lr, err, ""};
  for (int e = first; e <= o->epochs && rc == 0 && !stopped; e++) {
    if (remeasured && e > first) { /* the shares measured in the last epoch */
      tsr__run_shard(sh);
      cp.steps = sh->steps, total_steps = sh->steps * o->epochs;
    }
    const int32_t *mine = idx + sh->lo[sh->replica];
    int64_t my_samples = 0, my_steps = 0;
    tsr_dataset_epoch_order(idx, train->n, o->seed, o->shuffle ? e : 0);
    double t0 = now(), last_progress = t0;
    int64_t k = e == first ? o->start_step : 0, seen = 0; /* samples of all ranks this epoch */
    if (rep) rc = tsr__replicas_epoch_begin(rep, e, step);
    for (; k < sh->steps && rc == 0 && !stopped; k++) {
      for (int q = 0; q < size; q++) {
        counts[q] = shard_take(sh, q / pr, k);
        if (q % pr == 0) seen += counts[q];
      }
      int here = counts[tsr_dist_rank()];
      my_samples += here, my_steps += here > 0;
      if (rep) tsr__replicas_count(rep, counts);
      if (o->lr_schedule != TSR_LR_CONSTANT) {
        int64_t t = (int64_t)((e - 1) * sh->steps + k);
        tsr_net_set_lr(net, (float)tsr__lr_at(o->lr_schedule, base_lr, t, total_steps));
      }
      tsr__net_label_step(net, (int64_t)(e - 1) * sh->steps + k + 1);
      /* An empty step of weight averaging is skipped: no sample, no update (momentum and
       * decay would still move the weights), and no other rank waits for it (a grid column's
       * ranks skip it together). */
      if (here > 0 || sh->step_sync)
        rc = tsr_net_train_step(net, train, mine + k * sh->batch[sh->replica], here, true);
      if (rc == 0 && rep) rc = tsr__replicas_after_step(rep, step + 1);
      step++;
      if (rc == 0 && k >= o->window) {
        double w0 = tsr__observe_now();
        rc = tsr_net_wait(net, o->window);
        tsr__observe_span("window wait", w0, tsr__observe_now());
      }
      if (speaker && o->on_progress && now() - last_progress > 0.5) {
        last_progress = now();
        o->on_progress(e, k + 1, sh->steps, last_progress - t0, o->ctx);
      }
      bool mid = k + 1 < sh->steps; /* the epoch end writes its own */
      if (rc == 0 && mid && o->checkpoint_in_steps && o->checkpoint_every > 0 &&
          step % o->checkpoint_every == 0)
        rc = write_checkpoint(&cp, e - 1, k + 1);
      /* One process stops after any step; ranks stop together at an epoch end. */
      if (rc == 0 && mid && !rep && o->should_stop && o->should_stop(o->ctx)) {
        stopped = true;
        rc = write_checkpoint(&cp, e - 1, k + 1);
      }
    }
    if (rc || stopped) break;
    /* This rank's own steps done: its compute time (--shares auto measures it). */
    if (rep) rc = tsr_net_wait(net, 0);
    double computed = now() - t0;
    double s0 = tsr__observe_now();
    if (rc == 0 && rep) rc = tsr__replicas_epoch_end(rep, e, e == o->epochs);
    if (rep) tsr__observe_span("epoch-end synchronization", s0, tsr__observe_now());
    if (rc) break;
    double loss_sum, correct; /* both wait for the epoch */
    s0 = tsr__observe_now();
    rc = rep ? tsr__replicas_reduce_stats(rep, &loss_sum, &correct)
             : tsr_net_take_stats(net, false, &loss_sum, &correct);
    tsr__observe_span(rep ? "epoch end: reduce stats" : "epoch end: wait", s0, tsr__observe_now());
    double t1 = now();
    /* A resumed epoch reports the steps it ran. */
    tsr_epoch_stats_t st = {.epoch = e,
                            .epochs = o->epochs,
                            .loss = loss_sum / (double)seen,
                            .train_accuracy = correct / (double)seen,
                            .test_loss = NAN,
                            .test_accuracy = NAN,
                            .seconds = t1 - t0,
                            .samples = seen,
                            .samples_per_s = (double)seen / (t1 - t0),
                            .ranks = size,
                            .grid_rows = pr,
                            .grid_cols = size / pr,
                            .lr_end = tsr_net_lr(net)};
    tsr_sync_stats_t sync_seen = {0};
    if (rep) {
      /* Every rank's work, on every rank: the log's, and --shares auto's measurement. */
      tsr_rank_work_t mine_w = {.share = sh->share[sh->replica],
                                .samples = my_samples,
                                .steps = my_steps,
                                .compute_seconds = computed,
                                .wait_seconds = st.seconds - computed};
      rc = tsr_dist_allgather(&mine_w, (int)sizeof mine_w, work);
      if (rc) break;
      st.work = work;
      totals.work.share = mine_w.share;
      totals.work.samples += my_samples, totals.work.steps += my_steps;
      totals.work.compute_seconds += computed, totals.work.wait_seconds += mine_w.wait_seconds;
      if (remeasured) remeasure(&sh->shares, work, sh->replicas);
      tsr_sync_stats_t ss;
      tsr__replicas_take_stats(rep, &ss);
      st.sync_seconds = ss.seconds;
      st.bytes_sent = ss.bytes_sent, st.bytes_received = ss.bytes_received;
      st.messages_sent = ss.messages_sent, st.messages_received = ss.messages_received;
      st.averages = ss.averages, st.group_averages = ss.group_averages;
      totals.seconds += st.seconds, totals.sync_seconds += ss.seconds;
      totals.bytes_sent += ss.bytes_sent, totals.bytes_received += ss.bytes_received;
      totals.messages_sent += ss.messages_sent, totals.messages_received += ss.messages_received;
      sync_seen = ss;
    }
    tsr__net_label_step(net, 0);
    s0 = tsr__observe_now();
    if (rc == 0 && evaluator && test && test->n > 0) {
      rc = tsr_evaluate(net, test, &st.test_loss, &st.test_accuracy);
      st.test_samples = test->n;
    }
    if (speaker && test && test->n > 0) tsr__observe_span("evaluation", s0, tsr__observe_now());
    st.eval_seconds = now() - t1;
    /* Grid: the epoch's transfers per rank, its evaluation's (column 0) included. */
    if (traffic && rc == 0) rc = epoch_traffic(net, &sync_seen, &grid_seen, measured_seen, traffic);
    if (traffic) st.per_rank = traffic;
    if (rc == 0 && speaker && o->on_epoch && (rc = o->on_epoch(&st, o->ctx)) != 0) {
      told = true; /* the callback says why, in err if it wants to */
      if (rc > 0) rc = TSR_EINVAL;
    }
    /* Checked once the epoch's line is out, from the sums the epoch end reads anyway: which
     * step went first would cost a wait per step. */
    bool train_bad = !isfinite(st.loss), test_bad = st.test_samples > 0 && !isfinite(st.test_loss);
    if (rc == 0 && speaker && (train_bad || test_bad)) {
      rc = tsr_error_set(
          err, TSR_EDIVERGED,
          "training diverged in epoch %d (steps %lld to %lld): the mean %s loss is "
          "%s: weights or activations overflowed (a lower learning rate usually helps)",
          e, (long long)((e - 1) * sh->steps + 1), (long long)(e * sh->steps),
          train_bad ? "training" : "test", nonfinite_text(train_bad ? st.loss : st.test_loss));
      told = true;
    }
    if (rc) break; /* under MPI this rank's alone, maybe: its caller stops the others */
    bool stop = o->should_stop && o->should_stop(o->ctx);
    if (rep) stop = tsr_dist_any(stop);
    bool due = e == o->epochs || stop ||
               (!o->checkpoint_in_steps && o->checkpoint_every > 0 && e % o->checkpoint_every == 0);
    if (rc == 0 && due) rc = write_checkpoint(&cp, e, 0);
    stopped = stop && e < o->epochs;
  }
  free(idx), free(traffic), free(measured_seen), free(sh), free(work);
  if (rc == 0 && rep) rc = report_ranks(&totals, o);
  /* Releasing the replicas waits for every rank (StarPU-MPI's barrier): after an error on this
   * rank alone the others never come, so they are left to the caller's tsr_dist_abort. */
  if (rc == 0 || !rep) tsr__replicas_destroy(&rep);
  if (rc == 0 && stopped) {
    if (o->checkpoint_path)
      return tsr_error_set(err, TSR_ESTOPPED,
                           "stopped on request; the checkpoint %s holds %s: continue with --resume "
                           "%s",
                           o->checkpoint_path, cp.where, o->checkpoint_path);
    return tsr_error_set(err, TSR_ESTOPPED, "stopped on request after %s (no checkpoint asked for)",
                         cp.where);
  }
  if (rc && (told || (err && err->msg[0]))) return rc; /* already said what went wrong */
  if (rc) return tsr_error_set(err, rc, "training stopped: %s", tsr_strerror(rc));
  return 0;
}
