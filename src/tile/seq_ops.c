/* Tiled operations of the sequence layers (src/tile/ops.h, "Sequence layers"): one task per
 * batch-row tile of whole samples (one tile wide), the parameters' gradients summed over the
 * tiles deterministically: the embedding's in a chain into its tables (the same bits for any
 * tiling), layer norm's and the head's by a fixed pairwise tree of per-tile partials (parallel,
 * as conv's filter gradient). Tilings are checked before any task is submitted. */
#include "tile/ops.h"
#include "try.h"
#include "codelets.h"
#include "tile/tiles_impl.h"

/* A task that writes a local matrix runs where it is submitted (as in ops.c). */
static tsr_task_opts_t route(const tsr_task_opts_t *o, const tsr_tiles_t *out) {
  tsr_task_opts_t r = *o;
  if (out->kind == TSR_TILES_LOCAL) r.mpi = false;
  return r;
}

/* x's rows are tiled like y's, and both are one tile wide (whole samples). */
static bool rows_alike(const tsr_tiles_t *x, const tsr_tiles_t *y) {
  return x->nt == 1 && y->nt == 1 && x->m == y->m && x->mb == y->mb;
}

static bool single(const tsr_tiles_t *t) {
  return t->mt == 1 && t->nt == 1;
}

/* Slot 0 = the sum of n slots by a fixed pairwise tree (slot i += slot i + s, s = 1, 2, 4, ...):
 * slot 0 is first, slot i > 0 tile i - off of parts (one partial per batch-row tile; off 1 when
 * tile 0's partial is first itself, 0 when it is parts' tile 0). */
static int tree(const tsr_task_opts_t *o, starpu_data_handle_t first, const tsr_tiles_t *parts,
                int off, int n) {
  for (int s = 1; s < n; s *= 2)
    for (int i = 0; i + s < n; i += 2 * s) {
      starpu_data_handle_t y = i ? tsr__tile(parts, i - off, 0) : first;
      TSR_TRY(tsr__insert_axpby(o, 1.0f, tsr__tile(parts, i + s - off, 0), 1.0f, y));
    }
  return 0;
}

int tsr__tiles_embed_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *tok,
                         const tsr_tiles_t *wte, const tsr_tiles_t *wpe) {
  tsr_task_opts_t r = route(o, y);
  if (!rows_alike(tok, y) || !single(wte) || (wpe && !single(wpe)) || y->n != tok->n * wte->n)
    return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    TSR_TRY(tsr__insert_embed_fwd(&r, tsr__tile(y, i, 0), tsr__tile(tok, i, 0),
                                  tsr__tile(wte, 0, 0), wpe ? tsr__tile(wpe, 0, 0) : NULL));
  return 0;
}

int tsr__tiles_embed_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dwte, tsr_tiles_t *dwpe,
                         const tsr_tiles_t *tok, const tsr_tiles_t *dy, bool add_tokens) {
  tsr_task_opts_t r = route(o, dwte);
  if (!rows_alike(tok, dy) || !single(dwte) || (dwpe && !single(dwpe)) || dy->n != tok->n * dwte->n)
    return TSR_ESHAPE;
  for (int i = 0; i < dy->mt; i++)
    TSR_TRY(tsr__insert_embed_bwd(&r, tsr__tile(dwte, 0, 0), dwpe ? tsr__tile(dwpe, 0, 0) : NULL,
                                  tsr__tile(tok, i, 0), tsr__tile(dy, i, 0), i == 0 && !add_tokens,
                                  i == 0));
  return 0;
}

int tsr__tiles_layernorm_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, tsr_tiles_t *stats,
                             const tsr_tiles_t *x, const tsr_tiles_t *w, const tsr_tiles_t *b,
                             float eps) {
  tsr_task_opts_t r = route(o, y);
  if (!rows_alike(x, y) || !rows_alike(x, stats) || !single(w) || !single(b)) return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    TSR_TRY(tsr__insert_layernorm_fwd(&r, tsr__tile(y, i, 0), tsr__tile(stats, i, 0),
                                      tsr__tile(x, i, 0), tsr__tile(w, 0, 0), tsr__tile(b, 0, 0),
                                      eps));
  return 0;
}

