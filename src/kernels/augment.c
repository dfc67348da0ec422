/* Random crop and flip of images as a batch is gathered (kernels/augment.h). Each sample's
 * draws are a pure function of (key, its index in the dataset); the loop walks the output
 * columns a tile holds, so any column tiling writes the same values. */
#include <string.h>

#include "kernels/augment.h"
#include "kernels/hot.h"

static inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform in [0, n) from the top 32 bits of h (n <= 2^31). */
static inline int below(uint64_t h, int n) {
  return (int)(((h >> 32) * (uint64_t)n) >> 32);
}

void tsr__k_augment_draw(const tsr_augment_geom_t *g, int64_t sample, int *dy, int *dx,
                         bool *mirror) {
  uint64_t s = mix(g->key + 0x9e3779b97f4a7c15ULL * (uint64_t)(sample + 1));
  int span = 2 * g->pad + 1;
  *dy = g->crop ? below(mix(s + 0xd1b54a32d192ed03ULL), span) : g->pad;
  *dx = g->crop ? below(mix(s + 0x8cb92ba72f3d8dd7ULL), span) : g->pad;
  *mirror = g->flip && (mix(s + 0xabc98388fb8fac03ULL) >> 63);
}

/* One output row, columns [col0, col0 + n): the image pixel each one reads, or the fill. */
TSR_HOT static void augment_row(const tsr_augment_geom_t *g, const float *fill, int n, float *d,
                                const float *img, int col0, int dy, int dx, bool mirror) {
  int c = g->c, pix = col0 / c, ch = col0 % c;
  int y = pix / g->w, x = pix % g->w;
  for (int j = 0; j < n; j++) {
    int sy = y + dy - g->pad, sx = (mirror ? g->w - 1 - x : x) + dx - g->pad;
    bool inside = sy >= 0 && sy < g->h && sx >= 0 && sx < g->w;
    d[j] = inside ? img[((long)sy * g->w + sx) * c + ch] : fill[ch];
    if (++ch == c) {
      ch = 0;
      if (++x == g->w) x = 0, y++;
    }
  }
}

void tsr__k_augment_rows(const tsr_augment_geom_t *g, const float *fill, int m, int n, float *dst,
                         int ldd, const float *src, int lds, int col0, const int32_t *rows,
                         int nvalid) {
  for (int r = 0; r < m; r++) {
    float *d = dst + (long)r * ldd;
    if (r >= nvalid) {
      memset(d, 0, sizeof(float) * (size_t)n);
      continue;
    }
    int dy, dx;
    bool mirror;
    tsr__k_augment_draw(g, rows[r], &dy, &dx, &mirror);
    augment_row(g, fill, n, d, src + (long)rows[r] * lds, col0, dy, dx, mirror);
  }
}
