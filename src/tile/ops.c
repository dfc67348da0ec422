/* Tiled operations: loops over tiles that call the codelets' insert helpers.
 * Tiling agreement is checked up front so that a mismatch never leaves half
 * an operation submitted. */
#include <assert.h>

#include "tile/ops.h"
#include "tessera/dist.h"
#include "try.h"
#include "codelets.h"
#include "tile/tiles_impl.h"

#include <starpu_mpi.h>

/* Under StarPU-MPI (o->mpi) only distributed tiles have an owner that
 * computes: a task that writes a local or per-node matrix (every rank holds
 * its own: a grid column's input batch, replicated layers) runs where it is
 * submitted, reading data that is here. */
static tsr_task_opts_t route(const tsr_task_opts_t *o, const tsr_tiles_t *out) {
  tsr_task_opts_t r = *o;
  if (out->kind == TSR_TILES_LOCAL) r.mpi = false;
  return r;
}
#define ROUTE(o, out)                                                                              \
  tsr_task_opts_t routed_ = route(o, out);                                                         \
  o = &routed_

static bool same_tiling(const tsr_tiles_t *a, const tsr_tiles_t *b) {
  return a->m == b->m && a->n == b->n && a->mb == b->mb && a->nb == b->nb;
}

/* Whether dimension da of x (0 rows, 1 cols) is tiled like dimension db of y. */
static bool dims_agree(const tsr_tiles_t *x, int da, const tsr_tiles_t *y, int db) {
  int64_t nx = da ? x->n : x->m, ny = db ? y->n : y->m;
  int bx = da ? x->nb : x->mb, by = db ? y->nb : y->mb;
  return nx == ny && bx == by;
}

/* The last task of tile (i, j)'s chain, with the step of that tile of step->w and, given e (the
 * bias gradient, on the first row), of tile (0, j) of step->b. */
static int gemm_sgd_task(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                         starpu_data_handle_t ha, starpu_data_handle_t hb, float beta,
                         tsr_tiles_t *c, int i, int j, const tsr_tiles_t *e,
                         const tsr_sgd_step_t *s) {
  tsr_sgd_args_t w = {s->lr, s->momentum, s->wd, 0, s->nesterov};
  tsr_sgd_args_t b = {s->lr, s->momentum, s->bias_wd, 0, s->nesterov};
  return tsr__insert_gemm_sgd(
      o, ta, tb, alpha, ha, hb, beta, tsr__tile(c, i, j), e ? tsr__tile(e, 0, j) : NULL,
      tsr__tile(s->w, i, j), s->v ? tsr__tile(s->v, i, j) : NULL, &w,
      e ? tsr__tile(s->b, 0, j) : NULL, e && s->bv ? tsr__tile(s->bv, 0, j) : NULL, e ? &b : NULL);
}

/* c = alpha op(a) op(b) + beta c tile by tile, each output tile's inner tiles in order, with
 * epilogue ep (0: none) on e: BIAS and GATE on the last inner tile's task of each output tile
 * (after the whole sum), DBIAS on every task of the first row of output tiles (e's column j
 * summing op(b)'s column tiles in the inner order). With step (DBIAS only), the last task of each
 * output tile's chain is gemm_sgd's: it also takes the step of that tile of step->w, and on the
 * first row that of step->b from e. */
static int gemm_tiles(const tsr_task_opts_t *o, bool ta, bool tb, float alpha, const tsr_tiles_t *a,
                      const tsr_tiles_t *b, float beta, tsr_tiles_t *c, int ep,
                      const tsr_tiles_t *e, bool relu, const tsr_sgd_step_t *step) {
  ROUTE(o, c);
  /* op(a) rows are a's dim (ta ? 1 : 0), op(a) cols the other; same for b. */
  if (!dims_agree(a, ta ? 1 : 0, c, 0) || !dims_agree(b, tb ? 0 : 1, c, 1) ||
      !dims_agree(a, ta ? 0 : 1, b, tb ? 1 : 0))
    return TSR_ESHAPE;
  if ((ep == TSR_EP_BIAS || ep == TSR_EP_DBIAS) && (e->m != 1 || !dims_agree(e, 1, c, 1)))
    return TSR_ESHAPE;
  if (ep == TSR_EP_GATE && !same_tiling(e, c)) return TSR_ESHAPE;
  if (step && o->mpi) return TSR_EINVAL; /* gemm_sgd's tasks are single-process */
  if (step && (ep != TSR_EP_DBIAS || !same_tiling(step->w, c) || !same_tiling(step->b, e) ||
               (step->v && !same_tiling(step->v, c)) || (step->bv && !same_tiling(step->bv, e))))
    return TSR_ESHAPE;
  int kt = ta ? a->mt : a->nt;
  for (int i = 0; i < c->mt; i++)
    for (int j = 0; j < c->nt; j++)
      for (int p = 0; p < kt; p++) {
        starpu_data_handle_t ha = ta ? tsr__tile(a, p, i) : tsr__tile(a, i, p);
        starpu_data_handle_t hb = tb ? tsr__tile(b, j, p) : tsr__tile(b, p, j);
        float bp = p == 0 ? beta : 1.0f;
        bool last = p == kt - 1;
        if ((ep == TSR_EP_BIAS && last) || (ep == TSR_EP_GATE && last))
          TSR_TRY(tsr__insert_gemm_ep(o, ta, tb, alpha, ha, hb, bp, tsr__tile(c, i, j), ep,
                                      ep == TSR_EP_GATE ? tsr__tile(e, i, j) : tsr__tile(e, 0, j),
                                      relu));
        else if (step && last)
          TSR_TRY(gemm_sgd_task(o, ta, tb, alpha, ha, hb, bp, c, i, j, i == 0 ? e : NULL, step));
        else if (ep == TSR_EP_DBIAS && i == 0)
          TSR_TRY(tsr__insert_gemm_ep(o, ta, tb, alpha, ha, hb, bp, tsr__tile(c, i, j), ep,
                                      tsr__tile(e, 0, j), false));
        else
          TSR_TRY(tsr__insert_gemm(o, ta, tb, alpha, ha, hb, bp, tsr__tile(c, i, j)));
      }
  return 0;
}

