/* The optimizer object: hyper-parameters, step count, rate, and each
 * parameter's state; the kind (registry.c lists them) does the arithmetic. */
#include <stdlib.h>

#include "optim/optim.h"
#include "try.h"

typedef struct {
  bool decay;
  tsr_tiles_t *state[TSR_OPTIM_MAX_STATE];
} param_state_t;

struct tsr_optim {
  const tsr_optim_kind_t *kind;
  tsr_optimizer_t hp;
  int nstate;
  int64_t t; /* steps begun */
  float lr;
  int nparams, cap;
  param_state_t *params;
};

int tsr__optim_create(tsr_optim_t **out, const tsr_optimizer_t *hp) {
  *out = NULL;
  const tsr_optim_kind_t *kind = tsr__optim_find(hp->name);
  if (!kind) return TSR_EINVAL;
  tsr_optim_t *o = calloc(1, sizeof *o);
  if (!o) return TSR_ENOMEM;
  o->kind = kind, o->hp = *hp, o->lr = hp->lr;
  o->nstate = kind->nstate(hp);
  *out = o;
  return 0;
}

void tsr__optim_destroy(tsr_optim_t **op) {
  tsr_optim_t *o = *op;
  if (!o) return;
  for (int p = 0; p < o->nparams; p++)
    for (int k = 0; k < o->nstate; k++)
      tsr_tiles_destroy(&o->params[p].state[k]);
  free(o->params);
  free(o);
  *op = NULL;
}

int tsr__optim_add(tsr_optim_t *o, const tsr_tiles_t *w, bool decay, int *index) {
  if (o->nparams == o->cap) {
    int cap = o->cap ? 2 * o->cap : 8;
    param_state_t *grown = realloc(o->params, sizeof *grown * (size_t)cap);
    if (!grown) return TSR_ENOMEM;
    o->params = grown, o->cap = cap;
  }
  param_state_t *p = &o->params[o->nparams];
  *p = (param_state_t){.decay = decay};
  for (int k = 0; k < o->nstate; k++) {
    int rc = tsr_tiles_create_like(&p->state[k], w); /* a grid's slice like its weights */
    if (rc) {
      while (k-- > 0)
        tsr_tiles_destroy(&p->state[k]);
      return rc;
    }
  }
  *index = o->nparams++;
  return 0;
}

const tsr_optim_kind_t *tsr__optim_kind(const tsr_optim_t *o) {
  return o->kind;
}

const tsr_optimizer_t *tsr__optim_hyper(const tsr_optim_t *o) {
  return &o->hp;
}

int tsr__optim_nstate(const tsr_optim_t *o) {
  return o->nstate;
}

const char *tsr__optim_state_name(const tsr_optim_t *o, int k) {
  return k >= 0 && k < o->nstate ? o->kind->state_names[k] : NULL;
}

tsr_tiles_t *tsr__optim_state(const tsr_optim_t *o, int param, int k) {
  if (param < 0 || param >= o->nparams || k < 0 || k >= o->nstate) return NULL;
  return o->params[param].state[k];
}

void tsr__optim_next_step(tsr_optim_t *o) {
  o->t++;
}

void tsr__optim_set_steps(tsr_optim_t *o, int64_t steps) {
  o->t = steps;
}

int64_t tsr__optim_steps(const tsr_optim_t *o) {
  return o->t;
}

void tsr__optim_set_lr(tsr_optim_t *o, float lr) {
  o->lr = lr;
}

float tsr__optim_lr(const tsr_optim_t *o) {
  return o->lr;
}

int tsr__optim_update_tile(const tsr_optim_t *o, int param, tsr_tiles_t *w,
                           tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g,
                           int gi, int gj, const tsr_task_opts_t *to) {
  if (param < 0 || param >= o->nparams) return TSR_EINVAL;
  float wd = o->params[param].decay ? o->hp.weight_decay : 0.0f;
  if (!state) state = o->params[param].state;
  return o->kind->update_tile(&o->hp, o->lr, o->t, wd, w, state, i, j, r0, g, gi, gj, to);
}

bool tsr__optim_sgd_step(const tsr_optim_t *o, int wparam, tsr_tiles_t *w, int bparam,
                         tsr_tiles_t *b, tsr_sgd_step_t *step) {
  if (!o->kind->sgd_step || wparam < 0 || wparam >= o->nparams || bparam < 0 ||
      bparam >= o->nparams)
    return false;
  const param_state_t *pw = &o->params[wparam], *pb = &o->params[bparam];
  bool mom = o->nstate > 0;
  *step = (tsr_sgd_step_t){w,
                           mom ? pw->state[0] : NULL,
                           b,
                           mom ? pb->state[0] : NULL,
                           o->lr,
                           o->hp.momentum,
                           pw->decay ? o->hp.weight_decay : 0.0f,
                           pb->decay ? o->hp.weight_decay : 0.0f,
                           o->kind->sgd_step == TSR_SGD_STEP_NESTEROV};
  return true;
}

int tsr__optim_update(const tsr_optim_t *o, int param, tsr_tiles_t *w, const tsr_tiles_t *g,
                      const tsr_task_opts_t *to) {
  if (param < 0 || param >= o->nparams) return TSR_EINVAL;
  tsr_tiles_t *const *state = o->params[param].state;
  /* A parameter unknown to StarPU-MPI (a grid's replicated layer) updates where it is. */
  tsr_task_opts_t here = *to;
  if (tsr_tiles_tag(w, 0, 0) < 0) here.mpi = false;
  for (int i = 0; i < tsr_tiles_mt(w); i++)
    for (int j = 0; j < tsr_tiles_nt(w); j++)
      TSR_TRY(tsr__optim_update_tile(o, param, w, state, i, j, 0, g, i, j, &here));
  return 0;
}
