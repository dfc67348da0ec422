/* SGD with Nesterov momentum and L2 weight decay: PyTorch's
 * torch.optim.SGD(nesterov=True), dampening 0 (tsr__k_sgd_nesterov). The
 * "nesterov" variant of sgd (--optimizer sgd --nesterov): the same defaults,
 * state and rate scaling; PyTorch refuses it without momentum, and so does
 * this. */
#include "optim/optim.h"
#include "tile/ops.h"

static int nstate(const tsr_optimizer_t *hp) {
  (void)hp;
  return 1;
}

static int check(const tsr_optimizer_t *hp, tsr_errbuf_t *err) {
  if (hp->momentum > 0.0f) return 0;
  return tsr_error_set(err, TSR_EINVAL,
                       "optimizer sgd-nesterov (--nesterov) needs a momentum > 0, not %g: give "
                       "--momentum in (0, 1)",
                       (double)hp->momentum);
}

static int update_tile(const tsr_optimizer_t *hp, float lr, int64_t t, float wd, tsr_tiles_t *w,
                       tsr_tiles_t *const *state, int i, int j, int r0, const tsr_tiles_t *g,
                       int gi, int gj, const tsr_task_opts_t *o) {
  (void)t;
  return tsr__tile_sgd(o, w, state[0], i, j, r0, g, gi, gj, lr, hp->momentum, wd, true);
}

const tsr_optim_kind_t tsr__optim_sgd_nesterov = {
    .name = "sgd-nesterov",
    .variant_of = "sgd",
    .variant = "nesterov",
    .defaults = {.lr = 0.01f, .momentum = 0.9f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
    .lr_scales_with_replicas = true,
    .nstate = nstate,
    .state_names = {"momentum_buffer"},
    .check = check,
    .update_tile = update_tile,
    .sgd_step = TSR_SGD_STEP_NESTEROV,
};
