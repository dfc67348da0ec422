/* Element-wise kernels on one tile: bias, ReLU, fill, copy, axpby, scale, add, the channel
 * block copy of a concat and the row gather that assembles a batch. Plain loops the compiler
 * vectorizes. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/hot.h"

TSR_HOT void tsr__k_bias_add(int m, int n, float *y, int ldy, const float *b, bool relu) {
  for (int i = 0; i < m; i++) {
    float *yr = y + (long)i * ldy;
    if (relu) /* a comparison, not fmaxf: GCC calls fmaxf element by element (its NaN rule) */
      for (int j = 0; j < n; j++) {
        float v = yr[j] + b[j];
        yr[j] = v > 0.0f ? v : 0.0f;
      }
    else
      for (int j = 0; j < n; j++)
        yr[j] += b[j];
  }
}

TSR_HOT void tsr__k_bias_grad(int m, int n, float *db, const float *dy, int lddy, float beta) {
  if (beta == 0.0f)
    memset(db, 0, sizeof(float) * (size_t)n);
  else if (beta != 1.0f)
    for (int j = 0; j < n; j++)
      db[j] *= beta;
  for (int i = 0; i < m; i++) {
    const float *r = dy + (long)i * lddy;
    for (int j = 0; j < n; j++)
      db[j] += r[j];
  }
}

TSR_HOT void tsr__k_relu_fwd(int m, int n, float *y, int ldy, const float *x, int ldx) {
  for (int i = 0; i < m; i++) {
    float *yr = y + (long)i * ldy;
    const float *xr = x + (long)i * ldx;
    for (int j = 0; j < n; j++) /* vectorized; fmaxf was a call per element (3 ns) */
      yr[j] = xr[j] > 0.0f ? xr[j] : 0.0f;
  }
}

TSR_HOT void tsr__k_relu_bwd(int m, int n, float *dx, int lddx, const float *dy, int lddy,
                             const float *y, int ldy) {
  for (int i = 0; i < m; i++) {
    float *dxr = dx + (long)i * lddx;
    const float *dyr = dy + (long)i * lddy;
    const float *yr = y + (long)i * ldy;
    for (int j = 0; j < n; j++)
      dxr[j] = yr[j] > 0.0f ? dyr[j] : 0.0f;
  }
}

void tsr__k_fill(int m, int n, float *x, int ldx, float value) {
  for (int i = 0; i < m; i++) {
    float *r = x + (long)i * ldx;
    for (int j = 0; j < n; j++)
      r[j] = value;
  }
}

void tsr__k_copy(int m, int n, float *dst, int ldd, const float *src, int lds) {
  for (int i = 0; i < m; i++)
    memcpy(dst + (long)i * ldd, src + (long)i * lds, sizeof(float) * (size_t)n);
}

TSR_HOT void tsr__k_axpby(int m, int n, float alpha, const float *x, int ldx, float beta, float *y,
                          int ldy) {
  for (int i = 0; i < m; i++) {
    const float *xr = x + (long)i * ldx;
    float *yr = y + (long)i * ldy;
    if (beta == 0.0f) /* y may be uninitialized: never read it */
      for (int j = 0; j < n; j++)
        yr[j] = alpha * xr[j];
    else
      for (int j = 0; j < n; j++)
        yr[j] = alpha * xr[j] + beta * yr[j];
  }
}

TSR_HOT void tsr__k_scale(int m, int n, float alpha, float *x, int ldx) {
  for (int i = 0; i < m; i++) {
    float *r = x + (long)i * ldx;
    for (int j = 0; j < n; j++)
      r[j] *= alpha;
  }
}

TSR_HOT double tsr__k_sumsq(int m, int n, const float *x, int ldx) {
  double s = 0.0;
  for (int i = 0; i < m; i++) {
    const float *r = x + (long)i * ldx;
    for (int j = 0; j < n; j++)
      s += (double)r[j] * r[j];
  }
  return s;
}

TSR_HOT void tsr__k_clip(int m, int n, float *x, int ldx, float sumsq, float max_norm) {
  float coef = max_norm / (sqrtf(sumsq) + 1e-6f);
  if (coef < 1.0f) tsr__k_scale(m, n, coef, x, ldx);
}

TSR_HOT void tsr__k_gather_rows(int m, int n, float *dst, int ldd, const float *src, int lds,
                                int col0, const int32_t *rows, int nvalid) {
  for (int r = 0; r < m; r++) {
    float *d = dst + (long)r * ldd;
    if (r < nvalid)
      memcpy(d, src + (long)rows[r] * lds + col0, sizeof(float) * (size_t)n);
    else
      memset(d, 0, sizeof(float) * (size_t)n);
  }
}

TSR_HOT void tsr__k_add(int m, int n, float *y, int ldy, const float *a, int lda, const float *b,
                        int ldb, bool relu) {
  for (int i = 0; i < m; i++) {
    float *yr = y + (long)i * ldy;
    const float *ar = a + (long)i * lda, *br = b + (long)i * ldb;
    if (relu)
      for (int j = 0; j < n; j++) {
        float v = ar[j] + br[j];
        yr[j] = v > 0.0f ? v : 0.0f;
      }
    else
      for (int j = 0; j < n; j++)
        yr[j] = ar[j] + br[j];
  }
}

TSR_HOT void tsr__k_channels_copy(int m, int pixels, int width, float *dst, int ldd, int dst_stride,
                                  int dst_off, const float *src, int lds, int src_stride,
                                  int src_off, bool add) {
  for (int i = 0; i < m; i++)
    for (int p = 0; p < pixels; p++) {
      float *d = dst + (long)i * ldd + (long)p * dst_stride + dst_off;
      const float *s = src + (long)i * lds + (long)p * src_stride + src_off;
      if (!add) {
        memcpy(d, s, sizeof(float) * (size_t)width);
        continue;
      }
      for (int q = 0; q < width; q++)
        d[q] += s[q];
    }
}

const char *tsr__k_hot_level(void) {
#if defined(TSR_PORTABLE) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "portable build, running its x86-64-v4 versions (AVX-512)";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "portable build, running its x86-64-v3 versions (AVX2, FMA)";
  return "portable build, running its baseline x86-64 versions (SSE2)";
#elif defined(TSR_PORTABLE)
  return "portable build without dispatched versions (not GCC, or not x86-64): the baseline";
#else
  return "built for this CPU alone (-Dmarch=" TSR_MARCH ")";
#endif
}
