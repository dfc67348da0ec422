/* Chunks and their homes (chunks.h): what the engine averages and the planner
 * counts. */
#include "parallel/chunks.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/error.h"

/* The number of bands per tile row: the divisor k of the tile rows mb whose
 * bands come closest to (without exceeding, where the rows allow) target
 * floats. */
static int bands_per_tile(int mb, int nb, int64_t target) {
  int64_t want_rows = target / nb > 0 ? target / nb : 1;
  for (int k = 1; k <= mb; k++)
    if (mb % k == 0 && mb / k <= want_rows) return k;
  return mb;
}

typedef struct {
  int param, I, j;
  uint64_t bytes;
} chunk_t;

/* Larger chunks first; the order in which they were listed breaks ties, so
 * every rank sorts alike. */
static int by_bytes(const void *a, const void *b) {
  const chunk_t *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  if (x->param != y->param) return x->param - y->param;
  return x->I != y->I ? x->I - y->I : x->j - y->j;
}

uint64_t tsr__chunks_piece_bytes(const tsr_chunk_shape_t *s, int band, int I, int j) {
  int64_t rows = s->rows - (int64_t)I * band, cols = s->cols - (int64_t)j * s->nb;
  return (uint64_t)(rows < band ? rows : band) * (uint64_t)(cols < s->nb ? cols : s->nb) *
         sizeof(float);
}

/* Every parameter's pieces into all, largest first (ties in listing order): chunks, or with
 * tiles whole tiles (piece (i, j) of out[k] then its tile (i, j)). Returns how many. */
static int64_t list_pieces(const tsr_chunk_shape_t *sh, int n, const tsr_chunking_t *out,
                           bool tiles, chunk_t *all) {
  int64_t m = 0;
  for (int k = 0; k < n; k++) {
    int band = tiles ? sh[k].mb : out[k].cr;
    for (int I = 0; I * (int64_t)band < sh[k].rows; I++)
      for (int j = 0; j < out[k].nt; j++)
        all[m++] = (chunk_t){k, I, j, tsr__chunks_piece_bytes(&sh[k], band, I, j)};
  }
  qsort(all, (size_t)m, sizeof *all, by_bytes);
  return m;
}

/* Equal weights: a min-heap of ranks by (bytes homed, rank), so that
 * homing costs O(log P) a chunk for the planner's thousands of ranks. */
typedef struct {
  uint64_t load;
  int rank;
} slot_t;

static bool lighter(const slot_t *a, const slot_t *b) {
  return a->load != b->load ? a->load < b->load : a->rank < b->rank;
}

static void sift_down(slot_t *h, int n, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, s = i;
    if (l < n && lighter(&h[l], &h[s])) s = l;
    if (r < n && lighter(&h[r], &h[s])) s = r;
    if (s == i) return;
    slot_t t = h[i];
    h[i] = h[s], h[s] = t, i = s;
  }
}

/* The chunk's home under weights: the rank whose bytes after it are the
 * fewest for its weight (the lowest among equals). */
static int weighted_home(const uint64_t *load, const double *weight, int ranks, uint64_t bytes) {
  int best = 0;
  for (int q = 1; q < ranks; q++)
    if ((double)(load[q] + bytes) / weight[q] < (double)(load[best] + bytes) / weight[best])
      best = q;
  return best;
}

/* Cuts every parameter in chunks of at most target floats and homes them;
 * *busiest: the most bytes a rank homes (relative to its weight: what it
 * would home at an equal weight). */
