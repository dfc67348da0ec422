/* AdamW, Adam with decoupled weight decay (PyTorch's torch.optim.AdamW,
 * amsgrad off): w *= 1 - lr wd, then Adam's step on the gradient alone
 * (tsr__k_adamw). Adam's state, names and step (adam.c), PyTorch's defaults:
 * Adam's and a decay of 0.01. */
#include "optim/optim.h"

static int update_tile(const tsr_optimizer_t *hp, float lr, int64_t t, float wd, tsr_tiles_t *w,
                       tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g,
                       int gi, int gj, const tsr_task_opts_t *o) {
  return tsr__adam_update_tile(hp, lr, t, wd, w, state, i, j, r0, g, gi, gj, o, true);
}

const tsr_optim_kind_t tsr__optim_adamw = {
    .name = "adamw",
    .defaults = {.lr = 0.001f,
                 .momentum = 0.9f,
                 .weight_decay = 0.01f,
                 .beta1 = 0.9f,
                 .beta2 = 0.999f,
                 .eps = 1e-8f},
    .nstate = tsr__adam_nstate,
    .state_names = {"exp_avg", "exp_avg_sq"},
    .update_tile = update_tile,
};
