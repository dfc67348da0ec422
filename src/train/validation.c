/* --val-split: a fraction of the training set held out for validation, before the inputs'
 * standardization is fitted (to the rest alone). Which samples: the first round(F n) of a
 * permutation of 0 .. n-1 seeded by the run's seed alone, in a stream of its own (no epoch's
 * shuffle draws it), so every rank of every run of that seed holds out the same ones whatever
 * the number of ranks; both parts keep the file's order. A sample moves with its labels (a text
 * window's T targets). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "tessera/train.h"

/* "VALSPLIT": the permutation's stream, apart from the epochs' (seed * 0x100000001b3 + e). */
#define SPLIT_STREAM 0x56414c53504c4954ULL

int tsr_validation_split(tsr_dataset_t *train, tsr_dataset_t *val, double fraction, uint64_t seed,
                         tsr_errbuf_t *err) {
  *val = (tsr_dataset_t){0};
  if (!(fraction > 0 && fraction < 1))
    return tsr_error_set(err, TSR_EINVAL,
                         "--val-split %g: expected a fraction of the training set in (0, 1), "
                         "e.g. 0.1",
                         fraction);
  int64_t n = train->n, n_val = (int64_t)llround(fraction * (double)n);
  if (n_val < 1 || n_val >= n)
    return tsr_error_set(err, TSR_EINVAL,
                         "--val-split %g of %lld training samples holds out %lld: at least one "
                         "must be held out and one left to train on; give a fraction between "
                         "%.3g and %.3g",
                         fraction, (long long)n, (long long)n_val, 0.5 / (double)n,
                         1 - 1.5 / (double)n);
  size_t f = (size_t)train->features, t = train->targets > 1 ? (size_t)train->targets : 1;
  int64_t *perm = malloc(sizeof *perm * (size_t)n);
  unsigned char *held = calloc((size_t)n, 1);
  float *vx = malloc(sizeof(float) * (size_t)n_val * f),
        *vy = malloc(sizeof(float) * (size_t)n_val * t);
  if (!perm || !held || !vx || !vy) {
    free(perm), free(held), free(vx), free(vy);
    return tsr_error_set(err, TSR_ENOMEM, "out of memory for --val-split");
  }
  for (int64_t i = 0; i < n; i++)
    perm[i] = i;
  tsr_rng_t rng = {seed ^ SPLIT_STREAM};
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)tsr__rng_below(&rng, (uint64_t)i + 1), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  for (int64_t i = 0; i < n_val; i++)
    held[perm[i]] = 1;
  int64_t kept = 0, out = 0;
  for (int64_t i = 0; i < n; i++) { /* in place: kept <= i */
    const float *x = train->x + (size_t)i * f, *y = train->y + (size_t)i * t;
    if (held[i]) {
      memcpy(vx + (size_t)out * f, x, sizeof(float) * f);
      memcpy(vy + (size_t)out++ * t, y, sizeof(float) * t);
    } else {
      memmove(train->x + (size_t)kept * f, x, sizeof(float) * f);
      memmove(train->y + (size_t)kept++ * t, y, sizeof(float) * t);
    }
  }
  free(perm), free(held);
  *val = *train; /* classes and geometry */
  val->n = n_val, val->x = vx, val->y = vy;
  return tsr_dataset_truncate(train, kept); /* classes stay */
}
