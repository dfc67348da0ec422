/* StarPU glue: one codelet per file, each with its history-based performance
 * model (symbol tessera_<op>_f32) and an insert helper that checks shapes
 * before submitting, since a codelet cannot return an error.
 *
 * Every tile is a StarPU matrix handle holding a row-major block: NX is the
 * number of columns, NY the number of rows, LD the row stride. */
#ifndef TSR_CODELETS_H
#define TSR_CODELETS_H

#include <stdbool.h>
#include <stdint.h>
#include <starpu.h>

#include "kernels/augment.h"
#include "kernels/kernels.h"
#include "runtime/task_opts.h"

#define TSR_ROWS(buf) ((int)STARPU_MATRIX_GET_NY(buf))
#define TSR_COLS(buf) ((int)STARPU_MATRIX_GET_NX(buf))
#define TSR_LD(buf) ((int)STARPU_MATRIX_GET_LD(buf))
#define TSR_PTR(buf) ((float *)STARPU_MATRIX_GET_PTR(buf))

/* Codelets with several CPU implementations (impls.c): cpu_funcs[TSR_IMPL_ONEDNN] and
 * cpu_funcs[TSR_IMPL_BLIS], each the implementation wrapped by TSR_IMPL_TASKS, .can_execute =
 * tsr__cl_impl_can_execute, and an argument struct that starts with the tsr_impl_choice_t of
 * tsr__impl_choice. */
enum { TSR_IMPL_ONEDNN, TSR_IMPL_BLIS };
typedef struct {
  int kernels;  /* tsr_kernels_t, from the task's options */
  int pick;     /* --kernels tuned: 0 until the task is given an implementation, then 1 + it */
  uint64_t key; /* --kernels tuned: the task's shape (codelets/tuned.h); 0 otherwise */
} tsr_impl_choice_t;
/* The choice for a task with options o whose shape is size bytes at shape (every byte set:
 * the codelet, its geometry, the tile's rows; no padding), keyed only under --kernels tuned. */
tsr_impl_choice_t tsr__impl_choice(const tsr_task_opts_t *o, const void *shape, size_t size);
int tsr__cl_impl_can_execute(unsigned workerid, struct starpu_task *task, unsigned nimpl);
/* The convolutions' shape key: which pass (0 forward, 1 input gradient, 2 filter gradient), the
 * geometry, the tile's rows, and what changes the kernel's work (a fused ReLU; adding to dw). */
typedef struct {
  int pass;
  tsr_conv_geom_t g;
  int rows, variant;
} tsr_conv_shape_t;
/* The GEMMs' shape key: which codelet (0 gemm, 1 gemm_ep, 2 gemm_sgd), the transpositions, m, n, k,
 * and the epilogue (TSR_EP_*, 0 for none). */
typedef struct {
  int op, ta, tb, m, n, k, ep;
} tsr_gemm_shape_t;
/* Runs fn, implementation impl of a codelet whose argument starts with a tsr_impl_choice_t;
 * under --kernels tuned, timed and reported to the shape's table. */
void tsr__impl_run(void *buffers[], void *cl_arg, int impl, void (*fn)(void *[], void *));
/* op_onednn_task and op_blis_task: the functions a codelet registers for op_onednn and
 * op_blis. */
#define TSR_IMPL_TASKS(op)                                                                         \
  static void op##_onednn_task(void *buffers[], void *cl_arg) {                                    \
    tsr__impl_run(buffers, cl_arg, TSR_IMPL_ONEDNN, op##_onednn);                                  \
  }                                                                                                \
  static void op##_blis_task(void *buffers[], void *cl_arg) {                                      \
    tsr__impl_run(buffers, cl_arg, TSR_IMPL_BLIS, op##_blis);                                      \
  }
/* A performance-model footprint that tells shapes apart, not only sizes: the task's data
 * footprint (its buffers' sizes) hashed with `size` bytes of key (a convolution's geometry, whose
 * 3x3 and 1x1 windows over the same tiles would share one history otherwise). */
uint32_t tsr__cl_footprint(struct starpu_task *task, const void *key, size_t size);
extern struct starpu_codelet tsr_cl_conv_fwd, tsr_cl_conv_fwd_wb, tsr_cl_conv_fwd_st,
    tsr_cl_conv_fwd_wb_st, tsr_cl_conv_bwd_data, tsr_cl_conv_bwd_data_wb, tsr_cl_conv_bwd_filter,
    tsr_cl_conv_bwd_filter_w, tsr_cl_gemm, tsr_cl_gemm_w, tsr_cl_gemm_ep, tsr_cl_gemm_ep_w,
    tsr_cl_gemm_dbias, tsr_cl_gemm_dbias_w, tsr_cl_gemm_sgd;

