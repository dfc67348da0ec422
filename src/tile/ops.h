/* Tiled operations: whole-matrix operations expressed as one task per tile
 * (or per tile triple for GEMM). Layers call these; these call the codelets'
 * insert helpers. Every function only submits work and returns; StarPU orders
 * the tasks by the data they touch. A shape or tiling mismatch is caught here,
 * before any task is submitted, and returns TSR_ESHAPE. Every operation
 * takes the caller's task options (priority, labels, StarPU-MPI or not). */
#ifndef TSR_TILE_OPS_H
#define TSR_TILE_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/augment.h"
#include "kernels/kernels.h"
#include "runtime/task_opts.h"
#include "tessera/tiles.h"

/* c (M, N) = alpha op(a) (M, K) op(b) (K, N) + beta c. Tilings must agree:
 * c's rows with op(a)'s rows, c's columns with op(b)'s columns, and op(a)'s
 * columns with op(b)'s rows. Each output tile accumulates over K tiles in a
 * fixed order, so results do not depend on scheduling. */
int tsr__tiles_gemm(const tsr_task_opts_t *o, bool ta, bool tb, float alpha, const tsr_tiles_t *a,
                    const tsr_tiles_t *b, float beta, tsr_tiles_t *c);
/* y (M, N) += b (1, N) per row, then ReLU when relu is set. */
int tsr__tiles_bias_add(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *b, bool relu);
/* db (1, N) = column sums of dy (M, N). */
int tsr__tiles_bias_grad(const tsr_task_opts_t *o, tsr_tiles_t *db, const tsr_tiles_t *dy);
int tsr__tiles_relu_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x);
/* dx = dy where y > 0; dx may be dy. */
int tsr__tiles_relu_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                        const tsr_tiles_t *y);
/* Softmax cross-entropy of logits (M, C) (one tile column) against labels (M, 1); or, with
 * labels (M, P) (one tile column), of each row's P predictions (M, P C') against its P labels,
 * nvalid rows counting P predictions each.
 * stats (mt, 2), one (1, 2) tile per batch-row tile, accumulates [loss sum,
 * correct]. dlogits (may be NULL) = scale (softmax - target) on the first
 * nvalid rows, 0 below; the target is onehot smoothed by eps in [0, 1) (PyTorch's label
 * smoothing: (1 - eps) onehot + eps / C), the loss its cross-entropy. */
int tsr__tiles_softmax_xent(const tsr_task_opts_t *o, tsr_tiles_t *dlogits, tsr_tiles_t *stats,
                            const tsr_tiles_t *logits, const tsr_tiles_t *labels, int64_t nvalid,
                            float scale, float eps);
/* v is NULL when momentum is 0; nesterov: Nesterov momentum (v required). */
int tsr__tiles_sgd(const tsr_task_opts_t *o, tsr_tiles_t *w, tsr_tiles_t *v, const tsr_tiles_t *g,
                   float lr, float momentum, float wd, bool nesterov);
/* decoupled: AdamW's weight decay instead of Adam's L2. */
int tsr__tiles_adam(const tsr_task_opts_t *o, tsr_tiles_t *w, tsr_tiles_t *m1, tsr_tiles_t *m2,
                    const tsr_tiles_t *g, float lr, float beta1, float beta2, float eps, float wd,
                    int t, bool decoupled);
int tsr__tiles_fill(const tsr_task_opts_t *o, tsr_tiles_t *x, float value);
int tsr__tiles_copy(const tsr_task_opts_t *o, tsr_tiles_t *dst, const tsr_tiles_t *src);
int tsr__tiles_axpby(const tsr_task_opts_t *o, float alpha, const tsr_tiles_t *x, float beta,
                     tsr_tiles_t *y);
int tsr__tiles_scale(const tsr_task_opts_t *o, tsr_tiles_t *x, float alpha);
/* Gradient-norm clipping (--clip-grad): acc's tile (0, 0) (1 x 1) += the sum of squares of
 * tile (i, j) of g, or of every tile; tile (i, j) of g, or every tile, times
 * min(1, max_norm / (sqrt(acc) + 1e-6)). acc's additions run in submission order. */
