/* Domain-split convolutions and pooling (domain.h): the slabs, halos and partial gradients of a
 * layer, and the tasks that fill and use them. */
#include <stdlib.h>

#include "tile/domain.h"
#include "tessera/dist.h"
#include "try.h"
#include "codelets.h"
#include "tile/tiles_impl.h"

#include <starpu_mpi.h>

typedef struct {
  int r0, r1, a0, a1;        /* its output rows; the input rows of its slab */
  tsr_conv_geom_t cut;       /* the window over the slab alone (tsr__k_band_window) */
  tsr_tiles_t *slab, *dslab; /* (batch, (a1 - a0) w c) on the band's rank; dslab with dx */
  tsr_tiles_t *dw, *db;      /* params, bands 1..: the band's weight and bias gradients */
} band_t;

struct tsr_domain {
  tsr_conv_geom_t g;
  int pr, nout, nin; /* the column's rows; output bands; input bands (banded_in) */
  int *ranks;        /* [pr] row p's rank */
  bool banded_in, dx, params;
  band_t *out;                  /* [nout] */
  tsr_tiles_t **halo;           /* [nout nin] slab p's rows from input band q != p, on q's rank */
  tsr_tiles_t **halo_grad;      /* [nout nin] their gradients, on p's rank (dx) */
  tsr_tiles_t *dw_sum, *db_sum; /* params: band 0's gradients, then the column's sums, row 0 */
  tsr_tiles_t **part;           /* batchnorm: [nout] (3 mt, c) each band's partials, its rank */
  int64_t batch;
  int mb;
};

static int fixed_rank(int i, int j, void *ctx) {
  (void)i, (void)j;
  return *(const int *)ctx;
}

/* Rows [*lo, *hi) of slab [a0, a1) that input band q of g holds; false when none. */
static bool overlap(const tsr_conv_geom_t *g, int pr, int a0, int a1, int q, int *lo, int *hi) {
  int q0, q1;
  tsr__k_band(g->h, pr, q, &q0, &q1);
  *lo = a0 > q0 ? a0 : q0, *hi = a1 < q1 ? a1 : q1;
  return *lo < *hi;
}

/* The slab rows [*a0, *a1) of output band p of g. */
static void slab_rows(const tsr_conv_geom_t *g, int pr, int p, int *a0, int *a1) {
  int r0, r1;
  tsr__k_band(g->oh, pr, p, &r0, &r1);
  tsr__k_band_window(g, r0, r1, a0, a1);
}

int64_t tsr__domain_floats(const tsr_conv_geom_t *g, int pr, int row, int64_t batch, bool banded_in,
                           bool dx, bool params) {
  int nout = tsr__k_bands(g->oh, pr), nin = banded_in ? tsr__k_bands(g->h, pr) : 0;
  int64_t wc = (int64_t)g->w * g->c, floats = 0;
  for (int p = 0; p < nout; p++) {
    int a0, a1, lo, hi;
    slab_rows(g, pr, p, &a0, &a1);
    if (p == row) floats += (dx ? 2 : 1) * batch * (a1 - a0) * wc;
    for (int q = 0; q < nin; q++)
      if (q != p && overlap(g, pr, a0, a1, q, &lo, &hi))
        floats += ((q == row) + (dx && p == row)) * batch * (hi - lo) * wc;
  }
  if (params && row < nout) floats += ((int64_t)g->kh * g->kw * g->c + 1) * g->oc;
  return floats;
}

int tsr__domain_halo_rows(const tsr_conv_geom_t *g, int pr, int p, int q) {
  int a0, a1, lo, hi;
  if (p == q || p >= tsr__k_bands(g->oh, pr) || q >= tsr__k_bands(g->h, pr)) return 0;
  slab_rows(g, pr, p, &a0, &a1);
  return overlap(g, pr, a0, a1, q, &lo, &hi) ? hi - lo : 0;
}

