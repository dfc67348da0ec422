/* Causal multi-head self-attention on a block of samples, as FlashAttention computes it: plain C
 * (no StarPU), the block products by BLIS (tsr__k_gemm). codelets/attention.c wraps it; tests
 * call it directly.
 *
 * A sample is a sequence of t positions; its row holds, position after position, the 3 d
 * values [q | k | v] of that position (GPT-2's c_attn split: q columns 0 .. d-1, k d .. 2d-1,
 * v 2d .. 3d-1; head h at columns h dh .. (h+1) dh - 1 of each, dh = d / heads). Per sample and
 * head: o = softmax(q k^T / sqrt(dh) + causal mask) v, written to the output row at position p's
 * columns p d + h dh ... The scores are never held whole: query blocks of TSR_ATTN_BLOCK
 * positions meet key blocks of as many, blocks entirely above the diagonal are skipped, the
 * diagonal block is masked, and each query row keeps a running max and sum (the online
 * softmax). The forward pass saves each row's log-sum-exp, from which the backward pass
 * recomputes each block's probabilities (FlashAttention-2). */
#ifndef TSR_KERNELS_ATTENTION_H
#define TSR_KERNELS_ATTENTION_H

#include <stddef.h>

/* Positions per query block and per key block: a 64 x 64 block of scores and its gradient are
 * 32 KB, in L1/L2 beside the operands' 64-row panels. */
#define TSR_ATTN_BLOCK 64

/* A sequence's shape: t positions of width d (the output's; the input has 3 d), heads heads. */
typedef struct {
  int t, d, heads;
} tsr_attn_geom_t;

/* Floats of workspace tsr__k_attention_fwd and tsr__k_attention_bwd need (the larger of the
 * two: one call's scratch, whatever the number of samples). */
size_t tsr__k_attention_work(const tsr_attn_geom_t *g);

/* y (n, t d) = the attention of qkv (n, t 3d); lse (n, heads t): row r, column h t + p, the
 * log-sum-exp of position p's scaled scores in head h (what the backward pass needs). work
 * holds tsr__k_attention_work floats. */
void tsr__k_attention_fwd(const tsr_attn_geom_t *g, int n, float *y, int ldy, float *lse, int ldlse,
                          const float *qkv, int ldx, float *work);

/* dqkv (n, t 3d) = the gradient of the forward pass's inputs from dy (n, t d), the gradient of
 * its output y, given its inputs qkv, its output y and lse as it wrote them; dq, dk and dv in
 * the [q | k | v] layout of qkv. dqkv is written, not added to. work holds
 * tsr__k_attention_work floats. */
void tsr__k_attention_bwd(const tsr_attn_geom_t *g, int n, float *dqkv, int lddx, const float *dy,
                          int lddy, const float *qkv, int ldx, const float *y, int ldy,
                          const float *lse, int ldlse, float *work);

/* The forward pass's floating-point operations for one sample: per head and causal score (t (t
 * + 1) / 2 of them), dh multiply-adds for q k^T and as many for the weighted sum of v, and about
 * 5 for the scale, the max, the exponential and the sum. */
double tsr__k_attention_flops(const tsr_attn_geom_t *g);

#endif
