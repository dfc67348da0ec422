/* x = alpha x on a tile. */
#include "codelets.h"
#include "kernels/kernels.h"

static void scale_cpu(void *buffers[], void *cl_arg) {
  const float *alpha = cl_arg;
  tsr__k_scale(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), *alpha, TSR_PTR(buffers[0]),
               TSR_LD(buffers[0]));
}

static struct starpu_perfmodel scale_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_scale_f32",
};

struct starpu_codelet tsr_cl_scale = {
    .name = "scale",
    .cpu_funcs = {scale_cpu},
    .cpu_funcs_name = {"scale_cpu"},
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &scale_model,
};

int tsr__insert_scale(const tsr_task_opts_t *o, starpu_data_handle_t x, float alpha) {
  return tsr__submit(o, &tsr_cl_scale, &alpha, sizeof alpha, 1, &x);
}
