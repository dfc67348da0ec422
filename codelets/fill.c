/* Fill a tile with one value (zeroing accumulators, constant initialization). */
#include "codelets.h"
#include "kernels/kernels.h"

static void fill_cpu(void *buffers[], void *cl_arg) {
  const float *value = cl_arg;
  tsr__k_fill(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
              *value);
}

static struct starpu_perfmodel fill_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_fill_f32",
};

struct starpu_codelet tsr_cl_fill = {
    .name = "fill",
    .cpu_funcs = {fill_cpu},
    .cpu_funcs_name = {"fill_cpu"},
    .nbuffers = 1,
    .modes = {STARPU_W},
    .model = &fill_model,
};

int tsr__insert_fill(const tsr_task_opts_t *o, starpu_data_handle_t x, float value) {
  return tsr__submit(o, &tsr_cl_fill, &value, sizeof value, 1, &x);
}
