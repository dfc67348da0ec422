/* GEMM on tiles with an epilogue on the output tile, so that a dense layer's small element-wise
 * passes ride on the last GEMM of their tile instead of being tasks of their own (with 16-row
 * tiles a bias add or a ReLU gate is about a microsecond of work against several of a task's
 * cost): c = alpha op(a) op(b) + beta c (tsr__k_gemm), then
 *   BIAS   c += e (1, n) row by row, then max(c, 0) with relu: a dense layer's forward;
 *   GATE   c = 0 where e (m, n) is not positive: the input gradient of a layer whose input came
 *          through a fused ReLU (e is that input, the ReLU's output);
 *   DBIAS  e (1, n) = ep_beta e + the column sums of b (op(b) = b, k x n): the weight gradient
 *          x^T dy of the first row of tiles also sums dy's columns into the bias gradient.
 * Each epilogue is what the separate task did, after the whole sum, in the same order, so the
 * digits are the unfused ones'. Modes: c is written only (W) with beta 0; DBIAS's e likewise
 * with ep_beta 0 (the two come together: the first batch-row tile of the chain).
 *
 * gemm_sgd, the last task of a weight gradient tile's chain, also takes the SGD step of the
 * weight tile from the gradient it has just completed, and on the first row of tiles the bias's
 * from DBIAS's column sums: the step's own task (sgd.c) would read the gradient back from
 * memory a task later; here it is in cache, and a dense layer's update is no task of its own.
 * Its buffers vary (a, b, c, [e], w, [v], [bw, [bv]]), hence STARPU_VARIABLE_NBUFFERS. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct gemm_ep_args {
  tsr_impl_choice_t choice; /* first: impls.c reads it */
  bool ta, tb, relu;
  int ep; /* TSR_EP_* */
  float alpha, beta, ep_beta;
};

/* The product by oneDNN (dnnl) or BLIS (gemm.c's two implementations), then the epilogue. */
static void gemm_ep_run(void *buffers[], const struct gemm_ep_args *g, bool dnnl) {
  int m = TSR_ROWS(buffers[2]), n = TSR_COLS(buffers[2]);
  float *c = TSR_PTR(buffers[2]), *e = TSR_PTR(buffers[3]);
  int ldc = TSR_LD(buffers[2]);
  tsr__gemm_task_cpu(buffers, dnnl, g->ta, g->tb, g->alpha, g->beta);
  if (g->ep == TSR_EP_BIAS)
    tsr__k_bias_add(m, n, c, ldc, e, g->relu);
  else if (g->ep == TSR_EP_GATE)
    tsr__k_relu_bwd(m, n, c, ldc, c, ldc, e, TSR_LD(buffers[3]));
  else
    tsr__k_bias_grad(TSR_ROWS(buffers[1]), n, e, TSR_PTR(buffers[1]), TSR_LD(buffers[1]),
                     g->ep_beta);
}

static void gemm_ep_onednn(void *buffers[], void *cl_arg) {
  gemm_ep_run(buffers, cl_arg, true);
}

static void gemm_ep_blis(void *buffers[], void *cl_arg) {
  gemm_ep_run(buffers, cl_arg, false);
}

TSR_IMPL_TASKS(gemm_ep)

struct gemm_sgd_args {
  tsr_impl_choice_t choice; /* first: impls.c reads it */
  bool ta, tb, dbias, bias_step;
  float alpha, beta;
  tsr_sgd_args_t step, bias;
};

/* Where each buffer of a gemm_sgd task is: a, b, c, then e with DBIAS, w, v with momentum, and
 * the bias's w and v when it takes its step. */
typedef struct {
  int e, w, v, bw, bv, n;
} gemm_sgd_slots_t;

static gemm_sgd_slots_t gemm_sgd_slots(const struct gemm_sgd_args *g) {
  bool mom = g->step.momentum != 0.0f;
  gemm_sgd_slots_t s = {-1, -1, -1, -1, -1, 3};
  if (g->dbias) s.e = s.n++;
  s.w = s.n++;
  if (mom) s.v = s.n++;
  if (g->bias_step) {
    s.bw = s.n++;
    if (mom) s.bv = s.n++;
  }
  return s;
}