/* Rows and columns of a registered tile. */
int tsr__handle_rows(starpu_data_handle_t h);
int tsr__handle_cols(starpu_data_handle_t h);

/* Creates and submits one task of cl on handles (modes from cl->modes), with
 * a private copy of args (args_size bytes, may be 0), as the options say:
 * priority, StarPU-MPI or not, the observer's callback, the counter. */
int tsr__submit(const tsr_task_opts_t *o, struct starpu_codelet *cl, const void *args,
                size_t args_size, int nhandles, const starpu_data_handle_t *handles);
/* The same for a codelet of STARPU_VARIABLE_NBUFFERS, each handle with its mode; a task of
 * StarPU-MPI (o->mpi) is refused (TSR_EINVAL): its callers are single-process paths. */
int tsr__submit_modes(const tsr_task_opts_t *o, struct starpu_codelet *cl, const void *args,
                      size_t args_size, int nhandles, const starpu_data_handle_t *handles,
                      const enum starpu_data_access_mode *modes);

/* c = alpha op(a) op(b) + beta c on a task's first three buffers (a, b, c), by oneDNN (dnnl)
 * or BLIS: the CPU side of tsr__cl_gemm_task (gemm.c). */
void tsr__gemm_task_cpu(void *buffers[], bool dnnl, bool ta, bool tb, float alpha, float beta);
/* Whether op(a) op(b) fits c (gemm.c), and the inner dimension k. */
bool tsr__gemm_fits(bool ta, bool tb, starpu_data_handle_t a, starpu_data_handle_t b,
                    starpu_data_handle_t c, int *k);
/* c (m, n) = alpha op(a) op(b) + beta c; c is written only when beta == 0. */
int tsr__insert_gemm(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                     starpu_data_handle_t a, starpu_data_handle_t b, float beta,
                     starpu_data_handle_t c);
/* GEMM with an epilogue on c (gemm_ep.c): c = alpha op(a) op(b) + beta c, then for ep
 * TSR_EP_BIAS c += e (1, n) and ReLU with relu, TSR_EP_GATE c = 0 where e (m, n) <= 0, or
 * TSR_EP_DBIAS e (1, n) = beta e + column sums of b (tb false). */
enum { TSR_EP_BIAS = 1, TSR_EP_GATE, TSR_EP_DBIAS };
int tsr__insert_gemm_ep(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                        starpu_data_handle_t a, starpu_data_handle_t b, float beta,
                        starpu_data_handle_t c, int ep, starpu_data_handle_t e, bool relu);
/* An SGD step as tsr__insert_sgd takes it: w -= lr (momentum v + g + wd w), or Nesterov's,
 * on rows r0 .. of w and v from g; its CPU and OpenCL bodies on a task's buffers (sgd.c), v
 * NULL without momentum. */
typedef struct {
  float lr, momentum, wd;
  int r0; /* the band's first row in w and v; g holds the band */
  bool nesterov;
} tsr_sgd_args_t;
void tsr__sgd_cpu(void *w, void *v, void *g, const tsr_sgd_args_t *a);
#ifdef TSR_HAVE_OPENCL
void tsr__sgd_opencl(void *w, void *v, void *g, const tsr_sgd_args_t *a);
#endif
/* The last GEMM of a weight gradient tile's chain with the tile's SGD step (gemm_ep.c):
 * c = alpha op(a) op(b) + beta c, the gradient tile, complete after it; with e (not NULL)
 * DBIAS's epilogue e = beta e + column sums of b; then w (velocity v) takes its step from c
 * (step, r0 0) and, with bw (velocity bv), the bias its step from e (bias_step). v and bv are
 * NULL without momentum. The digits are those of tsr__insert_gemm_ep (or tsr__insert_gemm)
 * followed by tsr__insert_sgd's tasks. */
int tsr__insert_gemm_sgd(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                         starpu_data_handle_t a, starpu_data_handle_t b, float beta,
                         starpu_data_handle_t c, starpu_data_handle_t e, starpu_data_handle_t w,
                         starpu_data_handle_t v, const tsr_sgd_args_t *step,
                         starpu_data_handle_t bw, starpu_data_handle_t bv,
                         const tsr_sgd_args_t *bias_step);
