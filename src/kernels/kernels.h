/* Plain C kernels on one tile. They know nothing of StarPU: codelets call
 * them with the pointers and strides of their data handles, and tests call
 * them directly.
 *
 * Every matrix is row-major with an explicit leading dimension (elements
 * between the starts of consecutive rows). Shapes are (rows, cols). */
#ifndef TSR_KERNELS_H
#define TSR_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Makes BLIS single-threaded (StarPU is the only source of parallelism) and picks its kernels
 * where BLIS alone would pick slow ones (gemm.c); call before any other BLIS call. */
void tsr__k_init(void);
/* What tsr__k_init chose of BLIS's kernels for this CPU ("BLIS_ARCH_TYPE=0 (skx), set by
 * tessera"), or "" when BLIS chose alone (gemm.c says when tessera chooses). */
const char *tsr__k_blis_choice(void);
/* The name of the BLIS kernels in use ("skx", "generic", ...), after tsr__k_init. */
const char *tsr__k_blis_kernels(void);

/* c (m, n) = alpha * op(a) (m, k) * op(b) (k, n) + beta * c. With ta, a is
 * stored (k, m); with tb, b is stored (n, k). BLIS does the work. */
void tsr__k_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);

/* The same product by oneDNN's dnnl_sgemm on this thread alone (its JIT kernels, row-major as
 * ours), or false without computing anything when this build has no oneDNN or it refuses the
 * call. On this project's Zen 3 it ran a dense layer's tiles 1.03-1.37x as fast as BLIS (gemm.c
 * has the figures). */
bool tsr__k_gemm_dnnl(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc);

/* The product by oneDNN's GEMM when dnnl and it serves the call, else by BLIS's: the tile GEMM
 * codelets' two implementations and the planner's timing of them. */
void tsr__k_gemm_by(bool dnnl, bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
                    int lda, const float *b, int ldb, float beta, float *c, int ldc);

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
 * scale * (softmax - target) for valid rows and 0 for padding rows. The target is PyTorch's
 * label smoothing by eps in [0, 1): (1 - eps) onehot + eps / n, and the loss its cross-entropy
 * with the softmax, (1 - eps) (-log p_label) + eps / n sum_j (-log p_j); eps 0 is the plain
 * one-hot cross-entropy, with the digits it had before eps. */
void tsr__k_softmax_xent(int m, int n, float *dlogits, int ldd, const float *logits, int ldl,
                         const float *labels, int nvalid, float scale, float eps, float *stats);

/* SGD with momentum and L2 weight decay, PyTorch's formulation:
 * g' = g + wd w; v = momentum v + g'; w -= lr v. v is unused when momentum is 0. */
void tsr__k_sgd(int m, int n, float *w, int ldw, float *v, int ldv, const float *g, int ldg,
                float lr, float momentum, float wd);

/* SGD with Nesterov momentum and L2 weight decay, PyTorch's SGD(nesterov=True), dampening 0:
 * g' = g + wd w; v = momentum v + g'; w -= lr (g' + momentum v). v (m, n) is required. */
void tsr__k_sgd_nesterov(int m, int n, float *w, int ldw, float *v, int ldv, const float *g,
                         int ldg, float lr, float momentum, float wd);

/* Adam with L2 weight decay (PyTorch's Adam); t is the 1-based step number. */
void tsr__k_adam(int m, int n, float *w, int ldw, float *m1, int ldm1, float *m2, int ldm2,
                 const float *g, int ldg, float lr, float beta1, float beta2, float eps, float wd,
                 int t);

/* AdamW, decoupled weight decay (PyTorch's AdamW, amsgrad off): w *= 1 - lr wd, then Adam's
 * step on g alone; t is the 1-based step number. */
void tsr__k_adamw(int m, int n, float *w, int ldw, float *m1, int ldm1, float *m2, int ldm2,
                  const float *g, int ldg, float lr, float beta1, float beta2, float eps, float wd,
                  int t);

/* Adam's bias corrections at step t, as the kernels apply them: c1 = 1 / (1 - beta1^t),
 * c2 = 1 / (1 - beta2^t) (the OpenCL versions take them from here, for the same floats). */
void tsr__k_adam_corrections(float beta1, float beta2, int t, float *c1, float *c2);

/* One outer-optimizer step on x (m, n) with momentum u and pseudo-gradient
 * d = scale (a - b), elementwise (a may be x itself):
 *   slowmo:   u = momentum u + d / gamma; x -= lr gamma u   (gamma <= 0: x -= d, u kept)
 *   nesterov: u = momentum u + d;         x -= lr (d + momentum u) */
