/* ReLU forward on a tile: y = max(x, 0), out of place. (After a dense layer
 * the ReLU is fused into the bias add instead.) */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

static void relu_fwd_cpu(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  tsr__k_relu_fwd(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                  TSR_LD(buffers[0]), TSR_PTR(buffers[1]), TSR_LD(buffers[1]));
}

#ifdef TSR_HAVE_OPENCL
static void relu_fwd_opencl(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]);
  int ldy = TSR_LD(buffers[0]), yo = TSR_CL_OFF(buffers[0]);
  int ldx = TSR_LD(buffers[1]), xo = TSR_CL_OFF(buffers[1]);
  cl_mem y = TSR_CL_MEM(buffers[0]), x = TSR_CL_MEM(buffers[1]);
  tsr__cl_run2d(TSR_CLK_RELU_FWD, m, n, 8,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(y), TSR_CL_ARG(yo),
                                 TSR_CL_ARG(ldy), TSR_CL_ARG(x), TSR_CL_ARG(xo), TSR_CL_ARG(ldx)});
}
#endif

static struct starpu_perfmodel relu_fwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_relu_fwd_f32",
};

struct starpu_codelet tsr_cl_relu_fwd = {
    .name = "relu_fwd",
    .cpu_funcs = {relu_fwd_cpu},
    .cpu_funcs_name = {"relu_fwd_cpu"},
    TSR_OPENCL_FUNC(relu_fwd_opencl),
    .nbuffers = 2,
    .modes = {STARPU_W, STARPU_R},
    .model = &relu_fwd_model,
};

int tsr__insert_relu_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x) {
  if (tsr__handle_rows(y) != tsr__handle_rows(x) || tsr__handle_cols(y) != tsr__handle_cols(x))
    return TSR_ESHAPE;
  starpu_data_handle_t h[2] = {y, x};
  return tsr__submit(o, &tsr_cl_relu_fwd, NULL, 0, 2, h);
}