int tsr__tiles_gemm(const tsr_task_opts_t *o, bool ta, bool tb, float alpha, const tsr_tiles_t *a,
                    const tsr_tiles_t *b, float beta, tsr_tiles_t *c) {
  return gemm_tiles(o, ta, tb, alpha, a, b, beta, c, 0, NULL, false, NULL);
}

int tsr__tiles_gemm_bias(const tsr_task_opts_t *o, const tsr_tiles_t *x, const tsr_tiles_t *w,
                         const tsr_tiles_t *bias, bool relu, tsr_tiles_t *y) {
  return gemm_tiles(o, false, false, 1.0f, x, w, 0.0f, y, TSR_EP_BIAS, bias, relu, NULL);
}

int tsr__tiles_gemm_gate(const tsr_task_opts_t *o, const tsr_tiles_t *dy, const tsr_tiles_t *w,
                         const tsr_tiles_t *gate, tsr_tiles_t *dx) {
  return gemm_tiles(o, false, true, 1.0f, dy, w, 0.0f, dx, TSR_EP_GATE, gate, false, NULL);
}

int tsr__tiles_gemm_dbias(const tsr_task_opts_t *o, const tsr_tiles_t *x, const tsr_tiles_t *dy,
                          tsr_tiles_t *dw, tsr_tiles_t *db, const tsr_sgd_step_t *step) {
  /* The bias gradient's chain is the first row of dW's: every column tile of dy meets it. */
  if (db->nt != dw->nt) return TSR_ESHAPE;
  if (step && (!step->w || !step->b)) return TSR_EINVAL;
  return gemm_tiles(o, true, false, 1.0f, x, dy, 0.0f, dw, TSR_EP_DBIAS, db, false, step);
}

int tsr__tiles_bias_add(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *b, bool relu) {
  ROUTE(o, y);
  if (b->m != 1 || !dims_agree(b, 1, y, 1)) return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    for (int j = 0; j < y->nt; j++)
      TSR_TRY(tsr__insert_bias_add(o, tsr__tile(y, i, j), tsr__tile(b, 0, j), relu));
  return 0;
}

int tsr__tiles_bias_grad(const tsr_task_opts_t *o, tsr_tiles_t *db, const tsr_tiles_t *dy) {
  ROUTE(o, db);
  if (db->m != 1 || !dims_agree(db, 1, dy, 1)) return TSR_ESHAPE;
  for (int j = 0; j < dy->nt; j++)
    for (int i = 0; i < dy->mt; i++)
      TSR_TRY(
          tsr__insert_bias_grad(o, tsr__tile(db, 0, j), tsr__tile(dy, i, j), i == 0 ? 0.0f : 1.0f));
  return 0;
}

int tsr__tiles_relu_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x) {
  ROUTE(o, y);
  if (!same_tiling(x, y)) return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    for (int j = 0; j < y->nt; j++)
      TSR_TRY(tsr__insert_relu_fwd(o, tsr__tile(y, i, j), tsr__tile(x, i, j)));
  return 0;
}

int tsr__tiles_relu_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                        const tsr_tiles_t *y) {
  ROUTE(o, dx);
  if (!same_tiling(dx, dy) || !same_tiling(dx, y)) return TSR_ESHAPE;
  for (int i = 0; i < dx->mt; i++)
    for (int j = 0; j < dx->nt; j++)
      TSR_TRY(
          tsr__insert_relu_bwd(o, tsr__tile(dx, i, j), tsr__tile(dy, i, j), tsr__tile(y, i, j)));
  return 0;
}

int tsr__tiles_softmax_xent(const tsr_task_opts_t *o, tsr_tiles_t *dlogits, tsr_tiles_t *stats,
                            const tsr_tiles_t *logits, const tsr_tiles_t *labels, int64_t nvalid,
                            float scale, float eps) {
  ROUTE(o, stats);
  if (logits->nt != 1 || labels->nt != 1 || logits->n % labels->n != 0 ||
      !dims_agree(labels, 0, logits, 0) || stats->m != logits->mt || stats->n != 2 ||
      stats->mb != 1 || (dlogits && !same_tiling(dlogits, logits)))
    return TSR_ESHAPE;
  for (int i = 0; i < logits->mt; i++) {
    int64_t left = nvalid - (int64_t)i * logits->mb;
    int rows = tsr_tiles_tile_rows(logits, i);
    int valid = left <= 0 ? 0 : left >= rows ? rows : (int)left;
    TSR_TRY(tsr__insert_softmax_xent(o, dlogits ? tsr__tile(dlogits, i, 0) : NULL,
                                     tsr__tile(stats, i, 0), tsr__tile(logits, i, 0),
                                     tsr__tile(labels, i, 0), valid, scale, eps));
  }
  return 0;
}

int tsr__tiles_sgd(const tsr_task_opts_t *o, tsr_tiles_t *w, tsr_tiles_t *v, const tsr_tiles_t *g,
                   float lr, float momentum, float wd, bool nesterov) {
  ROUTE(o, w);
  if (!same_tiling(w, g) || (v && !same_tiling(w, v))) return TSR_ESHAPE;
  for (int i = 0; i < w->mt; i++)
    for (int j = 0; j < w->nt; j++)
      TSR_TRY(tsr__insert_sgd(o, tsr__tile(w, i, j), v ? tsr__tile(v, i, j) : NULL,
                              tsr__tile(g, i, j), 0, lr, momentum, wd, nesterov));
  return 0;
}

int tsr__tiles_adam(const tsr_task_opts_t *o, tsr_tiles_t *w, tsr_tiles_t *m1, tsr_tiles_t *m2,
                    const tsr_tiles_t *g, float lr, float beta1, float beta2, float eps, float wd,
                    int t, bool decoupled) {
  ROUTE(o, w);
  if (!same_tiling(w, g) || !same_tiling(w, m1) || !same_tiling(w, m2)) return TSR_ESHAPE;
  for (int i = 0; i < w->mt; i++)
    for (int j = 0; j < w->nt; j++)
      TSR_TRY(tsr__insert_adam(o, tsr__tile(w, i, j), tsr__tile(m1, i, j), tsr__tile(m2, i, j),
                               tsr__tile(g, i, j), 0, lr, beta1, beta2, eps, wd, t, decoupled));
  return 0;
}

int tsr__tiles_fill(const tsr_task_opts_t *o, tsr_tiles_t *x, float value) {
  ROUTE(o, x);
  for (int i = 0; i < x->mt; i++)
    for (int j = 0; j < x->nt; j++)
      TSR_TRY(tsr__insert_fill(o, tsr__tile(x, i, j), value));
  return 0;
}

