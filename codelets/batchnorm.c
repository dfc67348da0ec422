/* Batch normalization's tasks on batch-row tiles of whole channels-last samples and on the
 * per-channel (3, C) partials and statistics (src/kernels/batchnorm.c): the statistics of a
 * tile, the pairwise combine of two partials, the finalize that turns the batch's partial into
 * mean and 1 / std and moves the running statistics, the evaluation statistics, normalize
 * (with a fused ReLU), the backward sums, their pairwise add, the input gradient and the
 * parameters' gradients. CPU functions only: the passes are memory-bound and small. The
 * double accumulators of the two passes over a tile come from the worker's workspace. */
#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct bn_args {
  int hw, c, valid; /* positions and channels of a sample; rows of the tile that are samples */
  bool relu;        /* a fused ReLU (its output is the layer's y) */
  float momentum, eps;
  bool update; /* finalize: move the running statistics */
};

#define BN_MODEL(var, sym)                                                                         \
  static struct starpu_perfmodel var = {.type = STARPU_HISTORY_BASED, .symbol = sym}
#define BN_CODELET(var, fn, pm, n, ...)                                                            \
  struct starpu_codelet var = {.name = #fn,                                                        \
                               .cpu_funcs = {fn},                                                  \
                               .cpu_funcs_name = {#fn},                                            \
                               .nbuffers = n,                                                      \
                               .modes = {__VA_ARGS__},                                             \
                               .model = &pm}

static double *acc_of(int c) {
  return (double *)(void *)tsr__workspace(4 * (size_t)c);
}

static void bn_stats_cpu(void *b[], void *cl_arg) {
  const struct bn_args *a = cl_arg;
  tsr__k_bn_stats(a->valid, a->hw, a->c, TSR_PTR(b[1]), TSR_LD(b[1]), TSR_PTR(b[0]), TSR_LD(b[0]),
                  acc_of(a->c));
}

static void bn_combine_cpu(void *b[], void *cl_arg) {
  (void)cl_arg;
  tsr__k_bn_combine(TSR_COLS(b[0]), TSR_PTR(b[0]), TSR_LD(b[0]), TSR_PTR(b[1]), TSR_LD(b[1]));
}

static void bn_finalize_cpu(void *b[], void *cl_arg) {
  const struct bn_args *a = cl_arg;
  tsr__k_bn_finalize(TSR_COLS(b[0]), TSR_PTR(b[0]), TSR_LD(b[0]), TSR_PTR(b[1]), TSR_PTR(b[2]),
                     TSR_PTR(b[3]), TSR_LD(b[3]), a->momentum, a->eps, a->update);
}

static void bn_eval_stats_cpu(void *b[], void *cl_arg) {
  const struct bn_args *a = cl_arg;
  tsr__k_bn_eval_stats(TSR_COLS(b[0]), TSR_PTR(b[0]), TSR_PTR(b[1]), TSR_PTR(b[2]), TSR_LD(b[2]),
                       a->eps);
}

static void bn_normalize_cpu(void *b[], void *cl_arg) {
  const struct bn_args *a = cl_arg;
  tsr__k_bn_normalize(TSR_ROWS(b[0]), a->hw, a->c, TSR_PTR(b[0]), TSR_LD(b[0]), TSR_PTR(b[1]),
                      TSR_LD(b[1]), TSR_PTR(b[2]), TSR_LD(b[2]), TSR_PTR(b[3]), TSR_PTR(b[4]),
                      a->relu);
}

static void bn_sums_cpu(void *b[], void *cl_arg) {
  const struct bn_args *a = cl_arg;
  tsr__k_bn_sums(a->valid, a->hw, a->c, TSR_PTR(b[1]), TSR_LD(b[1]), TSR_PTR(b[2]), TSR_LD(b[2]),
                 a->relu ? TSR_PTR(b[3]) : NULL, TSR_LD(b[3]), TSR_PTR(b[4]), TSR_LD(b[4]),
                 TSR_PTR(b[0]), TSR_LD(b[0]), acc_of(a->c));
}

static void bn_sums_add_cpu(void *b[], void *cl_arg) {
  (void)cl_arg;
  tsr__k_bn_sums_add(TSR_COLS(b[0]), TSR_PTR(b[0]), TSR_LD(b[0]), TSR_PTR(b[1]), TSR_LD(b[1]));
}

static void bn_dx_cpu(void *b[], void *cl_arg) {
  const struct bn_args *a = cl_arg;
  tsr__k_bn_dx(TSR_ROWS(b[0]), a->valid, a->hw, a->c, TSR_PTR(b[0]), TSR_LD(b[0]), TSR_PTR(b[1]),
               TSR_LD(b[1]), TSR_PTR(b[2]), TSR_LD(b[2]), a->relu ? TSR_PTR(b[3]) : NULL,
               TSR_LD(b[3]), TSR_PTR(b[4]), TSR_LD(b[4]), TSR_PTR(b[5]), TSR_PTR(b[6]),
               TSR_LD(b[6]));
}

static void bn_params_grad_cpu(void *b[], void *cl_arg) {
  (void)cl_arg;
  tsr__k_bn_params_grad(TSR_COLS(b[0]), TSR_PTR(b[0]), TSR_PTR(b[1]), TSR_PTR(b[2]), TSR_LD(b[2]));
}

BN_MODEL(stats_model, "tessera_bn_stats_f32");
BN_MODEL(small_model, "tessera_bn_small_f32");
BN_MODEL(normalize_model, "tessera_bn_normalize_f32");
BN_MODEL(sums_model, "tessera_bn_sums_f32");
BN_MODEL(dx_model, "tessera_bn_dx_f32");

/* Handles: stats (p W, x R); combine (a RW, b R); finalize (p R, mean RW, var RW, s W);
 * eval_stats (mean R, var R, s W); normalize (y W, x R, s R, scale R, shift R); sums (p W,
 * dy R, x R, y R, s R); sums_add (a RW, b R); dx (dx W, dy R, x R, y R, s R, scale R, p R);
 * params_grad (dscale W, dshift W, p R). */
static BN_CODELET(cl_stats, bn_stats_cpu, stats_model, 2, STARPU_W, STARPU_R);
static BN_CODELET(cl_combine, bn_combine_cpu, small_model, 2, STARPU_RW, STARPU_R);
static BN_CODELET(cl_finalize, bn_finalize_cpu, small_model, 4, STARPU_R, STARPU_RW, STARPU_RW,
                  STARPU_W);
static BN_CODELET(cl_eval_stats, bn_eval_stats_cpu, small_model, 3, STARPU_R, STARPU_R, STARPU_W);
static BN_CODELET(cl_normalize, bn_normalize_cpu, normalize_model, 5, STARPU_W, STARPU_R, STARPU_R,
                  STARPU_R, STARPU_R);
static BN_CODELET(cl_sums, bn_sums_cpu, sums_model, 5, STARPU_W, STARPU_R, STARPU_R, STARPU_R,
                  STARPU_R);
static BN_CODELET(cl_sums_add, bn_sums_add_cpu, small_model, 2, STARPU_RW, STARPU_R);
static BN_CODELET(cl_dx, bn_dx_cpu, dx_model, 7, STARPU_W, STARPU_R, STARPU_R, STARPU_R, STARPU_R,
                  STARPU_R, STARPU_R);
static BN_CODELET(cl_params_grad, bn_params_grad_cpu, small_model, 3, STARPU_W, STARPU_W, STARPU_R);

/* A (3, c) partial or statistics tile, a (1, c) vector, a tile of samples of hw c columns. */
static bool is_stats(starpu_data_handle_t h, int c) {
  return tsr__handle_rows(h) == 3 && tsr__handle_cols(h) == c;
}
static bool is_vec(starpu_data_handle_t h, int c) {
  return tsr__handle_rows(h) == 1 && tsr__handle_cols(h) == c;
}
static bool is_rows(starpu_data_handle_t h, int hw, int c, int valid) {
  return tsr__handle_cols(h) == hw * c && valid >= 0 && valid <= tsr__handle_rows(h);
}

int tsr__insert_bn_stats(const tsr_task_opts_t *o, starpu_data_handle_t p, starpu_data_handle_t x,
                         int hw, int c, int valid) {
  if (!is_stats(p, c) || !is_rows(x, hw, c, valid)) return TSR_ESHAPE;
  struct bn_args a = {.hw = hw, .c = c, .valid = valid};
  return tsr__submit(o, &cl_stats, &a, sizeof a, 2, (starpu_data_handle_t[]){p, x});
}

int tsr__insert_bn_combine(const tsr_task_opts_t *o, starpu_data_handle_t a, starpu_data_handle_t b,
                           bool sums) {
  int c = tsr__handle_cols(a);
  if (!is_stats(a, c) || !is_stats(b, c)) return TSR_ESHAPE;
  return tsr__submit(o, sums ? &cl_sums_add : &cl_combine, NULL, 0, 2,
                     (starpu_data_handle_t[]){a, b});
}

int tsr__insert_bn_finalize(const tsr_task_opts_t *o, starpu_data_handle_t s,
                            starpu_data_handle_t p, starpu_data_handle_t mean,
                            starpu_data_handle_t var, float momentum, float eps, bool update) {
  int c = tsr__handle_cols(s);
  if (!is_stats(s, c) || !is_vec(mean, c) || !is_vec(var, c) || (p && !is_stats(p, c)))
    return TSR_ESHAPE;
  struct bn_args a = {.c = c, .momentum = momentum, .eps = eps, .update = update};
  if (!p)
    return tsr__submit(o, &cl_eval_stats, &a, sizeof a, 3, (starpu_data_handle_t[]){mean, var, s});
  return tsr__submit(o, &cl_finalize, &a, sizeof a, 4, (starpu_data_handle_t[]){p, mean, var, s});
}

int tsr__insert_bn_normalize(const tsr_task_opts_t *o, starpu_data_handle_t y,
                             starpu_data_handle_t x, starpu_data_handle_t s,
                             starpu_data_handle_t scale, starpu_data_handle_t shift, int hw,
                             bool relu) {
  int c = tsr__handle_cols(s), m = tsr__handle_rows(x);
  if (!is_stats(s, c) || !is_vec(scale, c) || !is_vec(shift, c) || !is_rows(x, hw, c, m) ||
      !is_rows(y, hw, c, m) || tsr__handle_rows(y) != m)
    return TSR_ESHAPE;
  struct bn_args a = {.hw = hw, .c = c, .relu = relu};
  return tsr__submit(o, &cl_normalize, &a, sizeof a, 5,
                     (starpu_data_handle_t[]){y, x, s, scale, shift});
}

int tsr__insert_bn_sums(const tsr_task_opts_t *o, starpu_data_handle_t p, starpu_data_handle_t dy,
                        starpu_data_handle_t x, starpu_data_handle_t y, starpu_data_handle_t s,
                        int hw, int valid, bool relu) {
  int c = tsr__handle_cols(s), m = tsr__handle_rows(x);
  if (!is_stats(p, c) || !is_stats(s, c) || !is_rows(x, hw, c, valid) ||
      tsr__handle_rows(dy) != m || tsr__handle_rows(y) != m || !is_rows(dy, hw, c, valid) ||
      !is_rows(y, hw, c, valid))
    return TSR_ESHAPE;
  struct bn_args a = {.hw = hw, .c = c, .valid = valid, .relu = relu};
  return tsr__submit(o, &cl_sums, &a, sizeof a, 5, (starpu_data_handle_t[]){p, dy, x, y, s});
}

int tsr__insert_bn_dx(const tsr_task_opts_t *o, starpu_data_handle_t dx, starpu_data_handle_t dy,
                      starpu_data_handle_t x, starpu_data_handle_t y, starpu_data_handle_t s,
                      starpu_data_handle_t scale, starpu_data_handle_t p, int hw, int valid,
                      bool relu) {
  int c = tsr__handle_cols(s), m = tsr__handle_rows(x);
  if (!is_stats(p, c) || !is_stats(s, c) || !is_vec(scale, c) || !is_rows(x, hw, c, valid) ||
      tsr__handle_rows(dy) != m || tsr__handle_rows(y) != m || tsr__handle_rows(dx) != m ||
      !is_rows(dy, hw, c, valid) || !is_rows(y, hw, c, valid) || !is_rows(dx, hw, c, valid))
    return TSR_ESHAPE;
  struct bn_args a = {.hw = hw, .c = c, .valid = valid, .relu = relu};
  return tsr__submit(o, &cl_dx, &a, sizeof a, 7,
                     (starpu_data_handle_t[]){dx, dy, x, y, s, scale, p});
}

int tsr__insert_bn_params_grad(const tsr_task_opts_t *o, starpu_data_handle_t dscale,
                               starpu_data_handle_t dshift, starpu_data_handle_t p) {
  int c = tsr__handle_cols(p);
  if (!is_stats(p, c) || !is_vec(dscale, c) || !is_vec(dshift, c)) return TSR_ESHAPE;
  return tsr__submit(o, &cl_params_grad, NULL, 0, 3, (starpu_data_handle_t[]){dscale, dshift, p});
}
