/* What a checkpoint reads of the replicas and writes back (replicas.h, "Checkpoints"): whether
 * the last average was the end's, post-local's switch, the outer optimizer's momentum gathered
 * from the ranks that home its chunks and given back to them. */
#include "parallel/replicas_impl.h"

bool tsr__replicas_final_extra(const tsr_replicas_t *r) {
  return r->final_extra;
}

bool tsr__replicas_has_outer(const tsr_replicas_t *r) {
  return r->outer != NULL;
}

static const rparam_t *param_of(const tsr_replicas_t *r, int index) {
  for (int k = 0; k < r->nparams; k++)
    if (r->params[k].p->index == index) return &r->params[k];
  return NULL;
}

int tsr__replicas_outer_read(tsr_replicas_t *r, int index, float *all) {
  const rparam_t *rp = param_of(r, index);
  const tsr_tiles_t *u = r->outer && rp ? tsr__outer_momentum(r->outer, rp->index) : NULL;
  /* Each tile from the rank that homes it; under a grid each row homes its chunks by its own
   * plan (tsr__placement_plan), which only that row's ranks know. */
  if (!u) return TSR_EINVAL;
  return r->m.grid_rows > 1 ? tsr_tiles_gather_owned(u, all) : tsr_tiles_gather(u, all);
}

int tsr__replicas_outer_write(tsr_replicas_t *r, int index, const float *all) {
  const rparam_t *rp = param_of(r, index);
  tsr_tiles_t *u = r->outer && rp ? tsr__outer_momentum(r->outer, rp->index) : NULL;
  return u ? tsr_tiles_write_owned(u, all) : TSR_EINVAL;
}

int64_t tsr__replicas_local_from(const tsr_replicas_t *r) {
  return r->local_from;
}
