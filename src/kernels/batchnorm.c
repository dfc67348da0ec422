/* Batch normalization kernels on one batch-row tile of channels-last samples: m rows of hw
 * positions of c channels (column p c + ch is channel ch at position p). The statistics of a
 * tile are partials (count, mean, M2) per channel, computed in two passes in double and
 * combined by Chan's formula, so a tree of partials gives the batch's mean and variance
 * stably and the same for any cut into tiles (within float rounding). The backward pass's
 * per-channel sums (of dy and of dy xhat) are partials added the same way. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/hot.h"

TSR_HOT void tsr__k_bn_stats(int m, int hw, int c, const float *x, int ldx, float *p, int ldp,
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

TSR_HOT void tsr__k_bn_normalize(int m, int hw, int c, float *y, int ldy, const float *x, int ldx,
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

/* dy where a fused ReLU's output y is positive, else +0 (also where y is NaN), by a mask: GCC
 * vectorizes the loops below with it, not with a comparison's select (4 ns an element). */
static inline float gated(float dy, float y) {
  uint32_t bits, mask = y > 0.0f ? ~0u : 0u;
  memcpy(&bits, &dy, sizeof bits);
  bits &= mask;
  float v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

/* One row of bn_sums: with relu the ReLU's output y gates dy. Channels innermost, each
 * channel's sums in the same order as element by element, so the loop vectorizes over
 * channels. */
static inline void sums_row(int hw, int c, const float *dy, const float *x, const float *y,
                            bool relu, const float *mean, const float *rstd, double *acc) {
  for (int q = 0; q < hw; q++) {
    const float *g = dy + (int64_t)q * c, *xr = x + (int64_t)q * c;
    const float *yr = relu ? y + (int64_t)q * c : g;
    for (int ch = 0; ch < c; ch++) {
      double gv = relu ? gated(g[ch], yr[ch]) : g[ch];
      double xhat = ((double)xr[ch] - mean[ch]) * rstd[ch];
      acc[ch] += gv, acc[c + ch] += gv * xhat;
    }
  }
}

TSR_HOT void tsr__k_bn_sums(int m, int hw, int c, const float *dy, int lddy, const float *x,
                            int ldx, const float *y, int ldy, const float *s, int lds, float *p,
                            int ldp, double *acc) {
  for (int ch = 0; ch < c; ch++)
    acc[ch] = 0.0, acc[c + ch] = 0.0;
  for (int i = 0; i < m; i++)
    if (y)
      sums_row(hw, c, dy + (int64_t)i * lddy, x + (int64_t)i * ldx, y + (int64_t)i * ldy, true, s,
               s + lds, acc);
    else
      sums_row(hw, c, dy + (int64_t)i * lddy, x + (int64_t)i * ldx, NULL, false, s, s + lds, acc);
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

/* Channels of bn_dx taken together: the per-channel factors are computed once per block (the
 * same double values element by element gave), and the loops over the block vectorize. */
#define DX_BLOCK 256

/* Channels [c0, c0 + cb) of one row of bn_dx: out = k (n g - p0 - xhat p1), k = scale rstd / n,
 * 0 for a channel without samples (n 0). */
static inline void dx_row(int hw, int c, int c0, int cb, float *dx, const float *dy, const float *x,
                          const float *y, bool relu, const float *s, int lds, const double *k,
                          const float *p, int ldp) {
  const float *mean = s + c0, *rstd = s + lds + c0, *count = s + 2 * lds + c0;
  const float *p0 = p + c0, *p1 = p + ldp + c0;
  for (int q = 0; q < hw; q++) {
    int64_t at = (int64_t)q * c + c0;
    const float *g = dy + at, *xr = x + at, *yr = relu ? y + at : g;
    float *out = dx + at;
    for (int ch = 0; ch < cb; ch++) {
      double n = count[ch];
      double gv = relu ? gated(g[ch], yr[ch]) : g[ch];
      double xhat = ((double)xr[ch] - mean[ch]) * rstd[ch];
      float v = (float)(k[ch] * (n * gv - p0[ch] - xhat * p1[ch]));
      out[ch] = gated(v, count[ch]); /* 0 where n is 0 */
    }
  }
}

TSR_HOT void tsr__k_bn_dx(int m, int valid, int hw, int c, float *dx, int lddx, const float *dy,
                          int lddy, const float *x, int ldx, const float *y, int ldy,
                          const float *s, int lds, const float *scale, const float *p, int ldp) {
  double k[DX_BLOCK];
  for (int c0 = 0; c0 < c; c0 += DX_BLOCK) {
    int cb = c - c0 < DX_BLOCK ? c - c0 : DX_BLOCK;
    for (int ch = 0; ch < cb; ch++)
      k[ch] = (double)scale[c0 + ch] * s[lds + c0 + ch] / (double)s[2 * lds + c0 + ch];
    for (int i = 0; i < m; i++) {
      float *out = dx + (int64_t)i * lddx;
      if (i >= valid) {
        for (int q = 0; q < hw; q++)
          memset(out + (int64_t)q * c + c0, 0, sizeof(float) * (size_t)cb);
      } else if (y) {
        dx_row(hw, c, c0, cb, out, dy + (int64_t)i * lddy, x + (int64_t)i * ldx,
               y + (int64_t)i * ldy, true, s, lds, k, p, ldp);
      } else {
        dx_row(hw, c, c0, cb, out, dy + (int64_t)i * lddy, x + (int64_t)i * ldx, NULL, false, s,
               lds, k, p, ldp);
      }
    }
  }
}

void tsr__k_bn_params_grad(int c, float *dscale, float *dshift, const float *p, int ldp) {
  for (int ch = 0; ch < c; ch++)
    dshift[ch] = p[ch], dscale[ch] = p[ldp + ch];
}

TSR_HOT void tsr__k_bn_fold(int fan_in, int c, const float *w, int ldw, const float *b,
                            const float *run_mean, const float *run_var, const float *scale,
                            const float *shift, float eps, float *w2, float *b2) {
  for (int ch = 0; ch < c; ch++) {
    double k = (double)scale[ch] / sqrt((double)run_var[ch] + (double)eps);
    b2[ch] = (float)(((double)b[ch] - run_mean[ch]) * k + shift[ch]);
    w2[ch] = (float)k; /* row 0 holds k until the rows below are done */
  }
  for (int r = fan_in - 1; r >= 0; r--)
    for (int ch = 0; ch < c; ch++)
      w2[(int64_t)r * c + ch] = w[(int64_t)r * ldw + ch] * w2[ch];
}

size_t tsr__k_bn_folded_floats(const tsr_conv_geom_t *g) {
  return ((size_t)g->kh * g->kw * g->c * g->oc + (size_t)g->oc + 15) / 16 * 16;
}

size_t tsr__k_conv_bn_work(const tsr_conv_geom_t *g, int n, bool relu) {
  size_t lowered = tsr__k_conv_work(g, n), dnnl = tsr__k_dnnl_conv_work(g, n, 0, relu);
  return tsr__k_bn_folded_floats(g) + (dnnl > lowered ? dnnl : lowered);
}
