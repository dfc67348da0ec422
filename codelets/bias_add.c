/* Bias add on an activation tile, y += b row by row, with the following ReLU
 * fused in when the layer after a dense layer is a ReLU: one pass over the
 * tile instead of two. */
#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

static void bias_add_cpu(void *buffers[], void *cl_arg) {
  const bool *relu = cl_arg;
  tsr__k_bias_add(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                  TSR_LD(buffers[0]), TSR_PTR(buffers[1]), *relu);
}

static struct starpu_perfmodel bias_add_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_bias_add_f32",
};

struct starpu_codelet tsr_cl_bias_add = {
    .name = "bias_add",
    .cpu_funcs = {bias_add_cpu},
    .cpu_funcs_name = {"bias_add_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &bias_add_model,
};

int tsr__insert_bias_add(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t b,
                         bool relu) {
  if (tsr__handle_rows(b) != 1 || tsr__handle_cols(b) != tsr__handle_cols(y)) return TSR_ESHAPE;
  starpu_data_handle_t h[2] = {y, b};
  return tsr__submit(o, &tsr_cl_bias_add, &relu, sizeof relu, 2, h);
}
