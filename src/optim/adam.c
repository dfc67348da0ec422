/* Adam with L2 weight decay (PyTorch's Adam): two state matrices, the first
 * and second moments; the bias correction uses the step count. Its rate does
 * not scale with the replicas. AdamW (adamw.c) shares its state and step. */
#include "optim/optim.h"
#include "tile/ops.h"

int tsr__adam_nstate(const tsr_optimizer_t *hp) {
  (void)hp;
  return 2;
}

int tsr__adam_update_tile(const tsr_optimizer_t *hp, float lr, int64_t t, float wd, tsr_tiles_t *w,
                          tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g,
                          int gi, int gj, const tsr_task_opts_t *o, bool decoupled) {
  return tsr__tile_adam(o, w, state[0], state[1], i, j, r0, g, gi, gj, lr, hp->beta1, hp->beta2,
                        hp->eps, wd, (int)t, decoupled);
}

static int update_tile(const tsr_optimizer_t *hp, float lr, int64_t t, float wd, tsr_tiles_t *w,
                       tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g,
                       int gi, int gj, const tsr_task_opts_t *o) {
  return tsr__adam_update_tile(hp, lr, t, wd, w, state, i, j, r0, g, gi, gj, o, false);
}

const tsr_optim_kind_t tsr__optim_adam = {
    .name = "adam",
    /* Momentum is SGD's (tessera's default), kept as the other optimizers keep it. */
    .defaults = {.lr = 0.001f, .momentum = 0.9f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
    .nstate = tsr__adam_nstate,
    .state_names = {"exp_avg", "exp_avg_sq"},
    .update_tile = update_tile,
};