void tsr__k_outer(int m, int n, float *x, int ldx, float *u, int ldu, const float *a, int lda,
                  const float *b, int ldb, float scale, bool nesterov, float lr, float momentum,
                  float gamma);

void tsr__k_fill(int m, int n, float *x, int ldx, float value);
void tsr__k_copy(int m, int n, float *dst, int ldd, const float *src, int lds);
/* y (m, n) = alpha x + beta y; y is not read when beta is 0. */
void tsr__k_axpby(int m, int n, float alpha, const float *x, int ldx, float beta, float *y,
                  int ldy);
void tsr__k_scale(int m, int n, float alpha, float *x, int ldx);
/* Gradient-norm clipping (--clip-grad), PyTorch's clip_grad_norm_: the sum of the squares of
 * x (m, n), in double; and x times min(1, max_norm / (sqrt(sumsq) + 1e-6)), sumsq the sum over
 * every gradient (x untouched when the factor is 1). */
double tsr__k_sumsq(int m, int n, const float *x, int ldx);
void tsr__k_clip(int m, int n, float *x, int ldx, float sumsq, float max_norm);
/* y (m, n) = a + b (the add layer). */
void tsr__k_add(int m, int n, float *y, int ldy, const float *a, int lda, const float *b, int ldb,
                bool relu);
/* A block of channels between two tiles of channels-last rows (the concat layer): for each of
 * m rows and each of `pixels` pixels, the `width` values at column p * src_stride + src_off of
 * src go to column p * dst_stride + dst_off of dst (rows lds and ldd floats apart), or with add
 * are added to what is there (a domain-split layer's halo gradients). */
void tsr__k_channels_copy(int m, int pixels, int width, float *dst, int ldd, int dst_stride,
                          int dst_off, const float *src, int lds, int src_stride, int src_off,
                          bool add);

/* dst (m, n) row r = src row rows[r], columns [col0, col0 + n), for r < nvalid;
 * rows from nvalid on are zero (padding of a short last batch). */
void tsr__k_gather_rows(int m, int n, float *dst, int ldd, const float *src, int lds, int col0,
                        const int32_t *rows, int nvalid);

/* Geometry of a 2-D convolution or pooling window over one sample. A sample
 * is one row stored channels-last: (h, w, c) in, (oh, ow, oc) out. The window
 * is kh x kw with strides sh, sw and zero padding ph, pw on each side; the
 * output size is (h + 2 ph - kh) / sh + 1 (and the same for w). */
typedef struct {
  int c, h, w;
  int oc, oh, ow;
  int kh, kw, sh, sw, ph, pw;
} tsr_conv_geom_t;

/* Domain parallelism (--grid with --domain rows): the Pr ranks of a grid column cut every
 * image of a convolution's or pooling's output into bands of ceil(h / Pr) rows; band p is rows
 * [*r0, *r1) (empty, r0 == r1, past the last band). */
int tsr__k_band_rows(int h, int pr);
int tsr__k_bands(int h, int pr);
void tsr__k_band(int h, int pr, int p, int *r0, int *r1);
/* The window of g's output rows [r0, r1) (r0 < r1): the input rows [*a0, *a1) they read, and g
 * cut to those rows (h = a1 - a0, oh = r1 - r0, ph what padding remains above a0; the padding
 * below is implied by the range checks), so that a kernel run with it on input rows [a0, a1)
 * alone computes exactly output rows [r0, r1), and its input gradient is theirs. */
tsr_conv_geom_t tsr__k_band_window(const tsr_conv_geom_t *g, int r0, int r1, int *a0, int *a1);

/* Floats of workspace the conv kernels need for n samples: the lowered
 * input (n oh ow, kh kw c). */
size_t tsr__k_conv_work(const tsr_conv_geom_t *g, int n);
/* col (n oh ow, kh kw c) row-major, rows ldcol floats apart: every output pixel's receptive
 * field, zero where the window hangs over the padding. x is (n, h w c), ld ldx. */
void tsr__k_im2col(const tsr_conv_geom_t *g, int n, float *col, int ldcol, const float *x, int ldx);
/* dx (n, h w c) = the sum, over every output pixel, of its row of col
 * scattered back onto its receptive field (the adjoint of im2col). */
void tsr__k_col2im(const tsr_conv_geom_t *g, int n, float *dx, int lddx, const float *col);
/* y (n, oh ow oc) = conv(x (n, h w c), w (kh kw c, oc)) + b (1, oc), then
 * ReLU when relu is set. work holds tsr__k_conv_work floats. */
void tsr__k_conv_fwd(const tsr_conv_geom_t *g, int n, float *y, int ldy, const float *x, int ldx,
                     const float *w, int ldw, const float *b, bool relu, float *work);