void tsr__domain_destroy(tsr_domain_t **dp) {
  tsr_domain_t *d = *dp;
  if (!d) return;
  for (int p = 0; d->out && p < d->nout; p++) {
    band_t *b = &d->out[p];
    tsr_tiles_destroy(&b->slab), tsr_tiles_destroy(&b->dslab);
    tsr_tiles_destroy(&b->dw), tsr_tiles_destroy(&b->db);
  }
  for (int k = 0; k < d->nout * d->nin; k++) {
    if (d->halo) tsr_tiles_destroy(&d->halo[k]);
    if (d->halo_grad) tsr_tiles_destroy(&d->halo_grad[k]);
  }
  tsr_tiles_destroy(&d->dw_sum), tsr_tiles_destroy(&d->db_sum);
  for (int p = 0; d->part && p < d->nout; p++)
    tsr_tiles_destroy(&d->part[p]);
  free(d->part);
  free(d->out), free(d->halo), free(d->halo_grad), free(d->ranks), free(d);
  *dp = NULL;
}

/* A (rows, cols) matrix in mb-row tiles one tile wide, all on rank *at. */
static int on_rank(tsr_tiles_t **t, int64_t rows, int64_t cols, int mb, int *at) {
  return tsr_tiles_create_distributed(t, rows, cols, mb, (int)cols, fixed_rank, at);
}

int tsr__domain_create(tsr_domain_t **out, const tsr_conv_geom_t *g, int pr, const int *ranks,
                       int64_t batch, int mb, bool banded_in, bool dx, bool params) {
  *out = NULL;
  if (pr < 2 || (dx && !banded_in)) return TSR_EINVAL;
  tsr_domain_t *d = calloc(1, sizeof *d);
  if (!d) return TSR_ENOMEM;
  *out = d;
  d->g = *g, d->pr = pr, d->banded_in = banded_in, d->dx = dx, d->params = params;
  d->nout = tsr__k_bands(g->oh, pr), d->nin = banded_in ? tsr__k_bands(g->h, pr) : 0;
  d->ranks = malloc(sizeof *d->ranks * (size_t)pr);
  d->out = calloc((size_t)d->nout, sizeof *d->out);
  size_t pairs = (size_t)d->nout * (size_t)(d->nin > 0 ? d->nin : 1);
  d->halo = calloc(pairs, sizeof *d->halo);
  d->halo_grad = calloc(pairs, sizeof *d->halo_grad);
  if (!d->ranks || !d->out || !d->halo || !d->halo_grad) return TSR_ENOMEM;
  for (int p = 0; p < pr; p++)
    d->ranks[p] = ranks[p];
  int64_t wc = (int64_t)g->w * g->c, k = (int64_t)g->kh * g->kw * g->c;
  for (int p = 0; p < d->nout; p++) {
    band_t *b = &d->out[p];
    tsr__k_band(g->oh, pr, p, &b->r0, &b->r1);
    b->cut = tsr__k_band_window(g, b->r0, b->r1, &b->a0, &b->a1);
    TSR_TRY(on_rank(&b->slab, batch, (b->a1 - b->a0) * wc, mb, &d->ranks[p]));
    if (dx) TSR_TRY(on_rank(&b->dslab, batch, (b->a1 - b->a0) * wc, mb, &d->ranks[p]));
    if (params && p > 0) {
      TSR_TRY(on_rank(&b->dw, k, g->oc, (int)k, &d->ranks[p]));
      TSR_TRY(on_rank(&b->db, 1, g->oc, 1, &d->ranks[p]));
    }
    for (int q = 0; q < d->nin; q++) {
      int lo, hi;
      if (q == p || !overlap(g, pr, b->a0, b->a1, q, &lo, &hi)) continue;
      tsr_tiles_t **h = &d->halo[p * d->nin + q], **hg = &d->halo_grad[p * d->nin + q];
      TSR_TRY(on_rank(h, batch, (hi - lo) * wc, mb, &d->ranks[q]));
      if (dx) TSR_TRY(on_rank(hg, batch, (hi - lo) * wc, mb, &d->ranks[p]));
    }
  }
  if (params) {
    TSR_TRY(on_rank(&d->dw_sum, k, g->oc, (int)k, &d->ranks[0]));
    TSR_TRY(on_rank(&d->db_sum, 1, g->oc, 1, &d->ranks[0]));
  }
  return 0;
}

