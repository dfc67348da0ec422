/* A block of channels from one tile of channels-last rows into another (tsr__k_channels_copy):
 * a concat's forward pass puts each input's channels at their place in the output, and its
 * backward pass takes them back out of the output's gradient; a domain-split layer's bands and
 * halos are blocks of columns copied or added the same way (tsr__insert_columns). The destination
 * is only partly written, so it is read-write: the copies into one tile run in the order they were
 * submitted. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct channels_args {
  int pixels, width, dst_stride, dst_off, src_stride, src_off, add;
};

/* buffers: dst RW, src R */
static void channels_copy_cpu(void *buffers[], void *cl_arg) {
  const struct channels_args *a = cl_arg;
  tsr__k_channels_copy(TSR_ROWS(buffers[0]), a->pixels, a->width, TSR_PTR(buffers[0]),
                       TSR_LD(buffers[0]), a->dst_stride, a->dst_off, TSR_PTR(buffers[1]),
                       TSR_LD(buffers[1]), a->src_stride, a->src_off, a->add);
}

#ifdef TSR_HAVE_OPENCL
static void channels_copy_opencl(void *buffers[], void *cl_arg) {
  struct channels_args a = *(const struct channels_args *)cl_arg;
  int m = TSR_ROWS(buffers[0]);
  int ldd = TSR_LD(buffers[0]), dof = TSR_CL_OFF(buffers[0]);
  int lds = TSR_LD(buffers[1]), so = TSR_CL_OFF(buffers[1]);
  cl_mem d = TSR_CL_MEM(buffers[0]), s = TSR_CL_MEM(buffers[1]);
  tsr__cl_run2d(TSR_CLK_CHANNELS_COPY, m, a.pixels * a.width, 14,
                (tsr_cl_arg_t[]){TSR_CL_ARG(m), TSR_CL_ARG(a.pixels), TSR_CL_ARG(a.width),
                                 TSR_CL_ARG(d), TSR_CL_ARG(dof), TSR_CL_ARG(ldd),
                                 TSR_CL_ARG(a.dst_stride), TSR_CL_ARG(a.dst_off), TSR_CL_ARG(s),
                                 TSR_CL_ARG(so), TSR_CL_ARG(lds), TSR_CL_ARG(a.src_stride),
                                 TSR_CL_ARG(a.src_off), TSR_CL_ARG(a.add)});
}
#endif

static struct starpu_perfmodel channels_copy_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_channels_copy_f32",
};

struct starpu_codelet tsr_cl_channels_copy = {
    .name = "channels_copy",
    .cpu_funcs = {channels_copy_cpu},
    .cpu_funcs_name = {"channels_copy_cpu"},
    TSR_OPENCL_FUNC(channels_copy_opencl),
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &channels_copy_model,
};

static int channels_op(const tsr_task_opts_t *o, starpu_data_handle_t dst, int dst_stride,
                       int dst_off, starpu_data_handle_t src, int src_stride, int src_off,
                       int pixels, int width, bool add) {
  int64_t dst_end = (int64_t)(pixels - 1) * dst_stride + dst_off + width;
  int64_t src_end = (int64_t)(pixels - 1) * src_stride + src_off + width;
  if (tsr__handle_rows(dst) != tsr__handle_rows(src) || pixels < 1 || width < 1 || dst_off < 0 ||
      src_off < 0 || dst_end > tsr__handle_cols(dst) || src_end > tsr__handle_cols(src) ||
      (pixels > 1 && (dst_stride < width || src_stride < width)))
    return TSR_ESHAPE;
  struct channels_args args = {pixels, width, dst_stride, dst_off, src_stride, src_off, add};
  starpu_data_handle_t h[2] = {dst, src};
  return tsr__submit(o, &tsr_cl_channels_copy, &args, sizeof args, 2, h);
}

int tsr__insert_channels_copy(const tsr_task_opts_t *o, starpu_data_handle_t dst, int dst_stride,
                              int dst_off, starpu_data_handle_t src, int src_stride, int src_off,
                              int pixels, int width) {
  return channels_op(o, dst, dst_stride, dst_off, src, src_stride, src_off, pixels, width, false);
}

int tsr__insert_columns(const tsr_task_opts_t *o, starpu_data_handle_t dst, int dst_off,
                        starpu_data_handle_t src, int src_off, int width, bool add) {
  return channels_op(o, dst, 0, dst_off, src, 0, src_off, 1, width, add);
}