static void *slot(void *buffers[], int k) {
  return k >= 0 ? buffers[k] : NULL;
}

static void gemm_sgd_run(void *buffers[], const struct gemm_sgd_args *g, bool dnnl) {
  gemm_sgd_slots_t s = gemm_sgd_slots(g);
  tsr__gemm_task_cpu(buffers, dnnl, g->ta, g->tb, g->alpha, g->beta);
  if (g->dbias)
    tsr__k_bias_grad(TSR_ROWS(buffers[1]), TSR_COLS(buffers[2]), TSR_PTR(buffers[s.e]),
                     TSR_PTR(buffers[1]), TSR_LD(buffers[1]), g->beta);
  tsr__sgd_cpu(buffers[s.w], slot(buffers, s.v), buffers[2], &g->step);
  if (g->bias_step) tsr__sgd_cpu(buffers[s.bw], slot(buffers, s.bv), buffers[s.e], &g->bias);
}

static void gemm_sgd_onednn(void *buffers[], void *cl_arg) {
  gemm_sgd_run(buffers, cl_arg, true);
}

static void gemm_sgd_blis(void *buffers[], void *cl_arg) {
  gemm_sgd_run(buffers, cl_arg, false);
}

TSR_IMPL_TASKS(gemm_sgd)

#ifdef TSR_HAVE_OPENCL
/* e (1, n) = beta e + the column sums of b: the bias gradient's kernel on two buffers. */
static void cl_bias_grad(void *bb, void *eb, float beta) {
  int rows = TSR_ROWS(bb), n = TSR_COLS(bb), ldb = TSR_LD(bb), bo = TSR_CL_OFF(bb);
  int eo = TSR_CL_OFF(eb);
  cl_mem b = TSR_CL_MEM(bb), e = TSR_CL_MEM(eb);
  tsr__cl_run2d(TSR_CLK_BIAS_GRAD, 1, n, 8,
                (tsr_cl_arg_t[]){TSR_CL_ARG(rows), TSR_CL_ARG(n), TSR_CL_ARG(e), TSR_CL_ARG(eo),
                                 TSR_CL_ARG(b), TSR_CL_ARG(bo), TSR_CL_ARG(ldb), TSR_CL_ARG(beta)});
}

/* CLBlast's GEMM, then the kernel the separate task ran. */
static void gemm_ep_opencl(void *buffers[], void *cl_arg) {
  const struct gemm_ep_args *g = cl_arg;
  int m = TSR_ROWS(buffers[2]), n = TSR_COLS(buffers[2]);
  int ldc = TSR_LD(buffers[2]), co = TSR_CL_OFF(buffers[2]);
  int lde = TSR_LD(buffers[3]), eo = TSR_CL_OFF(buffers[3]);
  cl_mem c = TSR_CL_MEM(buffers[2]), e = TSR_CL_MEM(buffers[3]);
  tsr__cl_gemm_task(buffers, g->ta, g->tb, g->alpha, g->beta);
  int relu = g->relu;
  if (g->ep == TSR_EP_BIAS) {
    tsr__cl_run2d(TSR_CLK_BIAS_ADD, m, n, 8,
                  (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(c), TSR_CL_ARG(co),
                                   TSR_CL_ARG(ldc), TSR_CL_ARG(e), TSR_CL_ARG(eo),
                                   TSR_CL_ARG(relu)});
  } else if (g->ep == TSR_EP_GATE) {
    tsr__cl_run2d(TSR_CLK_RELU_BWD, m, n, 11,
                  (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(c), TSR_CL_ARG(co),
                                   TSR_CL_ARG(ldc), TSR_CL_ARG(c), TSR_CL_ARG(co), TSR_CL_ARG(ldc),
                                   TSR_CL_ARG(e), TSR_CL_ARG(eo), TSR_CL_ARG(lde)});
  } else {
    cl_bias_grad(buffers[1], buffers[3], g->ep_beta);
  }
}