/* dx (n, h w c) = gradient of the input from dy (n, oh ow oc) and w. */
void tsr__k_conv_bwd_data(const tsr_conv_geom_t *g, int n, float *dx, int lddx, const float *dy,
                          int lddy, const float *w, int ldw, float *work);
/* dw (kh kw c, oc) = beta dw + lowered(x)^T dy; db (1, oc) = beta db +
 * column sums of dy viewed as (n oh ow, oc). */
void tsr__k_conv_bwd_filter(const tsr_conv_geom_t *g, int n, float *dw, int lddw, float *db,
                            const float *x, int ldx, const float *dy, int lddy, float beta,
                            float *work);

/* ---- The same three passes through oneDNN (conv_dnnl.c) ----
 * Same arguments and results as tsr__k_conv_* above, on one thread; each returns false, having
 * written nothing, when oneDNN cannot serve the call (a build without it, or a shape it runs
 * only with its reference code): the caller then runs the lowered kernel. work holds
 * tsr__k_dnnl_conv_work(g, n, pass, flag) floats (pass 0 forward, 1 input gradient, 2 filter
 * gradient; flag: the forward's relu, the filter gradient's beta != 0). beta is 0 or 1. The
 * filter gradient of a 1x1 convolution, and of a wide one over a small tile, is one dnnl_sgemm
 * over the (lowered) input there, not the primitive. */
bool tsr__k_dnnl_built(void);
const char *tsr__k_dnnl_version(void); /* "oneDNN 2.6.3 (OpenMP)" or why there is none */
/* Whether a tile's rows are whole samples back to back and w is (kh kw c, oc) exactly: the
 * layouts these kernels take. */
bool tsr__k_dnnl_conv_dense(const tsr_conv_geom_t *g, int n, int ld_in, int ld_out, int ldw);
size_t tsr__k_dnnl_conv_work(const tsr_conv_geom_t *g, int n, int pass, bool flag);
/* The implementation oneDNN chose for the pass ("brg:avx512_core", "jit:avx2", ...), or
 * "none". */
const char *tsr__k_dnnl_conv_impl(const tsr_conv_geom_t *g, int n, int pass);
/* Weights reordered once for a step into the layout the pass's primitive for tiles of n rows
 * takes (tsr__k_dnnl_conv_wreorder); the forward and input-gradient calls use them where their
 * own primitive takes the same layout (an edge tile's may not), else reorder w themselves.
 * NULL, or w NULL: none. */
typedef struct {
  const float *w;
  int n;
} tsr_dnnl_blocked_t;
/* Floats of the weights in the layout pass 0 or 1's primitive for n rows takes; 0 when it takes
 * w as it is or oneDNN does not serve the shape (nothing to reorder). */
size_t tsr__k_dnnl_conv_wfloats(const tsr_conv_geom_t *g, int n, int pass, bool flag);
/* wb = w (kh kw c, oc, ldw = oc) in that layout; false when there is none. */
bool tsr__k_dnnl_conv_wreorder(const tsr_conv_geom_t *g, int n, int pass, bool flag, const float *w,
                               int ldw, float *wb);
bool tsr__k_dnnl_conv_fwd(const tsr_conv_geom_t *g, int n, float *y, int ldy, const float *x,
                          int ldx, const float *w, int ldw, const float *b, bool relu,
                          const tsr_dnnl_blocked_t *wb, float *work);
bool tsr__k_dnnl_conv_bwd_data(const tsr_conv_geom_t *g, int n, float *dx, int lddx,
                               const float *dy, int lddy, const float *w, int ldw,
                               const tsr_dnnl_blocked_t *wb, float *work);
bool tsr__k_dnnl_conv_bwd_filter(const tsr_conv_geom_t *g, int n, float *dw, int lddw, float *db,
                                 const float *x, int ldx, const float *dy, int lddy, float beta,
                                 float *work);

/* Pooling over each channel (g->oc == g->c, padding at most half the kernel): y (n, oh ow c)
 * = max (or mean) of x (n, h w c) over each window. The padding never wins a max (-inf) and
 * counts as zeros in a mean, whose divisor is kh kw (PyTorch's count_include_pad=True). */
void tsr__k_pool_fwd(const tsr_conv_geom_t *g, bool max, int n, float *y, int ldy, const float *x,
                     int ldx);
/* dx (n, h w c) = pooling gradient from dy (n, oh ow c). Max pooling routes
 * each output's gradient to the first input of its window equal to the
 * output (x and y are the forward input and output), and with relu only
 * where that maximum is positive (the backward pass of a ReLU before the
 * pooling, fused); mean pooling spreads it evenly and ignores x, y, relu. */