/* y (m, n) += b (1, n), then ReLU when relu is set. */
int tsr__insert_bias_add(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t b,
                         bool relu);
/* db (1, n) = beta db + column sums of dy (m, n). */
int tsr__insert_bias_grad(const tsr_task_opts_t *o, starpu_data_handle_t db,
                          starpu_data_handle_t dy, float beta);
/* y = max(x, 0) */
int tsr__insert_relu_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x);
/* dx = dy where y > 0; dx may be dy (in place) */
int tsr__insert_relu_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dx, starpu_data_handle_t dy,
                         starpu_data_handle_t y);
/* stats (1, 2) += [loss sum, correct] of logits (m, n) against labels (m, 1);
 * dlogits (m, n), when not NULL, = scale (softmax - target) on the first nvalid rows; the
 * target is onehot smoothed by eps in [0, 1) (tsr__k_softmax_xent; else TSR_EINVAL). */
int tsr__insert_softmax_xent(const tsr_task_opts_t *o, starpu_data_handle_t dlogits,
                             starpu_data_handle_t stats, starpu_data_handle_t logits,
                             starpu_data_handle_t labels, int nvalid, float scale, float eps);
/* w -= lr (momentum v + g + wd w); v is NULL when momentum is 0. g holds
 * rows r0 .. r0 + rows(g) of w's gradient (the whole of it: r0 0 and g of
 * w's shape), and only those rows of w and v are updated. nesterov:
 * PyTorch's Nesterov momentum instead (tsr__k_sgd_nesterov; momentum > 0). */
int tsr__insert_sgd(const tsr_task_opts_t *o, starpu_data_handle_t w, starpu_data_handle_t v,
                    starpu_data_handle_t g, int r0, float lr, float momentum, float wd,
                    bool nesterov);
/* PyTorch's Adam at step t (1-based); g holds rows r0 .. of w's gradient, as for SGD.
 * decoupled: AdamW's decoupled weight decay instead of L2 (tsr__k_adamw). */
int tsr__insert_adam(const tsr_task_opts_t *o, starpu_data_handle_t w, starpu_data_handle_t m1,
                     starpu_data_handle_t m2, starpu_data_handle_t g, int r0, float lr, float beta1,
                     float beta2, float eps, float wd, int t, bool decoupled);
/* dst (rows, n) = rows r0 .. r0 + rows of src: a band taken out of a tile. */
int tsr__insert_band_get(const tsr_task_opts_t *o, starpu_data_handle_t dst,
                         starpu_data_handle_t src, int r0);
/* Rows r0 .. r0 + rows(src) of dst = src; dst's other rows are kept. */
int tsr__insert_band_put(const tsr_task_opts_t *o, starpu_data_handle_t dst, int r0,
                         starpu_data_handle_t src);
/* A bucket (--bucket-mb) is one row of floats carrying many chunks: rows r0 .. r0 + rows of a
 * tile, packed row after row from the bucket's float off. */
typedef struct {
  int r0, rows;
  int64_t off;
} tsr_bucket_args_t;
/* bucket[off ..] = rows r0 .. r0 + rows of src; the bucket's other floats are kept. */
int tsr__insert_bucket_pack(const tsr_task_opts_t *o, starpu_data_handle_t bucket, int64_t off,
                            starpu_data_handle_t src, int r0, int rows);
/* Rows r0 .. r0 + rows of dst = bucket[off ..]; dst's other rows are kept. */
int tsr__insert_bucket_unpack(const tsr_task_opts_t *o, starpu_data_handle_t dst, int r0, int rows,
                              starpu_data_handle_t bucket, int64_t off);
int tsr__insert_fill(const tsr_task_opts_t *o, starpu_data_handle_t x, float value);
int tsr__insert_copy(const tsr_task_opts_t *o, starpu_data_handle_t dst, starpu_data_handle_t src);
/* y = alpha x + beta y (y only written when beta is 0) */
int tsr__insert_axpby(const tsr_task_opts_t *o, float alpha, starpu_data_handle_t x, float beta,
                      starpu_data_handle_t y);
/* The same; with commute (beta must be 1) contributions to y may be applied in any order. */
int tsr__insert_axpby_mode(const tsr_task_opts_t *o, float alpha, starpu_data_handle_t x,
                           float beta, starpu_data_handle_t y, bool commute);
