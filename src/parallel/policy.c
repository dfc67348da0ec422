/* The synchronization policy registry (policy.h): the table of policies, and what is common to
 * all of them: parsing --sync through each one's parse, describing, the traits, and the options
 * orthogonal to the schedule (the outer optimizers, --weighting, their checks). Adding a
 * policy: its file src/parallel/sync_<name>.c with its descriptor, and its line below. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/policy.h"

extern const tsr__sync_policy_t tsr__sync_batch, tsr__sync_every, tsr__sync_epoch,
    tsr__sync_async_epoch, tsr__sync_post_local, tsr__sync_hier, tsr__sync_grow;

/* In the order messages list them. */
static const tsr__sync_policy_t *const policies[] = {
    &tsr__sync_batch,      &tsr__sync_every, &tsr__sync_epoch, &tsr__sync_async_epoch,
    &tsr__sync_post_local, &tsr__sync_hier,  &tsr__sync_grow,  &tsr__sync_none,
};
#define NPOLICIES ((int)(sizeof policies / sizeof *policies))

const tsr__sync_policy_t *tsr__sync_policy(const tsr_sync_schedule_t *s) {
  for (int i = 0; i < NPOLICIES; i++)
    if (policies[i]->kind == s->kind) return policies[i];
  return &tsr__sync_none;
}

const tsr_sync_traits_t *tsr_sync_traits(const tsr_sync_schedule_t *s) {
  return &tsr__sync_policy(s)->traits;
}

#define MAX_COUNT 1000000

int tsr__sync_counts(const char *text, const char *prefix, int n, int optional, int *out) {
  size_t len = strlen(prefix);
  if (strncmp(text, prefix, len) != 0) return -1;
  const char *p = text + len;
  for (int k = 0; k < n; k++) {
    if (k > 0) {
      if (*p == '\0' && k >= n - optional) return 0;
      if (*p++ != ',') return -2;
    }
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > MAX_COUNT) return -2;
    out[k] = (int)v, p = end;
  }
  return *p ? -2 : 0;
}

/* The first policy whose parse claims text: its result in *rc. */
static const tsr__sync_policy_t *claim(tsr_sync_schedule_t *s, const char *text, int *rc) {
  for (int i = 0; i < NPOLICIES; i++) {
    memset(s, 0, sizeof *s);
    s->kind = policies[i]->kind, s->every = 1;
    if ((*rc = policies[i]->parse(s, text)) != -1) return policies[i];
  }
  return NULL;
}

const tsr__sync_policy_t *tsr__sync_policy_claiming(const char *text) {
  tsr_sync_schedule_t s;
  int rc;
  return claim(&s, text, &rc);
}

void tsr__sync_list(char *buf, size_t size, bool (*has)(const tsr_sync_traits_t *), bool synopses) {
  const char *item[4 * NPOLICIES];
  int m = 0, n = 0;
  for (int i = 0; i < NPOLICIES; i++) {
    if (has && !has(&policies[i]->traits)) continue;
    if (synopses) item[m++] = policies[i]->traits.synopsis;
    for (int k = 0; !synopses && policies[i]->forms[k]; k++)
      item[m++] = policies[i]->forms[k];
  }
  buf[0] = '\0';
  for (int i = 0; i < m && n < (int)size; i++)
    n += snprintf(buf + n, size - (size_t)n, "%s%s",
                  i == 0       ? ""
                  : i == m - 1 ? " or "
                               : ", ",
                  item[i]);
}

int tsr_sync_schedule_parse(tsr_sync_schedule_t *s, const char *text, tsr_errbuf_t *err) {
  int rc;
  const tsr__sync_policy_t *p = claim(s, text, &rc);
  if (p && rc == 0) return 0;
  if (p) return tsr_error_set(err, TSR_EINVAL, "--sync %s: the counts must be %s", text, p->counts);
  char forms[256];
  tsr__sync_list(forms, sizeof forms, NULL, false);
  return tsr_error_set(err, TSR_EINVAL, "--sync %s: unknown policy; use %s", text, forms);
}

int tsr_sync_parse(tsr_sync_t *s, const char *text, tsr_errbuf_t *err) {
  memset(s, 0, sizeof *s);
  return tsr_sync_schedule_parse(&s->schedule, text, err);
}

void tsr_sync_schedule_describe(const tsr_sync_schedule_t *s, char *buf, int size) {
  tsr__sync_policy(s)->describe(s, buf, size);
}

static const char *const outer_names[] = {"none", "slowmo", "nesterov"};

void tsr_sync_describe(const tsr_sync_t *s, char *buf, int size) {
  int n = tsr__sync_policy(&s->schedule)->describe(&s->schedule, buf, size);
  if (s->outer.kind != TSR_OUTER_NONE && n >= 0 && n < size)
    snprintf(buf + n, (size_t)(size - n), " %s(%g,%g)", outer_names[s->outer.kind], s->outer.lr,
             s->outer.momentum);
}

int tsr_outer_init(tsr_outer_t *o, const char *name, tsr_errbuf_t *err) {
  static const float lr[] = {1.0f, 1.0f, 0.7f}, momentum[] = {0.0f, 0.5f, 0.9f};
  for (int k = 0; k < 3; k++)
    if (strcmp(name, outer_names[k]) == 0) {
      *o = (tsr_outer_t){(tsr_outer_kind_t)k, lr[k], momentum[k]};
      return 0;
    }
  return tsr_error_set(err, TSR_EINVAL, "--outer %s: unknown; use none, slowmo or nesterov", name);
}

static bool counts_steps(const tsr_sync_traits_t *t) {
  return t->counts_steps;
}

static bool averages_weights(const tsr_sync_traits_t *t) {
  return t->averages_weights;
}

int tsr_sync_check(const tsr_sync_t *s, tsr_errbuf_t *err) {
  const tsr_sync_traits_t *t = tsr_sync_traits(&s->schedule);
  char which[256];
  /* A policy that averages nothing (none) has no averages to weigh. */
  if (s->by_steps && !t->counts_steps && (t->meets_every_step || t->averages_weights)) {
    tsr__sync_list(which, sizeof which, counts_steps, true);
    return tsr_error_set(err, TSR_EINVAL,
                         "--weighting steps normalizes weight averages by each rank's local steps "
                         "(%s), not --sync %s; use --weighting samples there",
                         which, t->name);
  }
  if (s->outer.kind == TSR_OUTER_NONE) return 0;
  if (!t->averages_weights) {
    tsr__sync_list(which, sizeof which, averages_weights, true);
    return tsr_error_set(err, TSR_EINVAL,
                         "--outer %s needs a policy that averages weights (%s), not --sync %s",
                         outer_names[s->outer.kind], which, t->name);
  }
  if (!(s->outer.lr > 0.0f) || !(s->outer.momentum >= 0.0f && s->outer.momentum < 1.0f))
    return tsr_error_set(err, TSR_EINVAL,
                         "--outer %s: the rate must be > 0 and the momentum in [0, 1) (got %g, %g)",
                         outer_names[s->outer.kind], s->outer.lr, s->outer.momentum);
  return 0;
}