int tsr__tiles_copy(const tsr_task_opts_t *o, tsr_tiles_t *dst, const tsr_tiles_t *src) {
  ROUTE(o, dst);
  if (!same_tiling(dst, src)) return TSR_ESHAPE;
  for (int i = 0; i < dst->mt; i++)
    for (int j = 0; j < dst->nt; j++)
      TSR_TRY(tsr__insert_copy(o, tsr__tile(dst, i, j), tsr__tile(src, i, j)));
  return 0;
}

int tsr__tiles_axpby(const tsr_task_opts_t *o, float alpha, const tsr_tiles_t *x, float beta,
                     tsr_tiles_t *y) {
  ROUTE(o, y);
  if (!same_tiling(x, y)) return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    for (int j = 0; j < y->nt; j++)
      TSR_TRY(tsr__insert_axpby(o, alpha, tsr__tile(x, i, j), beta, tsr__tile(y, i, j)));
  return 0;
}

int tsr__tiles_add(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *a,
                   const tsr_tiles_t *b, bool relu) {
  ROUTE(o, y);
  if (!same_tiling(y, a) || !same_tiling(y, b)) return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    for (int j = 0; j < y->nt; j++)
      TSR_TRY(tsr__insert_add(o, tsr__tile(y, i, j), tsr__tile(a, i, j), tsr__tile(b, i, j), relu));
  return 0;
}

/* Whether dst and src (strides per pixel) are cut alike in whole pixels, `pixels` in all. */
static bool same_pixels(const tsr_tiles_t *dst, int dst_stride, const tsr_tiles_t *src,
                        int src_stride, int pixels) {
  if (dst->nt != src->nt || dst->n != (int64_t)pixels * dst_stride ||
      src->n != (int64_t)pixels * src_stride)
    return false;
  for (int j = 0; j < dst->nt; j++) {
    int dc = tsr_tiles_tile_cols(dst, j), sc = tsr_tiles_tile_cols(src, j);
    if (dc % dst_stride || sc % src_stride || dc / dst_stride != sc / src_stride) return false;
  }
  return true;
}

/* With one pixel per row the block is a range of columns, cut wherever a tile of either side
 * ends: one task per pair of overlapping tiles. With several, both sides are cut alike in
 * whole pixels (one tile wide, or bands of image rows) and each tile is one task. */
int tsr__tiles_channels_copy(const tsr_task_opts_t *o, tsr_tiles_t *dst, int dst_stride,
                             int dst_off, const tsr_tiles_t *src, int src_stride, int src_off,
                             int pixels, int width) {
  ROUTE(o, dst);
  if (dst->m != src->m || dst->mb != src->mb || pixels < 1 || width < 1 ||
      (int64_t)(pixels - 1) * dst_stride + dst_off + width > dst->n ||
      (int64_t)(pixels - 1) * src_stride + src_off + width > src->n ||
      (pixels > 1 && !same_pixels(dst, dst_stride, src, src_stride, pixels)))
    return TSR_ESHAPE;
  for (int i = 0; i < dst->mt; i++) {
    for (int j = 0; pixels > 1 && j < dst->nt; j++)
      TSR_TRY(tsr__insert_channels_copy(o, tsr__tile(dst, i, j), dst_stride, dst_off,
                                        tsr__tile(src, i, j), src_stride, src_off,
                                        tsr_tiles_tile_cols(dst, j) / dst_stride, width));
    if (pixels > 1) continue;
    for (int j = dst_off / dst->nb; j < dst->nt && (int64_t)j * dst->nb < dst_off + width; j++) {
      int64_t d0 = (int64_t)j * dst->nb, d1 = d0 + tsr_tiles_tile_cols(dst, j);
      int64_t lo = d0 > dst_off ? d0 : dst_off, hi = d1 < dst_off + width ? d1 : dst_off + width;
      /* [lo, hi) of dst is [lo + shift, hi + shift) of src */
      int64_t shift = (int64_t)src_off - dst_off;
      for (int t = (int)((lo + shift) / src->nb); t < src->nt; t++) {
        int64_t s0 = (int64_t)t * src->nb, s1 = s0 + tsr_tiles_tile_cols(src, t);
        int64_t a = s0 - shift > lo ? s0 - shift : lo, b = s1 - shift < hi ? s1 - shift : hi;
        if (a >= b) break;
        TSR_TRY(tsr__insert_channels_copy(o, tsr__tile(dst, i, j), 0, (int)(a - d0),
                                          tsr__tile(src, i, t), 0, (int)(a + shift - s0), 1,
                                          (int)(b - a)));
      }
    }
  }
  return 0;
}

int tsr__tiles_scale(const tsr_task_opts_t *o, tsr_tiles_t *x, float alpha) {
  ROUTE(o, x);
  for (int i = 0; i < x->mt; i++)
    for (int j = 0; j < x->nt; j++)
      TSR_TRY(tsr__insert_scale(o, tsr__tile(x, i, j), alpha));
  return 0;
}

int tsr__tiles_gather(const tsr_task_opts_t *o, tsr_tiles_t *dst, const float *src, int64_t lds,
                      const int32_t *rows, int64_t nvalid) {
  ROUTE(o, dst);
  if (nvalid < 0 || nvalid > dst->m || dst->n > lds) return TSR_ESHAPE;
  for (int i = 0; i < dst->mt; i++) {
    int64_t row0 = (int64_t)i * dst->mb;
    int64_t left = nvalid - row0;
    int rows_i = tsr_tiles_tile_rows(dst, i);
    int valid = left <= 0 ? 0 : left >= rows_i ? rows_i : (int)left;
    for (int j = 0; j < dst->nt; j++)
      TSR_TRY(
          tsr__insert_gather(o, tsr__tile(dst, i, j), src, lds, j * dst->nb, rows + row0, valid));
  }
  return 0;
}

