/* The sequence layers' kernels (sequence.h): embedding lookup and its scattered gradient,
 * layer normalization per position, GELU. Reductions over a position's channels accumulate in
 * double; the embedding's scatter adds in sample order, so the bits do not depend on how the
 * batch is cut. */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/sequence.h"

/* A token id stored as an exact integer in float. */
static int token_at(const float *tok, int vocab) {
  int id = (int)*tok;
  assert(id >= 0 && id < vocab && (float)id == *tok);
  (void)vocab;
  return id;
}

void tsr__k_embed_fwd(int n, int t, int d, float *y, int ldy, const float *tok, int ldt,
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

void tsr__k_embed_bwd(int n, int t, int d, float *dwte, int lddw, int vocab, bool zero_tokens,
                      float *dwpe, int lddp, int context, bool zero_positions, const float *tok,
                      int ldt, const float *dy, int lddy) {
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

void tsr__k_layernorm_fwd(int n, int p, int c, float *y, int ldy, float *stats, int lds,
                          const float *x, int ldx, const float *w, const float *b, float eps) {
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

void tsr__k_layernorm_bwd(int n, int p, int c, float *dx, int lddx, float *dw, float *db,
                          const float *dy, int lddy, const float *x, int ldx, const float *w,
                          const float *stats, int lds) {
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

void tsr__k_gelu_fwd(int m, int n, float *y, int ldy, const float *x, int ldx) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      float v = x[(long)i * ldx + j];
      y[(long)i * ldy + j] = 0.5f * v * (1.0f + tanhf(gelu_k * (v + gelu_c * v * v * v)));
    }
}

void tsr__k_gelu_bwd(int m, int n, float *dx, int lddx, const float *dy, int lddy, const float *x,
                     int ldx) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      float v = x[(long)i * ldx + j];
      float t = tanhf(gelu_k * (v + gelu_c * v * v * v));
      float d =
          0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * gelu_k * (1.0f + 3.0f * gelu_c * v * v);
      dx[(long)i * lddx + j] = dy[(long)i * lddy + j] * d;
    }
}
