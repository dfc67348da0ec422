/* Synchronization policies as users write them: "batch", "every=K",
 * "epoch", "epoch=n", "async-epoch", "post-local:E,K", "hier:K1,K2[,G]",
 * "none"; and the outer optimizers of weight averaging. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/dist.h"

#define MAX_COUNT 1000000

/* Reads n comma-separated whole numbers in [1, MAX_COUNT] (the last `optional` may be
 * missing, left as they are) after prefix: 0, -1 when the prefix differs, -2 when the
 * numbers are not right. */
static int counts_after(const char *text, const char *prefix, int n, int optional, int *out) {
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

int tsr_sync_parse(tsr_sync_t *s, const char *text, tsr_errbuf_t *err) {
  memset(s, 0, sizeof *s);
  s->every = 1;
  static const struct {
    const char *name;
    tsr_sync_kind_t kind;
  } plain[] = {{"none", TSR_SYNC_NONE},
               {"batch", TSR_SYNC_BATCH},
               {"epoch", TSR_SYNC_EPOCH},
               {"async-epoch", TSR_SYNC_ASYNC_EPOCH}};
  for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
    if (strcmp(text, plain[i].name) == 0) {
      s->kind = plain[i].kind;
      return 0;
    }
  const char *form = "a whole number >= 1";
  int v[3], rc;
  if ((rc = counts_after(text, "every=", 1, 0, v)) == 0) {
    s->kind = TSR_SYNC_EVERY, s->every = v[0];
    return 0;
  }
  if (rc == -1 && (rc = counts_after(text, "epoch=", 1, 0, v)) == 0) {
    s->kind = TSR_SYNC_EPOCH, s->every = v[0];
    return 0;
  }
  if (rc == -1) {
    form = "E,K: epochs of batch averaging, then steps between averages (whole numbers >= 1)";
    if ((rc = counts_after(text, "post-local:", 2, 0, v)) == 0) {
      s->kind = TSR_SYNC_POST_LOCAL, s->post_epochs = v[0], s->every = v[1];
      return 0;
    }
  }
  if (rc == -1) {
    form = "K1,K2[,G]: steps between averages inside a node, steps between averages over all "
           "ranks, and optionally G consecutive ranks per group instead of nodes (whole numbers "
           ">= 1)";
    v[2] = 0;
    if ((rc = counts_after(text, "hier:", 3, 1, v)) == 0) {
      s->kind = TSR_SYNC_HIER, s->group_every = v[0], s->every = v[1], s->group_size = v[2];
      return 0;
    }
  }
  if (rc == -1)
    return tsr_error_set(err, TSR_EINVAL,
                         "--sync %s: unknown policy; use batch, every=K, epoch, epoch=n, "
                         "async-epoch, post-local:E,K, hier:K1,K2 or none",
                         text);
  return tsr_error_set(err, TSR_EINVAL, "--sync %s: the counts must be %s", text, form);
}

static const char *const outer_names[] = {"none", "slowmo", "nesterov"};

void tsr_sync_describe(const tsr_sync_t *s, char *buf, int size) {
  int n;
  switch (s->kind) {
  case TSR_SYNC_BATCH: n = snprintf(buf, (size_t)size, "batch"); break;
  case TSR_SYNC_EVERY: n = snprintf(buf, (size_t)size, "every=%d", s->every); break;
  case TSR_SYNC_EPOCH:
    n = snprintf(buf, (size_t)size, s->every > 1 ? "epoch=%d" : "epoch", s->every);
    break;
  case TSR_SYNC_ASYNC_EPOCH: n = snprintf(buf, (size_t)size, "async-epoch"); break;
  case TSR_SYNC_POST_LOCAL:
    n = snprintf(buf, (size_t)size, "post-local:%d,%d", s->post_epochs, s->every);
    break;
  case TSR_SYNC_HIER:
    n = s->group_size
            ? snprintf(buf, (size_t)size, "hier:%d,%d,%d", s->group_every, s->every, s->group_size)
            : snprintf(buf, (size_t)size, "hier:%d,%d", s->group_every, s->every);
    break;
  default: n = snprintf(buf, (size_t)size, "none"); break;
  }
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

int tsr_sync_check(const tsr_sync_t *s, tsr_errbuf_t *err) {
  if (s->by_steps && (s->kind == TSR_SYNC_BATCH || s->kind == TSR_SYNC_ASYNC_EPOCH))
    return tsr_error_set(err, TSR_EINVAL,
                         "--weighting steps normalizes weight averages by each rank's local steps "
                         "(every=K, epoch[=n], post-local:E,K or hier:K1,K2), not --sync %s; use "
                         "--weighting samples there",
                         s->kind == TSR_SYNC_BATCH ? "batch" : "async-epoch");
  if (s->outer.kind == TSR_OUTER_NONE) return 0;
  if (s->kind == TSR_SYNC_NONE || s->kind == TSR_SYNC_BATCH)
    return tsr_error_set(err, TSR_EINVAL,
                         "--outer %s needs a policy that averages weights (every=K, epoch[=n], "
                         "async-epoch, post-local:E,K or hier:K1,K2), not --sync %s",
                         outer_names[s->outer.kind], s->kind == TSR_SYNC_BATCH ? "batch" : "none");
  if (!(s->outer.lr > 0.0f) || !(s->outer.momentum >= 0.0f && s->outer.momentum < 1.0f))
    return tsr_error_set(err, TSR_EINVAL,
                         "--outer %s: the rate must be > 0 and the momentum in [0, 1) (got %g, %g)",
                         outer_names[s->outer.kind], s->outer.lr, s->outer.momentum);
  return 0;
}
