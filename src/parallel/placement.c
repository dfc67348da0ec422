/* Where each chunk and bucket of the averages lives (placement.h): every grid row's chunks from
 * its slice of the parameters, this rank's row's spread back over the tile columns, the buckets,
 * and async-epoch's homes of whole tiles. Shapes only: no StarPU, no tiles. */
#include <stdlib.h>
#include <string.h>

#include "grid.h"
#include "parallel/placement.h"
#include "parallel/policy.h"
#include "try.h"

const char *tsr__placement_no_buckets(const tsr_sync_t *sync) {
  if (tsr__sync_policy(&sync->schedule)->folds)
    return "async-epoch folds whole tiles into the global copy, not chunks";
  return NULL;
}

uint64_t tsr__placement_bucket_bytes(float bucket_mb) {
  return (uint64_t)(bucket_mb * 1048576.0 + 0.5);
}

/* Which grid row of pr holds tile column j of a parameter, spread or whole (-1: every row), and
 * (at) its position among that row's columns: src/grid.h's rule, as the network places it. */
static int row_of(bool spread, int j, int pr, int *at) {
  return tsr__placed_row(spread ? TSR_PLACE_SPREAD : TSR_PLACE_WHOLE, j, pr, at);
}

/* Tile columns and rows of a shape, and tile column j's width (edge tiles narrower). */
static int tile_cols_of(const tsr_chunk_shape_t *s) {
  return (int)((s->cols + s->nb - 1) / s->nb);
}

static int tile_rows_of(const tsr_chunk_shape_t *s) {
  return (int)((s->rows + s->mb - 1) / s->mb);
}

static int64_t width_of(const tsr_chunk_shape_t *s, int j) {
  int64_t left = s->cols - (int64_t)j * s->nb;
  return left < s->nb ? left : s->nb;
}

static int64_t height_of(const tsr_chunk_shape_t *s, int i) {
  int64_t left = s->rows - (int64_t)i * s->mb;
  return left < s->mb ? left : s->mb;
}

int tsr__placement_row(const tsr_chunk_shape_t *shapes, int n, int ranks, const double *weight,
                       bool two_level, const tsr__group_t *nodes, int nnodes, int per_node,
                       int stride, uint64_t bucket_bytes, tsr_chunking_t *row, tsr_buckets_t *bk,
                       tsr_buckets_t *tb) {
  memset(bk, 0, sizeof *bk), memset(tb, 0, sizeof *tb);
  int rc = two_level ? tsr__chunks_plan_two_level(shapes, n, nnodes, per_node, row, NULL, NULL)
                     : tsr__chunks_plan(shapes, n, ranks, weight, row, NULL, NULL);
  /* Two levels: the home is rank `local` of node `home`, as its position. */
  for (int e = 0; rc == 0 && two_level && e < n; e++)
    for (int c = 0; c < row[e].cmt * row[e].nt; c++) {
      const tsr__group_t *g = &nodes[row[e].home[c]];
      row[e].home[c] = g->ranks[row[e].local[c] % g->n] / stride;
    }
  /* Buckets by home: with two levels a home's chunks share its index in every node; and with
   * two levels node buckets of whole tiles. */
  if (rc == 0 && bucket_bytes > 0)
    rc = tsr__chunks_buckets(shapes, n, row, ranks, two_level ? per_node : 1, bucket_bytes, bk);
  if (rc == 0 && bucket_bytes > 0 && two_level)
    rc = tsr__chunks_tile_buckets(shapes, n, row, per_node, bucket_bytes, tb);
  if (rc) tsr__buckets_free(bk), tsr__buckets_free(tb);
  return rc;
}

/* Under a grid row p averages the slice of the parameters its ranks hold: a spread parameter's
 * tile columns on row p (j mod Pr = p: row_of), as one matrix of their widths (its tiles are
 * theirs, the last one last), a replicated one whole (shapes[k]; cols 0: none of the row's). The
 * planner plans grid row 0 from the same slice. */
