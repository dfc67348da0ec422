/* Outer optimizers of weight averaging (tessera/dist.h, tsr_outer_t): one
 * step on a chunk of the anchor with its momentum, from the mean of the
 * replicas; and the asynchronous variant, a rank's fold as an outer step on
 * the global copy. */
#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct outer_args {
  bool nesterov;
  float lr, momentum, gamma;
  float scale; /* fold: 1 / P, each rank's share of the pseudo-gradient */
};

/* buffers: x RW (the anchor), u RW, mean R; d = x - mean */
static void outer_cpu(void *buffers[], void *cl_arg) {
  const struct outer_args *a = cl_arg;
  float *x = TSR_PTR(buffers[0]);
  tsr__k_outer(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), x, TSR_LD(buffers[0]),
               TSR_PTR(buffers[1]), TSR_LD(buffers[1]), x, TSR_LD(buffers[0]), TSR_PTR(buffers[2]),
               TSR_LD(buffers[2]), 1.0f, a->nesterov, a->lr, a->momentum, a->gamma);
}

/* buffers: global RW (COMMUTE), u RW (COMMUTE), snap RW, w R; d = (snap - w) / P, then snap =
 * global: the rank's next start. */
static void outer_fold_cpu(void *buffers[], void *cl_arg) {
  const struct outer_args *a = cl_arg;
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]);
  tsr__k_outer(m, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
               TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]), TSR_PTR(buffers[3]),
               TSR_LD(buffers[3]), a->scale, a->nesterov, a->lr, a->momentum, a->gamma);
  tsr__k_copy(m, n, TSR_PTR(buffers[2]), TSR_LD(buffers[2]), TSR_PTR(buffers[0]),
              TSR_LD(buffers[0]));
}

static struct starpu_perfmodel outer_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_outer_f32",
};

static struct starpu_perfmodel outer_fold_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_outer_fold_f32",
};

struct starpu_codelet tsr_cl_outer = {
    .name = "outer",
    .cpu_funcs = {outer_cpu},
    .cpu_funcs_name = {"outer_cpu"},
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_RW, STARPU_R},
    .model = &outer_model,
};

struct starpu_codelet tsr_cl_outer_fold = {
    .name = "outer_fold",
    .cpu_funcs = {outer_fold_cpu},
    .cpu_funcs_name = {"outer_fold_cpu"},
    .nbuffers = 4,
    .modes = {STARPU_RW | STARPU_COMMUTE, STARPU_RW | STARPU_COMMUTE, STARPU_RW, STARPU_R},
    .model = &outer_fold_model,
};

/* Deterministic mode: folds in submission (rank) order. */
struct starpu_codelet tsr_cl_outer_fold_ordered = {
    .name = "outer_fold",
    .cpu_funcs = {outer_fold_cpu},
    .cpu_funcs_name = {"outer_fold_cpu"},
    .nbuffers = 4,
    .modes = {STARPU_RW, STARPU_RW, STARPU_RW, STARPU_R},
    .model = &outer_fold_model,
};

static bool same_shape(const starpu_data_handle_t *h, int n) {
  for (int i = 1; i < n; i++)
    if (tsr__handle_rows(h[i]) != tsr__handle_rows(h[0]) ||
        tsr__handle_cols(h[i]) != tsr__handle_cols(h[0]))
      return false;
  return true;
}

int tsr__insert_outer(const tsr_task_opts_t *o, starpu_data_handle_t x, starpu_data_handle_t u,
                      starpu_data_handle_t mean, bool nesterov, float lr, float momentum,
                      float gamma) {
  starpu_data_handle_t h[3] = {x, u, mean};
  if (!same_shape(h, 3)) return TSR_ESHAPE;
  struct outer_args args = {nesterov, lr, momentum, gamma, 1.0f};
  return tsr__submit(o, &tsr_cl_outer, &args, sizeof args, 3, h);
}

int tsr__insert_outer_fold(const tsr_task_opts_t *o, starpu_data_handle_t global,
                           starpu_data_handle_t u, starpu_data_handle_t snap,
                           starpu_data_handle_t w, float scale, bool nesterov, float lr,
                           float momentum, float gamma, bool commute) {
  starpu_data_handle_t h[4] = {global, u, snap, w};
  if (!same_shape(h, 4)) return TSR_ESHAPE;
  struct outer_args args = {nesterov, lr, momentum, gamma, scale};
  return tsr__submit(o, commute ? &tsr_cl_outer_fold : &tsr_cl_outer_fold_ordered, &args,
                     sizeof args, 4, h);
}
