/* Plain C kernels on one tile. They know nothing of StarPU: codelets call
 * them with the pointers and strides of their data handles, and tests call
 * them directly.
 *
 * Every matrix is row-major with an explicit leading dimension (elements
 * between the starts of consecutive rows). Shapes are (rows, cols). */
#ifndef TSR_KERNELS_H
#define TSR_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

/* Makes BLIS single-threaded: StarPU is the only source of parallelism. */
void tsr__k_init(void);

/* c (m, n) = alpha * op(a) (m, k) * op(b) (k, n) + beta * c. With ta, a is
 * stored (k, m); with tb, b is stored (n, k). BLIS does the work. */
void tsr__k_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);

/* The same product computed naively with double accumulation: a reference for tests. */
void tsr__k_gemm_ref(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc);

/* y (m, n) += b (1, n) on every row, then max(y, 0) when relu is set. */
void tsr__k_bias_add(int m, int n, float *y, int ldy, const float *b, bool relu);

/* db (1, n) = beta * db + column sums of dy (m, n). */
void tsr__k_bias_grad(int m, int n, float *db, const float *dy, int lddy, float beta);

/* y (m, n) = max(x, 0); y may alias x. */
void tsr__k_relu_fwd(int m, int n, float *y, int ldy, const float *x, int ldx);

/* dx (m, n) = dy where y > 0, else 0; dx may alias dy. */
void tsr__k_relu_bwd(int m, int n, float *dx, int lddx, const float *dy, int lddy, const float *y,
                     int ldy);

/* Fused softmax + cross-entropy over the rows of logits (m, n); labels (m, 1)
 * hold class indices. Only the first nvalid rows count (the rest are padding
 * of a short last batch). stats (1, 2) accumulates [sum of losses, number of
 * correct argmax predictions]. When dlogits (m, n) is not NULL it receives
 * scale * (softmax - onehot) for valid rows and 0 for padding rows. */
void tsr__k_softmax_xent(int m, int n, float *dlogits, int ldd, const float *logits, int ldl,
                         const float *labels, int nvalid, float scale, float *stats);

/* SGD with momentum and L2 weight decay, PyTorch's formulation:
 * g' = g + wd w; v = momentum v + g'; w -= lr v. v is unused when momentum is 0. */
void tsr__k_sgd(int m, int n, float *w, int ldw, float *v, int ldv, const float *g, int ldg,
                float lr, float momentum, float wd);

/* Adam with L2 weight decay (PyTorch's Adam); t is the 1-based step number. */
void tsr__k_adam(int m, int n, float *w, int ldw, float *m1, int ldm1, float *m2, int ldm2,
                 const float *g, int ldg, float lr, float beta1, float beta2, float eps, float wd,
                 int t);

void tsr__k_fill(int m, int n, float *x, int ldx, float value);
void tsr__k_copy(int m, int n, float *dst, int ldd, const float *src, int lds);
/* y (m, n) = alpha x + beta y; y is not read when beta is 0. */
void tsr__k_axpby(int m, int n, float alpha, const float *x, int ldx, float beta, float *y,
                  int ldy);
void tsr__k_scale(int m, int n, float alpha, float *x, int ldx);

/* dst (m, n) row r = src row rows[r], columns [col0, col0 + n), for r < nvalid;
 * rows from nvalid on are zero (padding of a short last batch). */
void tsr__k_gather_rows(int m, int n, float *dst, int ldd, const float *src, int lds, int col0,
                        const int32_t *rows, int nvalid);

#endif