int tsr__tiles_gather_augment(const tsr_task_opts_t *o, tsr_tiles_t *dst, const float *src,
                              int64_t lds, const int32_t *rows, int64_t nvalid,
                              const tsr_augment_geom_t *g, const float *fill) {
  ROUTE(o, dst);
  if (nvalid < 0 || nvalid > dst->m || dst->n != (int64_t)g->c * g->h * g->w || dst->n > lds)
    return TSR_ESHAPE;
  for (int i = 0; i < dst->mt; i++) {
    int64_t row0 = (int64_t)i * dst->mb;
    int64_t left = nvalid - row0;
    int rows_i = tsr_tiles_tile_rows(dst, i);
    int valid = left <= 0 ? 0 : left >= rows_i ? rows_i : (int)left;
    for (int j = 0; j < dst->nt; j++)
      TSR_TRY(tsr__insert_augment(o, tsr__tile(dst, i, j), g, fill, src, lds, j * dst->nb,
                                  rows + row0, valid));
  }
  return 0;
}

/* x's rows are tiled like y's, and both are one tile wide (whole samples). */
static bool whole_rows(const tsr_tiles_t *x, const tsr_tiles_t *y) {
  return x->nt == 1 && y->nt == 1 && x->m == y->m && x->mb == y->mb;
}

static bool one_tile(const tsr_tiles_t *t, int64_t m, int64_t n) {
  return t->m == m && t->n == n && t->mt == 1 && t->nt == 1;
}

int tsr__tiles_conv_wreorder(const tsr_task_opts_t *o, const tsr_tiles_t *w, tsr_tiles_t *wb,
                             const tsr_conv_geom_t *g, int n, int pass, bool flag) {
  ROUTE(o, wb);
  if (!one_tile(w, (int64_t)g->kh * g->kw * g->c, g->oc) || wb->mt != 1 || wb->nt != 1)
    return TSR_ESHAPE;
  return tsr__insert_conv_wreorder(o, tsr__tile(w, 0, 0), tsr__tile(wb, 0, 0), g, n, pass, flag);
}

int tsr__tiles_conv_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                        const tsr_tiles_t *w, const tsr_tiles_t *b, const tsr_tiles_t *wb,
                        const tsr_conv_geom_t *g, bool relu) {
  ROUTE(o, y);
  if (!whole_rows(x, y) || !one_tile(w, (int64_t)g->kh * g->kw * g->c, g->oc) ||
      !one_tile(b, 1, g->oc) || (wb && (wb->mt != 1 || wb->nt != 1)))
    return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    TSR_TRY(tsr__insert_conv_fwd_wb(o, tsr__tile(y, i, 0), tsr__tile(x, i, 0), tsr__tile(w, 0, 0),
                                    tsr__tile(b, 0, 0), wb ? tsr__tile(wb, 0, 0) : NULL, y->mb, g,
                                    relu));
  return 0;
}

int tsr__tiles_conv_bn_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                           const tsr_tiles_t *w, const tsr_tiles_t *b,
                           const tsr_tiles_t *const bn[4], const tsr_conv_geom_t *g, float eps,
                           bool relu) {
  ROUTE(o, y);
  if (!whole_rows(x, y) || !one_tile(w, (int64_t)g->kh * g->kw * g->c, g->oc) ||
      !one_tile(b, 1, g->oc))
    return TSR_ESHAPE;
  starpu_data_handle_t h[4];
  for (int k = 0; k < 4; k++) {
    if (!one_tile(bn[k], 1, g->oc)) return TSR_ESHAPE;
    h[k] = tsr__tile(bn[k], 0, 0);
  }
  for (int i = 0; i < y->mt; i++)
    TSR_TRY(tsr__insert_conv_bn_fwd(o, tsr__tile(y, i, 0), tsr__tile(x, i, 0), tsr__tile(w, 0, 0),
                                    tsr__tile(b, 0, 0), h, g, eps, relu));
  return 0;
}

int tsr__tiles_conv_bwd_data(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                             const tsr_tiles_t *w, const tsr_tiles_t *wb,
                             const tsr_conv_geom_t *g) {
  ROUTE(o, dx);
  if (!whole_rows(dx, dy) || !one_tile(w, (int64_t)g->kh * g->kw * g->c, g->oc) ||
      (wb && (wb->mt != 1 || wb->nt != 1)))
    return TSR_ESHAPE;
  for (int i = 0; i < dy->mt; i++)
    TSR_TRY(tsr__insert_conv_bwd_data_wb(o, tsr__tile(dx, i, 0), tsr__tile(dy, i, 0),
                                         tsr__tile(w, 0, 0), wb ? tsr__tile(wb, 0, 0) : NULL,
                                         dy->mb, g));
  return 0;
}

int tsr__tiles_conv_bwd_filter(const tsr_task_opts_t *o, tsr_tiles_t *dw, tsr_tiles_t *db,
                               tsr_tiles_t *pw, tsr_tiles_t *pb, const tsr_tiles_t *x,
                               const tsr_tiles_t *dy, const tsr_conv_geom_t *g) {
  ROUTE(o, dw);
  int64_t k = (int64_t)g->kh * g->kw * g->c;
  if (!whole_rows(x, dy) || !one_tile(dw, k, g->oc) || !one_tile(db, 1, g->oc)) return TSR_ESHAPE;
  bool tree = pw && pb && dy->mt > 1;
  if (tree && (pw->m != (dy->mt - 1) * k || pw->n != g->oc || pw->mb != k || pw->nt != 1 ||
               pb->m != dy->mt - 1 || pb->n != g->oc || pb->mb != 1 || pb->nt != 1))
    return TSR_ESHAPE;
  for (int i = 0; i < dy->mt; i++) {
    starpu_data_handle_t hw = tsr__tile(dw, 0, 0), hb = tsr__tile(db, 0, 0);
    if (tree && i > 0) hw = tsr__tile(pw, i - 1, 0), hb = tsr__tile(pb, i - 1, 0);
    TSR_TRY(tsr__insert_conv_bwd_filter(o, hw, hb, tsr__tile(x, i, 0), tsr__tile(dy, i, 0), g,
                                        i == 0 || tree ? 0.0f : 1.0f));
  }
  if (!tree) return 0;
  /* Slot 0 is (dw, db), slot i > 0 is partial i - 1: slot i += slot i + s. */
  for (int s = 1; s < dy->mt; s *= 2)
    for (int i = 0; i + s < dy->mt; i += 2 * s) {
      starpu_data_handle_t yw = i ? tsr__tile(pw, i - 1, 0) : tsr__tile(dw, 0, 0);
      starpu_data_handle_t yb = i ? tsr__tile(pb, i - 1, 0) : tsr__tile(db, 0, 0);
      TSR_TRY(tsr__insert_axpby(o, 1.0f, tsr__tile(pw, i + s - 1, 0), 1.0f, yw));
      TSR_TRY(tsr__insert_axpby(o, 1.0f, tsr__tile(pb, i + s - 1, 0), 1.0f, yb));
    }
  return 0;
}

