/* Convolution forward on one batch-row tile, bias and a following ReLU included, by either of
 * two CPU implementations (impls.c): oneDNN's primitive, or im2col into the worker's workspace,
 * one BLIS GEMM for the whole tile, then the bias and ReLU while the output is hot in cache.
 * The _wb codelet has a fifth buffer, the weights the step reordered into the primitive's
 * layout (conv_wreorder.c), which oneDNN's function takes instead of reordering them. The _st
 * codelets have one more, last: the batchnorm after it gets its statistics partial of the tile
 * (tsr__k_bn_stats over the output's first `stats` rows, while they are in cache) in the same
 * task instead of a bn_stats task of its own; CPU only. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct conv_fwd_args {
  tsr_impl_choice_t choice; /* first: impls.c reads it */
  tsr_conv_geom_t g;
  bool relu;
  int wb_n;  /* > 0: buffers[4] holds the weights reordered for tiles of wb_n rows */
  int stats; /* >= 0: the last buffer gets the (3, oc) statistics partial of y's first `stats`
                rows (the batch's real ones); -1: none */
};

static void conv_fwd_lowered(void *buffers[], void *cl_arg) {
  const struct conv_fwd_args *a = cl_arg;
  int n = TSR_ROWS(buffers[0]);
  tsr__k_conv_fwd(&a->g, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                  TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]), TSR_PTR(buffers[3]),
                  a->relu, tsr__workspace(tsr__k_conv_work(&a->g, n)));
}

/* The lowered kernel where oneDNN cannot serve the tile (rows that are not whole samples back
 * to back, a shape oneDNN runs only with its reference code). */
static void conv_fwd_dnnl(void *buffers[], void *cl_arg) {
  const struct conv_fwd_args *a = cl_arg;
  int n = TSR_ROWS(buffers[0]);
  size_t work = tsr__k_dnnl_conv_work(&a->g, n, 0, a->relu);
  tsr_dnnl_blocked_t wb = {a->wb_n > 0 ? TSR_PTR(buffers[4]) : NULL, a->wb_n};
  if (!work ||
      !tsr__k_dnnl_conv_fwd(&a->g, n, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                            TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]),
                            TSR_PTR(buffers[3]), a->relu, &wb, tsr__workspace(work)))
    conv_fwd_lowered(buffers, cl_arg);
}

/* With a->stats >= 0, the partial (count, mean, M2) per channel of the tile's output. */
static void conv_fwd_stats(void *buffers[], const struct conv_fwd_args *a) {
  if (a->stats < 0) return;
  void *p = buffers[a->wb_n > 0 ? 5 : 4];
  double *acc = (double *)(void *)tsr__workspace(4 * (size_t)a->g.oc);
  tsr__k_bn_stats(a->stats, a->g.oh * a->g.ow, a->g.oc, TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
                  TSR_PTR(p), TSR_LD(p), acc);
}

static void conv_fwd_blis(void *buffers[], void *cl_arg) {
  conv_fwd_lowered(buffers, cl_arg);
  conv_fwd_stats(buffers, cl_arg);
}

static void conv_fwd_onednn(void *buffers[], void *cl_arg) {
  conv_fwd_dnnl(buffers, cl_arg);
  conv_fwd_stats(buffers, cl_arg);
}

TSR_IMPL_TASKS(conv_fwd)

#ifdef TSR_HAVE_OPENCL
/* im2col into scratch, one CLBlast GEMM for the tile into y when its rows
 * are contiguous (else into scratch, copied out), then the bias (and ReLU)
 * over the (n oh ow, oc) product. */
static void conv_fwd_opencl(void *buffers[], void *cl_arg) {
  const struct conv_fwd_args *a = cl_arg;
  tsr_conv_geom_t g = a->g;
  int n = TSR_ROWS(buffers[0]), p = g.oh * g.ow, k = g.kh * g.kw * g.c, np = n * p;
  int ldy = TSR_LD(buffers[0]), yo = TSR_CL_OFF(buffers[0]);
  int ldx = TSR_LD(buffers[1]), xo = TSR_CL_OFF(buffers[1]);
  int ldw = TSR_LD(buffers[2]), wo = TSR_CL_OFF(buffers[2]), bo = TSR_CL_OFF(buffers[3]);
  cl_mem y = TSR_CL_MEM(buffers[0]), x = TSR_CL_MEM(buffers[1]), w = TSR_CL_MEM(buffers[2]);
  cl_mem b = TSR_CL_MEM(buffers[3]);
  cl_mem col = tsr__cl_scratch(0, (size_t)np * (size_t)k);
  tsr__cl_run2d(TSR_CLK_IM2COL, np, k, 6,
                (tsr_cl_arg_t[]){TSR_CL_ARG(g), TSR_CL_ARG(n), TSR_CL_ARG(col), TSR_CL_ARG(x),
                                 TSR_CL_ARG(xo), TSR_CL_ARG(ldx)});
  bool direct = n == 1 || ldy == p * g.oc;
  cl_mem out = direct ? y : tsr__cl_scratch(1, (size_t)np * (size_t)g.oc);
  int oo = direct ? yo : 0, oc = g.oc, relu = a->relu;
  tsr__cl_gemm(false, false, np, oc, k, 1.0f, col, 0, k, w, wo, ldw, 0.0f, out, oo, oc);
  tsr__cl_run2d(TSR_CLK_BIAS_ADD, np, oc, 8,
                (tsr_cl_arg_t[]){TSR_CL_ARG(np), TSR_CL_ARG(oc), TSR_CL_ARG(out), TSR_CL_ARG(oo),
                                 TSR_CL_ARG(oc), TSR_CL_ARG(b), TSR_CL_ARG(bo), TSR_CL_ARG(relu)});
  if (!direct) tsr__cl_copy(n, p * oc, y, yo, ldy, out, 0, p * oc);
}
#endif

