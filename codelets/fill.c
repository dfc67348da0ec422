/* Fill a tile with one value (zeroing accumulators, constant initialization). */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"

static void fill_cpu(void *buffers[], void *cl_arg) {
  const float *value = cl_arg;
  tsr__k_fill(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
              *value);
}

#ifdef TSR_HAVE_OPENCL
static void fill_opencl(void *buffers[], void *cl_arg) {
  float value = *(const float *)cl_arg;
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]), ld = TSR_LD(buffers[0]);
  int xo = TSR_CL_OFF(buffers[0]);
  cl_mem x = TSR_CL_MEM(buffers[0]);
  tsr__cl_run2d(TSR_CLK_FILL, m, n, 6,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(x), TSR_CL_ARG(xo),
                                 TSR_CL_ARG(ld), TSR_CL_ARG(value)});
}
#endif

static struct starpu_perfmodel fill_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_fill_f32",
};

struct starpu_codelet tsr_cl_fill = {
    .name = "fill",
    .cpu_funcs = {fill_cpu},
    .cpu_funcs_name = {"fill_cpu"},
    TSR_OPENCL_FUNC(fill_opencl),
    .nbuffers = 1,
    .modes = {STARPU_W},
    .model = &fill_model,
};

int tsr__insert_fill(const tsr_task_opts_t *o, starpu_data_handle_t x, float value) {
  return tsr__submit(o, &tsr_cl_fill, &value, sizeof value, 1, &x);
}