int tsr__tiles_pool_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                        const tsr_conv_geom_t *g, bool max) {
  ROUTE(o, y);
  if (!whole_rows(x, y)) return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    TSR_TRY(tsr__insert_pool_fwd(o, tsr__tile(y, i, 0), tsr__tile(x, i, 0), g, max));
  return 0;
}

int tsr__tiles_pool_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                        const tsr_tiles_t *x, const tsr_tiles_t *y, const tsr_conv_geom_t *g,
                        bool max, bool relu) {
  ROUTE(o, dx);
  if (!whole_rows(dx, dy) || (max && (!x || !y || !same_tiling(x, dx) || !same_tiling(y, dy))))
    return TSR_ESHAPE;
  for (int i = 0; i < dy->mt; i++)
    TSR_TRY(tsr__insert_pool_bwd(o, tsr__tile(dx, i, 0), tsr__tile(dy, i, 0),
                                 max ? tsr__tile(x, i, 0) : NULL, max ? tsr__tile(y, i, 0) : NULL,
                                 g, max, relu));
  return 0;
}

int tsr__tiles_dropout(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                       uint64_t seed, float rate) {
  ROUTE(o, y);
  if (!same_tiling(x, y)) return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    for (int j = 0; j < y->nt; j++)
      TSR_TRY(tsr__insert_dropout(o, tsr__tile(y, i, j), tsr__tile(x, i, j), seed,
                                  (int64_t)i * y->mb, (int64_t)j * y->nb, rate));
  return 0;
}

static bool tile_ok(const tsr_tiles_t *x, int i, int j) {
  return i >= 0 && i < x->mt && j >= 0 && j < x->nt;
}

static bool one_by_one(const tsr_tiles_t *acc) {
  return acc->m == 1 && acc->n == 1;
}

int tsr__tile_sumsq_add(const tsr_task_opts_t *o, const tsr_tiles_t *g, int i, int j,
                        tsr_tiles_t *acc) {
  if (!one_by_one(acc) || !tile_ok(g, i, j)) return TSR_ESHAPE;
  return tsr__insert_sumsq_add(o, tsr__tile(g, i, j), tsr__tile(acc, 0, 0));
}

int tsr__tiles_sumsq_add(const tsr_task_opts_t *o, const tsr_tiles_t *g, tsr_tiles_t *acc) {
  ROUTE(o, acc);
  for (int i = 0; i < g->mt; i++)
    for (int j = 0; j < g->nt; j++)
      TSR_TRY(tsr__tile_sumsq_add(o, g, i, j, acc));
  return 0;
}

int tsr__tile_clip(const tsr_task_opts_t *o, tsr_tiles_t *g, int i, int j, const tsr_tiles_t *acc,
                   float max_norm) {
  if (!one_by_one(acc) || !tile_ok(g, i, j)) return TSR_ESHAPE;
  return tsr__insert_clip(o, tsr__tile(g, i, j), tsr__tile(acc, 0, 0), max_norm);
}

int tsr__tiles_clip(const tsr_task_opts_t *o, tsr_tiles_t *g, const tsr_tiles_t *acc,
                    float max_norm) {
  ROUTE(o, g);
  for (int i = 0; i < g->mt; i++)
    for (int j = 0; j < g->nt; j++)
      TSR_TRY(tsr__tile_clip(o, g, i, j, acc, max_norm));
  return 0;
}

int tsr__tile_fill(const tsr_task_opts_t *o, tsr_tiles_t *x, int i, int j, float value) {
  if (!tile_ok(x, i, j)) return TSR_ESHAPE;
  return tsr__insert_fill(o, tsr__tile(x, i, j), value);
}

int tsr__tile_copy(const tsr_task_opts_t *o, tsr_tiles_t *dst, const tsr_tiles_t *src, int i,
                   int j) {
  if (!same_tiling(dst, src) || !tile_ok(dst, i, j)) return TSR_ESHAPE;
  return tsr__insert_copy(o, tsr__tile(dst, i, j), tsr__tile(src, i, j));
}

int tsr__tile_axpby(const tsr_task_opts_t *o, float alpha, const tsr_tiles_t *x, float beta,
                    tsr_tiles_t *y, int i, int j, bool commute) {
  if (!same_tiling(x, y) || !tile_ok(y, i, j)) return TSR_ESHAPE;
  return tsr__insert_axpby_mode(o, alpha, tsr__tile(x, i, j), beta, tsr__tile(y, i, j), commute);
}

int tsr__tile_fold(const tsr_task_opts_t *o, tsr_tiles_t *global, tsr_tiles_t *snap,
                   const tsr_tiles_t *w, int i, int j, bool commute) {
  if (!same_tiling(global, snap) || !same_tiling(global, w) || !tile_ok(w, i, j)) return TSR_ESHAPE;
  return tsr__insert_fold(o, tsr__tile(global, i, j), tsr__tile(snap, i, j), tsr__tile(w, i, j),
                          commute);
}

int tsr__tile_outer(const tsr_task_opts_t *o, tsr_tiles_t *x, tsr_tiles_t *u,
                    const tsr_tiles_t *mean, int i, int j, bool nesterov, float lr, float momentum,
                    float gamma) {
  if (!same_tiling(x, u) || !same_tiling(x, mean) || !tile_ok(x, i, j)) return TSR_ESHAPE;
  return tsr__insert_outer(o, tsr__tile(x, i, j), tsr__tile(u, i, j), tsr__tile(mean, i, j),
                           nesterov, lr, momentum, gamma);
}

int tsr__tile_outer_fold(const tsr_task_opts_t *o, tsr_tiles_t *global, tsr_tiles_t *u,
                         tsr_tiles_t *snap, const tsr_tiles_t *w, int i, int j, float scale,
                         bool nesterov, float lr, float momentum, float gamma, bool commute) {
  if (!same_tiling(global, u) || !same_tiling(global, snap) || !same_tiling(global, w) ||
      !tile_ok(w, i, j))
    return TSR_ESHAPE;
  return tsr__insert_outer_fold(o, tsr__tile(global, i, j), tsr__tile(u, i, j),
                                tsr__tile(snap, i, j), tsr__tile(w, i, j), scale, nesterov, lr,
                                momentum, gamma, commute);
}

