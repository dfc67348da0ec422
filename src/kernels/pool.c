/* Max and mean pooling on a tile of whole samples, channels-last: each output pixel's window
 * over every channel, the channels in blocks of POOL_BLOCK (4 AVX2 registers, 2 AVX-512 ones).
 * A block's running maxima, sums or gradients still to route live in a local array the compiler
 * keeps in registers, and the window's rows are read and written through restrict pointers, so
 * that every loop over a block is plain vector code with no check of whether the tiles overlap.
 * The helpers are inlined into each TSR_HOT version, where a block's width is a constant but for
 * the last block.
 *
 * Built apart with -fno-trapping-math (src/meson.build), as sequence.c is: max pooling's
 * backward pass adds each window position's routed gradient only where the input is the
 * maximum, a select GCC turns into a branch (and the AVX2 version into scalar code, 10x slower
 * on every overlapping pooling) while a float addition is taken to trap. Same bits. */
#include <assert.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/hot.h"

#define POOL_BLOCK 32
#define POOL_INLINE static inline __attribute__((always_inline))

/* The part of output pixel (oy, ox)'s window inside the sample: rows ky0 .. ky1 - 1 and
 * columns kx0 .. kx1 - 1 of the window, whose corner is input (iy0, ix0) (negative over the
 * padding). Never empty: padding is at most half the kernel. */
typedef struct {
  int iy0, ix0, ky0, ky1, kx0, kx1;
} pool_window_t;

POOL_INLINE pool_window_t pool_window(const tsr_conv_geom_t *g, int oy, int ox) {
  pool_window_t v;
  v.iy0 = oy * g->sh - g->ph, v.ix0 = ox * g->sw - g->pw;
  v.ky0 = v.iy0 < 0 ? -v.iy0 : 0, v.kx0 = v.ix0 < 0 ? -v.ix0 : 0;
  v.ky1 = g->h - v.iy0 < g->kh ? g->h - v.iy0 : g->kh;
  v.kx1 = g->w - v.ix0 < g->kw ? g->w - v.ix0 : g->kw;
  return v;
}

/* Offset in a sample of window position (ky, kx). */
POOL_INLINE long window_at(const tsr_conv_geom_t *g, const pool_window_t *v, int ky, int kx) {
  return ((long)(v->iy0 + ky) * g->w + v->ix0 + kx) * g->c;
}

/* y[0, cn) = the maximum, or the mean (the sum in the window's order, times inv), of x over the
 * window v; x and y point at the block's first channel of the sample and of the output pixel. */
POOL_INLINE void pool_fwd_block(const tsr_conv_geom_t *g, const pool_window_t *v, bool max,
                                float inv, int cn, float *restrict y, const float *restrict x) {
  float acc[POOL_BLOCK];
  const float *first = x + window_at(g, v, v->ky0, v->kx0);
  for (int q = 0; q < cn; q++)
    acc[q] = first[q];
  for (int ky = v->ky0; ky < v->ky1; ky++)
    for (int kx = v->kx0; kx < v->kx1; kx++) {
      if (ky == v->ky0 && kx == v->kx0) continue;
      const float *xi = x + window_at(g, v, ky, kx);
      if (max)
        for (int q = 0; q < cn; q++)
          acc[q] = xi[q] > acc[q] ? xi[q] : acc[q];
      else
        for (int q = 0; q < cn; q++)
          acc[q] += xi[q];
    }
  if (!max)
    for (int q = 0; q < cn; q++)
      acc[q] *= inv;
  for (int q = 0; q < cn; q++)
    y[q] = acc[q];
}

TSR_HOT void tsr__k_pool_fwd(const tsr_conv_geom_t *g, bool max, int n, float *y, int ldy,
                             const float *x, int ldx) {
  const int c = g->c;
  /* PyTorch's count_include_pad: the padding counts as zeros in the mean. */
  const float inv = 1.0f / (float)(g->kh * g->kw);
  assert(g->oc == c && g->ph <= g->kh / 2 && g->pw <= g->kw / 2);
  for (int s = 0; s < n; s++) {
    const float *xs = x + (long)s * ldx;
    float *ys = y + (long)s * ldy;
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++) {
        float *yo = ys + ((long)oy * g->ow + ox) * c;
        pool_window_t v = pool_window(g, oy, ox);
        int q0 = 0;
        for (; q0 + POOL_BLOCK <= c; q0 += POOL_BLOCK)
          pool_fwd_block(g, &v, max, inv, POOL_BLOCK, yo + q0, xs + q0);
        if (q0 < c) pool_fwd_block(g, &v, max, inv, c - q0, yo + q0, xs + q0);
      }
  }
}

/* One window position of max pooling's backward pass over a block: where the input x equals the
 * maximum y, its gradient dx takes what is left to route (written where the windows tile the
 * input, added where they overlap), and nothing is left. */
