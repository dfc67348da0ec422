/* Copy one tile into another of the same shape. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

/* buffers: dst W, src R */
static void copy_cpu(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  tsr__k_copy(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
              TSR_PTR(buffers[1]), TSR_LD(buffers[1]));
}

#ifdef TSR_HAVE_OPENCL
static void copy_opencl(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  tsr__cl_copy(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_CL_MEM(buffers[0]),
               TSR_CL_OFF(buffers[0]), TSR_LD(buffers[0]), TSR_CL_MEM(buffers[1]),
               TSR_CL_OFF(buffers[1]), TSR_LD(buffers[1]));
}
#endif

static struct starpu_perfmodel copy_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_copy_f32",
};

struct starpu_codelet tsr_cl_copy = {
    .name = "copy",
    .cpu_funcs = {copy_cpu},
    .cpu_funcs_name = {"copy_cpu"},
    TSR_OPENCL_FUNC(copy_opencl),
    .nbuffers = 2,
    .modes = {STARPU_W, STARPU_R},
    .model = &copy_model,
};

int tsr__insert_copy(const tsr_task_opts_t *o, starpu_data_handle_t dst, starpu_data_handle_t src) {
  if (tsr__handle_rows(dst) != tsr__handle_rows(src) ||
      tsr__handle_cols(dst) != tsr__handle_cols(src))
    return TSR_ESHAPE;
  starpu_data_handle_t h[2] = {dst, src};
  return tsr__submit(o, &tsr_cl_copy, NULL, 0, 2, h);
}
