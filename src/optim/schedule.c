/* Learning-rate schedules: the rate of every step (warm-up, then cosine, step decay or
 * plateau's factor), --lr-schedule's text read and written, and the two schedules that follow
 * the validation loss from epoch to epoch (reduce-on-plateau, early stopping), whose state
 * tsr_train keeps and checkpoints record. docs/training.md, "Learning-rate schedules", has the
 * formulas and the PyTorch schedulers each one matches. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
#include "tessera/train.h"

double tsr__lr_at(tsr_lr_schedule_t schedule, double base, int64_t t, int64_t total) {
  if (schedule != TSR_LR_COSINE || total <= 0) return base;
  double progress = (double)t / (double)total;
  return base * 0.5 * (1.0 + cos(M_PI * progress));
}

/* The schedule's rate, then the warm-up's ramp over its first steps: cosine's clock starts
 * after the warm-up (SequentialLR of LinearLR and CosineAnnealingLR); step decay and plateau
 * count epochs and reductions, which the ramp multiplies. */
double tsr_lr_at(tsr_lr_schedule_t kind, const tsr_lr_opts_t *lr, double base, int64_t t, int epoch,
                 int64_t total, double lr_factor) {
  int64_t w = lr ? lr->warmup : 0;
  double rate = base;
  if (kind == TSR_LR_COSINE)
    rate = t < w ? base : tsr__lr_at(kind, base, t - w, total - w);
  else if (kind == TSR_LR_STEP)
    for (int i = 0; lr && i < lr->n_milestones && lr->milestones[i] < epoch; i++)
      rate *= lr->factor;
  else if (kind == TSR_LR_PLATEAU)
    rate = base * lr_factor;
  if (t < w) rate = rate * (double)(t + 1) / (double)w;
  return rate;
}

void tsr_schedule_state_init(tsr_schedule_state_t *s) {
  *s = (tsr_schedule_state_t){.lr_factor = 1.0, .plateau_best = INFINITY, .early_best = INFINITY};
}

/* PyTorch's ReduceLROnPlateau.eps: a reduction smaller than it is not taken. */
#define PLATEAU_EPS 1e-8

bool tsr_lr_plateau_update(tsr_schedule_state_t *s, const tsr_lr_opts_t *lr, double base,
                           double loss) {
  if (loss < s->plateau_best * (1.0 - lr->threshold)) {
    s->plateau_best = loss, s->plateau_bad = 0;
    return false;
  }
  if (++s->plateau_bad <= lr->patience) return false;
  s->plateau_bad = 0;
  double old = base * s->lr_factor, now = old * lr->factor;
  if (!(old - now > PLATEAU_EPS)) return false;
  s->lr_factor *= lr->factor;
  return true;
}

bool tsr_early_stop_update(tsr_schedule_state_t *s, int patience, double loss, int epoch) {
  if (loss < s->early_best) {
    s->early_best = loss, s->early_best_epoch = epoch, s->early_bad = 0;
    return false;
  }
  return ++s->early_bad >= patience;
}

/* ---- --lr-schedule's text ------------------------------------------------ */

/* s as a whole number in [lo, hi] up to end (NULL: the string's end). */
static bool whole(const char *s, const char *stop, long lo, long hi, long *v) {
  char *end;
  errno = 0;
  *v = strtol(s, &end, 10);
  return end != s && end == (stop ? stop : s + strlen(s)) && !errno && *v >= lo && *v <= hi;
}

static bool number(const char *s, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return end != s && !*end && !errno && isfinite(*v);
}

static int bad(tsr_errbuf_t *err, const char *text, const char *why) {
  return tsr_error_set(err, TSR_EINVAL, "--lr-schedule %s: %s", text, why);
}

