/* Convolution weight and bias gradients of one batch-row tile, by either of two CPU
 * implementations (impls.c): oneDNN's primitive, or the input lowered again (cheaper than
 * keeping every tile's lowering between the passes) and lowered(x)^T dy added to dw. Batch-row
 * tiles accumulate in a fixed chain, the first writing (beta 0, W access) and the next ones
 * adding (RW), so the result does not depend on scheduling. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct conv_bwd_filter_args {
  tsr_impl_choice_t choice; /* first: impls.c reads it */
  tsr_conv_geom_t g;
  float beta;
};

static void conv_bwd_filter_blis(void *buffers[], void *cl_arg) {
  const struct conv_bwd_filter_args *a = cl_arg;
  int n = TSR_ROWS(buffers[2]);
  tsr__k_conv_bwd_filter(&a->g, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                         TSR_PTR(buffers[2]), TSR_LD(buffers[2]), TSR_PTR(buffers[3]),
                         TSR_LD(buffers[3]), a->beta, tsr__workspace(tsr__k_conv_work(&a->g, n)));
}

/* The lowered kernel where oneDNN cannot serve the tile (conv_fwd.c). */
static void conv_bwd_filter_onednn(void *buffers[], void *cl_arg) {
  const struct conv_bwd_filter_args *a = cl_arg;
  int n = TSR_ROWS(buffers[2]);
  size_t work = tsr__k_dnnl_conv_work(&a->g, n, 2, a->beta != 0.0f);
  if (!work || !tsr__k_dnnl_conv_bwd_filter(&a->g, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
                                            TSR_PTR(buffers[1]), TSR_PTR(buffers[2]),
                                            TSR_LD(buffers[2]), TSR_PTR(buffers[3]),
                                            TSR_LD(buffers[3]), a->beta, tsr__workspace(work)))
    conv_bwd_filter_blis(buffers, cl_arg);
}

TSR_IMPL_TASKS(conv_bwd_filter)

#ifdef TSR_HAVE_OPENCL
/* dw = beta dw + im2col(x)^T dy with CLBlast, db = beta db + column sums of
 * dy viewed as (n oh ow, oc) (dy packed first when its rows are not
 * contiguous). */
static void conv_bwd_filter_opencl(void *buffers[], void *cl_arg) {
  const struct conv_bwd_filter_args *a = cl_arg;
  tsr_conv_geom_t g = a->g;
  int n = TSR_ROWS(buffers[2]), p = g.oh * g.ow, k = g.kh * g.kw * g.c, np = n * p, oc = g.oc;
  int lddw = TSR_LD(buffers[0]), dwo = TSR_CL_OFF(buffers[0]), dbo = TSR_CL_OFF(buffers[1]);
  int ldx = TSR_LD(buffers[2]), xo = TSR_CL_OFF(buffers[2]);
  int lddy = TSR_LD(buffers[3]), dyo = TSR_CL_OFF(buffers[3]);
  cl_mem dw = TSR_CL_MEM(buffers[0]), db = TSR_CL_MEM(buffers[1]), x = TSR_CL_MEM(buffers[2]);
  cl_mem dy = TSR_CL_MEM(buffers[3]);
  float beta = a->beta;
  if (!(n == 1 || lddy == p * oc)) {
    cl_mem packed = tsr__cl_scratch(1, (size_t)np * (size_t)oc);
    tsr__cl_copy(n, p * oc, packed, 0, p * oc, dy, dyo, lddy);
    dy = packed, dyo = 0;
  }
  cl_mem col = tsr__cl_scratch(0, (size_t)np * (size_t)k);
  tsr__cl_run2d(TSR_CLK_IM2COL, np, k, 6,
                (tsr_cl_arg_t[]){TSR_CL_ARG(g), TSR_CL_ARG(n), TSR_CL_ARG(col), TSR_CL_ARG(x),
                                 TSR_CL_ARG(xo), TSR_CL_ARG(ldx)});
  tsr__cl_gemm(true, false, k, oc, np, 1.0f, col, 0, k, dy, dyo, oc, beta, dw, dwo, lddw);
  tsr__cl_run2d(TSR_CLK_BIAS_GRAD, 1, oc, 8,
                (tsr_cl_arg_t[]){TSR_CL_ARG(np), TSR_CL_ARG(oc), TSR_CL_ARG(db), TSR_CL_ARG(dbo),
                                 TSR_CL_ARG(dy), TSR_CL_ARG(dyo), TSR_CL_ARG(oc),
                                 TSR_CL_ARG(beta)});
}
#endif