int tsr__tiles_layernorm_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dx, tsr_tiles_t *partials,
                             tsr_tiles_t *dw, tsr_tiles_t *db, const tsr_tiles_t *dy,
                             const tsr_tiles_t *x, const tsr_tiles_t *w, const tsr_tiles_t *stats) {
  tsr_task_opts_t r = route(o, dw);
  if (!rows_alike(x, dy) || (dx && !rows_alike(x, dx)) || !rows_alike(x, stats) || !single(w) ||
      !single(dw) || !single(db) || partials->mb != 2 || partials->nt != 1 ||
      partials->mt != x->mt || partials->n != w->n)
    return TSR_ESHAPE;
  for (int i = 0; i < x->mt; i++) {
    tsr_task_opts_t rd = dx ? route(o, dx) : r;
    TSR_TRY(tsr__insert_layernorm_bwd(
        &rd, dx ? tsr__tile(dx, i, 0) : NULL, tsr__tile(partials, i, 0), tsr__tile(dy, i, 0),
        tsr__tile(x, i, 0), tsr__tile(w, 0, 0), tsr__tile(stats, i, 0)));
  }
  TSR_TRY(tree(&r, tsr__tile(partials, 0, 0), partials, 0, partials->mt));
  TSR_TRY(tsr__insert_band_get(&r, tsr__tile(dw, 0, 0), tsr__tile(partials, 0, 0), 0));
  return tsr__insert_band_get(&r, tsr__tile(db, 0, 0), tsr__tile(partials, 0, 0), 1);
}

int tsr__tiles_gelu_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x) {
  tsr_task_opts_t r = route(o, y);
  if (x->m != y->m || x->n != y->n || x->mb != y->mb || x->nb != y->nb) return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    for (int j = 0; j < y->nt; j++)
      TSR_TRY(tsr__insert_gelu_fwd(&r, tsr__tile(y, i, j), tsr__tile(x, i, j)));
  return 0;
}

int tsr__tiles_gelu_bwd(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                        const tsr_tiles_t *x) {
  tsr_task_opts_t r = route(o, dx);
  if (x->m != dx->m || x->n != dx->n || x->mb != dx->mb || x->nb != dx->nb || dy->m != x->m ||
      dy->n != x->n || dy->mb != x->mb || dy->nb != x->nb)
    return TSR_ESHAPE;
  for (int i = 0; i < dx->mt; i++)
    for (int j = 0; j < dx->nt; j++)
      TSR_TRY(
          tsr__insert_gelu_bwd(&r, tsr__tile(dx, i, j), tsr__tile(dy, i, j), tsr__tile(x, i, j)));
  return 0;
}

int tsr__tiles_lmhead_fwd(const tsr_task_opts_t *o, tsr_tiles_t *y, const tsr_tiles_t *x,
                          const tsr_tiles_t *w, int t) {
  tsr_task_opts_t r = route(o, y);
  if (!rows_alike(x, y) || !single(w) || t < 1 || x->n != t * w->n || y->n != t * w->m)
    return TSR_ESHAPE;
  for (int i = 0; i < y->mt; i++)
    TSR_TRY(tsr__insert_seq_gemm(&r, false, true, 1.0f, tsr__tile(x, i, 0), t, tsr__tile(w, 0, 0),
                                 1, 0.0f, tsr__tile(y, i, 0), t));
  return 0;
}

int tsr__tiles_lmhead_bwd_data(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *dy,
                               const tsr_tiles_t *w, int t) {
  tsr_task_opts_t r = route(o, dx);
  if (!rows_alike(dx, dy) || !single(w) || t < 1 || dx->n != t * w->n || dy->n != t * w->m)
    return TSR_ESHAPE;
  for (int i = 0; i < dy->mt; i++)
    TSR_TRY(tsr__insert_seq_gemm(&r, false, false, 1.0f, tsr__tile(dy, i, 0), t, tsr__tile(w, 0, 0),
                                 1, 0.0f, tsr__tile(dx, i, 0), t));
  return 0;
}

int tsr__tiles_lmhead_bwd_table(const tsr_task_opts_t *o, tsr_tiles_t *dw, tsr_tiles_t *partials,
                                const tsr_tiles_t *dy, const tsr_tiles_t *x, int t) {
  tsr_task_opts_t r = route(o, dw);
  if (!rows_alike(x, dy) || !single(dw) || t < 1 || x->n != t * dw->n || dy->n != t * dw->m)
    return TSR_ESHAPE;
  bool parts = partials && dy->mt > 1;
  if (parts && (partials->m != (int64_t)(dy->mt - 1) * dw->m || partials->mb != dw->m ||
                partials->n != dw->n || partials->nt != 1))
    return TSR_ESHAPE;
  for (int i = 0; i < dy->mt; i++) {
    starpu_data_handle_t h = parts && i > 0 ? tsr__tile(partials, i - 1, 0) : tsr__tile(dw, 0, 0);
    TSR_TRY(tsr__insert_seq_gemm(&r, true, false, 1.0f, tsr__tile(dy, i, 0), t, tsr__tile(x, i, 0),
                                 t, i == 0 || parts ? 0.0f : 1.0f, h, 1));
  }
  return parts ? tree(&r, tsr__tile(dw, 0, 0), partials, 1, dy->mt) : 0;
}
