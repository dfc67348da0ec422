/* Layer normalization's tasks on one batch-row tile of samples of P positions of C channels
 * (n, P C): the forward (y, and each position's mean and 1 / std kept in a stats tile (n, 2 P)),
 * and the backward (the input gradient, and this tile's (2, C) partial of the scale's and
 * shift's gradients: row 0 sum dy xhat, row 1 sum dy, summed over the tiles by the caller's
 * fixed tree). Formulas in src/kernels/sequence.h. CPU only. */
#include "codelets.h"
#include "kernels/sequence.h"
#include "tessera/error.h"

struct ln_args {
  int c;
  float eps;   /* forward */
  bool has_dx; /* backward: dx is the first buffer */
};

/* buffers: y W, stats W, x R, w R, b R */
static void ln_fwd_cpu(void *buffers[], void *cl_arg) {
  const struct ln_args *a = cl_arg;
  int n = TSR_ROWS(buffers[2]), p = TSR_COLS(buffers[2]) / a->c;
  tsr__k_layernorm_fwd(n, p, a->c, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                       TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]),
                       TSR_PTR(buffers[3]), TSR_PTR(buffers[4]), a->eps);
}

/* buffers: [dx W], partial W, dy R, x R, w R, stats R */
static void ln_bwd_cpu(void *buffers[], void *cl_arg) {
  const struct ln_args *a = cl_arg;
  int k = a->has_dx ? 1 : 0;
  float *dx = k ? TSR_PTR(buffers[0]) : NULL, *part = TSR_PTR(buffers[k]);
  int n = TSR_ROWS(buffers[k + 1]), p = TSR_COLS(buffers[k + 1]) / a->c;
  tsr__k_layernorm_bwd(n, p, a->c, dx, k ? TSR_LD(buffers[0]) : 0, part, part + TSR_LD(buffers[k]),
                       TSR_PTR(buffers[k + 1]), TSR_LD(buffers[k + 1]), TSR_PTR(buffers[k + 2]),
                       TSR_LD(buffers[k + 2]), TSR_PTR(buffers[k + 3]), TSR_PTR(buffers[k + 4]),
                       TSR_LD(buffers[k + 4]));
}

static struct starpu_perfmodel ln_fwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_layernorm_fwd_f32",
};

static struct starpu_perfmodel ln_bwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_layernorm_bwd_f32",
};

struct starpu_codelet tsr_cl_layernorm_fwd = {
    .name = "layernorm_fwd",
    .cpu_funcs = {ln_fwd_cpu},
    .cpu_funcs_name = {"ln_fwd_cpu"},
    .nbuffers = 5,
    .modes = {STARPU_W, STARPU_W, STARPU_R, STARPU_R, STARPU_R},
    .model = &ln_fwd_model,
};

struct starpu_codelet tsr_cl_layernorm_bwd = {
    .name = "layernorm_bwd",
    .cpu_funcs = {ln_bwd_cpu},
    .cpu_funcs_name = {"ln_bwd_cpu"},
    .nbuffers = 6,
    .modes = {STARPU_W, STARPU_W, STARPU_R, STARPU_R, STARPU_R, STARPU_R},
    .model = &ln_bwd_model,
};

struct starpu_codelet tsr_cl_layernorm_bwd_nodx = {
    .name = "layernorm_bwd",
    .cpu_funcs = {ln_bwd_cpu},
    .cpu_funcs_name = {"ln_bwd_cpu"},
    .nbuffers = 5,
    .modes = {STARPU_W, STARPU_R, STARPU_R, STARPU_R, STARPU_R},
    .model = &ln_bwd_model,
};

/* x (n, P c), stats (n, 2 P), w (1, c). */
static bool ln_fits(starpu_data_handle_t x, starpu_data_handle_t stats, starpu_data_handle_t w,
                    int c) {
  int n = tsr__handle_rows(x), cols = tsr__handle_cols(x);
  return c > 0 && cols % c == 0 && tsr__handle_rows(stats) == n &&
         tsr__handle_cols(stats) == 2 * (cols / c) && tsr__handle_rows(w) == 1 &&
         tsr__handle_cols(w) == c;
}

static bool same_shape(starpu_data_handle_t a, starpu_data_handle_t b) {
  return tsr__handle_rows(a) == tsr__handle_rows(b) && tsr__handle_cols(a) == tsr__handle_cols(b);
}

int tsr__insert_layernorm_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y,
                              starpu_data_handle_t stats, starpu_data_handle_t x,
                              starpu_data_handle_t w, starpu_data_handle_t b, float eps) {
  int c = tsr__handle_cols(w);
  if (!ln_fits(x, stats, w, c) || !same_shape(y, x) || !same_shape(b, w)) return TSR_ESHAPE;
  if (!(eps > 0.0f)) return TSR_EINVAL;
  struct ln_args args = {c, eps, false};
  starpu_data_handle_t h[5] = {y, stats, x, w, b};
  return tsr__submit(o, &tsr_cl_layernorm_fwd, &args, sizeof args, 5, h);
}

int tsr__insert_layernorm_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dx,
                              starpu_data_handle_t partial, starpu_data_handle_t dy,
                              starpu_data_handle_t x, starpu_data_handle_t w,
                              starpu_data_handle_t stats) {
  int c = tsr__handle_cols(w);
  if (!ln_fits(x, stats, w, c) || !same_shape(dy, x) || (dx && !same_shape(dx, x)) ||
      tsr__handle_rows(partial) != 2 || tsr__handle_cols(partial) != c)
    return TSR_ESHAPE;
  struct ln_args args = {c, 0.0f, dx != NULL};
  if (!dx) {
    starpu_data_handle_t h[5] = {partial, dy, x, w, stats};
    return tsr__submit(o, &tsr_cl_layernorm_bwd_nodx, &args, sizeof args, 5, h);
  }
  starpu_data_handle_t h[6] = {dx, partial, dy, x, w, stats};
  return tsr__submit(o, &tsr_cl_layernorm_bwd, &args, sizeof args, 6, h);
}
