/* Bias add on an activation tile, y += b row by row, with the following ReLU
 * fused in when the layer after a dense layer is a ReLU: one pass over the
 * tile instead of two. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

static void bias_add_cpu(void *buffers[], void *cl_arg) {
  const bool *relu = cl_arg;
  tsr__k_bias_add(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                  TSR_LD(buffers[0]), TSR_PTR(buffers[1]), *relu);
}

#ifdef TSR_HAVE_OPENCL
static void bias_add_opencl(void *buffers[], void *cl_arg) {
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]), ld = TSR_LD(buffers[0]);
  int yo = TSR_CL_OFF(buffers[0]), bo = TSR_CL_OFF(buffers[1]), relu = *(const bool *)cl_arg;
  cl_mem y = TSR_CL_MEM(buffers[0]), b = TSR_CL_MEM(buffers[1]);
  tsr__cl_run2d(TSR_CLK_BIAS_ADD, m, n, 8,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(y), TSR_CL_ARG(yo),
                                 TSR_CL_ARG(ld), TSR_CL_ARG(b), TSR_CL_ARG(bo), TSR_CL_ARG(relu)});
}
#endif

static struct starpu_perfmodel bias_add_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_bias_add_f32",
};

struct starpu_codelet tsr_cl_bias_add = {
    .name = "bias_add",
    .cpu_funcs = {bias_add_cpu},
    .cpu_funcs_name = {"bias_add_cpu"},
    TSR_OPENCL_FUNC(bias_add_opencl),
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
