/* The OpenCL side of the codelets: the program of tessera.cl (embedded as
 * tsr__cl_source) built for every OpenCL device when the runtime starts,
 * kernels made once per device by that device's worker (one worker per
 * device, so the cache needs no lock), launches on the worker's queue, and
 * GEMM through CLBlast.
 *
 * The runtime may not call into codelets/ (the layering), so this file
 * registers its start-up and shutdown work with the runtime when the
 * library is loaded; the runtime runs it only when StarPU started OpenCL
 * workers. */
#include <stdio.h>
#include <string.h>

#include <clblast_c.h>

#include "codelets.h"
#include "opencl.h"

extern const char tsr__cl_source[]; /* tessera_cl.c, generated from tessera.cl */

static const char *const kernel_names[TSR_CLK_COUNT] = {
    [TSR_CLK_FILL] = "tsr_fill",
    [TSR_CLK_COPY] = "tsr_copy",
    [TSR_CLK_AXPBY] = "tsr_axpby",
    [TSR_CLK_SCALE] = "tsr_scale",
    [TSR_CLK_BIAS_ADD] = "tsr_bias_add",
    [TSR_CLK_BIAS_GRAD] = "tsr_bias_grad",
    [TSR_CLK_RELU_FWD] = "tsr_relu_fwd",
    [TSR_CLK_RELU_BWD] = "tsr_relu_bwd",
    [TSR_CLK_SOFTMAX_XENT] = "tsr_softmax_xent",
    [TSR_CLK_SGD] = "tsr_sgd",
    [TSR_CLK_ADAM] = "tsr_adam",
    [TSR_CLK_DROPOUT] = "tsr_dropout",
    [TSR_CLK_IM2COL] = "tsr_im2col",
    [TSR_CLK_COL2IM] = "tsr_col2im",
    [TSR_CLK_POOL_FWD] = "tsr_pool_fwd",
    [TSR_CLK_POOL_BWD] = "tsr_pool_bwd",
    [TSR_CLK_OUTER] = "tsr_outer",
    [TSR_CLK_SGD_NESTEROV] = "tsr_sgd_nesterov",
    [TSR_CLK_ADAMW] = "tsr_adamw",
    [TSR_CLK_ADD] = "tsr_add",
    [TSR_CLK_CHANNELS_COPY] = "tsr_channels_copy",
};

static struct starpu_opencl_program program;
static bool built;
static cl_kernel kernels[STARPU_MAXOPENCLDEVS][TSR_CLK_COUNT];
static cl_mem scratch[STARPU_MAXOPENCLDEVS][2];
static size_t scratch_floats[STARPU_MAXOPENCLDEVS][2];

void tsr__cl_check(cl_int status, const char *what) {
  if (status != CL_SUCCESS) STARPU_OPENCL_REPORT_ERROR_WITH_MSG(what, status);
}

static int devid(void) {
  return starpu_worker_get_devid(starpu_worker_get_id_check());
}

cl_command_queue tsr__cl_queue(void) {
  cl_command_queue q;
  starpu_opencl_get_queue(devid(), &q);
  return q;
}

static cl_kernel kernel(tsr_clk_t k, int *dev) {
  *dev = devid();
  if (!kernels[*dev][k]) {
    cl_command_queue q;
    int rc = starpu_opencl_load_kernel(&kernels[*dev][k], &q, &program, kernel_names[k], *dev);
    if (rc != CL_SUCCESS) STARPU_OPENCL_REPORT_ERROR_WITH_MSG(kernel_names[k], rc);
  }
  return kernels[*dev][k];
}

static void set_args(cl_kernel kr, tsr_clk_t k, int nargs, const tsr_cl_arg_t *args) {
  for (int i = 0; i < nargs; i++)
    tsr__cl_check(clSetKernelArg(kr, (cl_uint)i, args[i].size, args[i].p), kernel_names[k]);
}

/* Work-groups of 16 columns x 8 rows: a size every OpenCL device accepts. */
enum { LOCAL_COLS = 16, LOCAL_ROWS = 8 };