int tsr__tile_sgd(const tsr_task_opts_t *o, tsr_tiles_t *w, tsr_tiles_t *v, int i, int j, int r0,
                  const tsr_tiles_t *g, int gi, int gj, float lr, float momentum, float wd,
                  bool nesterov) {
  if ((v && !same_tiling(w, v)) || !tile_ok(w, i, j) || !tile_ok(g, gi, gj)) return TSR_ESHAPE;
  return tsr__insert_sgd(o, tsr__tile(w, i, j), v ? tsr__tile(v, i, j) : NULL, tsr__tile(g, gi, gj),
                         r0, lr, momentum, wd, nesterov);
}

int tsr__tile_adam(const tsr_task_opts_t *o, tsr_tiles_t *w, tsr_tiles_t *m1, tsr_tiles_t *m2,
                   int i, int j, int r0, const tsr_tiles_t *g, int gi, int gj, float lr,
                   float beta1, float beta2, float eps, float wd, int t, bool decoupled) {
  if (!same_tiling(w, m1) || !same_tiling(w, m2) || !tile_ok(w, i, j) || !tile_ok(g, gi, gj))
    return TSR_ESHAPE;
  return tsr__insert_adam(o, tsr__tile(w, i, j), tsr__tile(m1, i, j), tsr__tile(m2, i, j),
                          tsr__tile(g, gi, gj), r0, lr, beta1, beta2, eps, wd, t, decoupled);
}

int tsr__tile_band_get(const tsr_task_opts_t *o, tsr_tiles_t *dst, int di, int dj,
                       const tsr_tiles_t *src, int i, int j, int r0) {
  if (!tile_ok(dst, di, dj) || !tile_ok(src, i, j)) return TSR_ESHAPE;
  return tsr__insert_band_get(o, tsr__tile(dst, di, dj), tsr__tile(src, i, j), r0);
}

int tsr__tile_band_put(const tsr_task_opts_t *o, tsr_tiles_t *dst, int i, int j, int r0,
                       const tsr_tiles_t *src, int si, int sj) {
  if (!tile_ok(dst, i, j) || !tile_ok(src, si, sj)) return TSR_ESHAPE;
  return tsr__insert_band_put(o, tsr__tile(dst, i, j), r0, tsr__tile(src, si, sj));
}

int tsr__tile_pack(const tsr_task_opts_t *o, tsr_tiles_t *bucket, int64_t off,
                   const tsr_tiles_t *src, int i, int j, int r0, int rows) {
  if (!tile_ok(bucket, 0, 0) || !tile_ok(src, i, j)) return TSR_ESHAPE;
  return tsr__insert_bucket_pack(o, tsr__tile(bucket, 0, 0), off, tsr__tile(src, i, j), r0, rows);
}

int tsr__tile_unpack(const tsr_task_opts_t *o, tsr_tiles_t *dst, int i, int j, int r0, int rows,
                     const tsr_tiles_t *bucket, int64_t off) {
  if (!tile_ok(dst, i, j) || !tile_ok(bucket, 0, 0)) return TSR_ESHAPE;
  return tsr__insert_bucket_unpack(o, tsr__tile(dst, i, j), r0, rows, tsr__tile(bucket, 0, 0), off);
}

int tsr__tiles_wait(unsigned n_left) {
  return starpu_task_wait_for_n_submitted(n_left) == 0 ? 0 : TSR_ERUNTIME;
}

/* Grid layers: a dense layer's output column tiles spread over the ranks of
 * a grid column (src/nn/net.c), with the transfers of Gholami et al.'s
 * formulation made explicit rather than left to owner-computes, which
 * (StarPU-MPI's cache being off, src/runtime/runtime.c) would send an input
 * tile once per task that reads it, and W tiles for the input gradient. */

/* Counts one tile transfer from rank `from` to rank `to` on this rank. */
static void count_transfer(tsr_traffic_t *tr, int from, int to, starpu_data_handle_t h) {
  if (!tr || from == to) return;
  uint64_t bytes = (uint64_t)tsr__handle_rows(h) * (uint64_t)tsr__handle_cols(h) * sizeof(float);
  int me = tsr_dist_rank();
  if (me == from) tr->bytes_sent += bytes, tr->messages_sent++;
  if (me == to) tr->bytes_received += bytes, tr->messages_received++;
}

/* The slot of the n one-rank matrices that belongs to rank owner; -1 if none. */
static int slot_of(tsr_tiles_t *const *slots, int n, int owner) {
  for (int p = 0; p < n; p++)
    if (tsr_tiles_rank_of(slots[p], 0, 0) == owner) return p;
  return -1;
}

/* Whether rank owner holds a column tile of w. */
static bool owns_columns(const tsr_tiles_t *w, int owner) {
  for (int j = 0; j < w->nt; j++)
    if (tsr_tiles_rank_of(w, 0, j) == owner) return true;
  return false;
}

/* Tile (i, k) of the input x as rank owner reads it: x's own (a per-node
 * input, or owner's tile) or owner's gathered copy. */
static starpu_data_handle_t input_tile(const tsr_tiles_t *x, tsr_tiles_t *const *gathered, int n,
                                       int owner, int i, int k) {
  if (x->kind == TSR_TILES_LOCAL || tsr_tiles_rank_of(x, i, k) == owner) return tsr__tile(x, i, k);
  int p = slot_of(gathered, n, owner);
  assert(p >= 0);
  return tsr__tile(gathered[p], i, k);
}

int tsr__tiles_spread_gather(const tsr_task_opts_t *o, const tsr_tiles_t *x,
                             tsr_tiles_t *const *gathered, int n, const tsr_tiles_t *w,
                             tsr_traffic_t *tr) {
  if (x->kind == TSR_TILES_LOCAL) return 0;
  for (int p = 0; p < n; p++)
    if (!same_tiling(gathered[p], x)) return TSR_ESHAPE;
  for (int p = 0; p < n; p++) {
    int owner = tsr_tiles_rank_of(gathered[p], 0, 0);
    if (!owns_columns(w, owner)) continue;
    for (int i = 0; i < x->mt; i++)
      for (int k = 0; k < x->nt; k++) {
        int from = tsr_tiles_rank_of(x, i, k);
        if (from == owner) continue;
        starpu_data_handle_t h = tsr__tile(x, i, k);
        count_transfer(tr, from, owner, h);
        TSR_TRY(tsr__insert_copy(o, tsr__tile(gathered[p], i, k), h));
      }
  }
  return 0;
}

