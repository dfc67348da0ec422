/* Convolution on a tile of whole samples, channels-last (pooling: pool.c).
 *
 * Convolution is lowered to one GEMM per tile: im2col lays every output
 * pixel's receptive field out as a row (kh kw c wide), so that with samples
 * stored (h, w, c) the output of the whole tile, (n oh ow, oc), is exactly
 * the row-major tile (n, oh ow oc). One large GEMM per task (rather than one
 * per sample) keeps BLIS near its peak; the bias and a following ReLU are
 * applied while the output is still in cache. The backward passes reuse the
 * same lowering: the filter gradient is lowered(x)^T dy, the input gradient
 * is dy w^T scattered back by col2im. */
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/hot.h"

/* The lowered input is produced and consumed in chunks of output pixels
 * (rows of the lowering) of about this many floats: a chunk stays in L2
 * between im2col writing it and the GEMM reading it, where a whole tile's
 * lowering (3.6 MB for 16 samples of the default CNN's second layer) went
 * through memory. */
#define CHUNK_FLOATS 49152

/* But never fewer than this many rows: with a wide fan-in (3x3 over 512 channels, k = 4608)
 * the chunk fell to a few rows and each GEMM was mostly packing its weights (6 GFLOP/s at
 * 7x7x2048, against 37 at 56x56x64). Fan-ins up to CHUNK_FLOATS / MIN_CHUNK_ROWS (384: the
 * 3x3 convolutions of up to 42 channels) keep their chunks, and their digits. */
#define MIN_CHUNK_ROWS 128

static long chunk_rows(const tsr_conv_geom_t *g) {
  long k = (long)g->kh * g->kw * g->c, rows = CHUNK_FLOATS / k;
  return rows > MIN_CHUNK_ROWS ? rows : MIN_CHUNK_ROWS;
}

static bool one_by_one(const tsr_conv_geom_t *g);

size_t tsr__k_conv_work(const tsr_conv_geom_t *g, int n) {
  long all = (long)n * g->oh * g->ow, rows = chunk_rows(g);
  size_t k = (size_t)g->kh * (size_t)g->kw * (size_t)g->c;
  /* A 1x1 convolution's input gradient also keeps W^T (oc, k) and k zeros (its bias). */
  size_t wt = one_by_one(g) ? ((size_t)g->oc + 1) * k : 0;
  return (size_t)(all < rows ? all : rows) * k + wt;
}

/* A 1x1 window without padding: each output pixel reads one input pixel, (oy sh, ox sw). */
static bool one_by_one(const tsr_conv_geom_t *g) {
  return g->kh == 1 && g->kw == 1 && g->ph == 0 && g->pw == 0;
}

/* Rows [r0, r0 + rows) of a strided 1x1 convolution's lowering, or (scatter) the other way:
 * the sampled pixels' c channels copied out of x into col (rows, c; rows ldcol floats apart),
 * or from col into dx.
 * Walks (sample, oy, ox) by increments: a row is one copy of c floats. */
TSR_HOT static void sampled_rows(const tsr_conv_geom_t *g, long r0, long rows, float *col,
                                 long ldcol, float *x, int ldx, bool scatter) {
  const int c = g->c, p = g->oh * g->ow;
  long s = r0 / p;
  int oy = (int)(r0 % p) / g->ow, ox = (int)(r0 % p) % g->ow;
  for (long r = 0; r < rows; r++) {
    float *px = x + s * ldx + ((long)oy * g->sh * g->w + (long)ox * g->sw) * c;
    float *row = col + r * ldcol;
    if (scatter)
      memcpy(px, row, sizeof(float) * (size_t)c);
    else
      memcpy(row, px, sizeof(float) * (size_t)c);
    if (++ox == g->ow) {
      ox = 0;
      if (++oy == g->oh) oy = 0, s++;
    }
  }
}

/* Rows [r0, r0 + rows) of the lowering of a tile: row r is output pixel
 * r % (oh ow) of sample r / (oh ow). */