void tsr__cl_run2d(tsr_clk_t k, int m, int n, int nargs, const tsr_cl_arg_t *args) {
  if (m <= 0 || n <= 0) return;
  int dev;
  cl_kernel kr = kernel(k, &dev);
  set_args(kr, k, nargs, args);
  size_t local[2] = {LOCAL_COLS, LOCAL_ROWS};
  size_t global[2] = {((size_t)n + LOCAL_COLS - 1) / LOCAL_COLS * LOCAL_COLS,
                      ((size_t)m + LOCAL_ROWS - 1) / LOCAL_ROWS * LOCAL_ROWS};
  cl_command_queue q;
  starpu_opencl_get_queue(dev, &q);
  tsr__cl_check(clEnqueueNDRangeKernel(q, kr, 2, NULL, global, local, 0, NULL, NULL),
                kernel_names[k]);
}

void tsr__cl_run_group(tsr_clk_t k, size_t local, int nargs, const tsr_cl_arg_t *args) {
  int dev;
  cl_kernel kr = kernel(k, &dev);
  set_args(kr, k, nargs, args);
  size_t global = local;
  cl_command_queue q;
  starpu_opencl_get_queue(dev, &q);
  tsr__cl_check(clEnqueueNDRangeKernel(q, kr, 1, NULL, &global, &local, 0, NULL, NULL),
                kernel_names[k]);
}

cl_mem tsr__cl_scratch(int slot, size_t floats) {
  int d = devid();
  if (scratch_floats[d][slot] < floats) {
    /* OpenCL frees a released buffer only once the commands using it finished. */
    if (scratch[d][slot]) clReleaseMemObject(scratch[d][slot]);
    cl_context ctx;
    starpu_opencl_get_context(d, &ctx);
    cl_int st;
    scratch[d][slot] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, floats * sizeof(float), NULL, &st);
    tsr__cl_check(st, "allocating device scratch memory for a convolution");
    scratch_floats[d][slot] = floats;
  }
  return scratch[d][slot];
}

void tsr__cl_copy(int m, int n, cl_mem dst, int dof, int ldd, cl_mem src, int so, int lds) {
  tsr__cl_run2d(TSR_CLK_COPY, m, n, 8,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(dst), TSR_CL_ARG(dof),
                                 TSR_CL_ARG(ldd), TSR_CL_ARG(src), TSR_CL_ARG(so),
                                 TSR_CL_ARG(lds)});
}

void tsr__cl_gemm_task(void *buffers[], bool ta, bool tb, float alpha, float beta) {
  int m = TSR_ROWS(buffers[2]), n = TSR_COLS(buffers[2]);
  int k = ta ? TSR_ROWS(buffers[0]) : TSR_COLS(buffers[0]);
  tsr__cl_gemm(ta, tb, m, n, k, alpha, TSR_CL_MEM(buffers[0]), TSR_CL_OFF(buffers[0]),
               TSR_LD(buffers[0]), TSR_CL_MEM(buffers[1]), TSR_CL_OFF(buffers[1]),
               TSR_LD(buffers[1]), beta, TSR_CL_MEM(buffers[2]), TSR_CL_OFF(buffers[2]),
               TSR_LD(buffers[2]));
}

void tsr__cl_gemm(bool ta, bool tb, int m, int n, int k, float alpha, cl_mem a, int ao, int lda,
                  cl_mem b, int bo, int ldb, float beta, cl_mem c, int co, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (beta == 0.0f) {
    /* CLBlast computes beta c even for beta 0, and a written-only tile may
     * hold NaNs from whatever used the memory before. */
    float zero = 0.0f;
    tsr__cl_run2d(TSR_CLK_FILL, m, n, 6,
                  (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(n), TSR_CL_ARG(c), TSR_CL_ARG(co),
                                   TSR_CL_ARG(ldc), TSR_CL_ARG(zero)});
  }
  if (k <= 0) return; /* c = beta c, done by the fill or left as it is (beta 1) */
  cl_command_queue q = tsr__cl_queue();
  CLBlastStatusCode st =
      CLBlastSgemm(CLBlastLayoutRowMajor, ta ? CLBlastTransposeYes : CLBlastTransposeNo,
                   tb ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)m, (size_t)n, (size_t)k,
                   alpha, a, (size_t)ao, (size_t)lda, b, (size_t)bo, (size_t)ldb, beta, c,
                   (size_t)co, (size_t)ldc, &q, NULL);
  if (st != CLBlastSuccess) {
    char msg[96];
    snprintf(msg, sizeof msg, "CLBlastSgemm (m %d, n %d, k %d) failed with CLBlast status %d", m, n,
             k, (int)st);
    STARPU_OPENCL_REPORT_ERROR_WITH_MSG(msg, (cl_int)st);
  }
}

