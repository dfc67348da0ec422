/* y = a + b on tiles of one shape, then a following ReLU where fused: the add layer's forward
 * pass (a residual connection). */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct add_args {
  bool relu;
};

/* buffers: y W, a R, b R */
static void add_cpu(void *buffers[], void *cl_arg) {
  const struct add_args *a = cl_arg;
  tsr__k_add(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
             TSR_PTR(buffers[1]), TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]),
             a->relu);
}

#ifdef TSR_HAVE_OPENCL
static void add_opencl(void *buffers[], void *cl_arg) {
  int relu = ((const struct add_args *)cl_arg)->relu;
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]);
  int ldy = TSR_LD(buffers[0]), yo = TSR_CL_OFF(buffers[0]);
  int lda = TSR_LD(buffers[1]), ao = TSR_CL_OFF(buffers[1]);
  int ldb = TSR_LD(buffers[2]), bo = TSR_CL_OFF(buffers[2]);
  cl_mem y = TSR_CL_MEM(buffers[0]), a = TSR_CL_MEM(buffers[1]), b = TSR_CL_MEM(buffers[2]);
  tsr__cl_run2d(TSR_CLK_ADD, m, n, 12,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(y), TSR_CL_ARG(yo),
                                 TSR_CL_ARG(ldy), TSR_CL_ARG(a), TSR_CL_ARG(ao), TSR_CL_ARG(lda),
                                 TSR_CL_ARG(b), TSR_CL_ARG(bo), TSR_CL_ARG(ldb), TSR_CL_ARG(relu)});
}
#endif

static struct starpu_perfmodel add_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_add_f32",
};

struct starpu_codelet tsr_cl_add = {
    .name = "add",
    .cpu_funcs = {add_cpu},
    .cpu_funcs_name = {"add_cpu"},
    TSR_OPENCL_FUNC(add_opencl),
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
    .model = &add_model,
};

int tsr__insert_add(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t a,
                    starpu_data_handle_t b, bool relu) {
  int m = tsr__handle_rows(y), n = tsr__handle_cols(y);
  if (tsr__handle_rows(a) != m || tsr__handle_cols(a) != n || tsr__handle_rows(b) != m ||
      tsr__handle_cols(b) != n)
    return TSR_ESHAPE;
  struct add_args args = {relu};
  starpu_data_handle_t h[3] = {y, a, b};
  return tsr__submit(o, &tsr_cl_add, &args, sizeof args, 3, h);
}