static int assign(const tsr_chunk_shape_t *sh, int n, int ranks, const double *weight,
                  int64_t target, tsr_chunking_t *out, uint64_t *load, int64_t *count, slot_t *heap,
                  uint64_t *busiest) {
  int64_t nchunks = 0;
  for (int k = 0; k < n; k++) {
    tsr_chunking_t *c = &out[k];
    c->k = bands_per_tile(sh[k].mb, sh[k].nb, target);
    c->cr = sh[k].mb / c->k;
    c->cmt = (int)((sh[k].rows + c->cr - 1) / c->cr);
    c->nt = (int)((sh[k].cols + sh[k].nb - 1) / sh[k].nb);
    free(c->home);
    if (!(c->home = calloc((size_t)c->cmt * (size_t)c->nt, sizeof *c->home))) return TSR_ENOMEM;
    nchunks += (int64_t)c->cmt * c->nt;
  }
  chunk_t *all = malloc(sizeof *all * (size_t)(nchunks > 0 ? nchunks : 1));
  if (!all) return TSR_ENOMEM;
  list_pieces(sh, n, out, false, all);
  for (int q = 0; q < ranks; q++)
    load[q] = 0, count[q] = 0, heap[q] = (slot_t){0, q};
  *busiest = 0;
  for (int64_t c = 0; c < nchunks; c++) {
    int q = weight ? weighted_home(load, weight, ranks, all[c].bytes) : heap[0].rank;
    load[q] += all[c].bytes, count[q]++;
    if (!weight) heap[0].load = load[q], sift_down(heap, ranks, 0);
    uint64_t relative = weight ? (uint64_t)((double)load[q] / weight[q]) : load[q];
    if (relative > *busiest) *busiest = relative;
    out[all[c].param].home[all[c].I * out[all[c].param].nt + all[c].j] = q;
  }
  free(all);
  return 0;
}

int tsr__chunks_plan(const tsr_chunk_shape_t *shapes, int n, int ranks, const double *weight,
                     tsr_chunking_t *out, uint64_t *load, int64_t *count) {
  memset(out, 0, sizeof *out * (size_t)n);
  int64_t total = 0;
  for (int k = 0; k < n; k++)
    total += shapes[k].rows * shapes[k].cols;
  uint64_t *l = calloc((size_t)ranks, sizeof *l);
  int64_t *c = calloc((size_t)ranks, sizeof *c);
  slot_t *heap = malloc(sizeof *heap * (size_t)ranks);
  int rc = l && c && heap ? 0 : TSR_ENOMEM;
  double bytes = (double)total * sizeof(float), ring = 2.0 * (ranks - 1) / ranks * bytes;
  for (int64_t target = INT64_MAX, level = 0; rc == 0; level++) {
    uint64_t busiest;
    rc = assign(shapes, n, ranks, weight, target, out, l, c, heap, &busiest);
    if (rc || bytes + (ranks - 2) * (double)busiest <= TSR_CHUNK_BALANCE * ring ||
        target == TSR_MIN_CHUNK_FLOATS)
      break;
    target = total / ((int64_t)ranks << level);
    if (target < TSR_MIN_CHUNK_FLOATS) target = TSR_MIN_CHUNK_FLOATS;
  }
  if (rc == 0 && load) memcpy(load, l, sizeof *l * (size_t)ranks);
  if (rc == 0 && count) memcpy(count, c, sizeof *c * (size_t)ranks);
  if (rc) tsr__chunks_free(out, n);
  free(l), free(c), free(heap);
  return rc;
}

/* The lightest of loads[0 .. n): its index (the lowest among equals). */
static int lightest(const uint64_t *loads, int n) {
  int best = 0;
  for (int q = 1; q < n; q++)
    if (loads[q] < loads[best]) best = q;
  return best;
}

