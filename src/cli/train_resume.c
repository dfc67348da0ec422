/* tessera train --resume: the run a checkpoint was part of goes on (docs/checkpoints.md,
 * "Writing and resuming"). --resume auto is the --checkpoint FILE when it exists and a new run
 * otherwise (a requeued batch job). A checkpoint records what decides the rest of its run (tessera/
 * checkpoint.h): each of those options that is not given takes the checkpoint's value, the
 * model included; one given with another value is refused in one line naming the option, the
 * checkpoint's value and the given one. Two keep rules of their own: the schedule's horizon is
 * the checkpoint's unless --schedule-epochs says otherwise (a note, refused under
 * --deterministic, which promises the digits of an uninterrupted run), and augmentation is
 * what --crop and --flip say (another than the checkpoint's: a note from
 * tsr_checkpoint_resume_check, refused under --deterministic). Only options are read here; the
 * checkpoint's contents are the library's to check (tsr_checkpoint_load). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/train_config.h"
#include "tessera/tessera.h"

typedef struct {
  tsr_cli_train_config_t *cfg;
  const char *path;
  bool speaker;
  int status; /* 2 once a given option differs */
} resume_t;

/* Whether the checkpoint's value of option `name` is taken: true when the option was not given;
 * false when it was, and refused (said, status 2) where its value now differs from then's. */
static bool take(resume_t *r, const char *name, const char *then, const char *now) {
  if (!tsr__cli_train_given(r->cfg, name)) return true;
  if (strcmp(then, now) != 0) {
    if (r->speaker)
      fprintf(stderr,
              "tessera train: --resume %s: --%s %s, but its run has %s; leave --%s out to "
              "continue that run (or start a new one without --resume)\n",
              r->path, name, now, then, name);
    r->status = 2;
  }
  return false;
}

static bool take_float(resume_t *r, const char *name, float then, float now) {
  char a[32], b[32];
  tsr_float_text(a, sizeof a, then);
  tsr_float_text(b, sizeof b, now);
  return take(r, name, a, b);
}

/* A count where 0 means none (--warmup, --early-stop). */
static bool take_count(resume_t *r, const char *name, int then, int now) {
  char a[24] = "none", b[24] = "none";
  if (then > 0) snprintf(a, sizeof a, "%d", then);
  if (now > 0) snprintf(b, sizeof b, "%d", now);
  return take(r, name, a, b);
}

/* The schedule's horizon: the checkpoint's, or --schedule-epochs (a note; under
 * --deterministic refused); a checkpoint of before has none recorded. */
static void take_horizon(resume_t *r, const tsr_checkpoint_info_t *was) {
  tsr_train_opts_t *t = &r->cfg->train;
  if (!was->settings) {
    if (r->speaker)
      fprintf(stderr,
              "tessera train: note: --resume %s was written before checkpoints recorded the "
              "schedule's horizon, the batch, gradient clipping and label smoothing: the "
              "schedule runs over this run's --epochs and those options are as given, as "
              "before\n",
              r->path);
    return;
  }
  int asked = t->schedule_epochs;
  if (asked == 0) {
    t->schedule_epochs = was->schedule_epochs; /* 0 (a library's file without one): --epochs */
  } else if (was->schedule_epochs > 0 && asked != was->schedule_epochs) {
    bool refuse = r->cfg->sync.deterministic;
    if (r->speaker)
      fprintf(stderr,
              "tessera train: %s--resume %s: --schedule-epochs %d, but its run's schedule has a "
              "horizon of %d epochs: from here the rate follows a %d-epoch schedule, which no "
              "uninterrupted run does%s\n",
              refuse ? "" : "note: ", r->path, asked, was->schedule_epochs, asked,
              refuse ? " (--deterministic promises one); leave --schedule-epochs out" : "");
    if (refuse) r->status = 2;
  }
  if (r->speaker && !r->status && t->lr_schedule == TSR_LR_COSINE && t->schedule_epochs > 0 &&
      t->epochs > t->schedule_epochs)
    fprintf(stderr,
            "tessera train: note: --resume %s: the cosine schedule keeps its run's horizon of %d "
            "epochs; epochs %d to %d go past it, where the rate rises again (as PyTorch's "
            "CosineAnnealingLR past T_max); --schedule-epochs N sets another horizon\n",
            r->path, t->schedule_epochs, t->schedule_epochs + 1, t->epochs);
}

/* The optimizer, its rate, momentum and decay: the checkpoint's, or refused where given
 * otherwise. */
static void take_optimizer(resume_t *r, const tsr_net_opts_t *saved) {
  tsr_cli_train_config_t *cfg = r->cfg;
  const char *then = tsr_optimizer_name(&saved->opt), *now = tsr_optimizer_name(&cfg->run.net.opt);
  bool named = tsr__cli_train_given(cfg, "optimizer") || tsr__cli_train_given(cfg, "nesterov");
  if (named && strcmp(then, now) != 0) {
    if (r->speaker)
      fprintf(stderr,
              "tessera train: --resume %s: --optimizer %s, but its run has %s; leave "
              "--optimizer out to continue that run\n",
              r->path, now, then);
    r->status = 2;
  }
  take_float(r, "lr", saved->opt.lr, cfg->run.net.opt.lr);
  take_float(r, "momentum", saved->opt.momentum, cfg->run.net.opt.momentum);
  take_float(r, "weight-decay", saved->opt.weight_decay, cfg->run.net.opt.weight_decay);
  if (!r->status) cfg->run.net.opt = saved->opt; /* what was given equals it */
}

