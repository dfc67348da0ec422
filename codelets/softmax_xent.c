/* Fused softmax + cross-entropy on one batch-row tile of logits. It adds the
 * tile's loss sum and correct count into a per-row-tile stats tile, so the
 * host reads the epoch's loss and accuracy once, at the epoch end, instead of
 * waiting on every batch. Without a gradient output it serves evaluation. */
#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct xent_args {
  int nvalid;
  float scale;
};

/* buffers: dlogits W, stats RW, logits R, labels R */
static void xent_grad_cpu(void *buffers[], void *cl_arg) {
  const struct xent_args *a = cl_arg;
  tsr__k_softmax_xent(TSR_ROWS(buffers[2]), TSR_COLS(buffers[2]), TSR_PTR(buffers[0]),
                      TSR_LD(buffers[0]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]),
                      TSR_PTR(buffers[3]), a->nvalid, a->scale, TSR_PTR(buffers[1]));
}

/* buffers: stats RW, logits R, labels R */
static void xent_eval_cpu(void *buffers[], void *cl_arg) {
  const struct xent_args *a = cl_arg;
  tsr__k_softmax_xent(TSR_ROWS(buffers[1]), TSR_COLS(buffers[1]), NULL, 0, TSR_PTR(buffers[1]),
                      TSR_LD(buffers[1]), TSR_PTR(buffers[2]), a->nvalid, a->scale,
                      TSR_PTR(buffers[0]));
}

static struct starpu_perfmodel xent_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_softmax_xent_f32",
};

struct starpu_codelet tsr_cl_softmax_xent = {
    .name = "softmax_xent",
    .cpu_funcs = {xent_grad_cpu},
    .cpu_funcs_name = {"xent_grad_cpu"},
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_RW, STARPU_R, STARPU_R},
    .model = &xent_model,
};

struct starpu_codelet tsr_cl_softmax_xent_eval = {
    .name = "softmax_xent",
    .cpu_funcs = {xent_eval_cpu},
    .cpu_funcs_name = {"xent_eval_cpu"},
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_R, STARPU_R},
    .model = &xent_model,
};

int tsr__insert_softmax_xent(const tsr_task_opts_t *o, starpu_data_handle_t dlogits,
                             starpu_data_handle_t stats, starpu_data_handle_t logits,
                             starpu_data_handle_t labels, int nvalid, float scale) {
  int m = tsr__handle_rows(logits), n = tsr__handle_cols(logits);
  if (tsr__handle_rows(labels) != m || tsr__handle_cols(labels) != 1 ||
      tsr__handle_rows(stats) != 1 || tsr__handle_cols(stats) != 2 || nvalid < 0 || nvalid > m)
    return TSR_ESHAPE;
  if (dlogits && (tsr__handle_rows(dlogits) != m || tsr__handle_cols(dlogits) != n))
    return TSR_ESHAPE;
  struct xent_args args = {nvalid, scale};
  if (dlogits) {
    starpu_data_handle_t h[4] = {dlogits, stats, logits, labels};
    return tsr__submit(o, &tsr_cl_softmax_xent, &args, sizeof args, 4, h);
  }
  starpu_data_handle_t h[3] = {stats, logits, labels};
  return tsr__submit(o, &tsr_cl_softmax_xent_eval, &args, sizeof args, 3, h);
}