int tsr__chunks_plan_two_level(const tsr_chunk_shape_t *shapes, int n, int nodes, int per_node,
                               tsr_chunking_t *out, uint64_t *node_load, uint64_t *local_load) {
  int slots = nodes > per_node ? nodes : per_node;
  int first = tsr__chunks_plan(shapes, n, slots, NULL, out, NULL, NULL);
  if (first) return first;
  int64_t nchunks = 0, ntiles = 0;
  for (int k = 0; k < n; k++) {
    nchunks += (int64_t)out[k].cmt * out[k].nt;
    ntiles += (int64_t)((shapes[k].rows + shapes[k].mb - 1) / shapes[k].mb) * out[k].nt;
  }
  int64_t most = nchunks > ntiles ? nchunks : ntiles;
  chunk_t *all = malloc(sizeof *all * (size_t)(most > 0 ? most : 1));
  uint64_t *by_node = calloc((size_t)nodes, sizeof *by_node);
  uint64_t *by_local = calloc((size_t)per_node, sizeof *by_local);
  int rc = all && by_node && by_local ? 0 : TSR_ENOMEM;
  for (int k = 0; rc == 0 && k < n; k++)
    if (!(out[k].local = calloc((size_t)out[k].cmt * (size_t)out[k].nt, sizeof(int))))
      rc = TSR_ENOMEM;
  /* Whole tiles to indices: a node's ranks send a tile to its index's rank in one message. */
  if (rc == 0) list_pieces(shapes, n, out, true, all);
  for (int64_t t = 0; rc == 0 && t < ntiles; t++) {
    int l = lightest(by_local, per_node);
    by_local[l] += all[t].bytes;
    tsr_chunking_t *o = &out[all[t].param];
    for (int I = all[t].I * o->k; I < (all[t].I + 1) * o->k && I < o->cmt; I++)
      o->local[I * o->nt + all[t].j] = l;
  }
  /* Chunks to nodes. */
  if (rc == 0) list_pieces(shapes, n, out, false, all);
  /* A home sends each chunk it homes to every other node: among the nodes lightest to within
   * this chunk's bytes, the one whose rank of the chunk's index homes the fewest chunks, so
   * that a node's chunks spread over its ranks (then the lightest, then the lowest). */
  int *homed = rc == 0 ? calloc((size_t)nodes * (size_t)per_node, sizeof *homed) : NULL;
  if (rc == 0 && !homed) rc = TSR_ENOMEM;
  for (int64_t c = 0; rc == 0 && c < nchunks; c++) {
    tsr_chunking_t *o = &out[all[c].param];
    int l = o->local[all[c].I * o->nt + all[c].j];
    uint64_t b = all[c].bytes > 0 ? all[c].bytes : 1, level = by_node[lightest(by_node, nodes)] / b;
    int best = -1;
    for (int a = 0; a < nodes; a++) {
      if (by_node[a] / b != level) continue;
      if (best < 0 || homed[a * per_node + l] < homed[best * per_node + l] ||
          (homed[a * per_node + l] == homed[best * per_node + l] && by_node[a] < by_node[best]))
        best = a;
    }
    by_node[best] += all[c].bytes, homed[best * per_node + l]++;
    o->home[all[c].I * o->nt + all[c].j] = best;
  }
  free(homed);
  if (rc == 0 && node_load) memcpy(node_load, by_node, sizeof *by_node * (size_t)nodes);
  if (rc == 0 && local_load) memcpy(local_load, by_local, sizeof *by_local * (size_t)per_node);
  if (rc) tsr__chunks_free(out, n);
  free(all), free(by_node), free(by_local);
  return rc;
}

/* Appends a bucket of home and index local to b (capacity *cap): its index, or -1 out of
 * memory. */
static int open_bucket(tsr_buckets_t *b, int *cap, int home, int local) {
  if (b->n == *cap) {
    int grown = *cap ? 2 * *cap : 16;
    int *h = realloc(b->home, sizeof *h * (size_t)grown);
    if (h) b->home = h;
    int *l = h ? realloc(b->local, sizeof *l * (size_t)grown) : NULL;
    if (l) b->local = l;
    int *c = l ? realloc(b->chunks, sizeof *c * (size_t)grown) : NULL;
    if (c) b->chunks = c;
    int64_t *f = c ? realloc(b->floats, sizeof *f * (size_t)grown) : NULL;
    if (!f) return -1;
    b->floats = f, *cap = grown;
  }
  b->home[b->n] = home, b->local[b->n] = local, b->chunks[b->n] = 0, b->floats[b->n] = 0;
  return b->n++;
}