/* The schedule, its warm-up and early stopping. */
static void take_schedule(resume_t *r, const tsr_checkpoint_info_t *was) {
  tsr_train_opts_t *t = &r->cfg->train;
  char then[256], now[256];
  tsr_lr_schedule_describe(was->lr_schedule, &was->lr, then, sizeof then);
  tsr_lr_schedule_describe(t->lr_schedule, &t->lr, now, sizeof now);
  bool schedule = take(r, "lr-schedule", then, now);
  bool warmup = take_count(r, "warmup", was->lr.warmup, t->lr.warmup);
  int asked_warmup = t->lr.warmup;
  if (schedule) t->lr_schedule = was->lr_schedule, t->lr = was->lr;
  t->lr.warmup = warmup ? was->lr.warmup : asked_warmup;
  if (take_count(r, "early-stop", was->early_stop, t->early_stop)) t->early_stop = was->early_stop;
}

/* The data's handling: the held-out fraction. */
static void take_val_split(resume_t *r, const tsr_checkpoint_info_t *was) {
  tsr_cli_train_config_t *cfg = r->cfg;
  char then[32] = "none", now[32] = "none";
  if (was->val_split > 0) snprintf(then, sizeof then, "%g", was->val_split);
  if (cfg->val_split > 0) snprintf(now, sizeof now, "%g", cfg->val_split);
  if (take(r, "val-split", then, now)) cfg->val_split = was->val_split;
}

/* What only a checkpoint since issue 40 records: the batch, clipping, label smoothing. The
 * batch is each replica's (a rank, or a grid column): on as many replicas as the checkpoint's
 * run it is the checkpoint's; on another number (a resharded resume) it is --batch's, as the
 * user keeps the global batch or not (docs/checkpoints.md). */
static void take_settings(resume_t *r, const tsr_checkpoint_info_t *was) {
  tsr_net_opts_t *n = &r->cfg->run.net;
  if (!was->settings) return;
  int then_replicas = was->ranks / (was->grid_rows > 1 ? was->grid_rows : 1);
  int replicas = tsr_dist_size() / (n->grid_rows > 1 ? n->grid_rows : 1);
  char then[24], now[24];
  snprintf(then, sizeof then, "%d", was->batch);
  snprintf(now, sizeof now, "%d", n->batch);
  if (replicas == then_replicas && take(r, "batch", then, now)) n->batch = was->batch;
  if (take_float(r, "clip-grad", was->clip_grad, n->clip_grad)) n->clip_grad = was->clip_grad;
  if (take_float(r, "label-smoothing", was->label_smoothing, n->label_smoothing))
    n->label_smoothing = was->label_smoothing;
}

/* --resume auto: the checkpoint if it is there, else a new run. */
static void resolve_auto(tsr_cli_train_config_t *cfg, bool speaker) {
  if (!cfg->resume || strcmp(cfg->resume, "auto") != 0) return;
  if (access(cfg->checkpoint, F_OK) == 0) {
    cfg->resume = cfg->checkpoint;
    return;
  }
  cfg->resume = NULL;
  if (speaker)
    fprintf(stderr, "tessera train: --resume auto: no checkpoint %s yet: a new run\n",
            cfg->checkpoint);
}

int tsr__cli_train_resume(tsr_cli_train_config_t *cfg, bool speaker) {
  resolve_auto(cfg, speaker);
  if (!cfg->resume) return 0;
  tsr_checkpoint_info_t was;
  tsr_net_opts_t saved;
  tsr_errbuf_t err = {""};
  if (tsr_checkpoint_read(cfg->resume, &was, NULL, &saved, NULL, NULL, &err)) {
    if (speaker) fprintf(stderr, "tessera train: --resume %s\n", err.msg);
    return 1;
  }
  resume_t r = {.cfg = cfg, .path = cfg->resume, .speaker = speaker};
  /* The log's configuration says null for a model it did not give: its run line's "resumed"
   * names the checkpoint, and the epochs' lines the model. */
  if (!tsr__cli_train_given(cfg, "model"))
    cfg->model_from_checkpoint = cfg->model_file = true, cfg->model = NULL;
  if (!tsr__cli_train_given(cfg, "epochs")) cfg->train.epochs = was.epochs;
  char then[24], now[24];
  snprintf(then, sizeof then, "%llu", (unsigned long long)was.seed);
  snprintf(now, sizeof now, "%llu", (unsigned long long)cfg->train.seed);
  if (take(&r, "seed", then, now)) cfg->run.net.seed = saved.seed, cfg->train.seed = was.seed;
  take_optimizer(&r, &saved);
  take_schedule(&r, &was);
  take_val_split(&r, &was);
  take_settings(&r, &was);
  if (!r.status) take_horizon(&r, &was);
  return r.status;
}