static uint32_t conv_bwd_filter_footprint(struct starpu_task *task) {
  const struct conv_bwd_filter_args *a = task->cl_arg;
  return tsr__cl_footprint(task, &a->g, sizeof a->g);
}

static struct starpu_perfmodel conv_bwd_filter_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_conv_bwd_filter_f32",
    .footprint = conv_bwd_filter_footprint,
};

struct starpu_codelet tsr_cl_conv_bwd_filter = {
    .name = "conv_bwd_filter",
    .can_execute = tsr__cl_impl_can_execute,
    .cpu_funcs = {[TSR_IMPL_ONEDNN] = conv_bwd_filter_onednn_task,
                  [TSR_IMPL_BLIS] = conv_bwd_filter_blis_task},
    .cpu_funcs_name =
        {[TSR_IMPL_ONEDNN] = "conv_bwd_filter_onednn", [TSR_IMPL_BLIS] = "conv_bwd_filter_blis"},
    TSR_OPENCL_FUNC(conv_bwd_filter_opencl),
    .nbuffers = 4,
    .modes = {STARPU_RW, STARPU_RW, STARPU_R, STARPU_R},
    .model = &conv_bwd_filter_model,
};

struct starpu_codelet tsr_cl_conv_bwd_filter_w = {
    .name = "conv_bwd_filter",
    .can_execute = tsr__cl_impl_can_execute,
    .cpu_funcs = {[TSR_IMPL_ONEDNN] = conv_bwd_filter_onednn_task,
                  [TSR_IMPL_BLIS] = conv_bwd_filter_blis_task},
    .cpu_funcs_name =
        {[TSR_IMPL_ONEDNN] = "conv_bwd_filter_onednn", [TSR_IMPL_BLIS] = "conv_bwd_filter_blis"},
    TSR_OPENCL_FUNC(conv_bwd_filter_opencl),
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_W, STARPU_R, STARPU_R},
    .model = &conv_bwd_filter_model,
};

int tsr__insert_conv_bwd_filter(const tsr_task_opts_t *o, starpu_data_handle_t dw,
                                starpu_data_handle_t db, starpu_data_handle_t x,
                                starpu_data_handle_t dy, const tsr_conv_geom_t *g, float beta) {
  int k = g->kh * g->kw * g->c;
  if (tsr__handle_rows(x) != tsr__handle_rows(dy) || tsr__handle_cols(x) != g->h * g->w * g->c ||
      tsr__handle_cols(dy) != g->oh * g->ow * g->oc || tsr__handle_rows(dw) != k ||
      tsr__handle_cols(dw) != g->oc || tsr__handle_rows(db) != 1 || tsr__handle_cols(db) != g->oc)
    return TSR_ESHAPE;
  tsr_conv_shape_t shape = {2, *g, tsr__handle_rows(x), beta != 0.0f};
  struct conv_bwd_filter_args args = {tsr__impl_choice(o, &shape, sizeof shape), *g, beta};
  starpu_data_handle_t h[4] = {dw, db, x, dy};
  return tsr__submit(o, beta == 0.0f ? &tsr_cl_conv_bwd_filter_w : &tsr_cl_conv_bwd_filter, &args,
                     sizeof args, 4, h);
}