static void row_shapes(const tsr_chunk_shape_t *whole, const bool *spread, int n, int pr, int p,
                       tsr_chunk_shape_t *shapes) {
  for (int k = 0; k < n; k++) {
    int64_t cols = 0;
    for (int j = 0; j < tile_cols_of(&whole[k]); j++) {
      int r = row_of(spread[k], j, pr, NULL);
      if (r < 0 || r == p) cols += width_of(&whole[k], j);
    }
    shapes[k] = (tsr_chunk_shape_t){whole[k].rows, cols, whole[k].mb, whole[k].nb};
  }
}

/* Spreads a row's chunking c of a parameter of shape s (its tile columns of the row, or NULL:
 * none) back over the parameter's nt tile columns into *out (homes as positions in the row;
 * another row's columns take their neighbours' chunking, in no bucket). */
static int spread_row(const tsr__members_t *m, const tsr_chunk_shape_t *s, bool spread,
                      const tsr_chunking_t *c, bool buckets, tsr_chunking_t *out) {
  int pr = m->grid_rows, nt = tile_cols_of(s), mt = tile_rows_of(s);
  out->k = c ? c->k : 1, out->cr = c ? c->cr : s->mb, out->nt = nt;
  out->cmt = c ? c->cmt : mt;
  size_t count = (size_t)out->cmt * (size_t)nt, tiles = (size_t)mt * (size_t)nt;
  bool tile_buckets = buckets && m->two_level;
  out->home = calloc(count, sizeof *out->home);
  if (m->two_level) out->local = calloc(count, sizeof *out->local);
  if (buckets) out->bucket = malloc(count * sizeof *out->bucket);
  if (buckets) out->offset = calloc(count, sizeof *out->offset);
  if (tile_buckets) out->tbucket = malloc(tiles * sizeof *out->tbucket);
  if (tile_buckets) out->toffset = calloc(tiles, sizeof *out->toffset);
  if (!out->home || (m->two_level && !out->local) || (buckets && (!out->bucket || !out->offset)) ||
      (tile_buckets && (!out->tbucket || !out->toffset)))
    return TSR_ENOMEM;
  for (size_t e = 0; buckets && e < count; e++) /* in no bucket until the row's own say */
    out->bucket[e] = -1;
  for (size_t e = 0; tile_buckets && e < tiles; e++)
    out->tbucket[e] = -1;
  for (int I = 0; c && I < out->cmt; I++)
    for (int j = 0; j < nt; j++) {
      int jc, r = row_of(spread, j, pr, &jc); /* jc: its position in its row */
      int at = I * c->nt + (jc < c->nt ? jc : c->nt - 1);
      bool ours = r < 0 || r == m->rank % pr;
      out->home[I * nt + j] = c->home[at];
      if (out->local) out->local[I * nt + j] = c->local[at];
      if (out->bucket) out->bucket[I * nt + j] = ours ? c->bucket[at] : -1;
      if (out->bucket && ours) out->offset[I * nt + j] = c->offset[at];
    }
  for (int i = 0; c && c->tbucket && i < mt; i++)
    for (int j = 0; j < nt; j++) {
      int jc, r = row_of(spread, j, pr, &jc); /* jc: its position in its row */
      int at = i * c->nt + (jc < c->nt ? jc : c->nt - 1);
      bool ours = r < 0 || r == m->rank % pr;
      out->tbucket[i * nt + j] = ours ? c->tbucket[at] : -1;
      if (ours) out->toffset[i * nt + j] = c->toffset[at];
    }
  return 0;
}