int tsr__tile_sumsq_add(const tsr_task_opts_t *o, const tsr_tiles_t *g, int i, int j,
                        tsr_tiles_t *acc);
int tsr__tiles_sumsq_add(const tsr_task_opts_t *o, const tsr_tiles_t *g, tsr_tiles_t *acc);
int tsr__tile_clip(const tsr_task_opts_t *o, tsr_tiles_t *g, int i, int j, const tsr_tiles_t *acc,
                   float max_norm);
int tsr__tiles_clip(const tsr_task_opts_t *o, tsr_tiles_t *g, const tsr_tiles_t *acc,
                    float max_norm);
/* An SGD step that a dense layer's weight gradient tasks take themselves: the weights w and the
 * bias b, their velocities v and bv (NULL without momentum), tiled like them; the rate, the
 * momentum, the weight decay of each, Nesterov's or not (tsr__insert_sgd's arithmetic). */
typedef struct {
  tsr_tiles_t *w, *v, *b, *bv;
  float lr, momentum, wd, bias_wd;
  bool nesterov;
} tsr_sgd_step_t;
/* A dense layer's three GEMMs with their element-wise passes fused into the GEMM tasks
 * (codelets/gemm_ep.c), the same digits as apart: y = x w + bias, then max(y, 0) with relu;
 * dx = dy w^T, 0 where gate (the layer's input, a ReLU's output) is not positive; dw = x^T dy
 * and db = the column sums of dy, then, given step (not under StarPU-MPI), w and b take it from
 * dw and db in the tasks that complete each of their tiles, as tsr__tile_sgd's tasks would
 * after them. */
int tsr__tiles_gemm_bias(const tsr_task_opts_t *o, const tsr_tiles_t *x, const tsr_tiles_t *w,
                         const tsr_tiles_t *bias, bool relu, tsr_tiles_t *y);
int tsr__tiles_gemm_gate(const tsr_task_opts_t *o, const tsr_tiles_t *dy, const tsr_tiles_t *w,
                         const tsr_tiles_t *gate, tsr_tiles_t *dx);
int tsr__tiles_gemm_dbias(const tsr_task_opts_t *o, const tsr_tiles_t *x, const tsr_tiles_t *dy,
                          tsr_tiles_t *dw, tsr_tiles_t *db, const tsr_sgd_step_t *step);
/* y = a + b, all of one shape and tiling, then max(y, 0) with relu. */
int tsr__tiles_add(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *a,
                   const tsr_tiles_t *b, bool relu);
/* Rows of channels-last samples of `pixels` pixels: for every pixel p, the `width` values at
 * column p src_stride + src_off of src go to column p dst_stride + dst_off of dst (a concat's
 * input into its output, or its output's gradient back out); dst's other columns are kept.
 * Row tilings must agree; with pixels > 1 both are cut alike in whole pixels (one tile wide,
 * or bands of image rows: tile j of each the same pixels, a task per tile), with one pixel any
 * column tiling works (a task per pair of overlapping tiles). */
int tsr__tiles_channels_copy(const tsr_task_opts_t *o, tsr_tiles_t *dst, int dst_stride,
                             int dst_off, const tsr_tiles_t *src, int src_stride, int src_off,
                             int pixels, int width);
/* dst (M, N) row r = src row rows[r] (src is (*, lds) row-major, borrowed
 * until the tasks ran; rows is copied), zero from row nvalid on. */
int tsr__tiles_gather(const tsr_task_opts_t *o, tsr_tiles_t *dst, const float *src, int64_t lds,
                      const int32_t *rows, int64_t nvalid);
/* As tsr__tiles_gather into dst (M, h w c of g's images), each row augmented as its dataset row's
 * draws say (tsr__k_augment_rows: crop of the padded image, flip), fill (g->c) the padded
 * pixels' values; any row and column tiling writes the same values. g, fill, rows copied. */
int tsr__tiles_gather_augment(const tsr_task_opts_t *o, tsr_tiles_t *dst, const float *src,
                              int64_t lds, const int32_t *rows, int64_t nvalid,
                              const tsr_augment_geom_t *g, const float *fill);

