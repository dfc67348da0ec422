/* Fused softmax + cross-entropy on one batch-row tile of logits. It adds the
 * tile's loss sum and correct count into a per-row-tile stats tile, so the
 * host reads the epoch's loss and accuracy once, at the epoch end, instead of
 * waiting on every batch. Without a gradient output it serves evaluation. eps: PyTorch's
 * label smoothing (0: none). */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct xent_args {
  int nvalid;
  float scale, eps;
  int positions; /* predictions per row: the tile (m, P C) is seen as (m P, C), labels (m P, 1) */
};

/* buffers: dlogits W, stats RW, logits R, labels R */
static void xent_grad_cpu(void *buffers[], void *cl_arg) {
  const struct xent_args *a = cl_arg;
  int p = a->positions;
  tsr__k_softmax_xent(TSR_ROWS(buffers[2]) * p, TSR_COLS(buffers[2]) / p, TSR_PTR(buffers[0]),
                      TSR_LD(buffers[0]) / p, TSR_PTR(buffers[2]), TSR_LD(buffers[2]) / p,
                      TSR_PTR(buffers[3]), a->nvalid * p, a->scale, a->eps, TSR_PTR(buffers[1]));
}

/* buffers: stats RW, logits R, labels R */
static void xent_eval_cpu(void *buffers[], void *cl_arg) {
  const struct xent_args *a = cl_arg;
  int p = a->positions;
  tsr__k_softmax_xent(TSR_ROWS(buffers[1]) * p, TSR_COLS(buffers[1]) / p, NULL, 0,
                      TSR_PTR(buffers[1]), TSR_LD(buffers[1]) / p, TSR_PTR(buffers[2]),
                      a->nvalid * p, a->scale, a->eps, TSR_PTR(buffers[0]));
}

#ifdef TSR_HAVE_OPENCL
/* d: the gradient's buffer index, or -1 (evaluation); then stats, logits, labels. */
static void xent_run(void *buffers[], const struct xent_args *a, int di, int si) {
  void *zb = buffers[si + 1], *lb = buffers[si + 2];
  int p = a->positions, m = TSR_ROWS(zb) * p, n = TSR_COLS(zb) / p, has_d = di >= 0;
  cl_mem z = TSR_CL_MEM(zb), labels = TSR_CL_MEM(lb), stats = TSR_CL_MEM(buffers[si]);
  cl_mem d = has_d ? TSR_CL_MEM(buffers[di]) : z; /* unused without the gradient */
  int dof = has_d ? TSR_CL_OFF(buffers[di]) : 0, ldd = has_d ? TSR_LD(buffers[di]) / p : 0;
  int zo = TSR_CL_OFF(zb), ldz = TSR_LD(zb) / p, lo = TSR_CL_OFF(lb), ldl = TSR_LD(lb) / p;
  int so = TSR_CL_OFF(buffers[si]), nvalid = a->nvalid * p;
  float scale = a->scale, eps = a->eps;
  enum { GROUP = 64 }; /* work-items sharing the rows */
  tsr__cl_run_group(
      TSR_CLK_SOFTMAX_XENT, GROUP, 18,
      (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(d), TSR_CL_ARG(dof),
                       TSR_CL_ARG(ldd), TSR_CL_ARG(has_d), TSR_CL_ARG(z), TSR_CL_ARG(zo),
                       TSR_CL_ARG(ldz), TSR_CL_ARG(labels), TSR_CL_ARG(lo), TSR_CL_ARG(ldl),
                       TSR_CL_ARG(nvalid), TSR_CL_ARG(scale), TSR_CL_ARG(eps), TSR_CL_ARG(stats),
                       TSR_CL_ARG(so), (tsr_cl_arg_t){2 * GROUP * sizeof(float), NULL}});
}

static void xent_grad_opencl(void *buffers[], void *cl_arg) {
  xent_run(buffers, cl_arg, 0, 1);
}

static void xent_eval_opencl(void *buffers[], void *cl_arg) {
  xent_run(buffers, cl_arg, -1, 0);
}
#endif

static struct starpu_perfmodel xent_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_softmax_xent_f32",
};

struct starpu_codelet tsr_cl_softmax_xent = {
    .name = "softmax_xent",
    .cpu_funcs = {xent_grad_cpu},
    .cpu_funcs_name = {"xent_grad_cpu"},
    TSR_OPENCL_FUNC(xent_grad_opencl),
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_RW, STARPU_R, STARPU_R},
    .model = &xent_model,
};

struct starpu_codelet tsr_cl_softmax_xent_eval = {
    .name = "softmax_xent",
    .cpu_funcs = {xent_eval_cpu},
    .cpu_funcs_name = {"xent_eval_cpu"},
    TSR_OPENCL_FUNC(xent_eval_opencl),
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_R, STARPU_R},
    .model = &xent_model,
};

int tsr__insert_softmax_xent(const tsr_task_opts_t *o, starpu_data_handle_t dlogits,
                             starpu_data_handle_t stats, starpu_data_handle_t logits,
                             starpu_data_handle_t labels, int nvalid, float scale, float eps) {
  int m = tsr__handle_rows(logits), n = tsr__handle_cols(logits);
  int p = tsr__handle_cols(labels);
  if (tsr__handle_rows(labels) != m || p < 1 || n % p != 0 || tsr__handle_rows(stats) != 1 ||
      tsr__handle_cols(stats) != 2 || nvalid < 0 || nvalid > m)
    return TSR_ESHAPE;
  /* Per position, rows must be contiguous to be seen as m p rows of n / p. */
  if (p > 1 && ((int)starpu_matrix_get_local_ld(logits) != n ||
                (int)starpu_matrix_get_local_ld(labels) != p ||
                (dlogits && (int)starpu_matrix_get_local_ld(dlogits) != n)))
    return TSR_ESHAPE;
  if (!(eps >= 0.0f && eps < 1.0f)) return TSR_EINVAL;
  if (dlogits && (tsr__handle_rows(dlogits) != m || tsr__handle_cols(dlogits) != n))
    return TSR_ESHAPE;
  struct xent_args args = {nvalid, scale, eps, p};
  if (dlogits) {
    starpu_data_handle_t h[4] = {dlogits, stats, logits, labels};
    return tsr__submit(o, &tsr_cl_softmax_xent, &args, sizeof args, 4, h);
  }
  starpu_data_handle_t h[3] = {stats, logits, labels};
  return tsr__submit(o, &tsr_cl_softmax_xent_eval, &args, sizeof args, 3, h);
}
