/* What a checkpoint reads of the replicas and writes back (replicas.h, "Checkpoints"): whether
 * they agree and how the optimizer state is kept (the whole state shared first where
 * gradient averaging shards it), whether the last average was the end's, the step local SGD
 * counts from and the resume past it (the policy's), the outer optimizer's momentum and the
 * anchor gathered from the ranks that home its chunks and given back to them, and between
 * averages each rank's samples and local steps since the last one. */
#include "parallel/gradients.h"
#include "parallel/home.h"

int tsr__replicas_checkpoint(tsr_replicas_t *r, bool write, tsr__replicas_saved_t *c) {
  *c = (tsr__replicas_saved_t){.agreed = tsr__replicas_agree(r),
                               .per_replica = !r->batch,
                               .outer = tsr__homes_outer(r) != NULL,
                               .final_extra = r->final_extra,
                               .local = !r->batch};
  c->local_since = r->policy->local_since ? r->policy->local_since(r->state) : 0;
  /* A policy with state of its own (its create hook: hier's groups, async-epoch's global copy,
   * post-local's switch) would need it saved too; every other one is its step count's alone. */
  c->between = !r->batch && !r->policy->create && r->m.grid_rows == 1;
  c->anchor = r->nparams > 0 && tsr__homes_anchor(r, r->params[0].index) != NULL;
  c->samples = r->samples, c->steps = tsr__homes_steps(r);
  return write && c->agreed ? tsr__replicas_share_state(r) : 0;
}

static const rparam_t *param_of(const tsr_replicas_t *r, int index) {
  for (int k = 0; k < r->nparams; k++)
    if (r->params[k].p->index == index) return &r->params[k];
  return NULL;
}

int tsr__replicas_kept(tsr_replicas_t *r, tsr__replicas_kept_t which, int index, float *into,
                       const float *from) {
  const rparam_t *rp = param_of(r, index);
  tsr_outer_state_t *outer = tsr__homes_outer(r);
  tsr_tiles_t *x = !rp                         ? NULL
                   : which == TSR__KEPT_ANCHOR ? tsr__homes_anchor(r, rp->index)
                   : outer                     ? tsr__outer_momentum(outer, rp->index)
                                               : NULL;
  if (!x) return TSR_EINVAL;
  if (from) return tsr_tiles_write_owned(x, from);
  /* Each tile from the rank that homes it; under a grid each row homes its chunks by its own
   * plan (tsr__placement_plan), which only that row's ranks know. */
  return r->m.grid_rows > 1 ? tsr_tiles_gather_owned(x, into) : tsr_tiles_gather(x, into);
}

int tsr__replicas_resume(tsr_replicas_t *r, const tsr__replicas_resumed_t *c) {
  if (c->samples && c->steps) {
    int64_t *local = tsr__homes_steps(r);
    for (int q = 0; q < r->m.size; q++)
      r->samples[q] = c->samples[q], local[q] = c->steps[q];
    r->agreed = false;
  }
  if (c->local && r->policy->resume_local)
    return r->policy->resume_local(r, r->state, c->local_since);
  return 0;
}
