/* Plain C kernels of the sequence layers (a sample is a window of T positions, channels-last:
 * position p's C values at columns p C .. p C + C - 1 of its row): the token and position
 * embedding, layer normalization over each position's channels, and GELU. No StarPU: the
 * codelets in codelets/embedding.c, layernorm.c and gelu.c call them, tests call them directly.
 * Matrices are row-major with explicit leading dimensions, as in kernels.h. */
#ifndef TSR_KERNELS_SEQUENCE_H
#define TSR_KERNELS_SEQUENCE_H

#include <stdbool.h>

/* y (n, t d): y[r, p, :] = wte[tok[r, p], :] + wpe[p, :] for n samples of t token ids tok (n, t)
 * (exact integers in float, each in [0, vocab): the caller guarantees it; asserted). wte
 * (vocab, d), wpe (>= t, d) or NULL (no position table). */
void tsr__k_embed_fwd(int n, int t, int d, float *y, int ldy, const float *tok, int ldt,
                      const float *wte, int ldw, int vocab, const float *wpe, int ldp);

/* The embedding's gradients of n samples, scattered in sample order then position order:
 * dwte[tok[r, p], :] += dy[r, p, :] and dwpe[p, :] += dy[r, p, :] (dwpe NULL: none). With
 * zero_tokens the vocab rows of dwte are set to 0 first, with zero_positions the context rows of
 * dwpe. Called on consecutive batch-row blocks into one table, this gives the same bits for
 * any cutting of the batch into blocks (each element adds its terms in the same order). */
void tsr__k_embed_bwd(int n, int t, int d, float *dwte, int lddw, int vocab, bool zero_tokens,
                      float *dwpe, int lddp, int context, bool zero_positions, const float *tok,
                      int ldt, const float *dy, int lddy);

/* Layer normalization of n samples of p positions of c channels (each sample's row holds its
 * positions contiguously: p c floats from the row's start): per position, mean and biased
 * variance over its c values (in double), y = (x - mean) / sqrt(var + eps) w + b with w, b (1,
 * c); stats (n, 2 p) keeps [mean, 1 / sqrt(var + eps)] of each position for the backward. */
void tsr__k_layernorm_fwd(int n, int p, int c, float *y, int ldy, float *stats, int lds,
                          const float *x, int ldx, const float *w, const float *b, float eps);

/* Its backward from dy (n, p c): with xhat = (x - mean) rstd and g = dy w, dx = rstd (g -
 * mean(g) - xhat mean(g xhat)) over each position's c values (dx NULL: not computed); dw and db
 * (1, c) are written with this block's sums of dy xhat and of dy. */
void tsr__k_layernorm_bwd(int n, int p, int c, float *dx, int lddx, float *dw, float *db,
                          const float *dy, int lddy, const float *x, int ldx, const float *w,
                          const float *stats, int lds);

/* y (m, n) = GELU(x), the tanh approximation (GPT-2's, PyTorch's approximate='tanh'):
 * 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
void tsr__k_gelu_fwd(int m, int n, float *y, int ldy, const float *x, int ldx);
/* dx (m, n) = dy GELU'(x); dx may alias dy. */
void tsr__k_gelu_bwd(int m, int n, float *dx, int lddx, const float *dy, int lddy, const float *x,
                     int ldx);

#endif
