/* ReLU backward on a tile: dx = dy where the forward output y is positive.
 * Using the output rather than the input lets the fused bias+ReLU forward
 * keep only one activation. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

static void relu_bwd_cpu(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  tsr__k_relu_bwd(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                  TSR_LD(buffers[0]), TSR_PTR(buffers[1]), TSR_LD(buffers[1]), TSR_PTR(buffers[2]),
                  TSR_LD(buffers[2]));
}

/* In place: buffers are (d RW, y R). */
static void relu_bwd_inplace_cpu(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  tsr__k_relu_bwd(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                  TSR_LD(buffers[0]), TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                  TSR_LD(buffers[1]));
}

#ifdef TSR_HAVE_OPENCL
/* dx, dy and y: buffers dxi, dyi and yi (dx and dy the same buffer in place). */
static void relu_bwd_run(void *buffers[], int dxi, int dyi, int yi) {
  int m = TSR_ROWS(buffers[dxi]), n = TSR_COLS(buffers[dxi]);
  int lddx = TSR_LD(buffers[dxi]), dxo = TSR_CL_OFF(buffers[dxi]);
  int lddy = TSR_LD(buffers[dyi]), dyo = TSR_CL_OFF(buffers[dyi]);
  int ldy = TSR_LD(buffers[yi]), yo = TSR_CL_OFF(buffers[yi]);
  cl_mem dx = TSR_CL_MEM(buffers[dxi]), dy = TSR_CL_MEM(buffers[dyi]), y = TSR_CL_MEM(buffers[yi]);
  tsr__cl_run2d(TSR_CLK_RELU_BWD, m, n, 11,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(dx), TSR_CL_ARG(dxo),
                                 TSR_CL_ARG(lddx), TSR_CL_ARG(dy), TSR_CL_ARG(dyo),
                                 TSR_CL_ARG(lddy), TSR_CL_ARG(y), TSR_CL_ARG(yo), TSR_CL_ARG(ldy)});
}

static void relu_bwd_opencl(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  relu_bwd_run(buffers, 0, 1, 2);
}

static void relu_bwd_inplace_opencl(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  relu_bwd_run(buffers, 0, 0, 1);
}
#endif

static struct starpu_perfmodel relu_bwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_relu_bwd_f32",
};

struct starpu_codelet tsr_cl_relu_bwd = {
    .name = "relu_bwd",
    .cpu_funcs = {relu_bwd_cpu},
    .cpu_funcs_name = {"relu_bwd_cpu"},
    TSR_OPENCL_FUNC(relu_bwd_opencl),
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
    .model = &relu_bwd_model,
};

struct starpu_codelet tsr_cl_relu_bwd_inplace = {
    .name = "relu_bwd",
    .cpu_funcs = {relu_bwd_inplace_cpu},
    .cpu_funcs_name = {"relu_bwd_inplace_cpu"},
    TSR_OPENCL_FUNC(relu_bwd_inplace_opencl),
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &relu_bwd_model,
};

int tsr__insert_relu_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dx, starpu_data_handle_t dy,
                         starpu_data_handle_t y) {
  int m = tsr__handle_rows(dx), n = tsr__handle_cols(dx);
  if (tsr__handle_rows(dy) != m || tsr__handle_cols(dy) != n || tsr__handle_rows(y) != m ||
      tsr__handle_cols(y) != n)
    return TSR_ESHAPE;
  if (dx == dy) {
    starpu_data_handle_t h[2] = {dx, y};
    return tsr__submit(o, &tsr_cl_relu_bwd_inplace, NULL, 0, 2, h);
  }
  starpu_data_handle_t h[3] = {dx, dy, y};
  return tsr__submit(o, &tsr_cl_relu_bwd, NULL, 0, 3, h);
}