/* Every task here runs on one rank of the column, as a plain StarPU task submitted there alone
 * (the others skip it), and every transfer is explicit: StarPU-MPI's owner-computes would also
 * want the layer's parameters, local to each rank, registered with it. */
static bool here(int rank) {
  return tsr_dist_rank() == rank;
}

static tsr_task_opts_t local(const tsr_task_opts_t *o) {
  tsr_task_opts_t l = *o;
  l.mpi = false;
  return l;
}

/* Tile h (owned by rank from) to rank to, counted in tr on this rank. */
static void send(tsr_traffic_t *tr, starpu_data_handle_t h, int from, int to, bool halo) {
  if (from == to) return;
  int me = tsr_dist_rank();
  if (tr) {
    uint64_t bytes = (uint64_t)tsr__handle_rows(h) * (uint64_t)tsr__handle_cols(h) * sizeof(float);
    if (me == from) {
      tr->bytes_sent += bytes, tr->messages_sent++;
      if (halo) tr->halo_bytes_sent += bytes, tr->halo_messages_sent++;
    }
    if (me == to) tr->bytes_received += bytes, tr->messages_received++;
  }
  if (me == from || me == to)
    starpu_mpi_get_data_on_node_detached(MPI_COMM_WORLD, h, to, NULL, NULL);
}

/* After its use on a rank that received it: the copy is not kept. */
static void drop(starpu_data_handle_t h, int owner) {
  if (!here(owner)) starpu_data_invalidate_submit(h);
}

/* Each band's slab from x: copied out of the input batch, or its own input band's rows and the
 * halo rows the other bands' owners copy out and send. */
static int gather(const tsr_task_opts_t *o, tsr_domain_t *d, const tsr_tiles_t *x,
                  tsr_traffic_t *tr) {
  tsr_task_opts_t l = local(o);
  int wc = d->g.w * d->g.c;
  for (int p = 0; p < d->nout; p++) {
    band_t *b = &d->out[p];
    int at_p = d->ranks[p];
    for (int i = 0; i < b->slab->mt; i++) {
      if (!d->banded_in) {
        if (here(at_p))
          TSR_TRY(tsr__insert_columns(&l, tsr__tile(b->slab, i, 0), 0, tsr__tile(x, i, 0),
                                      b->a0 * wc, (b->a1 - b->a0) * wc, false));
        continue;
      }
      for (int q = 0; q < d->nin; q++) {
        int lo, hi, q0, q1, at_q = d->ranks[q];
        if (!overlap(&d->g, d->pr, b->a0, b->a1, q, &lo, &hi)) continue;
        tsr__k_band(d->g.h, d->pr, q, &q0, &q1);
        int width = (hi - lo) * wc, at = (lo - b->a0) * wc, from = (lo - q0) * wc;
        if (q == p) {
          if (here(at_p))
            TSR_TRY(tsr__insert_columns(&l, tsr__tile(b->slab, i, 0), at, tsr__tile(x, i, q), from,
                                        width, false));
          continue;
        }
        if (!here(at_p) && !here(at_q)) continue;
        starpu_data_handle_t h = tsr__tile(d->halo[p * d->nin + q], i, 0);
        if (here(at_q))
          TSR_TRY(tsr__insert_columns(&l, h, 0, tsr__tile(x, i, q), from, width, false));
        send(tr, h, at_q, at_p, true);
        if (!here(at_p)) continue;
        TSR_TRY(tsr__insert_columns(&l, tsr__tile(b->slab, i, 0), at, h, 0, width, false));
        drop(h, at_q);
      }
    }
  }
  return 0;
}

/* dx's bands from the slabs' gradients: each input band q's own part (zeros where no window of
 * its own output band reads it), then the other bands' parts in band order, each copied out by
 * the slab's owner and sent. */