/* "E1,E2,...:FACTOR" after "step:". */
static int parse_step(const char *text, const char *p, tsr_lr_opts_t *lr, tsr_errbuf_t *err) {
  const char *colon = strchr(p, ':');
  if (!colon || colon == p)
    return bad(err, text, "expected step:E1,E2,...:FACTOR, e.g. step:30,60:0.1");
  lr->n_milestones = 0;
  for (const char *q = p; q < colon;) {
    const char *comma = memchr(q, ',', (size_t)(colon - q));
    const char *stop = comma ? comma : colon;
    long e;
    if (!whole(q, stop, 1, 1000000, &e))
      return bad(err, text, "the epochs must be integers from 1 to 1000000, e.g. step:30,60:0.1");
    if (lr->n_milestones == TSR_LR_MILESTONES) return bad(err, text, "at most 32 epochs");
    if (lr->n_milestones && e <= lr->milestones[lr->n_milestones - 1])
      return bad(err, text, "the epochs must be strictly increasing, e.g. step:30,60:0.1");
    lr->milestones[lr->n_milestones++] = (int)e;
    q = stop + (stop < colon);
    if (comma && q == colon) return bad(err, text, "an epoch is missing after the last comma");
  }
  if (!number(colon + 1, &lr->factor) || !(lr->factor > 0))
    return bad(err, text, "FACTOR must be a number > 0 (0.1 divides the rate by 10)");
  return 0;
}

/* "[:PATIENCE[:FACTOR]]" after "plateau". */
static int parse_plateau(const char *text, const char *p, tsr_lr_opts_t *lr, tsr_errbuf_t *err) {
  lr->patience = 10, lr->factor = 0.1, lr->threshold = 1e-4; /* PyTorch's */
  if (!*p) return 0;
  if (*p++ != ':')
    return bad(err, text,
               "expected plateau, plateau:PATIENCE or "
               "plateau:PATIENCE:FACTOR, e.g. plateau:5:0.5");
  const char *colon = strchr(p, ':');
  long patience;
  if (!whole(p, colon, 0, 1000000, &patience))
    return bad(err, text, "PATIENCE must be an integer from 0 to 1000000 (epochs)");
  lr->patience = (int)patience;
  if (colon && (!number(colon + 1, &lr->factor) || !(lr->factor > 0) || !(lr->factor < 1)))
    return bad(err, text, "FACTOR must be a number in (0, 1) (0.1 divides the rate by 10)");
  return 0;
}

int tsr_lr_schedule_parse(const char *text, tsr_lr_schedule_t *kind, tsr_lr_opts_t *lr,
                          tsr_errbuf_t *err) {
  tsr_lr_opts_t got = *lr;
  tsr_lr_schedule_t k;
  int rc = 0;
  if (strcmp(text, "cosine") == 0)
    k = TSR_LR_COSINE;
  else if (strcmp(text, "constant") == 0)
    k = TSR_LR_CONSTANT;
  else if (strncmp(text, "step:", 5) == 0)
    k = TSR_LR_STEP, rc = parse_step(text, text + 5, &got, err);
  else if (strncmp(text, "plateau", 7) == 0)
    k = TSR_LR_PLATEAU, rc = parse_plateau(text, text + 7, &got, err);
  else
    return bad(err, text,
               "expected cosine, constant, step:E1,E2,...:FACTOR or plateau[:PATIENCE[:FACTOR]]");
  if (rc) return rc;
  *kind = k, *lr = got;
  return 0;
}

/* v as %g when that reads back to v, else with every digit. */
static const char *shortest(double v, char *buf, size_t size) {
  snprintf(buf, size, "%g", v);
  if (strtod(buf, NULL) != v) snprintf(buf, size, "%.17g", v);
  return buf;
}

void tsr_lr_schedule_describe(tsr_lr_schedule_t kind, const tsr_lr_opts_t *lr, char *buf,
                              size_t size) {
  char f[32];
  if (kind == TSR_LR_STEP) {
    size_t n = (size_t)snprintf(buf, size, "step:");
    for (int i = 0; i < lr->n_milestones && n < size; i++)
      n += (size_t)snprintf(buf + n, size - n, "%s%d", i ? "," : "", lr->milestones[i]);
    if (n < size) snprintf(buf + n, size - n, ":%s", shortest(lr->factor, f, sizeof f));
  } else if (kind == TSR_LR_PLATEAU) {
    snprintf(buf, size, "plateau:%d:%s", lr->patience, shortest(lr->factor, f, sizeof f));
  } else {
    snprintf(buf, size, "%s", kind == TSR_LR_COSINE ? "cosine" : "constant");
  }
}
