/* The outer optimizers' state and steps (outer.h); the arithmetic is
 * tsr__k_outer, through codelets/outer.c. */
#include <stdlib.h>

#include "optim/outer.h"
#include "tile/ops.h"
#include "try.h"

typedef struct {
  tsr_tiles_t *x, *u;
} outer_param_t;

struct tsr_outer_state {
  tsr_outer_t hp;
  int nparams;
  outer_param_t *params;
};

int tsr__outer_create(tsr_outer_state_t **out, const tsr_outer_t *hp, int nparams) {
  *out = NULL;
  if (hp->kind == TSR_OUTER_NONE || nparams < 0) return TSR_EINVAL;
  tsr_outer_state_t *o = calloc(1, sizeof *o);
  if (!o || !(o->params = calloc((size_t)(nparams ? nparams : 1), sizeof *o->params))) {
    free(o);
    return TSR_ENOMEM;
  }
  o->hp = *hp, o->nparams = nparams;
  *out = o;
  return 0;
}

void tsr__outer_destroy(tsr_outer_state_t **op) {
  tsr_outer_state_t *o = *op;
  if (!o) return;
  for (int k = 0; k < o->nparams; k++)
    tsr_tiles_destroy(&o->params[k].x), tsr_tiles_destroy(&o->params[k].u);
  free(o->params);
  free(o);
  *op = NULL;
}

const tsr_outer_t *tsr__outer_hyper(const tsr_outer_state_t *o) {
  return &o->hp;
}

int tsr__outer_add(tsr_outer_state_t *o, int k, int64_t m, int64_t n, int mb, int nb,
                   tsr_rank_of_fn rank_of, void *ctx, bool anchor) {
  if (k < 0 || k >= o->nparams || o->params[k].u) return TSR_EINVAL;
  /* Distributed matrices start at zero. */
  TSR_TRY(tsr_tiles_create_distributed(&o->params[k].u, m, n, mb, nb, rank_of, ctx));
  if (anchor) TSR_TRY(tsr_tiles_create_distributed(&o->params[k].x, m, n, mb, nb, rank_of, ctx));
  return 0;
}

tsr_tiles_t *tsr__outer_anchor(const tsr_outer_state_t *o, int k) {
  return k >= 0 && k < o->nparams ? o->params[k].x : NULL;
}

tsr_tiles_t *tsr__outer_momentum(const tsr_outer_state_t *o, int k) {
  return k >= 0 && k < o->nparams ? o->params[k].u : NULL;
}

int tsr__outer_step_tile(const tsr_outer_state_t *o, int k, int i, int j, const tsr_tiles_t *mean,
                         float gamma, const tsr_task_opts_t *to) {
  if (k < 0 || k >= o->nparams || !o->params[k].x) return TSR_EINVAL;
  return tsr__tile_outer(to, o->params[k].x, o->params[k].u, mean, i, j,
                         o->hp.kind == TSR_OUTER_NESTEROV, o->hp.lr, o->hp.momentum, gamma);
}

int tsr__outer_fold_tile(const tsr_outer_state_t *o, int k, tsr_tiles_t *global, tsr_tiles_t *snap,
                         const tsr_tiles_t *w, int i, int j, float scale, float gamma, bool commute,
                         const tsr_task_opts_t *to) {
  if (k < 0 || k >= o->nparams || !o->params[k].u) return TSR_EINVAL;
  return tsr__tile_outer_fold(to, global, o->params[k].u, snap, w, i, j, scale,
                              o->hp.kind == TSR_OUTER_NESTEROV, o->hp.lr, o->hp.momentum, gamma,
                              commute);
}