static int scatter(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *dx, tsr_traffic_t *tr) {
  tsr_task_opts_t l = local(o);
  int wc = d->g.w * d->g.c;
  for (int q = 0; q < d->nin; q++) {
    int q0, q1, at_q = d->ranks[q];
    tsr__k_band(d->g.h, d->pr, q, &q0, &q1);
    for (int i = 0; i < dx->mt; i++) {
      starpu_data_handle_t t = here(at_q) ? tsr__tile(dx, i, q) : NULL;
      const band_t *own = q < d->nout ? &d->out[q] : NULL;
      int lo, hi;
      if (!t) {
        /* not ours */
      } else if (own && own->a0 <= q0 && own->a1 >= q1) {
        TSR_TRY(tsr__insert_columns(&l, t, 0, tsr__tile(own->dslab, i, 0), (q0 - own->a0) * wc,
                                    (q1 - q0) * wc, false));
      } else {
        TSR_TRY(tsr__insert_fill(&l, t, 0.0f));
        if (own && overlap(&d->g, d->pr, own->a0, own->a1, q, &lo, &hi))
          TSR_TRY(tsr__insert_columns(&l, t, (lo - q0) * wc, tsr__tile(own->dslab, i, 0),
                                      (lo - own->a0) * wc, (hi - lo) * wc, true));
      }
      for (int p = 0; p < d->nout; p++) {
        const band_t *b = &d->out[p];
        int at_p = d->ranks[p];
        if (p == q || !overlap(&d->g, d->pr, b->a0, b->a1, q, &lo, &hi)) continue;
        if (!here(at_p) && !here(at_q)) continue;
        int width = (hi - lo) * wc;
        starpu_data_handle_t h = tsr__tile(d->halo_grad[p * d->nin + q], i, 0);
        if (here(at_p))
          TSR_TRY(tsr__insert_columns(&l, h, 0, tsr__tile(b->dslab, i, 0), (lo - b->a0) * wc, width,
                                      false));
        send(tr, h, at_p, at_q, true);
        if (!t) continue;
        TSR_TRY(tsr__insert_columns(&l, t, (lo - q0) * wc, h, 0, width, true));
        drop(h, at_p);
      }
    }
  }
  return 0;
}

/* sum (one tile, on row 0) to every other rank of the column, then into each rank's own copy
 * `mine` (a local parameter's gradient). */
static int share(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *sum, tsr_tiles_t *mine,
                 tsr_traffic_t *tr) {
  starpu_data_handle_t h = tsr__tile(sum, 0, 0);
  int from = d->ranks[0];
  bool in_column = false;
  for (int p = 0; p < d->pr; p++) {
    in_column |= here(d->ranks[p]);
    send(tr, h, from, d->ranks[p], false);
  }
  if (!in_column) return 0;
  tsr_task_opts_t l = local(o);
  TSR_TRY(tsr__insert_copy(&l, tsr__tile(mine, 0, 0), h));
  drop(h, from);
  return 0;
}

/* The slabs from x, then y's bands from them: the convolution with w, b (relu fused), or with w
 * NULL the pooling (max or mean). */
static int forward(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *y, const tsr_tiles_t *x,
                   const tsr_tiles_t *w, const tsr_tiles_t *b, bool relu, bool max,
                   tsr_traffic_t *tr) {
  if (y->nt != d->nout) return TSR_ESHAPE;
  TSR_TRY(gather(o, d, x, tr));
  tsr_task_opts_t l = local(o);
  for (int p = 0; p < d->nout; p++)
    for (int i = 0; here(d->ranks[p]) && i < y->mt; i++) {
      starpu_data_handle_t out = tsr__tile(y, i, p), slab = tsr__tile(d->out[p].slab, i, 0);
      const tsr_conv_geom_t *cut = &d->out[p].cut;
      TSR_TRY(
          w ? tsr__insert_conv_fwd(&l, out, slab, tsr__tile(w, 0, 0), tsr__tile(b, 0, 0), cut, relu)
            : tsr__insert_pool_fwd(&l, out, slab, cut, max));
    }
  return 0;
}

