/* Bias gradient: db = beta db + column sums of dy. The first batch-row tile
 * writes (beta 0, W access), the next ones accumulate in a chain. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

static void bias_grad_cpu(void *buffers[], void *cl_arg) {
  const float *beta = cl_arg;
  tsr__k_bias_grad(TSR_ROWS(buffers[1]), TSR_COLS(buffers[1]), TSR_PTR(buffers[0]),
                   TSR_PTR(buffers[1]), TSR_LD(buffers[1]), *beta);
}

#ifdef TSR_HAVE_OPENCL
static void bias_grad_opencl(void *buffers[], void *cl_arg) {
  float beta = *(const float *)cl_arg;
  int m = TSR_ROWS(buffers[1]), n = TSR_COLS(buffers[1]), ld = TSR_LD(buffers[1]);
  int dbo = TSR_CL_OFF(buffers[0]), dyo = TSR_CL_OFF(buffers[1]);
  cl_mem db = TSR_CL_MEM(buffers[0]), dy = TSR_CL_MEM(buffers[1]);
  /* One row of work-items, one per column. */
  tsr__cl_run2d(TSR_CLK_BIAS_GRAD, 1, n, 8,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(db), TSR_CL_ARG(dbo),
                                 TSR_CL_ARG(dy), TSR_CL_ARG(dyo), TSR_CL_ARG(ld),
                                 TSR_CL_ARG(beta)});
}
#endif

static struct starpu_perfmodel bias_grad_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_bias_grad_f32",
};

struct starpu_codelet tsr_cl_bias_grad = {
    .name = "bias_grad",
    .cpu_funcs = {bias_grad_cpu},
    .cpu_funcs_name = {"bias_grad_cpu"},
    TSR_OPENCL_FUNC(bias_grad_opencl),
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &bias_grad_model,
};

struct starpu_codelet tsr_cl_bias_grad_w = {
    .name = "bias_grad",
    .cpu_funcs = {bias_grad_cpu},
    .cpu_funcs_name = {"bias_grad_cpu"},
    TSR_OPENCL_FUNC(bias_grad_opencl),
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
