/* The sequence layers' kernels (sequence.h): embedding lookup and its scattered gradient,
 * layer normalization per position, GELU. Reductions over a position's channels accumulate in
 * double; the embedding's scatter adds in sample order, so the bits do not depend on how the
 * batch is cut. */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/sequence.h"
#include "kernels/hot.h"

/* A token id stored as an exact integer in float. */
static int token_at(const float *tok, int vocab) {
  int id = (int)*tok;
  assert(id >= 0 && id < vocab && (float)id == *tok);
  (void)vocab;
  return id;
}

TSR_HOT void tsr__k_embed_fwd(int n, int t, int d, float *y, int ldy, const float *tok, int ldt,
                              const float *wte, int ldw, int vocab, const float *wpe, int ldp) {
  for (int r = 0; r < n; r++)
    for (int p = 0; p < t; p++) {
      const float *e = wte + (long)token_at(&tok[(long)r * ldt + p], vocab) * ldw;
      float *out = y + (long)r * ldy + (long)p * d;
      if (!wpe) {
        memcpy(out, e, sizeof *out * (size_t)d);
        continue;
      }
      const float *pos = wpe + (long)p * ldp;
      for (int k = 0; k < d; k++)
        out[k] = e[k] + pos[k];
    }
}

TSR_HOT void tsr__k_embed_bwd(int n, int t, int d, float *dwte, int lddw, int vocab,
                              bool zero_tokens, float *dwpe, int lddp, int context,
                              bool zero_positions, const float *tok, int ldt, const float *dy,
                              int lddy) {
  if (zero_tokens)
    for (int v = 0; v < vocab; v++)
      memset(dwte + (long)v * lddw, 0, sizeof *dwte * (size_t)d);
  if (dwpe && zero_positions)
    for (int p = 0; p < context; p++)
      memset(dwpe + (long)p * lddp, 0, sizeof *dwpe * (size_t)d);
  for (int r = 0; r < n; r++)
    for (int p = 0; p < t; p++) {
      const float *g = dy + (long)r * lddy + (long)p * d;
      float *e = dwte + (long)token_at(&tok[(long)r * ldt + p], vocab) * lddw;
      for (int k = 0; k < d; k++)
        e[k] += g[k];
      if (!dwpe) continue;
      float *pos = dwpe + (long)p * lddp;
      for (int k = 0; k < d; k++)
        pos[k] += g[k];
    }
}

TSR_HOT void tsr__k_layernorm_fwd(int n, int p, int c, float *y, int ldy, float *stats, int lds,
                                  const float *x, int ldx, const float *w, const float *b,
                                  float eps) {
  for (int r = 0; r < n; r++)
    for (int q = 0; q < p; q++) {
      const float *in = x + (long)r * ldx + (long)q * c;
      float *out = y + (long)r * ldy + (long)q * c;
      double mean = 0, var = 0;
      for (int k = 0; k < c; k++)
        mean += in[k];
      mean /= c;
      for (int k = 0; k < c; k++)
        var += (in[k] - mean) * (in[k] - mean);
      var /= c;
      double rstd = 1.0 / sqrt(var + (double)eps);
      for (int k = 0; k < c; k++)
        out[k] = (float)((in[k] - mean) * rstd) * w[k] + b[k];
      stats[(long)r * lds + 2 * q] = (float)mean;
      stats[(long)r * lds + 2 * q + 1] = (float)rstd;
    }
}

TSR_HOT void tsr__k_layernorm_bwd(int n, int p, int c, float *dx, int lddx, float *dw, float *db,
                                  const float *dy, int lddy, const float *x, int ldx,
                                  const float *w, const float *stats, int lds) {
  memset(dw, 0, sizeof *dw * (size_t)c);
  memset(db, 0, sizeof *db * (size_t)c);
  for (int r = 0; r < n; r++)
    for (int q = 0; q < p; q++) {
      const float *in = x + (long)r * ldx + (long)q * c, *g = dy + (long)r * lddy + (long)q * c;
      float mean = stats[(long)r * lds + 2 * q], rstd = stats[(long)r * lds + 2 * q + 1];
      double sg = 0, sgx = 0; /* sums of dy w and of dy w xhat */
      for (int k = 0; k < c; k++) {
        float xhat = (in[k] - mean) * rstd;
        sg += (double)g[k] * w[k];
        sgx += (double)g[k] * w[k] * xhat;
        dw[k] += g[k] * xhat;
        db[k] += g[k];
      }
      if (!dx) continue;
      float mg = (float)(sg / c), mgx = (float)(sgx / c);
      float *out = dx + (long)r * lddx + (long)q * c;
      for (int k = 0; k < c; k++) {
        float xhat = (in[k] - mean) * rstd;
        out[k] = rstd * (g[k] * w[k] - mg - xhat * mgx);
      }
    }
}

/* sqrt(2 / pi) and the cubic's coefficient of the tanh approximation. */
static const float gelu_k = 0.7978845608028654f, gelu_c = 0.044715f;

/* exp(x) in float without a libm call or a branch, so that the loops below vectorize (libm's
 * tanhf made GELU 37% of a gpt:4,256,4,128 step): x clamped to [-87, 87], x = k ln 2 + r with |r|
 * <= ln 2 / 2 (ln 2 in two parts), e^r by its Taylor polynomial of degree 7 (relative error under
 * 2e-7 there), times 2^k built in the exponent's bits. */
static inline float fast_expf(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 87.0f ? 87.0f : x;
  /* k = x / ln 2 rounded to nearest: adding and taking away 1.5 2^23 drops the fraction */
  float kf = (x * 1.4426950408889634f + 12582912.0f) - 12582912.0f;
  float r = x - kf * 0.693145751953125f - kf * 1.428606765330187e-06f;
  int k = (int)kf;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union {
    int32_t i;
    float f;
  } scale = {.i = (k + 127) << 23};
  return p * scale.f;
}

/* 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2 u)): GELU is x times the logistic of 2 u,
 * u = sqrt(2/pi) (x + 0.044715 x^3). */
static inline float gelu_half(float v) {
  return 1.0f / (1.0f + fast_expf(-2.0f * gelu_k * (v + gelu_c * v * v * v)));
}

TSR_HOT void tsr__k_gelu_fwd(int m, int n, float *y, int ldy, const float *x, int ldx) {
  for (int i = 0; i < m; i++) {
    float *restrict out = y + (long)i * ldy;
    const float *restrict in = x + (long)i * ldx;
    for (int j = 0; j < n; j++)
      out[j] = in[j] * gelu_half(in[j]);
  }
}

/* d/dx: s + x (1 - tanh^2) k (1 + 3 c x^2) / 2 with s = (1 + tanh) / 2, 1 - tanh^2 = 4 s (1 - s).
 */
TSR_HOT void tsr__k_gelu_bwd(int m, int n, float *dx, int lddx, const float *dy, int lddy,
                             const float *x, int ldx) {
  for (int i = 0; i < m; i++) {
    float *restrict out = dx + (long)i * lddx;
    const float *restrict g = dy + (long)i * lddy, *restrict in = x + (long)i * ldx;
    for (int j = 0; j < n; j++) {
      float v = in[j], s = gelu_half(v);
      out[j] = g[j] * (s + 2.0f * v * s * (1.0f - s) * gelu_k * (1.0f + 3.0f * gelu_c * v * v));
    }
  }
}