int tsr__domain_conv_fwd(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *y,
                         const tsr_tiles_t *x, const tsr_tiles_t *w, const tsr_tiles_t *b,
                         bool relu, tsr_traffic_t *tr) {
  return forward(o, d, y, x, w, b, relu, false, tr);
}

int tsr__domain_pool_fwd(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *y,
                         const tsr_tiles_t *x, bool max, tsr_traffic_t *tr) {
  return forward(o, d, y, x, NULL, NULL, false, max, tr);
}

int tsr__domain_conv_bwd(const tsr_task_opts_t *o, const tsr_task_opts_t *critical, tsr_domain_t *d,
                         tsr_tiles_t *dx, const tsr_tiles_t *dy, const tsr_tiles_t *w,
                         tsr_tiles_t *dw, tsr_tiles_t *db, tsr_traffic_t *tr) {
  if (dy->nt != d->nout || (dx && (!d->dx || dx->nt != d->nin)) || !d->params) return TSR_ESHAPE;
  tsr_task_opts_t l = local(o), lc = local(critical);
  for (int p = 0; dx && p < d->nout; p++)
    for (int i = 0; here(d->ranks[p]) && i < dy->mt; i++)
      TSR_TRY(tsr__insert_conv_bwd_data(&lc, tsr__tile(d->out[p].dslab, i, 0), tsr__tile(dy, i, p),
                                        tsr__tile(w, 0, 0), &d->out[p].cut));
  if (dx) TSR_TRY(scatter(critical, d, dx, tr));
  /* Each band's gradients over its batch tiles in order, then the bands' summed on row 0 in
   * band order: the same sum on every rank of the column. */
  for (int p = 0; p < d->nout; p++) {
    tsr_tiles_t *pw = p ? d->out[p].dw : d->dw_sum, *pb = p ? d->out[p].db : d->db_sum;
    for (int i = 0; here(d->ranks[p]) && i < dy->mt; i++)
      TSR_TRY(tsr__insert_conv_bwd_filter(&l, tsr__tile(pw, 0, 0), tsr__tile(pb, 0, 0),
                                          tsr__tile(d->out[p].slab, i, 0), tsr__tile(dy, i, p),
                                          &d->out[p].cut, i == 0 ? 0.0f : 1.0f));
  }
  for (int p = 1; p < d->nout; p++) {
    int at_p = d->ranks[p], at_0 = d->ranks[0];
    if (!here(at_p) && !here(at_0)) continue;
    starpu_data_handle_t hw = tsr__tile(d->out[p].dw, 0, 0), hb = tsr__tile(d->out[p].db, 0, 0);
    send(tr, hw, at_p, at_0, false), send(tr, hb, at_p, at_0, false);
    if (!here(at_0)) continue;
    TSR_TRY(tsr__insert_axpby(&l, 1.0f, hw, 1.0f, tsr__tile(d->dw_sum, 0, 0)));
    TSR_TRY(tsr__insert_axpby(&l, 1.0f, hb, 1.0f, tsr__tile(d->db_sum, 0, 0)));
    drop(hw, at_p), drop(hb, at_p);
  }
  TSR_TRY(share(o, d, d->dw_sum, dw, tr));
  return share(o, d, d->db_sum, db, tr);
}

int tsr__domain_pool_bwd(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *dx,
                         const tsr_tiles_t *dy, const tsr_tiles_t *y, bool max, bool relu,
                         tsr_traffic_t *tr) {
  if (!dx) return 0;
  if (!d->dx || dy->nt != d->nout || dx->nt != d->nin) return TSR_ESHAPE;
  tsr_task_opts_t l = local(o);
  for (int p = 0; p < d->nout; p++) {
    const band_t *b = &d->out[p];
    for (int i = 0; here(d->ranks[p]) && i < dy->mt; i++)
      TSR_TRY(tsr__insert_pool_bwd(&l, tsr__tile(b->dslab, i, 0), tsr__tile(dy, i, p),
                                   max ? tsr__tile(b->slab, i, 0) : NULL,
                                   max ? tsr__tile(y, i, p) : NULL, &b->cut, max, relu));
  }
  return scatter(o, d, dx, tr);
}

