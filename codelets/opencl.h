/* What the OpenCL functions of the codelets share (codelets/opencl.c): the
 * program of codelets/tessera.cl built once per device when the runtime
 * starts, its kernels per device, and launching them on the calling
 * worker's queue. Only compiled with -Dopencl (TSR_HAVE_OPENCL).
 *
 * OpenCL functions are asynchronous (STARPU_OPENCL_ASYNC): they enqueue on
 * the worker's in-order queue and return; StarPU waits for the queue. A
 * failing OpenCL call aborts with StarPU's report, since a codelet cannot
 * return an error. */
#ifndef TSR_CODELETS_OPENCL_H
#define TSR_CODELETS_OPENCL_H

/* In a codelet's initializer, `TSR_OPENCL_FUNC(f),`: its OpenCL function f,
 * asynchronous; none in a build without OpenCL (where f is not defined
 * either). */
#ifdef TSR_HAVE_OPENCL
#define TSR_OPENCL_FUNC(f) .opencl_funcs = {f}, .opencl_flags = {STARPU_OPENCL_ASYNC}
#else
#define TSR_OPENCL_FUNC(f) .opencl_funcs = {NULL}
#endif

#ifdef TSR_HAVE_OPENCL
#include <stdbool.h>
#include <stddef.h>

#include <starpu.h>
#include <starpu_opencl.h>

/* A tile's device buffer and its offset in floats (StarPU gives a sub-tile
 * as the whole buffer plus a byte offset). */
#define TSR_CL_MEM(buf) ((cl_mem)STARPU_MATRIX_GET_DEV_HANDLE(buf))
#define TSR_CL_OFF(buf) ((int)(STARPU_MATRIX_GET_OFFSET(buf) / sizeof(float)))

/* The kernels of tessera.cl, by index. */
typedef enum {
  TSR_CLK_FILL,
  TSR_CLK_COPY,
  TSR_CLK_AXPBY,
  TSR_CLK_SCALE,
  TSR_CLK_BIAS_ADD,
  TSR_CLK_BIAS_GRAD,
  TSR_CLK_RELU_FWD,
  TSR_CLK_RELU_BWD,
  TSR_CLK_SOFTMAX_XENT,
  TSR_CLK_SGD,
  TSR_CLK_ADAM,
  TSR_CLK_DROPOUT,
  TSR_CLK_IM2COL,
  TSR_CLK_COL2IM,
  TSR_CLK_POOL_FWD,
  TSR_CLK_POOL_BWD,
  TSR_CLK_OUTER,
  TSR_CLK_SGD_NESTEROV,
  TSR_CLK_ADAMW,
  TSR_CLK_ADD,
  TSR_CLK_CHANNELS_COPY,
  TSR_CLK_COUNT
} tsr_clk_t;

/* One kernel argument: size and address, or a __local buffer (p NULL). */
typedef struct {
  size_t size;
  const void *p;
} tsr_cl_arg_t;

#define TSR_CL_ARG(x) ((tsr_cl_arg_t){sizeof(x), &(x)})

/* Sets the arguments of kernel k for the calling worker's device and
 * enqueues it over global (columns, rows) = (n, m), rounded up to whole
 * work-groups (kernels check their bounds). m or n 0: nothing is enqueued. */
void tsr__cl_run2d(tsr_clk_t k, int m, int n, int nargs, const tsr_cl_arg_t *args);
/* The same over one work-group of `local` work-items (a reduction). */
void tsr__cl_run_group(tsr_clk_t k, size_t local, int nargs, const tsr_cl_arg_t *args);
/* The calling worker's queue. */
cl_command_queue tsr__cl_queue(void);
/* Aborts with what failed when status is not CL_SUCCESS. */
void tsr__cl_check(cl_int status, const char *what);

/* Device scratch memory of the calling worker's device: slot 0 or 1, at
 * least `floats` floats, valid until the next call with the same slot on that
 * device (the queue is in order, so later tasks never overwrite it early). */
cl_mem tsr__cl_scratch(int slot, size_t floats);

/* dst (m, n) = src, both (buffer, offset in floats, ld). */
void tsr__cl_copy(int m, int n, cl_mem dst, int dof, int ldd, cl_mem src, int so, int lds);

/* c (m, n) = alpha op(a) op(b) + beta c on the calling worker's device, with
 * CLBlast; with beta 0, c is zeroed first (it may hold garbage). */
void tsr__cl_gemm(bool ta, bool tb, int m, int n, int k, float alpha, cl_mem a, int ao, int lda,
                  cl_mem b, int bo, int ldb, float beta, cl_mem c, int co, int ldc);
/* The same on a task's first three buffers: c = buffers[2], a and b buffers[0] and [1]. */
void tsr__cl_gemm_task(void *buffers[], bool ta, bool tb, float alpha, float beta);
#endif

#endif
