/* Bands of rows taken out of a tile and put back: the chunks in which
 * --sync batch averages a parameter (src/parallel/sync.c), so that a
 * transfer carries a chunk, not the whole tile around it. */
#include "codelets.h"
#include "opencl.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

/* buffers: get: dst W (the band), src R (the tile); put: dst RW (the tile), src R (the band). */
static void band_get_cpu(void *buffers[], void *cl_arg) {
  int r0 = *(const int *)cl_arg;
  tsr__k_copy(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
              TSR_PTR(buffers[1]) + (long)r0 * TSR_LD(buffers[1]), TSR_LD(buffers[1]));
}

static void band_put_cpu(void *buffers[], void *cl_arg) {
  int r0 = *(const int *)cl_arg;
  tsr__k_copy(TSR_ROWS(buffers[1]), TSR_COLS(buffers[1]),
              TSR_PTR(buffers[0]) + (long)r0 * TSR_LD(buffers[0]), TSR_LD(buffers[0]),
              TSR_PTR(buffers[1]), TSR_LD(buffers[1]));
}

#ifdef TSR_HAVE_OPENCL
static void band_get_opencl(void *buffers[], void *cl_arg) {
  int r0 = *(const int *)cl_arg;
  tsr__cl_copy(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_CL_MEM(buffers[0]),
               TSR_CL_OFF(buffers[0]), TSR_LD(buffers[0]), TSR_CL_MEM(buffers[1]),
               TSR_CL_OFF(buffers[1]) + r0 * TSR_LD(buffers[1]), TSR_LD(buffers[1]));
}

static void band_put_opencl(void *buffers[], void *cl_arg) {
  int r0 = *(const int *)cl_arg;
  tsr__cl_copy(TSR_ROWS(buffers[1]), TSR_COLS(buffers[1]), TSR_CL_MEM(buffers[0]),
               TSR_CL_OFF(buffers[0]) + r0 * TSR_LD(buffers[0]), TSR_LD(buffers[0]),
               TSR_CL_MEM(buffers[1]), TSR_CL_OFF(buffers[1]), TSR_LD(buffers[1]));
}
#endif

static struct starpu_perfmodel band_get_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_band_get_f32",
};

static struct starpu_perfmodel band_put_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_band_put_f32",
};

struct starpu_codelet tsr_cl_band_get = {
    .name = "band_get",
    .cpu_funcs = {band_get_cpu},
    .cpu_funcs_name = {"band_get_cpu"},
    TSR_OPENCL_FUNC(band_get_opencl),
    .nbuffers = 2,
    .modes = {STARPU_W, STARPU_R},
    .model = &band_get_model,
};

struct starpu_codelet tsr_cl_band_put = {
    .name = "band_put",
    .cpu_funcs = {band_put_cpu},
    .cpu_funcs_name = {"band_put_cpu"},
    TSR_OPENCL_FUNC(band_put_opencl),
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &band_put_model,
};

/* Whether band (rows of band, from r0) fits in tile, columns equal. */
static bool fits(starpu_data_handle_t tile, starpu_data_handle_t band, int r0) {
  return tsr__handle_cols(tile) == tsr__handle_cols(band) && r0 >= 0 &&
         r0 + tsr__handle_rows(band) <= tsr__handle_rows(tile);
}

int tsr__insert_band_get(const tsr_task_opts_t *o, starpu_data_handle_t dst,
                         starpu_data_handle_t src, int r0) {
  if (!fits(src, dst, r0)) return TSR_ESHAPE;
  starpu_data_handle_t h[2] = {dst, src};
  return tsr__submit(o, &tsr_cl_band_get, &r0, sizeof r0, 2, h);
}

int tsr__insert_band_put(const tsr_task_opts_t *o, starpu_data_handle_t dst, int r0,
                         starpu_data_handle_t src) {
  if (!fits(dst, src, r0)) return TSR_ESHAPE;
  starpu_data_handle_t h[2] = {dst, src};
  return tsr__submit(o, &tsr_cl_band_put, &r0, sizeof r0, 2, h);
}
