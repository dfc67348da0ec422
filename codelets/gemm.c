/* GEMM on tiles: c = alpha op(a) op(b) + beta c, with BLIS inside the task.
 * Two codelets share one kernel and one performance model: with beta == 0 the
 * output is only written (W), which spares StarPU a fetch and lets it drop a
 * dependency on the tile's previous contents. */
#include <assert.h>

#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct gemm_args {
  bool ta, tb;
  float alpha, beta;
};

static void gemm_cpu(void *buffers[], void *cl_arg) {
  const struct gemm_args *g = cl_arg;
  int m = TSR_ROWS(buffers[2]), n = TSR_COLS(buffers[2]);
  int k = g->ta ? TSR_ROWS(buffers[0]) : TSR_COLS(buffers[0]);
  tsr__k_gemm(g->ta, g->tb, m, n, k, g->alpha, TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
              TSR_PTR(buffers[1]), TSR_LD(buffers[1]), g->beta, TSR_PTR(buffers[2]),
              TSR_LD(buffers[2]));
}

#ifdef TSR_HAVE_OPENCL
static void gemm_opencl(void *buffers[], void *cl_arg) {
  const struct gemm_args *g = cl_arg;
  int m = TSR_ROWS(buffers[2]), n = TSR_COLS(buffers[2]);
  int k = g->ta ? TSR_ROWS(buffers[0]) : TSR_COLS(buffers[0]);
  tsr__cl_gemm(g->ta, g->tb, m, n, k, g->alpha, TSR_CL_MEM(buffers[0]), TSR_CL_OFF(buffers[0]),
               TSR_LD(buffers[0]), TSR_CL_MEM(buffers[1]), TSR_CL_OFF(buffers[1]),
               TSR_LD(buffers[1]), g->beta, TSR_CL_MEM(buffers[2]), TSR_CL_OFF(buffers[2]),
               TSR_LD(buffers[2]));
}
#endif

static struct starpu_perfmodel gemm_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_gemm_f32",
};

struct starpu_codelet tsr_cl_gemm = {
    .name = "gemm",
    .cpu_funcs = {gemm_cpu},
    .cpu_funcs_name = {"gemm_cpu"},
    TSR_OPENCL_FUNC(gemm_opencl),
    .nbuffers = 3,
    .modes = {STARPU_R, STARPU_R, STARPU_RW},
    .model = &gemm_model,
};

struct starpu_codelet tsr_cl_gemm_w = {
    .name = "gemm",
    .cpu_funcs = {gemm_cpu},
    .cpu_funcs_name = {"gemm_cpu"},
    TSR_OPENCL_FUNC(gemm_opencl),
    .nbuffers = 3,
    .modes = {STARPU_R, STARPU_R, STARPU_W},
    .model = &gemm_model,
};

int tsr__insert_gemm(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                     starpu_data_handle_t a, starpu_data_handle_t b, float beta,
                     starpu_data_handle_t c) {
  int am = ta ? tsr__handle_cols(a) : tsr__handle_rows(a);
  int ak = ta ? tsr__handle_rows(a) : tsr__handle_cols(a);
  int bk = tb ? tsr__handle_cols(b) : tsr__handle_rows(b);
  int bn = tb ? tsr__handle_rows(b) : tsr__handle_cols(b);
  if (am != tsr__handle_rows(c) || bn != tsr__handle_cols(c) || ak != bk) return TSR_ESHAPE;
  struct gemm_args args = {ta, tb, alpha, beta};
  starpu_data_handle_t h[3] = {a, b, c};
  return tsr__submit(o, beta == 0.0f ? &tsr_cl_gemm_w : &tsr_cl_gemm, &args, sizeof args, 3, h);
}