/* Asynchronous epoch averaging: global = (global + w) / 2, then snap = global,
 * as one task, so a rank reads back the global copy right after its own fold;
 * with commute, folds of different ranks apply in the order they arrive. */
int tsr__insert_fold(const tsr_task_opts_t *o, starpu_data_handle_t global,
                     starpu_data_handle_t snap, starpu_data_handle_t w, bool commute);
/* One outer-optimizer step (tsr__k_outer) on the anchor x with momentum u,
 * pseudo-gradient x - mean; gamma: SlowMo's base rate. */
int tsr__insert_outer(const tsr_task_opts_t *o, starpu_data_handle_t x, starpu_data_handle_t u,
                      starpu_data_handle_t mean, bool nesterov, float lr, float momentum,
                      float gamma);
/* async-epoch with an outer optimizer: an outer step on global with momentum
 * u and pseudo-gradient scale (snap - w), then snap = global, as one task;
 * with commute, folds of different ranks apply in the order they arrive. */
int tsr__insert_outer_fold(const tsr_task_opts_t *o, starpu_data_handle_t global,
                           starpu_data_handle_t u, starpu_data_handle_t snap,
                           starpu_data_handle_t w, float scale, bool nesterov, float lr,
                           float momentum, float gamma, bool commute);
int tsr__insert_scale(const tsr_task_opts_t *o, starpu_data_handle_t x, float alpha);
/* --clip-grad (clip.c): acc (1 x 1) += the sum of squares of x; x times
 * min(1, max_norm / (sqrt(acc) + 1e-6)). */
int tsr__insert_sumsq_add(const tsr_task_opts_t *o, starpu_data_handle_t x,
                          starpu_data_handle_t acc);
int tsr__insert_clip(const tsr_task_opts_t *o, starpu_data_handle_t x, starpu_data_handle_t acc,
                     float max_norm);
/* y = a + b, all (m, n), then max(y, 0) with relu. */
int tsr__insert_add(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t a,
                    starpu_data_handle_t b, bool relu);
/* For every row and each of `pixels` pixels: dst's columns p dst_stride + dst_off .. + width =
 * src's columns p src_stride + src_off .. + width (tsr__k_channels_copy); dst's other columns
 * are kept. */
int tsr__insert_channels_copy(const tsr_task_opts_t *o, starpu_data_handle_t dst, int dst_stride,
                              int dst_off, starpu_data_handle_t src, int src_stride, int src_off,
                              int pixels, int width);
/* For every row: dst's columns dst_off .. + width = (add: +=) src's columns src_off .. + width;
 * dst's other columns are kept (a domain-split layer's halos, src/tile/domain.c). */
int tsr__insert_columns(const tsr_task_opts_t *o, starpu_data_handle_t dst, int dst_off,
                        starpu_data_handle_t src, int src_off, int width, bool add);
/* dst (m, n) row r = src row rows[r] from column col0, zero from row nvalid on.
 * rows is copied; src is borrowed and must stay valid until the task has run. */
int tsr__insert_gather(const tsr_task_opts_t *o, starpu_data_handle_t dst, const float *src,
                       int64_t lds, int col0, const int32_t *rows, int nvalid);
/* As tsr__insert_gather, each row augmented on the way (tsr__k_augment_rows): dst's columns are
 * columns [col0, col0 + cols) of g's images, fill (g->c) the padded pixels' values. g, fill and
 * rows are copied; src is borrowed until the task has run. */
int tsr__insert_augment(const tsr_task_opts_t *o, starpu_data_handle_t dst,
                        const tsr_augment_geom_t *g, const float *fill, const float *src,
                        int64_t lds, int col0, const int32_t *rows, int nvalid);

/* Scratch memory of at least `floats` floats for the calling worker, valid
 * until its next call on the same thread (inside one task). */
float *tsr__workspace(size_t floats);

/* Convolution on one batch-row tile of whole samples (channels-last rows):
 * y (n, oh ow oc) = conv(x (n, h w c), w (kh kw c, oc)) + b (1, oc), ReLU
 * when relu is set. g is copied. */
int tsr__insert_conv_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x,
                         starpu_data_handle_t w, starpu_data_handle_t b, const tsr_conv_geom_t *g,
                         bool relu);
/* The same with the weights the step reordered for oneDNN's primitive of tiles of wb_n rows
 * (wb, one row of tsr__k_dnnl_conv_wfloats floats, or NULL: none), which oneDNN's
 * implementation reads instead of reordering w. */
