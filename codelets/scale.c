/* x = alpha x on a tile. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"

static void scale_cpu(void *buffers[], void *cl_arg) {
  const float *alpha = cl_arg;
  tsr__k_scale(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), *alpha, TSR_PTR(buffers[0]),
               TSR_LD(buffers[0]));
}

#ifdef TSR_HAVE_OPENCL
static void scale_opencl(void *buffers[], void *cl_arg) {
  float alpha = *(const float *)cl_arg;
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]), ld = TSR_LD(buffers[0]);
  int xo = TSR_CL_OFF(buffers[0]);
  cl_mem x = TSR_CL_MEM(buffers[0]);
  tsr__cl_run2d(TSR_CLK_SCALE, m, n, 6,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(alpha), TSR_CL_ARG(x),
                                 TSR_CL_ARG(xo), TSR_CL_ARG(ld)});
}
#endif

static struct starpu_perfmodel scale_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_scale_f32",
};

struct starpu_codelet tsr_cl_scale = {
    .name = "scale",
    .cpu_funcs = {scale_cpu},
    .cpu_funcs_name = {"scale_cpu"},
    TSR_OPENCL_FUNC(scale_opencl),
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &scale_model,
};

int tsr__insert_scale(const tsr_task_opts_t *o, starpu_data_handle_t x, float alpha) {
  return tsr__submit(o, &tsr_cl_scale, &alpha, sizeof alpha, 1, &x);
}