/* One small GEMM on device devid through a queue of our own in StarPU's
 * context: CLBlast builds its GEMM program for the device on first use, and
 * doing it here keeps that out of the first GEMM task (and its time out of
 * the performance model). Returns an OpenCL or CLBlast status. */
static cl_int warm_up_gemm(int devid) {
  cl_context ctx;
  cl_device_id dev;
  starpu_opencl_get_context(devid, &ctx);
  starpu_opencl_get_device(devid, &dev);
  cl_int st;
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &st);
  if (st != CL_SUCCESS) return st;
  enum { N = 16 };
  cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 3 * N * N * sizeof(float), NULL, &st);
  if (st == CL_SUCCESS) {
    float zero = 0.0f;
    st = clEnqueueFillBuffer(q, m, &zero, sizeof zero, 0, 3 * N * N * sizeof(float), 0, NULL, NULL);
    if (st == CL_SUCCESS)
      st = (cl_int)CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, N, N,
                                N, 1.0f, m, 0, N, m, N * N, N, 0.0f, m, 2 * N * N, N, &q, NULL);
    if (st == CL_SUCCESS) st = clFinish(q);
    clReleaseMemObject(m);
  }
  clReleaseCommandQueue(q);
  return st;
}

/* Builds tessera.cl, and CLBlast's GEMM, for every OpenCL device StarPU runs. */
static int prepare(char *msg, size_t len) {
  if (built) return 0;
  memset(kernels, 0, sizeof kernels);
  int rc = starpu_opencl_load_opencl_from_string(tsr__cl_source, &program, "-cl-std=CL1.2");
  if (rc != 0) {
    snprintf(msg, len,
             "building the OpenCL kernels failed (STARPU_SILENT unset shows the compiler's log); "
             "run with --devices none to train on CPU workers only");
    return -1;
  }
  built = true;
  int ids[STARPU_MAXOPENCLDEVS];
  int n = starpu_worker_get_ids_by_type(STARPU_OPENCL_WORKER, ids, STARPU_MAXOPENCLDEVS);
  for (int i = 0; i < n; i++) {
    int d = starpu_worker_get_devid(ids[i]);
    cl_int st = warm_up_gemm(d);
    if (st != CL_SUCCESS) {
      snprintf(msg, len,
               "CLBlast's GEMM failed on OpenCL device %d (status %d); run with --devices none "
               "to train on CPU workers only",
               d, (int)st);
      return -1;
    }
  }
  return 0;
}

static void release(void) {
  if (!built) return;
  for (int d = 0; d < STARPU_MAXOPENCLDEVS; d++)
    for (int k = 0; k < TSR_CLK_COUNT; k++)
      if (kernels[d][k]) clReleaseKernel(kernels[d][k]), kernels[d][k] = NULL;
  for (int d = 0; d < STARPU_MAXOPENCLDEVS; d++)
    for (int s = 0; s < 2; s++) {
      if (scratch[d][s]) clReleaseMemObject(scratch[d][s]);
      scratch[d][s] = NULL, scratch_floats[d][s] = 0;
    }
  starpu_opencl_unload_opencl(&program);
  /* CLBlast caches programs per context; the contexts die with StarPU. */
  CLBlastClearCache();
  built = false;
}

__attribute__((constructor)) static void register_hooks(void) {
  static const tsr_device_hooks_t hooks = {prepare, release};
  tsr__runtime_device_hooks(&hooks);
}
