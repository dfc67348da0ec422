/* Dropout with a mask that is a pure function of (seed, sample row, feature):
 * forward and backward recompute it instead of storing it, and it does not
 * depend on the tiling, so results stay tile-size invariant. */
#include "kernels/kernels.h"
#include "kernels/hot.h"

static inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool tsr__k_dropout_keep(uint64_t seed, int64_t row, int64_t col, float rate) {
  uint64_t h = mix(mix(seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(row + 1)) +
                   0xd1b54a32d192ed03ULL * (uint64_t)(col + 1));
  /* 24 uniform bits: exact in float, so rate 0 keeps all and rate 1 none. */
  return (float)(h >> 40) * 0x1.0p-24f >= rate;
}

TSR_HOT void tsr__k_dropout(int m, int n, float *y, int ldy, const float *x, int ldx, uint64_t seed,
                            int64_t row0, int64_t col0, float rate) {
  const float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
  for (int i = 0; i < m; i++) {
    float *yr = y + (long)i * ldy;
    const float *xr = x + (long)i * ldx;
    uint64_t rs = mix(seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(row0 + i + 1));
    for (int j = 0; j < n; j++) {
      uint64_t h = mix(rs + 0xd1b54a32d192ed03ULL * (uint64_t)(col0 + j + 1));
      yr[j] = (float)(h >> 40) * 0x1.0p-24f >= rate ? xr[j] * scale : 0.0f;
    }
  }
}
