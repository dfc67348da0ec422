/* What a checkpoint reads of the replicas and writes back (replicas.h, "Checkpoints"): whether
 * the last average was the end's, the step local SGD counts from and the resume past it (the
 * policy's), the outer optimizer's momentum gathered from the ranks that home its chunks and
 * given back to them. */
#include "parallel/home.h"

bool tsr__replicas_final_extra(const tsr_replicas_t *r) {
  return r->final_extra;
}

bool tsr__replicas_has_outer(const tsr_replicas_t *r) {
  return tsr__homes_outer(r) != NULL;
}

static const rparam_t *param_of(const tsr_replicas_t *r, int index) {
  for (int k = 0; k < r->nparams; k++)
    if (r->params[k].p->index == index) return &r->params[k];
  return NULL;
}

int tsr__replicas_outer_read(tsr_replicas_t *r, int index, float *all) {
  const rparam_t *rp = param_of(r, index);
  tsr_outer_state_t *outer = tsr__homes_outer(r);
  const tsr_tiles_t *u = outer && rp ? tsr__outer_momentum(outer, rp->index) : NULL;
  /* Each tile from the rank that homes it; under a grid each row homes its chunks by its own
   * plan (tsr__placement_plan), which only that row's ranks know. */
  if (!u) return TSR_EINVAL;
  return r->m.grid_rows > 1 ? tsr_tiles_gather_owned(u, all) : tsr_tiles_gather(u, all);
}

int tsr__replicas_outer_write(tsr_replicas_t *r, int index, const float *all) {
  const rparam_t *rp = param_of(r, index);
  tsr_outer_state_t *outer = tsr__homes_outer(r);
  tsr_tiles_t *u = outer && rp ? tsr__outer_momentum(outer, rp->index) : NULL;
  return u ? tsr_tiles_write_owned(u, all) : TSR_EINVAL;
}

int64_t tsr__replicas_local_since(const tsr_replicas_t *r) {
  return r->policy->local_since ? r->policy->local_since(r->state) : 0;
}

int tsr__replicas_resume_local(tsr_replicas_t *r, int64_t since) {
  return r->policy->resume_local ? r->policy->resume_local(r, r->state, since) : 0;
}