/* CLBlast's GEMM, the bias gradient's kernel, then the SGD kernels. */
static void gemm_sgd_opencl(void *buffers[], void *cl_arg) {
  const struct gemm_sgd_args *g = cl_arg;
  gemm_sgd_slots_t s = gemm_sgd_slots(g);
  tsr__cl_gemm_task(buffers, g->ta, g->tb, g->alpha, g->beta);
  if (g->dbias) cl_bias_grad(buffers[1], buffers[s.e], g->beta);
  tsr__sgd_opencl(buffers[s.w], slot(buffers, s.v), buffers[2], &g->step);
  if (g->bias_step) tsr__sgd_opencl(buffers[s.bw], slot(buffers, s.bv), buffers[s.e], &g->bias);
}
#endif

/* One history per epilogue: their costs differ little, but a GEMM with a bias add and one with
 * a bias gradient over the same tiles are not the same task. */
static uint32_t gemm_ep_footprint(struct starpu_task *task) {
  const struct gemm_ep_args *g = task->cl_arg;
  return tsr__cl_footprint(task, &g->ep, sizeof g->ep);
}

static struct starpu_perfmodel gemm_ep_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_gemm_ep_f32",
    .footprint = gemm_ep_footprint,
};

#define GEMM_EP_CODELET(var, c_mode, e_mode)                                                       \
  struct starpu_codelet var = {                                                                    \
      .name = "gemm_ep",                                                                           \
      .can_execute = tsr__cl_impl_can_execute,                                                     \
      .cpu_funcs = {[TSR_IMPL_ONEDNN] = gemm_ep_onednn_task, [TSR_IMPL_BLIS] = gemm_ep_blis_task}, \
      .cpu_funcs_name = {[TSR_IMPL_ONEDNN] = "gemm_ep_onednn", [TSR_IMPL_BLIS] = "gemm_ep_blis"},  \
      TSR_OPENCL_FUNC(gemm_ep_opencl),                                                             \
      .nbuffers = 4,                                                                               \
      .modes = {STARPU_R, STARPU_R, c_mode, e_mode},                                               \
      .model = &gemm_ep_model}

GEMM_EP_CODELET(tsr_cl_gemm_ep, STARPU_RW, STARPU_R);     /* BIAS, GATE accumulating */
GEMM_EP_CODELET(tsr_cl_gemm_ep_w, STARPU_W, STARPU_R);    /* BIAS, GATE with beta 0 */
GEMM_EP_CODELET(tsr_cl_gemm_dbias, STARPU_RW, STARPU_RW); /* DBIAS adding */
GEMM_EP_CODELET(tsr_cl_gemm_dbias_w, STARPU_W, STARPU_W); /* DBIAS, the first of the chain */

int tsr__insert_gemm_ep(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                        starpu_data_handle_t a, starpu_data_handle_t b, float beta,
                        starpu_data_handle_t c, int ep, starpu_data_handle_t e, bool relu) {
  int ak, m = tsr__handle_rows(c), n = tsr__handle_cols(c);
  if (!tsr__gemm_fits(ta, tb, a, b, c, &ak)) return TSR_ESHAPE;
  bool row = tsr__handle_rows(e) == 1 && tsr__handle_cols(e) == n;
  if ((ep == TSR_EP_BIAS && !row) || (ep == TSR_EP_DBIAS && (!row || tb)) ||
      (ep == TSR_EP_GATE && (tsr__handle_rows(e) != m || tsr__handle_cols(e) != n)) ||
      ep < TSR_EP_BIAS || ep > TSR_EP_DBIAS)
    return TSR_ESHAPE;
  tsr_gemm_shape_t shape = {1, ta, tb, m, n, ak, ep};
  struct gemm_ep_args args = {
      tsr__impl_choice(o, &shape, sizeof shape), ta, tb, relu, ep, alpha, beta, beta};
  struct starpu_codelet *cl = ep == TSR_EP_DBIAS
                                  ? (beta == 0.0f ? &tsr_cl_gemm_dbias_w : &tsr_cl_gemm_dbias)
                              : beta == 0.0f ? &tsr_cl_gemm_ep_w
                                             : &tsr_cl_gemm_ep;
  starpu_data_handle_t h[4] = {a, b, c, e};
  return tsr__submit(o, cl, &args, sizeof args, 4, h);
}

