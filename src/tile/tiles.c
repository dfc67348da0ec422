/* Tiled-matrix descriptor. The matrix is one row-major allocation and each
 * tile is a StarPU matrix handle viewing its block (leading dimension n), so
 * a whole matrix can be read or written in one pass and BLIS reads tiles in
 * place through their strides. */
#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tile/tiles_impl.h"

static int ceil_div(int64_t a, int b) {
  return (int)((a + b - 1) / b);
}

int tsr_tiles_create(tsr_tiles_t **out, int64_t m, int64_t n, int mb, int nb,
                     tsr_rank_of_fn rank_of, void *ctx, int64_t tag_base) {
  *out = NULL;
  if (m <= 0 || n <= 0 || mb <= 0 || nb <= 0 || n > INT32_MAX) return TSR_EINVAL;
  tsr_tiles_t *t = calloc(1, sizeof *t);
  if (!t) return TSR_ENOMEM;
  t->m = m, t->n = n;
  t->mb = mb < m ? mb : (int)m;
  t->nb = nb < n ? nb : (int)n;
  t->mt = ceil_div(m, t->mb), t->nt = ceil_div(n, t->nb);
  t->rank_of = rank_of, t->rank_ctx = ctx, t->tag_base = tag_base;
  size_t bytes = ((size_t)m * (size_t)n * sizeof(float) + 63) / 64 * 64;
  t->data = aligned_alloc(64, bytes);
  t->handles = calloc((size_t)t->mt * (size_t)t->nt, sizeof *t->handles);
  if (!t->data || !t->handles) {
    free(t->data), free(t->handles), free(t);
    return TSR_ENOMEM;
  }
  memset(t->data, 0, bytes);
  for (int i = 0; i < t->mt; i++)
    for (int j = 0; j < t->nt; j++) {
      float *p = t->data + (int64_t)i * t->mb * n + (int64_t)j * t->nb;
      starpu_matrix_data_register(&t->handles[(long)i * t->nt + j], STARPU_MAIN_RAM, (uintptr_t)p,
                                  (uint32_t)n, (uint32_t)tsr_tiles_tile_cols(t, j),
                                  (uint32_t)tsr_tiles_tile_rows(t, i), sizeof(float));
      /* Names the tile in traces (src/runtime/observe.c). */
      starpu_data_set_coordinates(t->handles[(long)i * t->nt + j], 2, i, j);
    }
  *out = t;
  return 0;
}

void tsr_tiles_destroy(tsr_tiles_t **tp) {
  tsr_tiles_t *t = *tp;
  if (!t) return;
  for (long k = 0; k < (long)t->mt * t->nt; k++)
    if (t->handles[k]) starpu_data_unregister(t->handles[k]);
  free(t->handles);
  free(t->data);
  free(t);
  *tp = NULL;
}

int64_t tsr_tiles_rows(const tsr_tiles_t *t) {
  return t->m;
}
int64_t tsr_tiles_cols(const tsr_tiles_t *t) {
  return t->n;
}
int tsr_tiles_mb(const tsr_tiles_t *t) {
  return t->mb;
}
int tsr_tiles_nb(const tsr_tiles_t *t) {
  return t->nb;
}
int tsr_tiles_mt(const tsr_tiles_t *t) {
  return t->mt;
}
int tsr_tiles_nt(const tsr_tiles_t *t) {
  return t->nt;
}

int tsr_tiles_tile_rows(const tsr_tiles_t *t, int i) {
  assert(i >= 0 && i < t->mt);
  return i < t->mt - 1 ? t->mb : (int)(t->m - (int64_t)i * t->mb);
}

int tsr_tiles_tile_cols(const tsr_tiles_t *t, int j) {
  assert(j >= 0 && j < t->nt);
  return j < t->nt - 1 ? t->nb : (int)(t->n - (int64_t)j * t->nb);
}

int tsr_tiles_rank_of(const tsr_tiles_t *t, int i, int j) {
  return t->rank_of ? t->rank_of(i, j, t->rank_ctx) : 0;
}

int64_t tsr_tiles_tag(const tsr_tiles_t *t, int i, int j) {
  return t->tag_base + (int64_t)i * t->nt + j;
}

/* Copies between the matrix and a dense host array, tile by tile, holding
 * each tile through starpu_data_acquire so pending tasks finish first and a
 * copy on another memory node is brought back. */
static int transfer(const tsr_tiles_t *t, float *host, bool to_host) {
  for (int i = 0; i < t->mt; i++)
    for (int j = 0; j < t->nt; j++) {
      starpu_data_handle_t h = tsr__tile(t, i, j);
      if (starpu_data_acquire(h, to_host ? STARPU_R : STARPU_W) != 0) return TSR_ERUNTIME;
      int rows = tsr_tiles_tile_rows(t, i), cols = tsr_tiles_tile_cols(t, j);
      for (int r = 0; r < rows; r++) {
        int64_t off = ((int64_t)i * t->mb + r) * t->n + (int64_t)j * t->nb;
        if (to_host)
          memcpy(host + off, t->data + off, sizeof(float) * (size_t)cols);
        else
          memcpy(t->data + off, host + off, sizeof(float) * (size_t)cols);
      }
      starpu_data_release(h);
    }
  return 0;
}

int tsr_tiles_read(const tsr_tiles_t *t, float *dst) {
  return transfer(t, dst, true);
}

int tsr_tiles_write(tsr_tiles_t *t, const float *src) {
  return transfer(t, (float *)src, false);
}