int tsr__placement_plan(const tsr_chunk_shape_t *whole, const bool *spread, int n,
                        const tsr__members_t *m, const double *weight, uint64_t bucket_bytes,
                        tsr_chunking_t *ch, tsr_buckets_t *bk, tsr_buckets_t *tb, bool *staged,
                        bool *whole_g) {
  int pr = m->grid_rows, pc = m->size / pr, mine = m->rank % pr;
  tsr_chunk_shape_t *shapes = malloc(sizeof *shapes * (size_t)(n ? n : 1));
  tsr_chunking_t *row = calloc((size_t)(n ? n : 1), sizeof *row);
  int *of = malloc(sizeof *of * (size_t)(n ? n : 1)), rc = shapes && row && of ? 0 : TSR_ENOMEM;
  memset(ch, 0, sizeof *ch * (size_t)n), memset(bk, 0, sizeof *bk), memset(tb, 0, sizeof *tb);
  for (int k = 0; k < n; k++)
    staged[k] = false, whole_g[k] = false;
  for (int p = 0; rc == 0 && p < pr; p++) {
    row_shapes(whole, spread, n, pr, p, shapes);
    int nr = 0; /* the parameters the row holds, planned together */
    for (int k = 0; k < n; k++)
      if (shapes[k].cols > 0) shapes[nr] = shapes[k], of[nr++] = k;
    tsr_buckets_t rb, rtb;
    if (nr > 0)
      rc = tsr__placement_row(shapes, nr, pc, pr == 1 ? weight : NULL, m->two_level, m->nodes,
                              m->nnodes, m->per_node, pr, p == mine ? bucket_bytes : 0, row, &rb,
                              &rtb);
    else
      memset(&rb, 0, sizeof rb), memset(&rtb, 0, sizeof rtb);
    for (int e = 0; rc == 0 && e < nr; e++) {
      staged[of[e]] = staged[of[e]] || row[e].k > 1;
      whole_g[of[e]] = whole_g[of[e]] || row[e].k == 1 || m->two_level;
    }
    /* This rank's row: its buckets with homes as ranks, and its chunking spread back over the
     * tile columns. */
    if (p == mine) *bk = rb, *tb = rtb;
    for (int b = 0; rc == 0 && p == mine && b < bk->n; b++)
      bk->home[b] = m->rows[mine].ranks[bk->home[b]];
    for (int k = 0; rc == 0 && p == mine && k < n; k++) {
      int e = 0;
      while (e < nr && of[e] != k)
        e++;
      rc = spread_row(m, &whole[k], spread[k], e < nr ? &row[e] : NULL, bucket_bytes > 0, &ch[k]);
    }
    tsr__chunks_free(row, nr);
  }
  if (rc) tsr__chunks_free(ch, n), tsr__buckets_free(bk), tsr__buckets_free(tb);
  free(shapes), free(row), free(of);
  return rc;
}

int tsr__placement_tile_homes(const tsr_chunk_shape_t *shapes, const bool *spread, int n,
                              const tsr__members_t *m, int **home) {
  int pr = m->grid_rows, pc = m->size / pr;
  uint64_t *load = calloc((size_t)m->size, sizeof *load);
  if (!load) return TSR_ENOMEM;
  for (int k = 0; k < n; k++)
    home[k] = NULL;
  for (int k = 0; k < n; k++) {
    const tsr_chunk_shape_t *s = &shapes[k];
    int mt = tile_rows_of(s), nt = tile_cols_of(s);
    if (!(home[k] = calloc((size_t)mt * (size_t)nt, sizeof *home[k]))) {
      for (int e = 0; e < k; e++)
        free(home[e]), home[e] = NULL;
      free(load);
      return TSR_ENOMEM;
    }
    for (int i = 0; i < mt; i++)
      for (int j = 0; j < nt; j++) {
        int r = row_of(spread[k], j, pr, NULL); /* the rows that hold it: r, or all */
        int p0 = r < 0 ? 0 : r, p1 = r < 0 ? pr : r + 1, best = 0;
        uint64_t least = UINT64_MAX;
        for (int c = 0; c < pc; c++) {
          uint64_t cost = 0;
          for (int p = p0; p < p1; p++)
            cost += load[c * pr + p];
          if (cost < least) best = c, least = cost;
        }
        uint64_t bytes = (uint64_t)height_of(s, i) * (uint64_t)width_of(s, j);
        for (int p = p0; p < p1; p++)
          load[best * pr + p] += bytes;
        home[k][i * nt + j] = best;
      }
  }
  free(load);
  return 0;
}
