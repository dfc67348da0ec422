/* Synchronization policies as users write them: "batch", "every=K",
 * "epoch", "epoch=n", "async-epoch", "none". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/dist.h"

static int count_after(const char *text, const char *prefix, int *out) {
  size_t n = strlen(prefix);
  if (strncmp(text, prefix, n) != 0) return -1;
  char *end;
  long v = strtol(text + n, &end, 10);
  if (end == text + n || *end || v < 1 || v > 1000000) return -2;
  *out = (int)v;
  return 0;
}

int tsr_sync_parse(tsr_sync_t *s, const char *text, tsr_errbuf_t *err) {
  memset(s, 0, sizeof *s);
  s->every = 1;
  if (strcmp(text, "none") == 0) return 0;
  if (strcmp(text, "batch") == 0) {
    s->kind = TSR_SYNC_BATCH;
    return 0;
  }
  if (strcmp(text, "epoch") == 0) {
    s->kind = TSR_SYNC_EPOCH;
    return 0;
  }
  if (strcmp(text, "async-epoch") == 0) {
    s->kind = TSR_SYNC_ASYNC_EPOCH;
    return 0;
  }
  int rc = count_after(text, "every=", &s->every);
  if (rc == 0) {
    s->kind = TSR_SYNC_EVERY;
    return 0;
  }
  if (rc == -1 && (rc = count_after(text, "epoch=", &s->every)) == 0) {
    s->kind = TSR_SYNC_EPOCH;
    return 0;
  }
  return tsr_error_set(err, TSR_EINVAL,
                       "--sync %s: %s; use batch, every=K, epoch, epoch=n, async-epoch or none",
                       text, rc == -2 ? "the count must be a whole number >= 1" : "unknown policy");
}

void tsr_sync_describe(const tsr_sync_t *s, char *buf, int size) {
  switch (s->kind) {
  case TSR_SYNC_BATCH: snprintf(buf, (size_t)size, "batch"); break;
  case TSR_SYNC_EVERY: snprintf(buf, (size_t)size, "every=%d", s->every); break;
  case TSR_SYNC_EPOCH:
    snprintf(buf, (size_t)size, s->every > 1 ? "epoch=%d" : "epoch", s->every);
    break;
  case TSR_SYNC_ASYNC_EPOCH: snprintf(buf, (size_t)size, "async-epoch"); break;
  default: snprintf(buf, (size_t)size, "none"); break;
  }
}