int tsr__tiles_spread_gemm(const tsr_task_opts_t *o, const tsr_tiles_t *x,
                           tsr_tiles_t *const *gathered, int n, const tsr_tiles_t *w,
                           tsr_tiles_t *y) {
  if (!dims_agree(x, 0, y, 0) || !dims_agree(w, 1, y, 1) || !dims_agree(x, 1, w, 0))
    return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    for (int j = 0; j < y->nt; j++) {
      int owner = tsr_tiles_rank_of(y, i, j);
      for (int k = 0; k < x->nt; k++)
        TSR_TRY(tsr__insert_gemm(o, false, false, 1.0f, input_tile(x, gathered, n, owner, i, k),
                                 tsr__tile(w, k, j), k == 0 ? 0.0f : 1.0f, tsr__tile(y, i, j)));
    }
  return 0;
}

int tsr__tiles_spread_gemm_tn(const tsr_task_opts_t *o, const tsr_tiles_t *x,
                              tsr_tiles_t *const *gathered, int n, const tsr_tiles_t *dy,
                              tsr_tiles_t *dw) {
  if (!dims_agree(x, 1, dw, 0) || !dims_agree(dy, 1, dw, 1) || !dims_agree(x, 0, dy, 0))
    return TSR_ESHAPE;
  for (int k = 0; k < dw->mt; k++)
    for (int j = 0; j < dw->nt; j++) {
      int owner = tsr_tiles_rank_of(dw, k, j);
      for (int i = 0; i < x->mt; i++)
        TSR_TRY(tsr__insert_gemm(o, true, false, 1.0f, input_tile(x, gathered, n, owner, i, k),
                                 tsr__tile(dy, i, j), i == 0 ? 0.0f : 1.0f, tsr__tile(dw, k, j)));
    }
  return 0;
}

/* Tile (i, k) of sums, the input gradient reduced on its owner, to every
 * other rank of the column (ranks: the n slots' owners), then into each
 * rank's own per-node dx. */
static int share_tile(const tsr_task_opts_t *o, tsr_tiles_t *dx, tsr_tiles_t *sums,
                      tsr_tiles_t *const *slots, int n, int i, int k, tsr_traffic_t *tr) {
  starpu_data_handle_t h = tsr__tile(sums, i, k);
  int from = tsr_tiles_rank_of(sums, i, k), me = tsr_dist_rank();
  bool mine = false;
  for (int p = 0; p < n; p++) {
    int to = tsr_tiles_rank_of(slots[p], 0, 0);
    mine |= to == me;
    if (to == from) continue;
    count_transfer(tr, from, to, h);
    if (me == to || me == from)
      starpu_mpi_get_data_on_node_detached(MPI_COMM_WORLD, h, to, NULL, NULL);
  }
  if (!mine) return 0;
  tsr_task_opts_t local = *o;
  local.mpi = false;
  TSR_TRY(tsr__insert_copy(&local, tsr__tile(dx, i, k), h));
  /* The received copy is not kept past its use: memory stays the rank's own tiles. */
  if (me != from) starpu_data_invalidate_submit(h);
  return 0;
}

int tsr__tiles_spread_gemm_nt(const tsr_task_opts_t *o, const tsr_tiles_t *dy, const tsr_tiles_t *w,
                              tsr_tiles_t *const *partials, int n, tsr_tiles_t *dx,
                              tsr_tiles_t *sums, tsr_traffic_t *tr) {
  if (!dims_agree(dy, 0, dx, 0) || !dims_agree(w, 0, dx, 1) || !dims_agree(dy, 1, w, 1))
    return TSR_ESHAPE;
  bool per_node = dx->kind == TSR_TILES_LOCAL;
  if (!partials || (per_node && !sums) || (sums && !same_tiling(sums, dx))) return TSR_EINVAL;
  for (int p = 0; p < n; p++)
    if (!same_tiling(partials[p], dx)) return TSR_ESHAPE;
  tsr_tiles_t *target = per_node ? sums : dx;
  /* Each rank's partial sum over its own columns j: dy and W never travel. */
  for (int p = 0; p < n; p++) {
    int owner = tsr_tiles_rank_of(partials[p], 0, 0);
    for (int i = 0; i < dx->mt; i++)
      for (int k = 0; k < dx->nt; k++) {
        bool first = true;
        for (int j = 0; j < w->nt; j++) {
          if (tsr_tiles_rank_of(w, k, j) != owner) continue;
          TSR_TRY(tsr__insert_gemm(o, false, true, 1.0f, tsr__tile(dy, i, j), tsr__tile(w, k, j),
                                   first ? 0.0f : 1.0f, tsr__tile(partials[p], i, k)));
          first = false;
        }
      }
  }
  /* The partials summed on dx's owner, in slot order: one message per other rank with columns;
   * a per-node dx is summed in sums, then sent to every other rank of the column. */
  for (int i = 0; i < dx->mt; i++)
    for (int k = 0; k < dx->nt; k++) {
      bool first = true;
      int to = tsr_tiles_rank_of(target, i, k);
      for (int p = 0; p < n; p++) {
        int owner = tsr_tiles_rank_of(partials[p], 0, 0);
        if (!owns_columns(w, owner)) continue;
        starpu_data_handle_t h = tsr__tile(partials[p], i, k);
        count_transfer(tr, owner, to, h);
        if (first)
          TSR_TRY(tsr__insert_copy(o, tsr__tile(target, i, k), h));
        else
          TSR_TRY(tsr__insert_axpby(o, 1.0f, h, 1.0f, tsr__tile(target, i, k)));
        first = false;
      }
      if (per_node) TSR_TRY(share_tile(o, dx, sums, partials, n, i, k, tr));
    }
  return 0;
}

/* ---- Batch normalization ---- */