/* Convolutions and pooling over batch-row tiles. Activations hold one sample
 * per row, channels-last, and stay one tile wide so that each task sees whole
 * samples: x (M, h w c) and y (M, oh ow oc) must share their row tiling.
 * Weights w (kh kw c, oc) and biases b (1, oc) are one tile each. One task
 * per batch-row tile. */
/* tsr__tiles_conv_fwd without a ReLU, and in the same tasks the statistics of a batchnorm
 * reading y (tsr__tiles_bn_stats's partials p over y's first valid rows, then their tree). */
int tsr__tiles_conv_fwd_stats(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                              const tsr_tiles_t *w, const tsr_tiles_t *b, const tsr_tiles_t *wb,
                              const tsr_conv_geom_t *g, tsr_tiles_t *p, int valid);
/* Evaluation's convolution and the batchnorm reading it in one pass (tsr__insert_conv_bn_fwd):
 * y = the batchnorm of conv(x, w) + b under bn's running mean, running variance, scale and
 * shift (each (1, oc), one tile), ReLU with relu. */
int tsr__tiles_conv_bn_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                           const tsr_tiles_t *w, const tsr_tiles_t *b,
                           const tsr_tiles_t *const bn[4], const tsr_conv_geom_t *g, float eps,
                           bool relu);
int tsr__tiles_conv_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                        const tsr_tiles_t *w, const tsr_tiles_t *b, const tsr_tiles_t *wb,
                        const tsr_conv_geom_t *g, bool relu);
/* dx (M, h w c) = input gradient from dy (M, oh ow oc). */
int tsr__tiles_conv_bwd_data(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                             const tsr_tiles_t *w, const tsr_tiles_t *wb, const tsr_conv_geom_t *g);
/* wb (1, tsr__k_dnnl_conv_wfloats) = w in the layout oneDNN's primitive of pass 0 (forward;
 * flag: its ReLU) or 1 (input gradient) takes for batch-row tiles of n rows, once a step; the
 * two calls above take it (NULL: none) for their tasks of that primitive's layout. */
int tsr__tiles_conv_wreorder(const tsr_task_opts_t *o, const tsr_tiles_t *w, tsr_tiles_t *wb,
                             const tsr_conv_geom_t *g, int n, int pass, bool flag);
/* dw, db = weight and bias gradients summed over the batch-row tiles. With
 * partials pw ((mt - 1) kh kw c, oc) and pb (mt - 1, oc) in tiles of one
 * partial each, tiles 1.. write their own partial at once and a fixed
 * pairwise tree adds them into dw, db (parallel and deterministic);
 * without (NULL), the tiles accumulate into dw, db in a fixed chain. */
int tsr__tiles_conv_bwd_filter(const tsr_task_opts_t *o, tsr_tiles_t *dw, tsr_tiles_t *db,
                               tsr_tiles_t *pw, tsr_tiles_t *pb, const tsr_tiles_t *x,
                               const tsr_tiles_t *dy, const tsr_conv_geom_t *g);
int tsr__tiles_pool_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                        const tsr_conv_geom_t *g, bool max);
/* x and y (the forward input and output) are read by max pooling only;
 * relu (max pooling only) also applies the backward pass of a ReLU that
 * produced x. */
int tsr__tiles_pool_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                        const tsr_tiles_t *x, const tsr_tiles_t *y, const tsr_conv_geom_t *g,
                        bool max, bool relu);
/* y = dropout of x (same tiling, any) with the mask of (seed, row, column). */
int tsr__tiles_dropout(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                       uint64_t seed, float rate);

/* Single-tile operations on tile (i, j) of descriptors of one shape and
 * tiling (any kind: local, distributed, views). The synchronization code
 * works tile by tile, so that the averaging of a tile starts as soon as its
 * gradient is known. */
int tsr__tile_fill(const tsr_task_opts_t *o, tsr_tiles_t *x, int i, int j, float value);
int tsr__tile_copy(const tsr_task_opts_t *o, tsr_tiles_t *dst, const tsr_tiles_t *src, int i,
                   int j);
/* y = alpha x + beta y; with commute (beta 1), adds to y may apply in any order. */
int tsr__tile_axpby(const tsr_task_opts_t *o, float alpha, const tsr_tiles_t *x, float beta,
                    tsr_tiles_t *y, int i, int j, bool commute);
