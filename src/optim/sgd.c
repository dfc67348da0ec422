/* SGD with momentum and L2 weight decay (PyTorch's formulation); one state
 * matrix, the velocity, unless momentum is 0. */
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
                       wd);
}

const tsr_optim_kind_t tsr__optim_sgd = {
    .name = "sgd",
    .nstate = nstate,
    .state_names = {"momentum_buffer"},
    .update_tile = update_tile,
};
