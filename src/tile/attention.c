/* Causal multi-head self-attention as tiled operations (ops.h): one task per batch-row tile of
 * whole sequences, every head of the tile's samples inside it (a head's work on a tile of 8
 * sequences of 128 positions is too small a task to pay for itself; the batch-row tiles give
 * the workers their parallelism). Tilings are checked before the first task. */
#include "codelets.h"
#include "tile/ops.h"
#include "tile/tiles_impl.h"
#include "try.h"

/* A local matrix (every rank's own, as activations are) is written where the task is submitted,
 * as ops.c's route does. */
static tsr_task_opts_t local_route(const tsr_task_opts_t *o, const tsr_tiles_t *out) {
  tsr_task_opts_t r = *o;
  if (out->kind == TSR_TILES_LOCAL) r.mpi = false;
  return r;
}

/* t has `cols` columns in one tile column and rows tiled as `rows`'s. */
static bool rows_like(const tsr_tiles_t *t, const tsr_tiles_t *rows, int64_t cols) {
  return t->m == rows->m && t->mb == rows->mb && t->n == cols && t->nt == 1;
}

int tsr__tiles_attention_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, tsr_tiles_t *lse,
                             const tsr_tiles_t *qkv, const tsr_attn_geom_t *g) {
  tsr_task_opts_t r = local_route(o, y);
  int64_t td = (int64_t)g->t * g->d;
  if (!rows_like(qkv, qkv, 3 * td) || !rows_like(y, qkv, td) ||
      !rows_like(lse, qkv, (int64_t)g->heads * g->t))
    return TSR_ESHAPE;
  for (int i = 0; i < qkv->mt; i++)
    TSR_TRY(tsr__insert_attention_fwd(&r, tsr__tile(y, i, 0), tsr__tile(lse, i, 0),
                                      tsr__tile(qkv, i, 0), g));
  return 0;
}

int tsr__tiles_attention_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dqkv, const tsr_tiles_t *dy,
                             const tsr_tiles_t *qkv, const tsr_tiles_t *y, const tsr_tiles_t *lse,
                             const tsr_attn_geom_t *g) {
  tsr_task_opts_t r = local_route(o, dqkv);
  int64_t td = (int64_t)g->t * g->d;
  if (!rows_like(qkv, qkv, 3 * td) || !rows_like(dqkv, qkv, 3 * td) || !rows_like(y, qkv, td) ||
      !rows_like(dy, qkv, td) || !rows_like(lse, qkv, (int64_t)g->heads * g->t))
    return TSR_ESHAPE;
  for (int i = 0; i < qkv->mt; i++)
    TSR_TRY(tsr__insert_attention_bwd(&r, tsr__tile(dqkv, i, 0), tsr__tile(dy, i, 0),
                                      tsr__tile(qkv, i, 0), tsr__tile(y, i, 0),
                                      tsr__tile(lse, i, 0), g));
  return 0;
}