/* global = (global + w) / 2, then snap = global, as one task (async-epoch). */
int tsr__tile_fold(const tsr_task_opts_t *o, tsr_tiles_t *global, tsr_tiles_t *snap,
                   const tsr_tiles_t *w, int i, int j, bool commute);
/* One outer-optimizer step on tile (i, j) of the anchor x with momentum u
 * (tiled like x), pseudo-gradient x - mean (tsr__insert_outer). */
int tsr__tile_outer(const tsr_task_opts_t *o, tsr_tiles_t *x, tsr_tiles_t *u,
                    const tsr_tiles_t *mean, int i, int j, bool nesterov, float lr, float momentum,
                    float gamma);
/* async-epoch's fold as an outer step: global stepped with pseudo-gradient
 * scale (snap - w), then snap = global (tsr__insert_outer_fold). */
int tsr__tile_outer_fold(const tsr_task_opts_t *o, tsr_tiles_t *global, tsr_tiles_t *u,
                         tsr_tiles_t *snap, const tsr_tiles_t *w, int i, int j, float scale,
                         bool nesterov, float lr, float momentum, float gamma, bool commute);
/* The update of rows r0 .. r0 + rows of tile (i, j) of w (and of the
 * optimizer state, tiled like w) from tile (gi, gj) of g, which holds those
 * rows of the gradient: the whole tile (r0 0, g tiled like w) or a band of
 * it (--sync batch, on the band's home). v is NULL when momentum is 0;
 * nesterov and decoupled as for tsr__tiles_sgd and tsr__tiles_adam. */
int tsr__tile_sgd(const tsr_task_opts_t *o, tsr_tiles_t *w, tsr_tiles_t *v, int i, int j, int r0,
                  const tsr_tiles_t *g, int gi, int gj, float lr, float momentum, float wd,
                  bool nesterov);
int tsr__tile_adam(const tsr_task_opts_t *o, tsr_tiles_t *w, tsr_tiles_t *m1, tsr_tiles_t *m2,
                   int i, int j, int r0, const tsr_tiles_t *g, int gi, int gj, float lr,
                   float beta1, float beta2, float eps, float wd, int t, bool decoupled);
/* Tile (di, dj) of dst = rows r0 .. of tile (i, j) of src; and back: rows
 * r0 .. of tile (i, j) of dst = tile (si, sj) of src. */
int tsr__tile_band_get(const tsr_task_opts_t *o, tsr_tiles_t *dst, int di, int dj,
                       const tsr_tiles_t *src, int i, int j, int r0);
int tsr__tile_band_put(const tsr_task_opts_t *o, tsr_tiles_t *dst, int i, int j, int r0,
                       const tsr_tiles_t *src, int si, int sj);
/* Rows r0 .. r0 + rows of tile (i, j) of src packed into tile (0, 0) of bucket from its float off
 * (--bucket-mb), and back into tile (i, j) of dst. */
int tsr__tile_pack(const tsr_task_opts_t *o, tsr_tiles_t *bucket, int64_t off,
                   const tsr_tiles_t *src, int i, int j, int r0, int rows);
int tsr__tile_unpack(const tsr_task_opts_t *o, tsr_tiles_t *dst, int i, int j, int r0, int rows,
                     const tsr_tiles_t *bucket, int64_t off);

/* Grid layers: a dense layer y (M, N) = x (M, K) W (K, N) whose column tiles
 * j (of W, y, dy and the bias) live on the ranks of a grid column, each on
 * rank_of(0, j) (src/nn/net.c). Each rank computes its own columns. The
 * input x is either per-node (every rank has it: no transfer) or spread the
 * same way as the previous layer's output; n one-rank matrices tiled like x
 * (every tile of matrix p on one rank, one matrix per rank of the column)
 * hold, per rank, the copies it gathers and the partial input gradients it
 * sends. Transfers are counted for this rank in tr (may be NULL). */
typedef struct {
  uint64_t bytes_sent, bytes_received;
  int64_t messages_sent, messages_received;
  /* Of those sent, the halo rows of domain-split layers (src/tile/domain.h). */
  uint64_t halo_bytes_sent;
  int64_t halo_messages_sent;
} tsr_traffic_t;
/* The forward all-gather inside the column: each rank with columns of w
 * receives every tile (i, k) of a spread x that another rank owns, once,
 * into its gathered matrix. Nothing for a per-node x. */
