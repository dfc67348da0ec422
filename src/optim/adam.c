/* Adam with L2 weight decay (PyTorch's Adam): two state matrices, the first
 * and second moments; the bias correction uses the step count. */
#include "optim/optim.h"
#include "tile/ops.h"

static int nstate(const tsr_optimizer_t *hp) {
  (void)hp;
  return 2;
}

static int update_tile(const tsr_optimizer_t *hp, float lr, int64_t t, float wd, tsr_tiles_t *w,
                       tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g,
                       int gi, int gj, const tsr_task_opts_t *o) {
  return tsr__tile_adam(o, w, state[0], state[1], i, j, r0, g, gi, gj, lr, hp->beta1, hp->beta2,
                        hp->eps, wd, (int)t);
}

const tsr_optim_kind_t tsr__optim_adam = {
    .name = "adam",
    .nstate = nstate,
    .state_names = {"exp_avg", "exp_avg_sq"},
    .update_tile = update_tile,
};
