/* Asynchronous epoch averaging (dislib's asynchronous strategy): a rank at
 * its epoch end folds its weights into the global copy, global = (global +
 * w) / 2, and takes a snapshot of the result to continue from. Fold and
 * snapshot are one task so that the snapshot is this rank's fold and not a
 * later one, while folds of different ranks commute on the global copy. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

/* buffers: global RW|COMMUTE, snap W, w R */
static void fold_cpu(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]);
  tsr__k_axpby(m, n, 0.5f, TSR_PTR(buffers[2]), TSR_LD(buffers[2]), 0.5f, TSR_PTR(buffers[0]),
               TSR_LD(buffers[0]));
  tsr__k_copy(m, n, TSR_PTR(buffers[1]), TSR_LD(buffers[1]), TSR_PTR(buffers[0]),
              TSR_LD(buffers[0]));
}

#ifdef TSR_HAVE_OPENCL
static void fold_opencl(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  int m = TSR_ROWS(buffers[0]), n = TSR_COLS(buffers[0]);
  int ldg = TSR_LD(buffers[0]), go = TSR_CL_OFF(buffers[0]);
  int ldw = TSR_LD(buffers[2]), wo = TSR_CL_OFF(buffers[2]);
  cl_mem g = TSR_CL_MEM(buffers[0]), w = TSR_CL_MEM(buffers[2]);
  float half = 0.5f;
  tsr__cl_run2d(TSR_CLK_AXPBY, m, n, 10,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(half), TSR_CL_ARG(w),
                                 TSR_CL_ARG(wo), TSR_CL_ARG(ldw), TSR_CL_ARG(half), TSR_CL_ARG(g),
                                 TSR_CL_ARG(go), TSR_CL_ARG(ldg)});
  tsr__cl_copy(m, n, TSR_CL_MEM(buffers[1]), TSR_CL_OFF(buffers[1]), TSR_LD(buffers[1]), g, go,
               ldg);
}
#endif

static struct starpu_perfmodel fold_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_fold_f32",
};

struct starpu_codelet tsr_cl_fold = {
    .name = "fold",
    .cpu_funcs = {fold_cpu},
    .cpu_funcs_name = {"fold_cpu"},
    TSR_OPENCL_FUNC(fold_opencl),
    .nbuffers = 3,
    .modes = {STARPU_RW | STARPU_COMMUTE, STARPU_W, STARPU_R},
    .model = &fold_model,
};

/* Deterministic mode: folds in submission (rank) order. */
struct starpu_codelet tsr_cl_fold_ordered = {
    .name = "fold",
    .cpu_funcs = {fold_cpu},
    .cpu_funcs_name = {"fold_cpu"},
    TSR_OPENCL_FUNC(fold_opencl),
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_W, STARPU_R},
    .model = &fold_model,
};

int tsr__insert_fold(const tsr_task_opts_t *o, starpu_data_handle_t global,
                     starpu_data_handle_t snap, starpu_data_handle_t w, bool commute) {
  starpu_data_handle_t h[3] = {global, snap, w};
  for (int i = 1; i < 3; i++)
    if (tsr__handle_rows(h[i]) != tsr__handle_rows(global) ||
        tsr__handle_cols(h[i]) != tsr__handle_cols(global))
      return TSR_ESHAPE;
  return tsr__submit(o, commute ? &tsr_cl_fold : &tsr_cl_fold_ordered, NULL, 0, 3, h);
}