int tsr__tiles_spread_gather(const tsr_task_opts_t *o, const tsr_tiles_t *x,
                             tsr_tiles_t *const *gathered, int n, const tsr_tiles_t *w,
                             tsr_traffic_t *tr);
/* y = x w, each tile of y on its owner from x's tiles as gathered there. */
int tsr__tiles_spread_gemm(const tsr_task_opts_t *o, const tsr_tiles_t *x,
                           tsr_tiles_t *const *gathered, int n, const tsr_tiles_t *w,
                           tsr_tiles_t *y);
/* dw = x^T dy, local to each column's owner (x as gathered there). */
int tsr__tiles_spread_gemm_tn(const tsr_task_opts_t *o, const tsr_tiles_t *x,
                              tsr_tiles_t *const *gathered, int n, const tsr_tiles_t *dy,
                              tsr_tiles_t *dw);
/* dx = dy w^T: each rank with columns of w sums dy (i, j) w (k, j)^T over
 * its own j into partials[its slot] (i, k), and the owner of dx (i, k) adds
 * the partials in slot order: one tile-sized message per (i, k) and per
 * other rank with columns (the reduce-scatter inside the column). A
 * per-node dx (the layer below is replicated: a convolution's output) is
 * summed in sums (tiled like dx, spread like it would be) and each tile
 * then sent to every other rank of the column (reduce, then broadcast);
 * sums is NULL for a spread dx. */
int tsr__tiles_spread_gemm_nt(const tsr_task_opts_t *o, const tsr_tiles_t *dy, const tsr_tiles_t *w,
                              tsr_tiles_t *const *partials, int n, tsr_tiles_t *dx,
                              tsr_tiles_t *sums, tsr_traffic_t *tr);

/* ---- Batch normalization over the batch-row tiles of whole channels-last samples (hw
 * positions of c channels; of the batch's rows the first `valid` are samples, the rest padding
 * that never enters the statistics). p: (mt 3, c) in (3, c) tiles, one partial per batch-row
 * tile, the batch's in tile 0 once a fixed pairwise tree has combined them; s (3, c): mean,
 * 1 / std, count; scale, shift, mean, var: (1, c). src/kernels/batchnorm.c has the formulas. */
/* p = the statistics partials of x's tiles, combined into tile 0 (Chan's formula). */
int tsr__tiles_bn_stats(const tsr_task_opts_t *o, tsr_tiles_t *p, const tsr_tiles_t *x, int hw,
                        int valid);
/* s from p's tile 0 (training; moves mean and var when update is set), or from mean and var
 * (p NULL: evaluation). */
int tsr__tiles_bn_finalize(const tsr_task_opts_t *o, tsr_tiles_t *s, tsr_tiles_t *p,
                           tsr_tiles_t *mean, tsr_tiles_t *var, float momentum, float eps,
                           bool update);
int tsr__tiles_bn_normalize(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                            const tsr_tiles_t *s, const tsr_tiles_t *scale,
                            const tsr_tiles_t *shift, int hw, bool relu);
/* p = the backward sums (of dy, of dy xhat) of the tiles, added into tile 0 by the same tree;
 * with relu, dy counts where y (the fused ReLU's output) is positive. */
int tsr__tiles_bn_sums(const tsr_task_opts_t *o, tsr_tiles_t *p, const tsr_tiles_t *dy,
                       const tsr_tiles_t *x, const tsr_tiles_t *y, const tsr_tiles_t *s, int hw,
                       int valid, bool relu);
/* dscale, dshift from the sums in p's tile 0. */
int tsr__tiles_bn_params_grad(const tsr_task_opts_t *o, tsr_tiles_t *dscale, tsr_tiles_t *dshift,
                              const tsr_tiles_t *p);
/* dx from dy and the batch's sums in p's tile 0 (0 on padding rows). */
int tsr__tiles_bn_dx(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                     const tsr_tiles_t *x, const tsr_tiles_t *y, const tsr_tiles_t *s,
                     const tsr_tiles_t *scale, const tsr_tiles_t *p, int hw, int valid, bool relu);