int tsr__insert_conv_fwd_wb(const tsr_task_opts_t *o, starpu_data_handle_t y,
                            starpu_data_handle_t x, starpu_data_handle_t w, starpu_data_handle_t b,
                            starpu_data_handle_t wb, int wb_n, const tsr_conv_geom_t *g, bool relu);
/* The same, and with p (not NULL) the batchnorm statistics partial (3, oc) of y's first `stats`
 * rows (tsr__k_bn_stats) in the same task, on a CPU worker. */
int tsr__insert_conv_fwd_st(const tsr_task_opts_t *o, starpu_data_handle_t y,
                            starpu_data_handle_t x, starpu_data_handle_t w, starpu_data_handle_t b,
                            starpu_data_handle_t wb, int wb_n, const tsr_conv_geom_t *g, bool relu,
                            starpu_data_handle_t p, int stats);
int tsr__insert_conv_bwd_data_wb(const tsr_task_opts_t *o, starpu_data_handle_t dx,
                                 starpu_data_handle_t dy, starpu_data_handle_t w,
                                 starpu_data_handle_t wb, int wb_n, const tsr_conv_geom_t *g);
/* Evaluation's convolution with the batchnorm reading it folded in (conv_bn_fwd.c): y (n, oh
 * ow oc) = the batchnorm, under its running statistics, of conv(x, w) + b, then ReLU with relu;
 * bn: the batchnorm's running mean, running variance, scale and shift, each (1, oc). */
int tsr__insert_conv_bn_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y,
                            starpu_data_handle_t x, starpu_data_handle_t w, starpu_data_handle_t b,
                            starpu_data_handle_t const bn[4], const tsr_conv_geom_t *g, float eps,
                            bool relu);
/* wb = w in the layout oneDNN's primitive of pass (0 forward, 1 input gradient; flag: the
 * forward's ReLU) for tiles of n rows takes (tsr__k_dnnl_conv_wreorder). */
int tsr__insert_conv_wreorder(const tsr_task_opts_t *o, starpu_data_handle_t w,
                              starpu_data_handle_t wb, const tsr_conv_geom_t *g, int n, int pass,
                              bool flag);
/* dx (n, h w c) = input gradient of the convolution from dy (n, oh ow oc). */
int tsr__insert_conv_bwd_data(const tsr_task_opts_t *o, starpu_data_handle_t dx,
                              starpu_data_handle_t dy, starpu_data_handle_t w,
                              const tsr_conv_geom_t *g);
/* dw = beta dw + filter gradient, db = beta db + bias gradient of one tile;
 * written only (W) when beta == 0, accumulated in a chain otherwise. */
int tsr__insert_conv_bwd_filter(const tsr_task_opts_t *o, starpu_data_handle_t dw,
                                starpu_data_handle_t db, starpu_data_handle_t x,
                                starpu_data_handle_t dy, const tsr_conv_geom_t *g, float beta);
/* Max (max set) or mean pooling y (n, oh ow c) of x (n, h w c). */
int tsr__insert_pool_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x,
                         const tsr_conv_geom_t *g, bool max);
/* dx (n, h w c) from dy (n, oh ow c); max pooling also reads the forward
 * input x and output y (NULL for mean pooling), and with relu applies the
 * backward pass of a ReLU that produced x. */
int tsr__insert_pool_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dx, starpu_data_handle_t dy,
                         starpu_data_handle_t x, starpu_data_handle_t y, const tsr_conv_geom_t *g,
                         bool max, bool relu);
/* y (m, n) = dropout of x with the mask of (seed, row0 + i, col0 + j); the
 * same call on the gradient is the backward pass. */
int tsr__insert_dropout(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x,
                        uint64_t seed, int64_t row0, int64_t col0, float rate);

/* Batch normalization (batchnorm.c; src/kernels/batchnorm.c says the formulas). p and s are
 * (3, c) partials and statistics, mean, var, scale and shift (1, c); x, y, dy, dx tiles of
 * samples of hw positions of c channels, of which the first valid rows are samples. */
int tsr__insert_bn_stats(const tsr_task_opts_t *o, starpu_data_handle_t p, starpu_data_handle_t x,
                         int hw, int c, int valid);
/* a = a and b combined: partials (Chan's formula), or with sums the backward sums added. */
int tsr__insert_bn_combine(const tsr_task_opts_t *o, starpu_data_handle_t a, starpu_data_handle_t b,
                           bool sums);
