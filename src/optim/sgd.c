/* SGD with momentum and L2 weight decay (PyTorch's formulation, dampening 0);
 * one state matrix, the velocity, unless momentum is 0. Its rate scales
 * linearly with the replicas that average gradients every step. */
#include "optim/optim.h"
#include "tile/ops.h"

static int nstate(const tsr_optimizer_t *hp) {
  return hp->momentum != 0.0f ? 1 : 0;
}

static int update_tile(const tsr_optimizer_t *hp, float lr, int64_t t, float wd, tsr_tiles_t *w,
                       tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g,
                       int gi, int gj, const tsr_task_opts_t *o) {
  (void)t;
  return tsr__tile_sgd(o, w, nstate(hp) ? state[0] : NULL, i, j, r0, g, gi, gj, lr, hp->momentum,
                       wd, false);
}

const tsr_optim_kind_t tsr__optim_sgd = {
    .name = "sgd",
    /* Momentum 0.9 is tessera's default (PyTorch's is 0); betas and eps are Adam's, kept so
     * that a run's hyper-parameters read the same whichever optimizer it names. */
    .defaults = {.lr = 0.01f, .momentum = 0.9f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
    .lr_scales_with_replicas = true,
    .nstate = nstate,
    .state_names = {"momentum_buffer"},
    .update_tile = update_tile,
    .sgd_step = TSR_SGD_STEP_PLAIN,
};
