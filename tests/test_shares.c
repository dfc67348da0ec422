/* Cutting a whole number into parts in proportion to shares (tsr_shares_split,
 * src/parallel/shares.c), on hand-computed cases: the floors of the exact
 * parts, the samples left over one each to the largest remainders (ties to
 * the lower rank), parts raised to a minimum from the largest; and on many
 * drawn cases, parts that always sum to the total and stay within one of the
 * exact part. No StarPU, no MPI. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "tessera/dist.h"

typedef struct {
  int ranks;
  double share[4];
  int64_t total, min_each;
  int64_t want[4];
} split_case_t;

Test(shares, leftovers_go_to_the_largest_remainders) {
  static const split_case_t cases[] = {
      /* 3.5, 2.1, 1.4: floors 3, 2, 1; the 1 left to .5 */
      {3, {0.5, 0.3, 0.2}, 7, 0, {4, 2, 1}},
      /* 5.4, 2.25, 1.35: floors 5, 2, 1; the 1 left to .4 */
      {3, {0.6, 0.25, 0.15}, 9, 0, {6, 2, 1}},
      /* 1.3, 2.6, 3.9, 5.2: floors 1, 2, 3, 5; the 2 left to .9 and .6 */
      {4, {0.1, 0.2, 0.3, 0.4}, 13, 0, {1, 3, 4, 5}},
      /* 3.33 each: the 1 left to the lowest rank of the tie */
      {3, {1.0 / 3, 1.0 / 3, 1.0 / 3}, 10, 0, {4, 3, 3}},
      /* 0.75, 0.25: the 1 to rank 0 */
      {2, {0.75, 0.25}, 1, 0, {1, 0}},
      /* 9.8, 0.1, 0.1 -> 10, 0, 0, then ranks 1 and 2 raised to 1 from the largest */
      {3, {0.98, 0.01, 0.01}, 10, 1, {8, 1, 1}},
      /* exact: nothing left over */
      {4, {0.25, 0.25, 0.25, 0.25}, 64, 1, {16, 16, 16, 16}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const split_case_t *c = &cases[k];
    int64_t part[4] = {-1, -1, -1, -1};
    tsr_shares_split(c->share, c->ranks, c->total, c->min_each, part);
    for (int q = 0; q < c->ranks; q++)
      cr_expect_eq(part[q], c->want[q],
                   "case %zu (%lld over %d ranks): rank %d gets %lld, not %lld", k,
                   (long long)c->total, c->ranks, q, (long long)part[q], (long long)c->want[q]);
  }
}

/* Drawn shares (a fixed linear congruential sequence) over 2 to 8 ranks and totals 0 to 999:
 * the parts sum to the total, and each lies within 1 of share x total (largest remainders
 * give each part the floor or the ceiling of its exact value). */
Test(shares, parts_sum_to_the_total_within_one_of_the_exact_share) {
  uint64_t x = 12345;
  for (int trial = 0; trial < 2000; trial++) {
    double share[8], sum = 0;
    int ranks = 2 + trial % 7;
    for (int q = 0; q < ranks; q++) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      share[q] = 0.01 + (double)(x >> 11) / 9007199254740992.0;
      sum += share[q];
    }
    for (int q = 0; q < ranks; q++)
      share[q] /= sum;
    int64_t total = (int64_t)((x >> 20) % 1000), part[8], given = 0;
    tsr_shares_split(share, ranks, total, 0, part);
    for (int q = 0; q < ranks; q++) {
      double exact = share[q] * (double)total;
      cr_assert(part[q] >= floor(exact) && part[q] <= ceil(exact),
                "trial %d: rank %d gets %lld of %lld, its exact part is %.3f", trial, q,
                (long long)part[q], (long long)total, exact);
      given += part[q];
    }
    cr_assert_eq(given, total, "trial %d: %d parts sum to %lld, not %lld", trial, ranks,
                 (long long)given, (long long)total);
  }
}