/* s from the batch's partial p, moving the running mean and var when update is set; p NULL: s
 * from the running statistics (evaluation). */
int tsr__insert_bn_finalize(const tsr_task_opts_t *o, starpu_data_handle_t s,
                            starpu_data_handle_t p, starpu_data_handle_t mean,
                            starpu_data_handle_t var, float momentum, float eps, bool update);
int tsr__insert_bn_normalize(const tsr_task_opts_t *o, starpu_data_handle_t y,
                             starpu_data_handle_t x, starpu_data_handle_t s,
                             starpu_data_handle_t scale, starpu_data_handle_t shift, int hw,
                             bool relu);
/* p = the backward sums of one tile; y is read for a fused ReLU only. */
int tsr__insert_bn_sums(const tsr_task_opts_t *o, starpu_data_handle_t p, starpu_data_handle_t dy,
                        starpu_data_handle_t x, starpu_data_handle_t y, starpu_data_handle_t s,
                        int hw, int valid, bool relu);
int tsr__insert_bn_dx(const tsr_task_opts_t *o, starpu_data_handle_t dx, starpu_data_handle_t dy,
                      starpu_data_handle_t x, starpu_data_handle_t y, starpu_data_handle_t s,
                      starpu_data_handle_t scale, starpu_data_handle_t p, int hw, int valid,
                      bool relu);
int tsr__insert_bn_params_grad(const tsr_task_opts_t *o, starpu_data_handle_t dscale,
                               starpu_data_handle_t dshift, starpu_data_handle_t p);

/* Causal multi-head self-attention (attention.c; src/kernels/attention.h says the layout): one
 * task per batch-row tile of whole sequences, all heads inside. g is copied. */
#include "kernels/attention.h"
/* y (n, t d) and lse (n, heads t) from qkv (n, t 3d). */
int tsr__insert_attention_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y,
                              starpu_data_handle_t lse, starpu_data_handle_t qkv,
                              const tsr_attn_geom_t *g);
/* dqkv (n, t 3d) written from dy (n, t d), the forward pass's qkv, y and lse. */
int tsr__insert_attention_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dqkv,
                              starpu_data_handle_t dy, starpu_data_handle_t qkv,
                              starpu_data_handle_t y, starpu_data_handle_t lse,
                              const tsr_attn_geom_t *g);
/* The sequence layers (embedding.c, layernorm.c, gelu.c, seq_gemm.c; the formulas in
 * src/kernels/sequence.h). A batch-row tile holds whole samples of T positions. */
/* y (n, T D) = wte[tok] + wpe (tok (n, T) token ids; wte (vocab, D); wpe (>= T, D) or NULL). */
int tsr__insert_embed_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y,
                          starpu_data_handle_t tok, starpu_data_handle_t wte,
                          starpu_data_handle_t wpe);
/* dwte, dwpe (NULL: none) += the tile's scattered dy (n, T D); with write_tokens (and
 * write_positions) the table is written (zeroed first, W access), else added to. */
int tsr__insert_embed_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dwte,
                          starpu_data_handle_t dwpe, starpu_data_handle_t tok,
                          starpu_data_handle_t dy, bool write_tokens, bool write_positions);
/* y (n, P c) = layer norm of x per position (w, b (1, c)); stats (n, 2 P) its mean and 1 / std
 * per position; eps > 0 (else TSR_EINVAL). */
int tsr__insert_layernorm_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y,
                              starpu_data_handle_t stats, starpu_data_handle_t x,
                              starpu_data_handle_t w, starpu_data_handle_t b, float eps);
/* dx (NULL: not computed) and the tile's partial (2, c) [sum dy xhat; sum dy], written. */
int tsr__insert_layernorm_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dx,
                              starpu_data_handle_t partial, starpu_data_handle_t dy,
                              starpu_data_handle_t x, starpu_data_handle_t w,
                              starpu_data_handle_t stats);
int tsr__insert_gelu_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x);
/* dx = dy GELU'(x). */
int tsr__insert_gelu_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dx, starpu_data_handle_t dy,
                         starpu_data_handle_t x);
/* c = alpha op(a) op(b) + beta c, each operand of p > 1 positions per row seen as (rows p,
 * cols / p) (its rows contiguous, else TSR_ESHAPE); c written only (W) when beta == 0. */
int tsr__insert_seq_gemm(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                         starpu_data_handle_t a, int pa, starpu_data_handle_t b, int pb, float beta,
                         starpu_data_handle_t c, int pc);

#endif