/* ---- A whole layer over bands ---- */

int tsr__domain_allgather(const tsr_task_opts_t *o, const tsr_tiles_t *x, tsr_tiles_t *whole,
                          int pr, const int *ranks, tsr_traffic_t *tr) {
  if (x->nt > pr || whole->nt != 1 || whole->n != x->n || whole->mt != x->mt) return TSR_ESHAPE;
  tsr_task_opts_t l = local(o);
  for (int i = 0; i < x->mt; i++)
    for (int q = 0; q < x->nt; q++) {
      starpu_data_handle_t h = tsr__tile(x, i, q);
      for (int p = 0; p < pr; p++)
        send(tr, h, ranks[q], ranks[p], false);
      TSR_TRY(tsr__insert_columns(&l, tsr__tile(whole, i, 0), q * x->nb, h, 0,
                                  tsr_tiles_tile_cols(x, q), false));
      drop(h, ranks[q]);
    }
  return 0;
}

int tsr__domain_take_bands(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *whole_dx,
                           int pr, const int *ranks) {
  if (dx->nt > pr || whole_dx->nt != 1 || whole_dx->n != dx->n) return TSR_ESHAPE;
  tsr_task_opts_t l = local(o);
  for (int i = 0; i < dx->mt; i++)
    for (int q = 0; q < dx->nt; q++)
      if (here(ranks[q]))
        TSR_TRY(tsr__insert_columns(&l, tsr__tile(dx, i, q), 0, tsr__tile(whole_dx, i, 0),
                                    q * dx->nb, tsr_tiles_tile_cols(dx, q), false));
  return 0;
}

/* ---- Batch normalization over bands ---- */

int tsr__domain_bn_create(tsr_domain_t **out, const tsr_conv_geom_t *g, int pr, const int *ranks,
                          int64_t batch, int mb) {
  *out = NULL;
  if (pr < 2) return TSR_EINVAL;
  tsr_domain_t *d = calloc(1, sizeof *d);
  if (!d) return TSR_ENOMEM;
  *out = d;
  d->g = *g, d->pr = pr, d->banded_in = true, d->batch = batch, d->mb = mb;
  d->nout = d->nin = tsr__k_bands(g->h, pr);
  d->ranks = malloc(sizeof *d->ranks * (size_t)pr);
  d->part = calloc((size_t)d->nout, sizeof *d->part);
  if (!d->ranks || !d->part) return TSR_ENOMEM;
  for (int p = 0; p < pr; p++)
    d->ranks[p] = ranks[p];
  int64_t mt = (batch + mb - 1) / mb;
  for (int p = 0; p < d->nout; p++)
    TSR_TRY(
        tsr_tiles_create_distributed(&d->part[p], 3 * mt, g->c, 3, g->c, fixed_rank, &d->ranks[p]));
  return 0;
}

int64_t tsr__domain_bn_floats(const tsr_conv_geom_t *g, int pr, int row, int64_t batch, int mb) {
  return row < tsr__k_bands(g->h, pr) ? 3 * ((batch + mb - 1) / mb) * g->c : 0;
}

/* Rows of batch-row tile i that are samples. */
static int valid_rows(const tsr_domain_t *d, int i, int valid) {
  int64_t v = valid - (int64_t)i * d->mb, rows = d->batch - (int64_t)i * d->mb;
  if (rows > d->mb) rows = d->mb;
  return (int)(v < 0 ? 0 : v < rows ? v : rows);
}

