/* Causal multi-head self-attention, forward and backward, by FlashAttention's tiling
 * (attention.h): for each sample and head, query blocks against the key blocks at or below the
 * diagonal, the scores of one block at a time in the workspace, an online softmax in the
 * forward pass and the probabilities recomputed from the saved log-sum-exp in the backward
 * pass. The operands are read in place: a head's q, k, v (and their gradients) are (t, dh)
 * matrices with a row stride of 3 d inside the sample's row, which BLIS takes as they are. */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/hot.h"
#include "kernels/kernels.h"

enum { B = TSR_ATTN_BLOCK };

static int imin(int a, int b) {
  return a < b ? a : b;
}

size_t tsr__k_attention_work(const tsr_attn_geom_t *g) {
  size_t dh = (size_t)(g->d / g->heads);
  size_t fwd = (size_t)B * B + (size_t)B * dh + 2 * (size_t)B; /* scores, o, max, sum */
  size_t bwd = 2 * (size_t)B * B + (size_t)g->t;               /* p, dp, rowsum(do o) */
  return fwd > bwd ? fwd : bwd;
}

double tsr__k_attention_flops(const tsr_attn_geom_t *g) {
  double scores = (double)g->t * (g->t + 1) / 2, dh = (double)(g->d / g->heads);
  return g->heads * scores * (4.0 * dh + 5.0);
}

/* s (bq, bk) = scale q_blk k_blk^T: query rows i0 .., key rows j0 .. of one head (row stride
 * ld). */
TSR_HOT static void block_scores(float *s, const float *q, const float *k, int ld, int dh, int i0,
                                 int bq, int j0, int bk, float scale) {
  tsr__k_gemm(false, true, bq, bk, dh, scale, q + (size_t)i0 * ld, ld, k + (size_t)j0 * ld, ld,
              0.0f, s, B);
}

/* Keys of row i of the block (query i0 + i) at or before the diagonal: all bk of them below
 * it, i + 1 on it (the diagonal block has j0 = i0). */
static int keys_of(int i, int bk, int i0, int j0) {
  return j0 < i0 ? bk : imin(i + 1, bk);
}

/* One head of one sample: o (t, dh) (row stride ldo) and lse (t) from q, k, v (row stride
 * ld). */
TSR_HOT static void fwd_head(int t, int dh, float scale, float *o, int ldo, float *lse,
                             const float *q, const float *k, const float *v, int ld, float *work) {
  float *s = work, *acc = s + (size_t)B * B, *mx = acc + (size_t)B * dh, *sum = mx + B;
  for (int i0 = 0; i0 < t; i0 += B) {
    int bq = imin(B, t - i0);
    memset(acc, 0, sizeof *acc * (size_t)bq * (size_t)dh);
    for (int i = 0; i < bq; i++)
      mx[i] = -INFINITY, sum[i] = 0.0f;
    for (int j0 = 0; j0 <= i0; j0 += B) { /* blocks above the diagonal: never */
      int bk = imin(B, t - j0);
      block_scores(s, q, k, ld, dh, i0, bq, j0, bk, scale);
      for (int i = 0; i < bq; i++) {
        float *row = s + (size_t)i * B, m = mx[i];
        int keys = keys_of(i, bk, i0, j0);
        for (int j = 0; j < keys; j++)
          m = fmaxf(m, row[j]);
        float alpha = expf(mx[i] - m), add = 0.0f; /* mx[i] -inf: alpha 0 */
        for (int j = 0; j < keys; j++) {
          row[j] = expf(row[j] - m);
          add += row[j];
        }
        for (int j = keys; j < bk; j++)
          row[j] = 0.0f;
        sum[i] = sum[i] * alpha + add, mx[i] = m;
        if (alpha != 1.0f)
          for (int c = 0; c < dh; c++)
            acc[(size_t)i * dh + c] *= alpha;
      }
      tsr__k_gemm(false, false, bq, dh, bk, 1.0f, s, B, v + (size_t)j0 * ld, ld, 1.0f, acc, dh);
    }
    for (int i = 0; i < bq; i++) {
      float inv = 1.0f / sum[i];
      for (int c = 0; c < dh; c++)
        o[(size_t)(i0 + i) * ldo + c] = acc[(size_t)i * dh + c] * inv;
      lse[i0 + i] = mx[i] + logf(sum[i]);
    }
  }
}