TSR_HOT static void im2col_rows(const tsr_conv_geom_t *g, long r0, long rows, float *col,
                                long ldcol, const float *x, int ldx) {
  const int c = g->c, kc = g->kw * g->c, p = g->oh * g->ow;
  if (one_by_one(g)) {
    sampled_rows(g, r0, rows, col, ldcol, (float *)x, ldx, false); /* reads x only */
    return;
  }
  for (long r = r0; r < r0 + rows; r++) {
    const float *xs = x + r / p * ldx;
    int oy = (int)(r % p) / g->ow, ox = (int)(r % p) % g->ow;
    float *row = col + (r - r0) * ldcol;
    int ix0 = ox * g->sw - g->pw;
    for (int ky = 0; ky < g->kh; ky++) {
      int iy = oy * g->sh - g->ph + ky;
      float *dst = row + (long)ky * kc;
      if (iy < 0 || iy >= g->h) {
        for (int q = 0; q < kc; q++)
          dst[q] = 0.0f;
        continue;
      }
      const float *src = xs + (long)iy * g->w * c;
      if (ix0 >= 0 && ix0 + g->kw <= g->w) {
        /* The window's row is contiguous in (w, c) order: one copy. */
        const float *from = src + (long)ix0 * c;
        for (int q = 0; q < kc; q++)
          dst[q] = from[q];
        continue;
      }
      for (int kx = 0; kx < g->kw; kx++) {
        int ix = ix0 + kx;
        float *d = dst + (long)kx * c;
        if (ix < 0 || ix >= g->w)
          for (int q = 0; q < c; q++)
            d[q] = 0.0f;
        else
          for (int q = 0; q < c; q++)
            d[q] = src[(long)ix * c + q];
      }
    }
  }
}

/* Adds rows [r0, r0 + rows) of col back onto their receptive fields in dx. */
TSR_HOT static void col2im_rows(const tsr_conv_geom_t *g, long r0, long rows, float *dx, int lddx,
                                const float *col) {
  const int c = g->c, kc = g->kw * g->c, k = g->kh * kc, p = g->oh * g->ow;
  for (long r = r0; r < r0 + rows; r++) {
    float *dxs = dx + r / p * lddx;
    int oy = (int)(r % p) / g->ow, ox = (int)(r % p) % g->ow;
    const float *row = col + (r - r0) * k;
    for (int ky = 0; ky < g->kh; ky++) {
      int iy = oy * g->sh - g->ph + ky;
      if (iy < 0 || iy >= g->h) continue;
      for (int kx = 0; kx < g->kw; kx++) {
        int ix = ox * g->sw - g->pw + kx;
        if (ix < 0 || ix >= g->w) continue;
        float *d = dxs + ((long)iy * g->w + ix) * c;
        const float *src = row + (long)ky * kc + (long)kx * c;
        for (int q = 0; q < c; q++)
          d[q] += src[q];
      }
    }
  }
}

void tsr__k_im2col(const tsr_conv_geom_t *g, int n, float *col, int ldcol, const float *x,
                   int ldx) {
  im2col_rows(g, 0, (long)n * g->oh * g->ow, col, ldcol, x, ldx);
}

static void zero_samples(const tsr_conv_geom_t *g, int n, float *dx, int lddx) {
  for (int s = 0; s < n; s++)
    memset(dx + (long)s * lddx, 0, sizeof(float) * (size_t)g->h * (size_t)g->w * (size_t)g->c);
}

void tsr__k_col2im(const tsr_conv_geom_t *g, int n, float *dx, int lddx, const float *col) {
  zero_samples(g, n, dx, lddx);
  col2im_rows(g, 0, (long)n * g->oh * g->ow, dx, lddx, col);
}

/* A 1x1 convolution with stride 1 and no padding needs no lowering: the
 * input rows already are the receptive fields. */