int tsr__domain_bn_reduce(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *out,
                          const tsr_tiles_t *x, const tsr_tiles_t *dy, const tsr_tiles_t *y,
                          const tsr_tiles_t *s, int valid, bool relu, tsr_traffic_t *tr) {
  if (!d->part || x->nt != d->nout) return TSR_ESHAPE;
  bool sums = dy != NULL;
  tsr_task_opts_t l = local(o);
  int mt = (int)((d->batch + d->mb - 1) / d->mb);
  for (int p = 0; p < d->nout; p++) {
    if (!here(d->ranks[p])) continue;
    tsr_tiles_t *part = d->part[p];
    for (int i = 0; i < mt; i++) {
      int v = valid_rows(d, i, valid), hw = tsr_tiles_tile_cols(x, p) / d->g.c;
      if (sums)
        TSR_TRY(tsr__insert_bn_sums(&l, tsr__tile(part, i, 0), tsr__tile(dy, i, p),
                                    tsr__tile(x, i, p), tsr__tile(y, i, p), tsr__tile(s, 0, 0), hw,
                                    v, relu));
      else
        TSR_TRY(tsr__insert_bn_stats(&l, tsr__tile(part, i, 0), tsr__tile(x, i, p), hw, d->g.c, v));
    }
    for (int k = 1; k < mt; k *= 2) /* the band's fixed tree, as one process's */
      for (int i = 0; i + k < mt; i += 2 * k)
        TSR_TRY(tsr__insert_bn_combine(&l, tsr__tile(part, i, 0), tsr__tile(part, i + k, 0), sums));
  }
  /* The bands' combined on row 0 in band order, then every rank of the column gets them. */
  starpu_data_handle_t first = tsr__tile(d->part[0], 0, 0);
  for (int p = 1; p < d->nout; p++) {
    int at_p = d->ranks[p], at_0 = d->ranks[0];
    if (!here(at_p) && !here(at_0)) continue;
    starpu_data_handle_t h = tsr__tile(d->part[p], 0, 0);
    send(tr, h, at_p, at_0, false);
    if (!here(at_0)) continue;
    TSR_TRY(tsr__insert_bn_combine(&l, first, h, sums));
    drop(h, at_p);
  }
  for (int p = 0; p < d->pr; p++)
    send(tr, first, d->ranks[0], d->ranks[p], false);
  TSR_TRY(tsr__insert_copy(&l, tsr__tile(out, 0, 0), first));
  drop(first, d->ranks[0]);
  return 0;
}

int tsr__domain_bn_normalize(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *y,
                             const tsr_tiles_t *x, const tsr_tiles_t *s, const tsr_tiles_t *scale,
                             const tsr_tiles_t *shift, bool relu) {
  if (x->nt != d->nout || y->nt != d->nout) return TSR_ESHAPE;
  tsr_task_opts_t l = local(o);
  for (int p = 0; p < d->nout; p++)
    for (int i = 0; here(d->ranks[p]) && i < y->mt; i++)
      TSR_TRY(tsr__insert_bn_normalize(
          &l, tsr__tile(y, i, p), tsr__tile(x, i, p), tsr__tile(s, 0, 0), tsr__tile(scale, 0, 0),
          tsr__tile(shift, 0, 0), tsr_tiles_tile_cols(x, p) / d->g.c, relu));
  return 0;
}

int tsr__domain_bn_dx(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *dx,
                      const tsr_tiles_t *dy, const tsr_tiles_t *x, const tsr_tiles_t *y,
                      const tsr_tiles_t *s, const tsr_tiles_t *scale, const tsr_tiles_t *p,
                      int valid, bool relu) {
  if (x->nt != d->nout || dx->nt != d->nout) return TSR_ESHAPE;
  tsr_task_opts_t l = local(o);
  for (int q = 0; q < d->nout; q++)
    for (int i = 0; here(d->ranks[q]) && i < dx->mt; i++)
      TSR_TRY(tsr__insert_bn_dx(&l, tsr__tile(dx, i, q), tsr__tile(dy, i, q), tsr__tile(x, i, q),
                                tsr__tile(y, i, q), tsr__tile(s, 0, 0), tsr__tile(scale, 0, 0),
                                tsr__tile(p, 0, 0), tsr_tiles_tile_cols(x, q) / d->g.c,
                                valid_rows(d, i, valid), relu));
  return 0;
}