/* Its own history: the step's passes over the weight tile are a good part of the task. */
static struct starpu_perfmodel gemm_sgd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_gemm_sgd_f32",
};

struct starpu_codelet tsr_cl_gemm_sgd = {
    .name = "gemm_sgd",
    .can_execute = tsr__cl_impl_can_execute,
    .cpu_funcs = {[TSR_IMPL_ONEDNN] = gemm_sgd_onednn_task, [TSR_IMPL_BLIS] = gemm_sgd_blis_task},
    .cpu_funcs_name = {[TSR_IMPL_ONEDNN] = "gemm_sgd_onednn", [TSR_IMPL_BLIS] = "gemm_sgd_blis"},
    TSR_OPENCL_FUNC(gemm_sgd_opencl),
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &gemm_sgd_model,
};

int tsr__insert_gemm_sgd(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                         starpu_data_handle_t a, starpu_data_handle_t b, float beta,
                         starpu_data_handle_t c, starpu_data_handle_t e, starpu_data_handle_t w,
                         starpu_data_handle_t v, const tsr_sgd_args_t *step,
                         starpu_data_handle_t bw, starpu_data_handle_t bv,
                         const tsr_sgd_args_t *bias_step) {
  int ak, m = tsr__handle_rows(c), n = tsr__handle_cols(c);
  if (!tsr__gemm_fits(ta, tb, a, b, c, &ak)) return TSR_ESHAPE;
  if (tsr__handle_rows(w) != m || tsr__handle_cols(w) != n || step->r0 != 0) return TSR_ESHAPE;
  bool mom = step->momentum != 0.0f;
  if (mom != (v != NULL) || (bias_step && (!bw || !e || mom != (bv != NULL))) ||
      (bias_step && (bias_step->momentum != step->momentum ||
                     bias_step->nesterov != step->nesterov || bias_step->r0 != 0)))
    return TSR_EINVAL;
  if (e && (tb || tsr__handle_rows(e) != 1 || tsr__handle_cols(e) != n)) return TSR_ESHAPE;
  if (bias_step && (tsr__handle_rows(bw) != 1 || tsr__handle_cols(bw) != n)) return TSR_ESHAPE;
  /* A key of its own: under --kernels tuned the step's passes are in its timings. */
  tsr_gemm_shape_t shape = {2, ta, tb, m, n, ak, e ? TSR_EP_DBIAS : 0};
  struct gemm_sgd_args args = {tsr__impl_choice(o, &shape, sizeof shape),
                               ta,
                               tb,
                               e != NULL,
                               bias_step != NULL,
                               alpha,
                               beta,
                               *step,
                               bias_step ? *bias_step : (tsr_sgd_args_t){0}};
  enum starpu_data_access_mode out = beta == 0.0f ? STARPU_W : STARPU_RW;
  starpu_data_handle_t h[8] = {a, b, c};
  enum starpu_data_access_mode modes[8] = {STARPU_R, STARPU_R, out};
  int nh = 3;
  if (e) h[nh] = e, modes[nh++] = out;
  h[nh] = w, modes[nh++] = STARPU_RW;
  if (v) h[nh] = v, modes[nh++] = STARPU_RW;
  if (bias_step) {
    h[nh] = bw, modes[nh++] = STARPU_RW;
    if (bv) h[nh] = bv, modes[nh++] = STARPU_RW;
  }
  return tsr__submit_modes(o, &tsr_cl_gemm_sgd, &args, sizeof args, nh, h, modes);
}