static uint32_t conv_fwd_footprint(struct starpu_task *task) {
  const struct conv_fwd_args *a = task->cl_arg;
  return tsr__cl_footprint(task, &a->g, sizeof a->g);
}

static struct starpu_perfmodel conv_fwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_conv_fwd_f32",
    .footprint = conv_fwd_footprint,
};

#define CONV_FWD_CODELET(var, n, ocl, ...)                                                         \
  struct starpu_codelet var = {                                                                    \
      .name = "conv_fwd",                                                                          \
      .can_execute = tsr__cl_impl_can_execute,                                                     \
      .cpu_funcs =                                                                                 \
          {[TSR_IMPL_ONEDNN] = conv_fwd_onednn_task, [TSR_IMPL_BLIS] = conv_fwd_blis_task},        \
      .cpu_funcs_name =                                                                            \
          {[TSR_IMPL_ONEDNN] = "conv_fwd_onednn", [TSR_IMPL_BLIS] = "conv_fwd_blis"},              \
      ocl,                                                                                         \
      .nbuffers = n,                                                                               \
      .modes = {__VA_ARGS__},                                                                      \
      .model = &conv_fwd_model}

CONV_FWD_CODELET(tsr_cl_conv_fwd, 4, TSR_OPENCL_FUNC(conv_fwd_opencl), STARPU_W, STARPU_R, STARPU_R,
                 STARPU_R);
CONV_FWD_CODELET(tsr_cl_conv_fwd_wb, 5, TSR_OPENCL_FUNC(conv_fwd_opencl), STARPU_W, STARPU_R,
                 STARPU_R, STARPU_R, STARPU_R);
/* The statistics are computed by the CPU functions only: no OpenCL function. */
CONV_FWD_CODELET(tsr_cl_conv_fwd_st, 5, .where = STARPU_CPU, STARPU_W, STARPU_R, STARPU_R, STARPU_R,
                 STARPU_W);
CONV_FWD_CODELET(tsr_cl_conv_fwd_wb_st, 6, .where = STARPU_CPU, STARPU_W, STARPU_R, STARPU_R,
                 STARPU_R, STARPU_R, STARPU_W);

int tsr__insert_conv_fwd_st(const tsr_task_opts_t *o, starpu_data_handle_t y,
                            starpu_data_handle_t x, starpu_data_handle_t w, starpu_data_handle_t b,
                            starpu_data_handle_t wb, int wb_n, const tsr_conv_geom_t *g, bool relu,
                            starpu_data_handle_t p, int stats) {
  int k = g->kh * g->kw * g->c;
  if (tsr__handle_rows(y) != tsr__handle_rows(x) || tsr__handle_cols(x) != g->h * g->w * g->c ||
      tsr__handle_cols(y) != g->oh * g->ow * g->oc || tsr__handle_rows(w) != k ||
      tsr__handle_cols(w) != g->oc || tsr__handle_rows(b) != 1 || tsr__handle_cols(b) != g->oc ||
      (wb && wb_n <= 0) ||
      (p && (tsr__handle_rows(p) != 3 || tsr__handle_cols(p) != g->oc || stats < 0 ||
             stats > tsr__handle_rows(y))))
    return TSR_ESHAPE;
  tsr_conv_shape_t shape = {0, *g, tsr__handle_rows(y), relu};
  struct conv_fwd_args args = {tsr__impl_choice(o, &shape, sizeof shape), *g, relu, wb ? wb_n : 0,
                               p ? stats : -1};
  starpu_data_handle_t h[6] = {y, x, w, b};
  int n = 4;
  if (wb) h[n++] = wb;
  if (p) h[n++] = p;
  struct starpu_codelet *cl = p ? (wb ? &tsr_cl_conv_fwd_wb_st : &tsr_cl_conv_fwd_st)
                                : (wb ? &tsr_cl_conv_fwd_wb : &tsr_cl_conv_fwd);
  return tsr__submit(o, cl, &args, sizeof args, n, h);
}

int tsr__insert_conv_fwd_wb(const tsr_task_opts_t *o, starpu_data_handle_t y,
                            starpu_data_handle_t x, starpu_data_handle_t w, starpu_data_handle_t b,
                            starpu_data_handle_t wb, int wb_n, const tsr_conv_geom_t *g,
                            bool relu) {
  return tsr__insert_conv_fwd_st(o, y, x, w, b, wb, wb_n, g, relu, NULL, 0);
}

int tsr__insert_conv_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x,
                         starpu_data_handle_t w, starpu_data_handle_t b, const tsr_conv_geom_t *g,
                         bool relu) {
  return tsr__insert_conv_fwd_wb(o, y, x, w, b, NULL, 0, g, relu);
}