void tsr__k_pool_bwd(const tsr_conv_geom_t *g, bool max, bool relu, int n, float *dx, int lddx,
                     const float *dy, int lddy, const float *x, int ldx, const float *y, int ldy);

/* Whether dropout keeps element (row, col) of a step's mask: a hash of
 * (seed, row, col) against rate, so the mask depends on the sample row and
 * feature only, never on how the matrix is tiled. */
bool tsr__k_dropout_keep(uint64_t seed, int64_t row, int64_t col, float rate);
/* y (m, n) = x / (1 - rate) where kept, 0 elsewhere; rows are numbered from
 * row0 and columns from col0 in the mask. y may alias x. The same call on dy
 * gives the backward pass. */
void tsr__k_dropout(int m, int n, float *y, int ldy, const float *x, int ldx, uint64_t seed,
                    int64_t row0, int64_t col0, float rate);

/* Which versions of the kernels marked TSR_HOT (hot.h) run here, in words (elementwise.c). */
const char *tsr__k_hot_level(void);

/* ---- Batch normalization (batchnorm.c) ----
 * A tile holds m samples of hw positions of c channels, channels-last. Partials p are (3, c)
 * with row stride ldp; statistics s are (3, c) rows: mean, 1 / sqrt(var + eps), count (0 in
 * evaluation). acc: 2 c doubles of scratch. */
/* p = (count, mean, M2) per channel of the first m rows of x (m 0: zeros). */
void tsr__k_bn_stats(int m, int hw, int c, const float *x, int ldx, float *p, int ldp, double *acc);
/* a = the partial of a's and b's samples together (Chan et al.'s pairwise formula). */
void tsr__k_bn_combine(int c, float *a, int lda, const float *b, int ldb);
/* s from the batch's partial p (biased variance); with update and a count of at least 2, the
 * running mean and unbiased variance move by momentum (PyTorch's formula). */
void tsr__k_bn_finalize(int c, const float *p, int ldp, float *run_mean, float *run_var, float *s,
                        int lds, float momentum, float eps, bool update);
/* s from the running statistics (evaluation). */
void tsr__k_bn_eval_stats(int c, const float *run_mean, const float *run_var, float *s, int lds,
                          float eps);
/* y = (x - mean) / sqrt(var + eps) * scale + shift per channel, then max(y, 0) with relu. */
void tsr__k_bn_normalize(int m, int hw, int c, float *y, int ldy, const float *x, int ldx,
                         const float *s, int lds, const float *scale, const float *shift,
                         bool relu);
/* p = (sum dy, sum dy xhat, 0) per channel over the first m rows; y (not NULL): the fused
 * ReLU's output, dy counting only where it is positive. */
void tsr__k_bn_sums(int m, int hw, int c, const float *dy, int lddy, const float *x, int ldx,
                    const float *y, int ldy, const float *s, int lds, float *p, int ldp,
                    double *acc);
/* a += b on the sums' two rows. */
void tsr__k_bn_sums_add(int c, float *a, int lda, const float *b, int ldb);
/* dx = scale / sqrt(var + eps) / n (n dy - sum dy - xhat sum dy xhat) on the first valid rows
 * of the m, 0 on the others (padding); n: s's count, p: the batch's sums; y as in bn_sums. */
void tsr__k_bn_dx(int m, int valid, int hw, int c, float *dx, int lddx, const float *dy, int lddy,
                  const float *x, int ldx, const float *y, int ldy, const float *s, int lds,
                  const float *scale, const float *p, int ldp);
/* dshift = sum dy, dscale = sum dy xhat (the sums p), each (1, c). */
void tsr__k_bn_params_grad(int c, float *dscale, float *dshift, const float *p, int ldp);
/* Evaluation's batchnorm folded into the convolution before it: with k = scale / sqrt(var +
 * eps) per output channel, w2 = w k column by column ((fan_in, c), row stride ldw for w, c for
 * w2) and b2 = (b - mean) k + shift, so that conv(x, w2) + b2 is the batchnorm of conv(x, w) +
 * b under the running statistics. */
void tsr__k_bn_fold(int fan_in, int c, const float *w, int ldw, const float *b,
                    const float *run_mean, const float *run_var, const float *scale,
                    const float *shift, float eps, float *w2, float *b2);
/* The folded weights and bias of convolution g, rounded up to 64 bytes, in floats; and the
 * workspace of a folded convolution over n rows: those, then the convolution's own (oneDNN's
 * forward with relu, or the lowered one, whichever is larger). */
size_t tsr__k_bn_folded_floats(const tsr_conv_geom_t *g);
size_t tsr__k_conv_bn_work(const tsr_conv_geom_t *g, int n, bool relu);

#endif
