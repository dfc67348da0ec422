/* The order in which an epoch visits the training samples. Epoch e's order
 * is a Fisher-Yates shuffle of 0..n-1 drawn from a stream seeded by (seed, e)
 * alone, so any epoch can be reproduced on its own (a resumed run, a test, a
 * rank that must agree with the others) without replaying the ones before. */
#include "rng.h"
#include "tessera/data.h"

void tsr_dataset_epoch_order(int32_t *order, int64_t n, uint64_t seed, int epoch) {
  for (int64_t i = 0; i < n; i++)
    order[i] = (int32_t)i;
  if (epoch <= 0) return;
  tsr_rng_t rng = {seed * 0x100000001b3ULL + (uint64_t)epoch};
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)tsr__rng_below(&rng, (uint64_t)i + 1);
    int32_t t = order[i];
    order[i] = order[j], order[j] = t;
  }
}