void tsr__k_attention_fwd(const tsr_attn_geom_t *g, int n, float *y, int ldy, float *lse, int ldlse,
                          const float *qkv, int ldx, float *work) {
  int t = g->t, d = g->d, dh = d / g->heads;
  assert(d % g->heads == 0 && ldx >= 3 * t * d && ldy >= t * d && ldlse >= g->heads * t);
  float scale = 1.0f / sqrtf((float)dh);
  for (int r = 0; r < n; r++)
    for (int h = 0; h < g->heads; h++) {
      const float *q = qkv + (size_t)r * ldx + h * dh;
      fwd_head(t, dh, scale, y + (size_t)r * ldy + h * dh, d, lse + (size_t)r * ldlse + h * t, q,
               q + d, q + 2 * d, 3 * d, work);
    }
}

/* One head of one sample: dq, dk, dv (t, dh) (row stride ld, zero on entry) from do (t, dh) and
 * o (row stride ldo), lse (t) and q, k, v (row stride ld). FlashAttention-2's loop: each key
 * block against the query blocks at or below the diagonal, P = exp(s - lse) recomputed, dv +=
 * P^T do, dP = do v^T, dS = P (dP - rowsum(do o)), dq += scale dS k, dk += scale dS^T q. */
TSR_HOT static void bwd_head(int t, int dh, float scale, float *dq, float *dk, float *dv,
                             const float *dO, const float *o, int ldo, const float *lse,
                             const float *q, const float *k, const float *v, int ld, float *work) {
  float *p = work, *dp = p + (size_t)B * B, *rs = dp + (size_t)B * B;
  for (int i = 0; i < t; i++) {
    float acc = 0.0f;
    for (int c = 0; c < dh; c++)
      acc += dO[(size_t)i * ldo + c] * o[(size_t)i * ldo + c];
    rs[i] = acc;
  }
  for (int j0 = 0; j0 < t; j0 += B) {
    int bk = imin(B, t - j0);
    for (int i0 = j0; i0 < t; i0 += B) {
      int bq = imin(B, t - i0);
      block_scores(p, q, k, ld, dh, i0, bq, j0, bk, scale);
      for (int i = 0; i < bq; i++) {
        float *row = p + (size_t)i * B, l = lse[i0 + i];
        int keys = keys_of(i, bk, i0, j0);
        for (int j = 0; j < keys; j++)
          row[j] = expf(row[j] - l);
        for (int j = keys; j < bk; j++)
          row[j] = 0.0f;
      }
      const float *dOi = dO + (size_t)i0 * ldo;
      tsr__k_gemm(true, false, bk, dh, bq, 1.0f, p, B, dOi, ldo, 1.0f, dv + (size_t)j0 * ld, ld);
      tsr__k_gemm(false, true, bq, bk, dh, 1.0f, dOi, ldo, v + (size_t)j0 * ld, ld, 0.0f, dp, B);
      for (int i = 0; i < bq; i++)
        for (int j = 0; j < bk; j++)
          dp[(size_t)i * B + j] = p[(size_t)i * B + j] * (dp[(size_t)i * B + j] - rs[i0 + i]);
      tsr__k_gemm(false, false, bq, dh, bk, scale, dp, B, k + (size_t)j0 * ld, ld, 1.0f,
                  dq + (size_t)i0 * ld, ld);
      tsr__k_gemm(true, false, bk, dh, bq, scale, dp, B, q + (size_t)i0 * ld, ld, 1.0f,
                  dk + (size_t)j0 * ld, ld);
    }
  }
}

void tsr__k_attention_bwd(const tsr_attn_geom_t *g, int n, float *dqkv, int lddx, const float *dy,
                          int lddy, const float *qkv, int ldx, const float *y, int ldy,
                          const float *lse, int ldlse, float *work) {
  int t = g->t, d = g->d, dh = d / g->heads;
  assert(d % g->heads == 0 && ldx >= 3 * t * d && lddx >= 3 * t * d && ldy >= t * d &&
         lddy >= t * d && ldlse >= g->heads * t);
  float scale = 1.0f / sqrtf((float)dh);
  for (int r = 0; r < n; r++) {
    float *dx = dqkv + (size_t)r * lddx;
    memset(dx, 0, sizeof *dx * (size_t)t * 3 * (size_t)d);
    for (int h = 0; h < g->heads; h++) {
      const float *q = qkv + (size_t)r * ldx + h * dh;
      float *dq = dx + h * dh;
      bwd_head(t, dh, scale, dq, dq + d, dq + 2 * d, dy + (size_t)r * lddy + h * dh,
               y + (size_t)r * ldy + h * dh, d, lse + (size_t)r * ldlse + h * t, q, q + d,
               q + 2 * d, 3 * d, work);
    }
  }
}