static bool pointwise(const tsr_conv_geom_t *g) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* Walks a tile's lowering in chunks: [*r0, *r0 + return) is the next chunk,
 * kept inside one sample unless `whole` (every operand's rows contiguous). */
static long next_chunk(const tsr_conv_geom_t *g, int n, long r0, bool whole) {
  long p = (long)g->oh * g->ow, left = (long)n * p - r0, rows = chunk_rows(g);
  if (!whole && p - r0 % p < left) left = p - r0 % p;
  return left < rows ? left : rows;
}

/* Start of the row of output pixel r in a (n, oh ow oc) matrix with leading dimension ld. */
static long pixel_at(const tsr_conv_geom_t *g, long r, int ld, int width) {
  long p = (long)g->oh * g->ow;
  return r / p * ld + r % p * width;
}

/* Below this fan-in (kh kw c) a GEMM is mostly packing and edge handling in
 * BLIS: a first layer on one-channel images (k = 9) runs several times faster
 * in the loops below, which hold a block of 32 outputs in registers and
 * stream the lowered rows once. GCC's vector extension keeps them portable
 * (8 floats: AVX; the compiler splits it where vectors are narrower). */
#define SMALL_K 32
typedef float v8f __attribute__((vector_size(32), aligned(4)));

typedef int v8i __attribute__((vector_size(32)));

/* Macros, not functions: a function passing v8f by value changes the ABI between the builds of
 * a TSR_HOT function (GCC's -Wpsabi). */
#define ld8(p) (*(const v8f *)(p))
#define st8(p, v) (*(v8f *)(p) = (v))
#define relu8(a) ((v8f)((v8i)(a) & ((a) > (v8f){0})))

/* y (m, oc) = col (m, k) w (k, oc) + b, then ReLU when relu is set. Not inlined: inlined
 * into the 1x1 input gradient, GCC 12 compiled its loops to half their speed (bench_conv:
 * 21 against 41 GFLOP/s at 32x32x16 -> 16). */
TSR_HOT_NOINLINE static void gemm_bias(int m, int oc, int k, const float *col, const float *w,
                                       int ldw, const float *b, bool relu, float *y, int ldy,
                                       int small_k) {
  if (k >= small_k) {
    tsr__k_gemm(false, false, m, oc, k, 1.0f, col, k, w, ldw, 0.0f, y, ldy);
    for (int i = 0; i < m; i++) {
      float *yr = y + (long)i * ldy;
      if (relu)
        for (int j = 0; j < oc; j++)
          yr[j] = yr[j] + b[j] > 0.0f ? yr[j] + b[j] : 0.0f;
      else
        for (int j = 0; j < oc; j++)
          yr[j] += b[j];
    }
    return;
  }
  const v8f zero = {0};
  const int oc8 = oc / 8 * 8;
  for (int i = 0; i < m; i++) {
    float *yr = y + (long)i * ldy;
    const float *cr = col + (long)i * k;
    int j = 0;
    for (; j + 32 <= oc8; j += 32) {
      v8f a0 = ld8(b + j), a1 = ld8(b + j + 8), a2 = ld8(b + j + 16), a3 = ld8(b + j + 24);
      for (int p = 0; p < k; p++) {
        const float *wr = w + (long)p * ldw + j;
        v8f c = zero + cr[p];
        a0 += c * ld8(wr), a1 += c * ld8(wr + 8), a2 += c * ld8(wr + 16), a3 += c * ld8(wr + 24);
      }
      if (relu) a0 = relu8(a0), a1 = relu8(a1), a2 = relu8(a2), a3 = relu8(a3);
      st8(yr + j, a0), st8(yr + j + 8, a1), st8(yr + j + 16, a2), st8(yr + j + 24, a3);
    }
    for (; j < oc8; j += 8) {
      v8f a0 = ld8(b + j);
      for (int p = 0; p < k; p++)
        a0 += (zero + cr[p]) * ld8(w + (long)p * ldw + j);
      st8(yr + j, relu ? relu8(a0) : a0);
    }
    for (; j < oc; j++) {
      float a = b[j];
      for (int p = 0; p < k; p++)
        a += cr[p] * w[(long)p * ldw + j];
      yr[j] = relu && a < 0.0f ? 0.0f : a;
    }
  }
}

/* dw (k, oc) = beta dw + col (m, k)^T dy (m, oc); db (1, oc) = beta db + column sums of dy.
 * Small k: rows of dy in chunks that stay in L1, each chunk added into dw
 * per (p, block of 32 outputs) with the sums in registers. */
TSR_HOT static void gemm_tn_bias(int m, int oc, int k, const float *col, const float *dy, int lddy,
                                 float beta, float *dw, int lddw, float *db, int small_k) {
  tsr__k_bias_grad(m, oc, db, dy, lddy, beta);
  if (k >= small_k) {
    tsr__k_gemm(true, false, k, oc, m, 1.0f, col, k, dy, lddy, beta, dw, lddw);
    return;
  }
  for (int p = 0; p < k; p++) {
    float *d = dw + (long)p * lddw;
    for (int j = 0; j < oc; j++)
      d[j] = beta == 0.0f ? 0.0f : beta * d[j];
  }
  const v8f zero = {0};
  const int oc8 = oc / 8 * 8, chunk = 128;
  for (int i0 = 0; i0 < m; i0 += chunk) {
    int i1 = m - i0 < chunk ? m : i0 + chunk;
    for (int p = 0; p < k; p++) {
      float *d = dw + (long)p * lddw;
      int j = 0;
      for (; j + 32 <= oc8; j += 32) {
        v8f a0 = zero, a1 = zero, a2 = zero, a3 = zero;
        for (int i = i0; i < i1; i++) {
          const float *g = dy + (long)i * lddy + j;
          v8f c = zero + col[(long)i * k + p];
          a0 += c * ld8(g), a1 += c * ld8(g + 8), a2 += c * ld8(g + 16), a3 += c * ld8(g + 24);
        }
        st8(d + j, ld8(d + j) + a0), st8(d + j + 8, ld8(d + j + 8) + a1);
        st8(d + j + 16, ld8(d + j + 16) + a2), st8(d + j + 24, ld8(d + j + 24) + a3);
      }
      for (; j < oc8; j += 8) {
        v8f a0 = zero;
        for (int i = i0; i < i1; i++)
          a0 += (zero + col[(long)i * k + p]) * ld8(dy + (long)i * lddy + j);
        st8(d + j, ld8(d + j) + a0);
      }
      for (; j < oc; j++) {
        float a = 0.0f;
        for (int i = i0; i < i1; i++)
          a += col[(long)i * k + p] * dy[(long)i * lddy + j];
        d[j] += a;
      }
    }
  }
}

/* The fan-in from which a pass goes to BLIS rather than the loops above. A 3x3 convolution's
 * stays SMALL_K (its digits unchanged). A 1x1 convolution's GEMMs have the smallest inner
 * dimension for their outputs, where BLIS (its haswell kernels, one thread) ran at half the
 * loops' rate on the 2-core machine (benchmarks/bench_conv: 30 against 66 GFLOP/s forward at
 * 16x16x32 -> 32): the loops while W (k, oc) stays within 256 KB forward and for the input
 * gradient (at 512 x 512 BLIS won again), and for the filter gradient while its block stays
 * narrow (oc <= 64, k <= 1024; at 128 outputs BLIS won). */
static int small_fan(const tsr_conv_geom_t *g, bool filter) {
  long k = (long)g->c, oc = g->oc;
  if (!one_by_one(g)) return SMALL_K;
  bool loops = filter ? oc <= 64 && k <= 1024 : k * oc <= 65536;
  return loops ? INT_MAX : SMALL_K;
}

/* The patch rows r0 .. r0 + rows of x, (rows, kh kw c): built in work, or,
 * for a 1x1 convolution without stride or padding, x itself. */
static const float *patches(const tsr_conv_geom_t *g, long r0, long rows, const float *x, int ldx,
                            float *work) {
  if (pointwise(g)) return x + pixel_at(g, r0, ldx, g->c);
  im2col_rows(g, r0, rows, work, (long)g->kh * g->kw * g->c, x, ldx);
  return work;
}

void tsr__k_conv_fwd(const tsr_conv_geom_t *g, int n, float *y, int ldy, const float *x, int ldx,
                     const float *w, int ldw, const float *b, bool relu, float *work) {
  const int p = g->oh * g->ow, k = g->kh * g->kw * g->c, oc = g->oc;
  bool whole = n == 1 || (ldy == p * oc && ldx == g->h * g->w * g->c);
  for (long r0 = 0, rows; r0 < (long)n * p; r0 += rows) {
    rows = next_chunk(g, n, r0, whole);
    const float *col = patches(g, r0, rows, x, ldx, work);
    gemm_bias((int)rows, oc, k, col, w, ldw, b, relu, y + pixel_at(g, r0, ldy, oc), oc,
              small_fan(g, false));
  }
}

void tsr__k_conv_bwd_data(const tsr_conv_geom_t *g, int n, float *dx, int lddx, const float *dy,
                          int lddy, const float *w, int ldw, float *work) {
  const int p = g->oh * g->ow, k = g->kh * g->kw * g->c, oc = g->oc;
  bool whole = n == 1 || (lddy == p * oc && lddx == g->h * g->w * g->c);
  if (!pointwise(g)) zero_samples(g, n, dx, lddx);
  /* A 1x1 convolution whose W suits the loops (small_fan): dy W^T by them, from W^T (oc, k) and
   * zeros for a bias, kept after the chunk's rows in work. */
  float *wt = NULL;
  if (one_by_one(g) && small_fan(g, false) == INT_MAX) {
    wt = work + chunk_rows(g) * k;
    long all = (long)n * p;
    if (all < chunk_rows(g)) wt = work + all * k;
    for (int j = 0; j < oc; j++)
      for (int q = 0; q < k; q++)
        wt[(long)j * k + q] = w[(long)q * ldw + j];
    memset(wt + (long)oc * k, 0, sizeof(float) * (size_t)k);
  }
  for (long r0 = 0, rows; r0 < (long)n * p; r0 += rows) {
    rows = next_chunk(g, n, r0, whole);
    /* A 1x1 convolution's patch gradients are the input gradients. */
    float *dcol = pointwise(g) ? dx + pixel_at(g, r0, lddx, g->c) : work;
    if (wt)
      gemm_bias((int)rows, k, oc, dy + pixel_at(g, r0, lddy, oc), wt, k, wt + (long)oc * k, false,
                dcol, k, small_fan(g, false));
    else
      tsr__k_gemm(false, true, (int)rows, k, oc, 1.0f, dy + pixel_at(g, r0, lddy, oc), oc, w, ldw,
                  0.0f, dcol, k);
    /* A strided 1x1 convolution's windows neither overlap nor pad: each sampled pixel takes
     * its row (0 + v is v: the digits of col2im's sum), the others stay zero. */
    if (one_by_one(g) && !pointwise(g))
      sampled_rows(g, r0, rows, work, k, dx, lddx, true);
    else if (!pointwise(g))
      col2im_rows(g, r0, rows, dx, lddx, work);
  }
}

void tsr__k_conv_bwd_filter(const tsr_conv_geom_t *g, int n, float *dw, int lddw, float *db,
                            const float *x, int ldx, const float *dy, int lddy, float beta,
                            float *work) {
  const int p = g->oh * g->ow, k = g->kh * g->kw * g->c, oc = g->oc;
  bool whole = n == 1 || (lddy == p * oc && ldx == g->h * g->w * g->c);
  for (long r0 = 0, rows; r0 < (long)n * p; r0 += rows) {
    rows = next_chunk(g, n, r0, whole);
    const float *col = patches(g, r0, rows, x, ldx, work);
    gemm_tn_bias((int)rows, oc, k, col, dy + pixel_at(g, r0, lddy, oc), oc, r0 == 0 ? beta : 1.0f,
                 dw, lddw, db, small_fan(g, true));
  }
}

int tsr__k_band_rows(int h, int pr) {
  return (h + pr - 1) / pr;
}

int tsr__k_bands(int h, int pr) {
  int b = tsr__k_band_rows(h, pr);
  return (h + b - 1) / b;
}

void tsr__k_band(int h, int pr, int p, int *r0, int *r1) {
  int b = tsr__k_band_rows(h, pr);
  long lo = (long)p * b, hi = lo + b;
  *r0 = (int)(lo < h ? lo : h), *r1 = (int)(hi < h ? hi : h);
}

tsr_conv_geom_t tsr__k_band_window(const tsr_conv_geom_t *g, int r0, int r1, int *a0, int *a1) {
  int top = r0 * g->sh - g->ph, bottom = (r1 - 1) * g->sh - g->ph + g->kh;
  *a0 = top > 0 ? top : 0, *a1 = bottom < g->h ? bottom : g->h;
  tsr_conv_geom_t cut = *g;
  cut.h = *a1 - *a0, cut.oh = r1 - r0, cut.ph = *a0 - top;
  return cut;
}