/* Tile (0, 0) of a = it and tile (0, 0) of b combined (sums: added), each a (3, c) partial
 * (--sync-bn: a and b are two ranks' copies, under StarPU-MPI). */
int tsr__tile_bn_combine(const tsr_task_opts_t *o, tsr_tiles_t *a, const tsr_tiles_t *b, bool sums);

/* Waits until at most n_left submitted tasks are still pending: the
 * trainer's bounded submission window. */
int tsr__tiles_wait(unsigned n_left);

/* ---- Causal multi-head self-attention over the batch-row tiles of whole sequences
 * (src/tile/attention.c; src/kernels/attention.h says the layout): one task per batch-row tile,
 * all heads inside. qkv (M, t 3d), y (M, t d), lse (M, heads t): one tile column each, their
 * rows tiled alike. */
#include "kernels/attention.h"
/* y and lse (the log-sum-exp per row, head and position) from qkv. */
int tsr__tiles_attention_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, tsr_tiles_t *lse,
                             const tsr_tiles_t *qkv, const tsr_attn_geom_t *g);
/* dqkv (tiled like qkv) written from dy (tiled like y) and the forward pass's qkv, y, lse. */
int tsr__tiles_attention_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dqkv, const tsr_tiles_t *dy,
                             const tsr_tiles_t *qkv, const tsr_tiles_t *y, const tsr_tiles_t *lse,
                             const tsr_attn_geom_t *g);
/* ---- Sequence layers (seq_ops.c): batch-row tiles of whole samples of T positions (one tile
 * wide; rows tiled alike), tables and layer norm's parameters one tile each. Kernels'
 * formulas: src/kernels/sequence.h. */
/* y (M, T D) = wte (vocab, D) rows of the token ids tok (M, T), plus wpe (>= T, D) (NULL: none). */
int tsr__tiles_embed_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *tok,
                         const tsr_tiles_t *wte, const tsr_tiles_t *wpe);
/* dwte, dwpe (NULL: none) = dy (M, T D) scattered to the rows of tok, in a chain of the tiles in
 * order (the same bits for every row tiling); add_tokens: added to dwte as it is (a tied head
 * wrote it this step), else dwte is written. dwpe is always written. */
int tsr__tiles_embed_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dwte, tsr_tiles_t *dwpe,
                         const tsr_tiles_t *tok, const tsr_tiles_t *dy, bool add_tokens);
/* y (M, P C) = layer norm of x per position, scale w and shift b (1, C); stats (M, 2 P) keeps
 * each position's mean and 1 / std for the backward. */
int tsr__tiles_layernorm_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, tsr_tiles_t *stats,
                             const tsr_tiles_t *x, const tsr_tiles_t *w, const tsr_tiles_t *b,
                             float eps);
/* dx (NULL: not computed), and dw, db (1, C) summed over the tiles' partials (mt 2, C), one (2,
 * C) tile per batch-row tile, by a fixed tree. */
int tsr__tiles_layernorm_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dx, tsr_tiles_t *partials,
                             tsr_tiles_t *dw, tsr_tiles_t *db, const tsr_tiles_t *dy,
                             const tsr_tiles_t *x, const tsr_tiles_t *w, const tsr_tiles_t *stats);
/* y = GELU(x), and dx = dy GELU'(x): any tiling, all alike. */
int tsr__tiles_gelu_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x);
int tsr__tiles_gelu_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                        const tsr_tiles_t *x);
/* The language-model head over t positions, w (V, D) the token table: y (M, t V) = x (M, t D)
 * w^T per position; dx = dy w; dw = dy^T x summed over the batch (written), each batch-row
 * tile's own partial in partials ((mt - 1) V, D) in (V, D) tiles added by a fixed tree (NULL:
 * a chain into dw). */
int tsr__tiles_lmhead_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                          const tsr_tiles_t *w, int t);
int tsr__tiles_lmhead_bwd_data(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                               const tsr_tiles_t *w, int t);
int tsr__tiles_lmhead_bwd_table(const tsr_task_opts_t *o, tsr_tiles_t *dw, tsr_tiles_t *partials,
                                const tsr_tiles_t *dy, const tsr_tiles_t *x, int t);

#endif
