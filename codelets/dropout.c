/* Dropout on a tile, forward and backward alike: the mask is recomputed from
 * (seed, sample row, feature), so nothing is stored between the passes and
 * the backward pass is the same operation on the gradient. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct dropout_args {
  uint64_t seed;
  int64_t row0, col0;
  float rate;
};

static void dropout_cpu(void *buffers[], void *cl_arg) {
  const struct dropout_args *a = cl_arg;
  tsr__k_dropout(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                 TSR_LD(buffers[0]), TSR_PTR(buffers[1]), TSR_LD(buffers[1]), a->seed, a->row0,
                 a->col0, a->rate);
}

#ifdef TSR_HAVE_OPENCL
static void dropout_opencl(void *buffers[], void *cl_arg) {
  const struct dropout_args *a = cl_arg;
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]);
  int ldy = TSR_LD(buffers[0]), yo = TSR_CL_OFF(buffers[0]);
  int ldx = TSR_LD(buffers[1]), xo = TSR_CL_OFF(buffers[1]);
  cl_mem y = TSR_CL_MEM(buffers[0]), x = TSR_CL_MEM(buffers[1]);
  cl_ulong seed = a->seed;
  cl_long row0 = a->row0, col0 = a->col0;
  float rate = a->rate;
  tsr__cl_run2d(TSR_CLK_DROPOUT, m, n, 12,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(y), TSR_CL_ARG(yo),
                                 TSR_CL_ARG(ldy), TSR_CL_ARG(x), TSR_CL_ARG(xo), TSR_CL_ARG(ldx),
                                 TSR_CL_ARG(seed), TSR_CL_ARG(row0), TSR_CL_ARG(col0),
                                 TSR_CL_ARG(rate)});
}
#endif

static struct starpu_perfmodel dropout_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_dropout_f32",
};

struct starpu_codelet tsr_cl_dropout = {
    .name = "dropout",
    .cpu_funcs = {dropout_cpu},
    .cpu_funcs_name = {"dropout_cpu"},
    TSR_OPENCL_FUNC(dropout_opencl),
    .nbuffers = 2,
    .modes = {STARPU_W, STARPU_R},
    .model = &dropout_model,
};

int tsr__insert_dropout(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x,
                        uint64_t seed, int64_t row0, int64_t col0, float rate) {
  if (tsr__handle_rows(y) != tsr__handle_rows(x) || tsr__handle_cols(y) != tsr__handle_cols(x) ||
      !(rate >= 0.0f && rate < 1.0f) || row0 < 0 || col0 < 0)
    return TSR_ESHAPE;
  struct dropout_args args = {seed, row0, col0, rate};
  starpu_data_handle_t h[2] = {y, x};
  return tsr__submit(o, &tsr_cl_dropout, &args, sizeof args, 2, h);
}
