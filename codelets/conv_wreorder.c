/* A convolution's weights reordered once a step into the layout oneDNN's primitive takes for the
 * forward pass or the input gradient (src/kernels/conv_dnnl.c), so that each batch-row tile's
 * task reads that copy instead of reordering the weights again (2x2x512 3x3 over 4 samples: the
 * reorder cost half of each call). CPU only: a pass over the weights. */
#include <stdio.h>
#include <stdlib.h>

#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct conv_wreorder_args {
  tsr_conv_geom_t g;
  int n, pass;
  bool flag;
};

/* buffers: w (kh kw c, oc) R, wb (1, floats) W */
static void conv_wreorder_cpu(void *buffers[], void *cl_arg) {
  const struct conv_wreorder_args *a = cl_arg;
  /* The insert helper checked that oneDNN has this reorder: failing now is oneDNN's error, and
   * the tasks after it would read what the buffer held. */
  if (!tsr__k_dnnl_conv_wreorder(&a->g, a->n, a->pass, a->flag, TSR_PTR(buffers[0]),
                                 TSR_LD(buffers[0]), TSR_PTR(buffers[1]))) {
    fprintf(stderr, "tessera: oneDNN could not reorder a convolution's weights\n");
    abort();
  }
}

static struct starpu_perfmodel conv_wreorder_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_conv_wreorder_f32",
};

struct starpu_codelet tsr_cl_conv_wreorder = {
    .name = "conv_wreorder",
    .cpu_funcs = {conv_wreorder_cpu},
    .cpu_funcs_name = {"conv_wreorder_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_W},
    .model = &conv_wreorder_model,
};

int tsr__insert_conv_wreorder(const tsr_task_opts_t *o, starpu_data_handle_t w,
                              starpu_data_handle_t wb, const tsr_conv_geom_t *g, int n, int pass,
                              bool flag) {
  if (tsr__handle_rows(w) != g->kh * g->kw * g->c || tsr__handle_cols(w) != g->oc ||
      tsr__handle_rows(wb) != 1 ||
      (size_t)tsr__handle_cols(wb) != tsr__k_dnnl_conv_wfloats(g, n, pass, flag))
    return TSR_ESHAPE;
  struct conv_wreorder_args args = {*g, n, pass, flag};
  starpu_data_handle_t h[2] = {w, wb};
  return tsr__submit(o, &tsr_cl_conv_wreorder, &args, sizeof args, 2, h);
}
