/* Batch normalization kernels on one batch-row tile of channels-last samples: m rows of hw
 * positions of c channels (column p c + ch is channel ch at position p). The statistics of a
 * tile are partials (count, mean, M2) per channel, computed in two passes in double and
 * combined by Chan's formula, so a tree of partials gives the batch's mean and variance
 * stably and the same for any cut into tiles (within float rounding). The backward pass's
 * per-channel sums (of dy and of dy xhat) are partials added the same way. */
#include <math.h>

#include "kernels/kernels.h"

/* dy, or 0 where a fused ReLU's output y is not positive (y NULL: no ReLU). */
static inline float grad_at(const float *dy, const float *y, int64_t k) {
  return y && !(y[k] > 0.0f) ? 0.0f : dy[k];
}

void tsr__k_bn_stats(int m, int hw, int c, const float *x, int ldx, float *p, int ldp,
                     double *acc) {
  for (int ch = 0; ch < c; ch++)
    acc[ch] = 0.0, acc[c + ch] = 0.0;
  for (int i = 0; i < m; i++)
    for (int q = 0; q < hw; q++)
      for (int ch = 0; ch < c; ch++)
        acc[ch] += x[(int64_t)i * ldx + (int64_t)q * c + ch];
  double n = (double)m * hw;
  for (int ch = 0; ch < c; ch++)
    acc[ch] = n > 0 ? acc[ch] / n : 0.0;
  for (int i = 0; i < m; i++)
    for (int q = 0; q < hw; q++)
      for (int ch = 0; ch < c; ch++) {
        double d = x[(int64_t)i * ldx + (int64_t)q * c + ch] - acc[ch];
        acc[c + ch] += d * d;
      }
  for (int ch = 0; ch < c; ch++) {
    p[ch] = (float)n;
    p[ldp + ch] = (float)acc[ch];
    p[2 * ldp + ch] = (float)acc[c + ch];
  }
}

void tsr__k_bn_combine(int c, float *a, int lda, const float *b, int ldb) {
  for (int ch = 0; ch < c; ch++) {
    double na = a[ch], nb = b[ch], n = na + nb;
    if (nb == 0.0) continue;
    double delta = (double)b[ldb + ch] - a[lda + ch];
    a[ch] = (float)n;
    a[lda + ch] = (float)(a[lda + ch] + delta * nb / n);
    a[2 * lda + ch] =
        (float)((double)a[2 * lda + ch] + b[2 * ldb + ch] + delta * delta * na * nb / n);
  }
}

void tsr__k_bn_finalize(int c, const float *p, int ldp, float *run_mean, float *run_var, float *s,
                        int lds, float momentum, float eps, bool update) {
  for (int ch = 0; ch < c; ch++) {
    double n = p[ch], mean = n > 0 ? p[ldp + ch] : 0.0, m2 = n > 0 ? p[2 * ldp + ch] : 0.0;
    double var = n > 0 ? m2 / n : 0.0;
    s[ch] = (float)mean;
    s[lds + ch] = (float)(1.0 / sqrt(var + (double)eps));
    s[2 * lds + ch] = (float)n;
    if (!update || n < 2) continue;
    double mo = momentum;
    run_mean[ch] = (float)((1.0 - mo) * run_mean[ch] + mo * mean);
    run_var[ch] = (float)((1.0 - mo) * run_var[ch] + mo * (m2 / (n - 1)));
  }
}

void tsr__k_bn_eval_stats(int c, const float *run_mean, const float *run_var, float *s, int lds,
                          float eps) {
  for (int ch = 0; ch < c; ch++) {
    s[ch] = run_mean[ch];
    s[lds + ch] = (float)(1.0 / sqrt((double)run_var[ch] + (double)eps));
    s[2 * lds + ch] = 0.0f;
  }
}

void tsr__k_bn_normalize(int m, int hw, int c, float *y, int ldy, const float *x, int ldx,
                         const float *s, int lds, const float *scale, const float *shift,
                         bool relu) {
  for (int i = 0; i < m; i++)
    for (int q = 0; q < hw; q++)
      for (int ch = 0; ch < c; ch++) {
        int64_t col = (int64_t)q * c + ch;
        float v = (x[(int64_t)i * ldx + col] - s[ch]) * s[lds + ch] * scale[ch] + shift[ch];
        y[(int64_t)i * ldy + col] = relu && !(v > 0.0f) ? 0.0f : v;
      }
}

void tsr__k_bn_sums(int m, int hw, int c, const float *dy, int lddy, const float *x, int ldx,
                    const float *y, int ldy, const float *s, int lds, float *p, int ldp,
                    double *acc) {
  for (int ch = 0; ch < c; ch++)
    acc[ch] = 0.0, acc[c + ch] = 0.0;
  for (int i = 0; i < m; i++)
    for (int q = 0; q < hw; q++)
      for (int ch = 0; ch < c; ch++) {
        int64_t col = (int64_t)q * c + ch;
        double g = grad_at(dy + (int64_t)i * lddy, y ? y + (int64_t)i * ldy : NULL, col);
        double xhat = ((double)x[(int64_t)i * ldx + col] - s[ch]) * s[lds + ch];
        acc[ch] += g, acc[c + ch] += g * xhat;
      }
  for (int ch = 0; ch < c; ch++) {
    p[ch] = (float)acc[ch];
    p[ldp + ch] = (float)acc[c + ch];
    p[2 * ldp + ch] = 0.0f;
  }
}

void tsr__k_bn_sums_add(int c, float *a, int lda, const float *b, int ldb) {
  for (int ch = 0; ch < c; ch++)
    a[ch] += b[ch], a[lda + ch] += b[ldb + ch];
}

void tsr__k_bn_dx(int m, int valid, int hw, int c, float *dx, int lddx, const float *dy, int lddy,
                  const float *x, int ldx, const float *y, int ldy, const float *s, int lds,
                  const float *scale, const float *p, int ldp) {
  for (int i = 0; i < m; i++)
    for (int q = 0; q < hw; q++)
      for (int ch = 0; ch < c; ch++) {
        int64_t col = (int64_t)q * c + ch;
        float *out = &dx[(int64_t)i * lddx + col];
        double n = s[2 * lds + ch];
        if (i >= valid || n <= 0) {
          *out = 0.0f;
          continue;
        }
        double g = grad_at(dy + (int64_t)i * lddy, y ? y + (int64_t)i * ldy : NULL, col);
        double xhat = ((double)x[(int64_t)i * ldx + col] - s[ch]) * s[lds + ch];
        double k = (double)scale[ch] * s[lds + ch] / n;
        *out = (float)(k * (n * g - p[ch] - xhat * p[ldp + ch]));
      }
}

void tsr__k_bn_params_grad(int c, float *dscale, float *dshift, const float *p, int ldp) {
  for (int ch = 0; ch < c; ch++)
    dshift[ch] = p[ch], dscale[ch] = p[ldp + ch];
}