int tsr__chunks_buckets(const tsr_chunk_shape_t *shapes, int n, tsr_chunking_t *ch, int ranks,
                        int per_node, uint64_t target_bytes, tsr_buckets_t *out) {
  memset(out, 0, sizeof *out);
  if (target_bytes == 0 || per_node < 1) return TSR_EINVAL;
  int keys = ranks * per_node;
  int *open = malloc(sizeof *open * (size_t)keys), cap = 0, rc = open ? 0 : TSR_ENOMEM;
  for (int q = 0; rc == 0 && q < keys; q++)
    open[q] = -1;
  for (int k = n - 1; rc == 0 && k >= 0; k--) {
    tsr_chunking_t *c = &ch[k];
    size_t count = (size_t)c->cmt * (size_t)c->nt;
    free(c->bucket), free(c->offset);
    c->bucket = malloc(sizeof *c->bucket * count), c->offset = malloc(sizeof *c->offset * count);
    if (!c->bucket || !c->offset) rc = TSR_ENOMEM;
    for (int I = 0; rc == 0 && I < c->cmt; I++)
      for (int j = 0; rc == 0 && j < c->nt; j++) {
        int home = c->home[I * c->nt + j];
        int l = c->local ? c->local[I * c->nt + j] : 0, key = home * per_node + l % per_node;
        int b = open[key];
        if (b < 0 && (b = open[key] = open_bucket(out, &cap, home, l)) < 0) {
          rc = TSR_ENOMEM;
          break;
        }
        uint64_t bytes = tsr__chunks_piece_bytes(&shapes[k], c->cr, I, j);
        c->bucket[I * c->nt + j] = b, c->offset[I * c->nt + j] = out->floats[b];
        out->floats[b] += (int64_t)(bytes / sizeof(float)), out->chunks[b]++;
        if ((uint64_t)out->floats[b] * sizeof(float) >= target_bytes) open[key] = -1;
      }
  }
  free(open);
  if (rc) tsr__buckets_free(out), tsr__chunks_free(ch, n);
  return rc;
}

int tsr__chunks_tile_buckets(const tsr_chunk_shape_t *shapes, int n, tsr_chunking_t *ch,
                             int per_node, uint64_t target_bytes, tsr_buckets_t *out) {
  memset(out, 0, sizeof *out);
  if (target_bytes == 0 || per_node < 1) return TSR_EINVAL;
  int *open = malloc(sizeof *open * (size_t)per_node), cap = 0, rc = open ? 0 : TSR_ENOMEM;
  for (int q = 0; rc == 0 && q < per_node; q++)
    open[q] = -1;
  for (int k = n - 1; rc == 0 && k >= 0; k--) {
    tsr_chunking_t *c = &ch[k];
    int mt = (int)((shapes[k].rows + shapes[k].mb - 1) / shapes[k].mb);
    size_t count = (size_t)mt * (size_t)c->nt;
    free(c->tbucket), free(c->toffset);
    c->tbucket = malloc(sizeof *c->tbucket * count);
    c->toffset = malloc(sizeof *c->toffset * count);
    if (!c->tbucket || !c->toffset || !c->local) rc = c->local ? TSR_ENOMEM : TSR_EINVAL;
    for (int i = 0; rc == 0 && i < mt; i++)
      for (int j = 0; rc == 0 && j < c->nt; j++) {
        int l = c->local[i * c->k * c->nt + j] % per_node, b = open[l];
        if (b < 0 && (b = open[l] = open_bucket(out, &cap, -1, l)) < 0) {
          rc = TSR_ENOMEM;
          break;
        }
        uint64_t bytes = tsr__chunks_piece_bytes(&shapes[k], shapes[k].mb, i, j);
        c->tbucket[i * c->nt + j] = b, c->toffset[i * c->nt + j] = out->floats[b];
        out->floats[b] += (int64_t)(bytes / sizeof(float)), out->chunks[b]++;
        if ((uint64_t)out->floats[b] * sizeof(float) >= target_bytes) open[l] = -1;
      }
  }
  free(open);
  if (rc) tsr__buckets_free(out), tsr__chunks_free(ch, n);
  return rc;
}

void tsr__buckets_free(tsr_buckets_t *b) {
  free(b->home), free(b->local), free(b->chunks), free(b->floats);
  memset(b, 0, sizeof *b);
}

void tsr__chunks_free(tsr_chunking_t *c, int n) {
  for (int k = 0; k < n; k++) {
    free(c[k].home), free(c[k].local), free(c[k].bucket), free(c[k].offset);
    free(c[k].tbucket), free(c[k].toffset);
    c[k].home = NULL, c[k].local = NULL, c[k].bucket = NULL, c[k].offset = NULL;
    c[k].tbucket = NULL, c[k].toffset = NULL;
  }
}
