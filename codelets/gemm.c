/* GEMM on tiles: c = alpha op(a) op(b) + beta c, by either of two CPU implementations
 * (impls.c): oneDNN's dnnl_sgemm, or BLIS (the portable one, and what a build without oneDNN
 * runs). Two codelets share the kernels and one performance model: with beta == 0 the
 * output is only written (W), which spares StarPU a fetch and lets it drop a
 * dependency on the tile's previous contents. */
#include <assert.h>

#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct gemm_args {
  tsr_impl_choice_t choice; /* first: impls.c reads it */
  bool ta, tb;
  float alpha, beta;
};

void tsr__gemm_task_cpu(void *buffers[], bool dnnl, bool ta, bool tb, float alpha, float beta) {
  int m = TSR_ROWS(buffers[2]), n = TSR_COLS(buffers[2]);
  int k = ta ? TSR_ROWS(buffers[0]) : TSR_COLS(buffers[0]);
  tsr__k_gemm_by(dnnl, ta, tb, m, n, k, alpha, TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
                 TSR_PTR(buffers[1]), TSR_LD(buffers[1]), beta, TSR_PTR(buffers[2]),
                 TSR_LD(buffers[2]));
}

static void gemm_run(void *buffers[], const struct gemm_args *g, bool dnnl) {
  tsr__gemm_task_cpu(buffers, dnnl, g->ta, g->tb, g->alpha, g->beta);
}

static void gemm_onednn(void *buffers[], void *cl_arg) {
  gemm_run(buffers, cl_arg, true);
}

static void gemm_blis(void *buffers[], void *cl_arg) {
  gemm_run(buffers, cl_arg, false);
}

TSR_IMPL_TASKS(gemm)

#ifdef TSR_HAVE_OPENCL
static void gemm_opencl(void *buffers[], void *cl_arg) {
  const struct gemm_args *g = cl_arg;
  tsr__cl_gemm_task(buffers, g->ta, g->tb, g->alpha, g->beta);
}
#endif

static struct starpu_perfmodel gemm_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_gemm_f32",
};

#define GEMM_CODELET(var, c_mode)                                                                  \
  struct starpu_codelet var = {                                                                    \
      .name = "gemm",                                                                              \
      .can_execute = tsr__cl_impl_can_execute,                                                     \
      .cpu_funcs = {[TSR_IMPL_ONEDNN] = gemm_onednn_task, [TSR_IMPL_BLIS] = gemm_blis_task},       \
      .cpu_funcs_name = {[TSR_IMPL_ONEDNN] = "gemm_onednn", [TSR_IMPL_BLIS] = "gemm_blis"},        \
      TSR_OPENCL_FUNC(gemm_opencl),                                                                \
      .nbuffers = 3,                                                                               \
      .modes = {STARPU_R, STARPU_R, c_mode},                                                       \
      .model = &gemm_model}

GEMM_CODELET(tsr_cl_gemm, STARPU_RW);
GEMM_CODELET(tsr_cl_gemm_w, STARPU_W);

bool tsr__gemm_fits(bool ta, bool tb, starpu_data_handle_t a, starpu_data_handle_t b,
                    starpu_data_handle_t c, int *k) {
  int am = ta ? tsr__handle_cols(a) : tsr__handle_rows(a);
  int ak = ta ? tsr__handle_rows(a) : tsr__handle_cols(a);
  int bk = tb ? tsr__handle_cols(b) : tsr__handle_rows(b);
  int bn = tb ? tsr__handle_rows(b) : tsr__handle_cols(b);
  *k = ak;
  return am == tsr__handle_rows(c) && bn == tsr__handle_cols(c) && ak == bk;
}

int tsr__insert_gemm(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                     starpu_data_handle_t a, starpu_data_handle_t b, float beta,
                     starpu_data_handle_t c) {
  int ak;
  if (!tsr__gemm_fits(ta, tb, a, b, c, &ak)) return TSR_ESHAPE;
  tsr_gemm_shape_t shape = {0, ta, tb, tsr__handle_rows(c), tsr__handle_cols(c), ak, 0};
  struct gemm_args args = {tsr__impl_choice(o, &shape, sizeof shape), ta, tb, alpha, beta};
  starpu_data_handle_t h[3] = {a, b, c};
  return tsr__submit(o, beta == 0.0f ? &tsr_cl_gemm_w : &tsr_cl_gemm, &args, sizeof args, 3, h);
}
