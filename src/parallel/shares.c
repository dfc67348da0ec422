/* Shares of the work for ranks of different speed (--shares): parsing, and
 * cutting a whole number (an epoch's samples, a global batch) into parts in
 * proportion, the same on every rank, so that every rank submits the same
 * tasks. The training loop (src/train/train.c) decides what the parts are. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/dist.h"
#include "tessera/train.h" /* TSR_MAX_RANKS */

#define SHARE_MIN 1e-6
#define SHARE_MAX 1e6

void tsr_shares_fini(tsr_shares_t *s) {
  if (!s) return;
  free(s->w);
  memset(s, 0, sizeof *s);
}

int tsr_shares_copy(tsr_shares_t *dst, const tsr_shares_t *src) {
  *dst = *src, dst->w = NULL;
  if (src->n == 0) return 0;
  if (!(dst->w = malloc(sizeof *dst->w * (size_t)src->n))) {
    memset(dst, 0, sizeof *dst);
    return TSR_ENOMEM;
  }
  memcpy(dst->w, src->w, sizeof *dst->w * (size_t)src->n);
  return 0;
}

/* A list's values, one a comma more: at most TSR_MAX_RANKS, one per replica. */
static int parse_list(tsr_shares_t *s, const char *text, tsr_errbuf_t *err) {
  size_t values = 1;
  for (const char *c = text; *c; c++)
    values += *c == ',';
  if (values > TSR_MAX_RANKS)
    return tsr_error_set(err, TSR_EINVAL,
                         "--shares: %zu values, more than the %d ranks a run can have; give one "
                         "share per rank (or grid column)",
                         values, TSR_MAX_RANKS);
  if (!(s->w = malloc(sizeof *s->w * values)))
    return tsr_error_set(err, TSR_ENOMEM, "--shares: out of memory for %zu values", values);
  const char *p = text;
  double sum = 0;
  for (;;) {
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    bool underflow = errno == ERANGE && fabs(v) < 1.0; /* a subnormal or smaller */
    if (end == p || (errno && !underflow) || !isfinite(v))
      return tsr_error_set(err, TSR_EINVAL,
                           "--shares %s: expected uniform, auto or a comma-separated list of "
                           "numbers, one per rank (e.g. 3,1,1,1)",
                           text);
    if (v < 0)
      return tsr_error_set(err, TSR_EINVAL,
                           "--shares %s: value %d is negative (%g); each rank's share must be >= 0",
                           text, s->n + 1, v);
    /* Shares are relative weights: bounded so that their sum stays finite (1e308,1e308 summed
     * to inf and read as 0 each) and each positive one keeps a meaning next to the others. */
    if (v != 0.0 && (v < SHARE_MIN || v > SHARE_MAX))
      return tsr_error_set(err, TSR_EINVAL,
                           "--shares %s: value %d (%.3g) is out of range; each share is 0 or from "
                           "%g to %g (shares are relative: 2,1 is the same as 2000,1000)",
                           text, s->n + 1, v, SHARE_MIN, SHARE_MAX);
    s->w[s->n++] = v, sum += v;
    p = end;
    if (*p == '\0') break;
    if (*p++ != ',')
      return tsr_error_set(err, TSR_EINVAL,
                           "--shares %s: expected numbers separated by commas (e.g. 3,1,1,1)",
                           text);
  }
  if (!(sum > 0))
    return tsr_error_set(err, TSR_EINVAL,
                         "--shares %s: the shares sum to 0; give at least one rank a positive "
                         "share",
                         text);
  s->kind = TSR_SHARES_FIXED;
  return 0;
}

int tsr_shares_parse(tsr_shares_t *s, const char *text, tsr_errbuf_t *err) {
  memset(s, 0, sizeof *s);
  if (strcmp(text, "uniform") == 0) return 0;
  if (strcmp(text, "auto") == 0) {
    s->kind = TSR_SHARES_AUTO;
    return 0;
  }
  int rc = parse_list(s, text, err);
  if (rc) tsr_shares_fini(s);
  return rc;
}

int tsr_shares_check(const tsr_shares_t *s, int ranks, tsr_errbuf_t *err) {
  if (s->kind != TSR_SHARES_FIXED || s->n == ranks) return 0;
  return tsr_error_set(err, TSR_EINVAL,
                       "--shares: %d value%s for %d rank%s; give one share per MPI rank", s->n,
                       s->n == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s");
}

void tsr_shares_get(const tsr_shares_t *s, int ranks, double *share) {
  double sum = 0;
  bool given = s && s->kind != TSR_SHARES_UNIFORM && s->n == ranks;
  for (int q = 0; given && q < ranks; q++)
    sum += s->w[q];
  for (int q = 0; q < ranks; q++)
    share[q] = given && sum > 0 ? s->w[q] / sum : 1.0 / ranks;
}

void tsr_shares_split(const double *share, int ranks, int64_t total, int64_t min_each,
                      int64_t *part) {
  double *frac = malloc(sizeof *frac * (size_t)ranks);
  int64_t given = 0;
  for (int q = 0; q < ranks; q++) {
    double exact = share[q] * (double)total;
    part[q] = (int64_t)floor(exact);
    if (part[q] > total) part[q] = total;
    if (frac) frac[q] = exact - (double)part[q];
    given += part[q];
  }
  /* The remainder, one each, to the largest fractions (ties: the lower rank). */
  while (given < total) {
    int best = 0;
    for (int q = 1; frac && q < ranks; q++)
      if (frac[q] > frac[best]) best = q;
    part[best]++, given++;
    if (frac) frac[best] = -1.0;
  }
  while (given > total) { /* rounding above total: can only happen by float error */
    int big = 0;
    for (int q = 1; q < ranks; q++)
      if (part[q] > part[big]) big = q;
    part[big]--, given--;
  }
  free(frac);
  /* Raise parts under min_each, each time taking from the largest part. */
  for (int q = 0; q < ranks; q++)
    while (part[q] < min_each) {
      int big = 0;
      for (int t = 1; t < ranks; t++)
        if (part[t] > part[big]) big = t;
      if (part[big] <= min_each) return; /* total < ranks x min_each */
      part[big]--, part[q]++;
    }
}

void tsr_shares_tile_rows(const int64_t *batch, int ranks, int uniform_batch, int uniform_tile_rows,
                          int *rows) {
  int mt = (uniform_batch + uniform_tile_rows - 1) / uniform_tile_rows;
  for (; mt > 1; mt--) {
    bool fits = true;
    for (int q = 0; q < ranks && fits; q++) {
      int64_t mb = (batch[q] + mt - 1) / mt;
      fits = batch[q] >= mt && (batch[q] + mb - 1) / mb == mt;
    }
    if (fits) break;
  }
  for (int q = 0; q < ranks; q++)
    rows[q] = (int)((batch[q] + mt - 1) / mt);
}