POOL_INLINE void pool_route(int cn, bool tiled, float *restrict dx, const float *restrict x,
                            const float *restrict y, float *restrict left) {
  if (tiled)
    for (int q = 0; q < cn; q++) {
      bool hit = x[q] == y[q];
      dx[q] = hit ? left[q] : 0.0f;
      left[q] = hit ? 0.0f : left[q];
    }
  else
    for (int q = 0; q < cn; q++) {
      bool hit = x[q] == y[q];
      dx[q] += hit ? left[q] : 0.0f;
      left[q] = hit ? 0.0f : left[q];
    }
}

/* The first input of the window equal to the maximum took it in the forward pass: walk the
 * window with the gradient still to route. With relu (the input came through a ReLU) nothing
 * flows where the maximum is not positive: the ReLU's backward pass, fused. Pointers at the
 * block's first channel of the sample (dx, x) and of the output pixel (dy, y). */
POOL_INLINE void pool_bwd_max_block(const tsr_conv_geom_t *g, const pool_window_t *v, bool relu,
                                    bool tiled, int cn, float *dx, const float *dy, const float *x,
                                    const float *y) {
  float left[POOL_BLOCK];
  for (int q = 0; q < cn; q++)
    left[q] = !relu || y[q] > 0.0f ? dy[q] : 0.0f;
  for (int ky = v->ky0; ky < v->ky1; ky++)
    for (int kx = v->kx0; kx < v->kx1; kx++) {
      long at = window_at(g, v, ky, kx);
      pool_route(cn, tiled, dx + at, x + at, y, left);
    }
}

/* Mean pooling's backward pass over a block: every input of the window takes inv dy (added where
 * the windows overlap). */
POOL_INLINE void pool_bwd_mean_block(const tsr_conv_geom_t *g, const pool_window_t *v, float inv,
                                     bool tiled, int cn, float *restrict dx,
                                     const float *restrict dy) {
  float share[POOL_BLOCK];
  for (int q = 0; q < cn; q++)
    share[q] = inv * dy[q];
  for (int ky = v->ky0; ky < v->ky1; ky++)
    for (int kx = v->kx0; kx < v->kx1; kx++) {
      float *d = dx + window_at(g, v, ky, kx);
      if (tiled)
        for (int q = 0; q < cn; q++)
          d[q] = share[q];
      else
        for (int q = 0; q < cn; q++)
          d[q] += share[q];
    }
}

TSR_HOT void tsr__k_pool_bwd(const tsr_conv_geom_t *g, bool max, bool relu, int n, float *dx,
                             int lddx, const float *dy, int lddy, const float *x, int ldx,
                             const float *y, int ldy) {
  const int c = g->c;
  const float inv = 1.0f / (float)(g->kh * g->kw);
  /* Windows that neither overlap nor leave gaps between them (nor hang over a padding) write
   * each input once: assign instead of zeroing and accumulating, and zero only the rows and
   * columns past the last window. */
  const bool tiled = g->sh == g->kh && g->sw == g->kw && g->ph == 0 && g->pw == 0;
  assert(g->oc == c && g->ph <= g->kh / 2 && g->pw <= g->kw / 2);
  for (int s = 0; s < n; s++) {
    float *dxs = dx + (long)s * lddx;
    const float *dys = dy + (long)s * lddy;
    if (!tiled)
      memset(dxs, 0, sizeof(float) * (size_t)g->h * (size_t)g->w * (size_t)c);
    else
      for (int iy = 0; iy < g->h; iy++) {
        int from = iy < g->oh * g->kh ? g->ow * g->kw : 0;
        memset(dxs + ((long)iy * g->w + from) * c, 0, sizeof(float) * (size_t)(g->w - from) * c);
      }
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++) {
        long out = ((long)oy * g->ow + ox) * c;
        pool_window_t v = pool_window(g, oy, ox);
        int q0 = 0;
        if (!max) {
          for (; q0 + POOL_BLOCK <= c; q0 += POOL_BLOCK)
            pool_bwd_mean_block(g, &v, inv, tiled, POOL_BLOCK, dxs + q0, dys + out + q0);
          if (q0 < c) pool_bwd_mean_block(g, &v, inv, tiled, c - q0, dxs + q0, dys + out + q0);
          continue;
        }
        const float *xs = x + (long)s * ldx, *yo = y + (long)s * ldy + out;
        for (; q0 + POOL_BLOCK <= c; q0 += POOL_BLOCK)
          pool_bwd_max_block(g, &v, relu, tiled, POOL_BLOCK, dxs + q0, dys + out + q0, xs + q0,
                             yo + q0);
        if (q0 < c)
          pool_bwd_max_block(g, &v, relu, tiled, c - q0, dxs + q0, dys + out + q0, xs + q0,
                             yo + q0);
      }
  }
}
