/* A small seeded generator (splitmix64) so that initialization and shuffling
 * are reproducible from a seed on every platform. */
#ifndef TSR_RNG_H
#define TSR_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
  uint64_t s;
} tsr_rng_t;

static inline uint64_t tsr__rng_next(tsr_rng_t *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double tsr__rng_uniform(tsr_rng_t *r) {
  return (double)(tsr__rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n). */
static inline uint64_t tsr__rng_below(tsr_rng_t *r, uint64_t n) {
  return (uint64_t)(tsr__rng_uniform(r) * (double)n);
}

/* Normal(0, 1) by Box-Muller from two uniform draws (one value per call). */
static inline double tsr__rng_normal(tsr_rng_t *r) {
  double u = 1.0 - tsr__rng_uniform(r), v = tsr__rng_uniform(r);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