/* Rows of batch-row tile i of x that are samples. */
static int valid_rows(const tsr_tiles_t *x, int i, int valid) {
  int64_t v = valid - (int64_t)i * x->mb, rows = x->m - (int64_t)i * x->mb;
  if (rows > x->mb) rows = x->mb;
  return (int)(v < 0 ? 0 : v < rows ? v : rows);
}

static bool bn_partials(const tsr_tiles_t *p, const tsr_tiles_t *x) {
  return p->mb == 3 && p->m == 3 * (int64_t)x->mt && p->nt == 1 && x->nt == 1;
}

/* p's tile i = p's tiles i and i + s combined, s = 1, 2, 4, ...: a fixed tree. */
static int bn_tree(const tsr_task_opts_t *o, tsr_tiles_t *p, bool sums) {
  for (int s = 1; s < p->mt; s *= 2)
    for (int i = 0; i + s < p->mt; i += 2 * s)
      TSR_TRY(tsr__insert_bn_combine(o, tsr__tile(p, i, 0), tsr__tile(p, i + s, 0), sums));
  return 0;
}

int tsr__tiles_conv_fwd_stats(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                              const tsr_tiles_t *w, const tsr_tiles_t *b, const tsr_tiles_t *wb,
                              const tsr_conv_geom_t *g, tsr_tiles_t *p, int valid) {
  ROUTE(o, y);
  if (!whole_rows(x, y) || !one_tile(w, (int64_t)g->kh * g->kw * g->c, g->oc) ||
      !one_tile(b, 1, g->oc) || (wb && (wb->mt != 1 || wb->nt != 1)) || !bn_partials(p, y) ||
      p->n != g->oc)
    return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    TSR_TRY(tsr__insert_conv_fwd_st(o, tsr__tile(y, i, 0), tsr__tile(x, i, 0), tsr__tile(w, 0, 0),
                                    tsr__tile(b, 0, 0), wb ? tsr__tile(wb, 0, 0) : NULL, y->mb, g,
                                    false, tsr__tile(p, i, 0), valid_rows(y, i, valid)));
  return bn_tree(o, p, false);
}

int tsr__tiles_bn_stats(const tsr_task_opts_t *o, tsr_tiles_t *p, const tsr_tiles_t *x, int hw,
                        int valid) {
  ROUTE(o, p);
  if (!bn_partials(p, x) || hw <= 0 || x->n % hw) return TSR_ESHAPE;
  int c = (int)(x->n / hw);
  for (int i = 0; i < x->mt; i++)
    TSR_TRY(tsr__insert_bn_stats(o, tsr__tile(p, i, 0), tsr__tile(x, i, 0), hw, c,
                                 valid_rows(x, i, valid)));
  return bn_tree(o, p, false);
}

int tsr__tile_bn_combine(const tsr_task_opts_t *o, tsr_tiles_t *a, const tsr_tiles_t *b,
                         bool sums) {
  ROUTE(o, a);
  if (a->mb != 3 || b->mb != 3 || a->n != b->n || a->nt != 1 || b->nt != 1) return TSR_ESHAPE;
  return tsr__insert_bn_combine(o, tsr__tile(a, 0, 0), tsr__tile(b, 0, 0), sums);
}

int tsr__tiles_bn_finalize(const tsr_task_opts_t *o, tsr_tiles_t *s, tsr_tiles_t *p,
                           tsr_tiles_t *mean, tsr_tiles_t *var, float momentum, float eps,
                           bool update) {
  ROUTE(o, s);
  return tsr__insert_bn_finalize(o, tsr__tile(s, 0, 0), p ? tsr__tile(p, 0, 0) : NULL,
                                 tsr__tile(mean, 0, 0), tsr__tile(var, 0, 0), momentum, eps,
                                 update);
}

int tsr__tiles_bn_normalize(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                            const tsr_tiles_t *s, const tsr_tiles_t *scale,
                            const tsr_tiles_t *shift, int hw, bool relu) {
  ROUTE(o, y);
  if (!same_tiling(x, y) || x->nt != 1) return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    TSR_TRY(tsr__insert_bn_normalize(o, tsr__tile(y, i, 0), tsr__tile(x, i, 0), tsr__tile(s, 0, 0),
                                     tsr__tile(scale, 0, 0), tsr__tile(shift, 0, 0), hw, relu));
  return 0;
}

int tsr__tiles_bn_sums(const tsr_task_opts_t *o, tsr_tiles_t *p, const tsr_tiles_t *dy,
                       const tsr_tiles_t *x, const tsr_tiles_t *y, const tsr_tiles_t *s, int hw,
                       int valid, bool relu) {
  ROUTE(o, p);
  if (!bn_partials(p, x) || !same_tiling(x, dy) || !same_tiling(x, y)) return TSR_ESHAPE;
  for (int i = 0; i < x->mt; i++)
    TSR_TRY(tsr__insert_bn_sums(o, tsr__tile(p, i, 0), tsr__tile(dy, i, 0), tsr__tile(x, i, 0),
                                tsr__tile(y, i, 0), tsr__tile(s, 0, 0), hw, valid_rows(x, i, valid),
                                relu));
  return bn_tree(o, p, true);
}

int tsr__tiles_bn_params_grad(const tsr_task_opts_t *o, tsr_tiles_t *dscale, tsr_tiles_t *dshift,
                              const tsr_tiles_t *p) {
  ROUTE(o, dscale);
  return tsr__insert_bn_params_grad(o, tsr__tile(dscale, 0, 0), tsr__tile(dshift, 0, 0),
                                    tsr__tile(p, 0, 0));
}

int tsr__tiles_bn_dx(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                     const tsr_tiles_t *x, const tsr_tiles_t *y, const tsr_tiles_t *s,
                     const tsr_tiles_t *scale, const tsr_tiles_t *p, int hw, int valid, bool relu) {
  ROUTE(o, dx);
  if (!same_tiling(x, dy) || !same_tiling(x, y) || !same_tiling(x, dx) || x->nt != 1)
    return TSR_ESHAPE;
  for (int i = 0; i < x->mt; i++)
    TSR_TRY(tsr__insert_bn_dx(o, tsr__tile(dx, i, 0), tsr__tile(dy, i, 0), tsr__tile(x, i, 0),
                              tsr__tile(y, i, 0), tsr__tile(s, 0, 0), tsr__tile(scale, 0, 0),
                              tsr__tile(p, 0, 0), hw, valid_rows(x, i, valid), relu));
  return 0;
}
