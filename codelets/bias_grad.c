/* Bias gradient: db = beta db + column sums of dy. The first batch-row tile
 * writes (beta 0, W access), the next ones accumulate in a chain. */
#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

static void bias_grad_cpu(void *buffers[], void *cl_arg) {
  const float *beta = cl_arg;
  tsr__k_bias_grad(TSR_ROWS(buffers[1]), TSR_COLS(buffers[1]), TSR_PTR(buffers[0]),
                   TSR_PTR(buffers[1]), TSR_LD(buffers[1]), *beta);
}

static struct starpu_perfmodel bias_grad_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_bias_grad_f32",
};

struct starpu_codelet tsr_cl_bias_grad = {
    .name = "bias_grad",
    .cpu_funcs = {bias_grad_cpu},
    .cpu_funcs_name = {"bias_grad_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &bias_grad_model,
};

struct starpu_codelet tsr_cl_bias_grad_w = {
    .name = "bias_grad",
    .cpu_funcs = {bias_grad_cpu},
    .cpu_funcs_name = {"bias_grad_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_W, STARPU_R},
    .model = &bias_grad_model,
};

int tsr__insert_bias_grad(const tsr_task_opts_t *o, starpu_data_handle_t db,
                          starpu_data_handle_t dy, float beta) {
  if (tsr__handle_rows(db) != 1 || tsr__handle_cols(db) != tsr__handle_cols(dy)) return TSR_ESHAPE;
  starpu_data_handle_t h[2] = {db, dy};
  return tsr__submit(o, beta == 0.0f ? &tsr_cl_bias_grad_w : &tsr_cl_bias_grad, &beta, sizeof beta,
                     2, h);
}
