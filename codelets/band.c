/* Bands of rows taken out of a tile and put back: the chunks in which
 * --sync batch averages a parameter (src/parallel/sync.c), so that a
 * transfer carries a chunk, not the whole tile around it; and bands packed
 * into (and unpacked from) a bucket, one row of floats that carries many
 * chunks in one message (--bucket-mb). */
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

/* buffers: pack: the bucket RW, the tile R; unpack: the tile RW, the bucket R. The band, rows
 * r0 .. r0 + rows of the tile, is rows x cols floats from the bucket's float off. */
static void pack_cpu(void *buffers[], void *cl_arg) {
  const tsr_bucket_args_t *a = cl_arg;
  int cols = TSR_COLS(buffers[1]);
  tsr__k_copy(a->rows, cols, TSR_PTR(buffers[0]) + a->off, cols,
              TSR_PTR(buffers[1]) + (long)a->r0 * TSR_LD(buffers[1]), TSR_LD(buffers[1]));
}

static void unpack_cpu(void *buffers[], void *cl_arg) {
  const tsr_bucket_args_t *a = cl_arg;
  int cols = TSR_COLS(buffers[0]);
  tsr__k_copy(a->rows, cols, TSR_PTR(buffers[0]) + (long)a->r0 * TSR_LD(buffers[0]),
              TSR_LD(buffers[0]), TSR_PTR(buffers[1]) + a->off, cols);
}

#ifdef TSR_HAVE_OPENCL
static void pack_opencl(void *buffers[], void *cl_arg) {
  const tsr_bucket_args_t *a = cl_arg;
  int cols = TSR_COLS(buffers[1]);
  tsr__cl_copy(a->rows, cols, TSR_CL_MEM(buffers[0]), TSR_CL_OFF(buffers[0]) + (int)a->off, cols,
               TSR_CL_MEM(buffers[1]), TSR_CL_OFF(buffers[1]) + a->r0 * TSR_LD(buffers[1]),
               TSR_LD(buffers[1]));
}

static void unpack_opencl(void *buffers[], void *cl_arg) {
  const tsr_bucket_args_t *a = cl_arg;
  int cols = TSR_COLS(buffers[0]);
  tsr__cl_copy(a->rows, cols, TSR_CL_MEM(buffers[0]),
               TSR_CL_OFF(buffers[0]) + a->r0 * TSR_LD(buffers[0]), TSR_LD(buffers[0]),
               TSR_CL_MEM(buffers[1]), TSR_CL_OFF(buffers[1]) + (int)a->off, cols);
}

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

static struct starpu_perfmodel pack_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_bucket_pack_f32",
};

static struct starpu_perfmodel unpack_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_bucket_unpack_f32",
};

struct starpu_codelet tsr_cl_bucket_pack = {
    .name = "bucket_pack",
    .cpu_funcs = {pack_cpu},
    .cpu_funcs_name = {"pack_cpu"},
    TSR_OPENCL_FUNC(pack_opencl),
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &pack_model,
};

struct starpu_codelet tsr_cl_bucket_unpack = {
    .name = "bucket_unpack",
    .cpu_funcs = {unpack_cpu},
    .cpu_funcs_name = {"unpack_cpu"},
    TSR_OPENCL_FUNC(unpack_opencl),
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &unpack_model,
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

/* Whether rows r0 .. r0 + rows of tile fit it, and as many floats from off fit bucket. */
static bool fits_bucket(starpu_data_handle_t tile, starpu_data_handle_t bucket,
                        const tsr_bucket_args_t *a) {
  return a->r0 >= 0 && a->rows > 0 && a->r0 + a->rows <= tsr__handle_rows(tile) && a->off >= 0 &&
         a->off + (int64_t)a->rows * tsr__handle_cols(tile) <=
             (int64_t)tsr__handle_rows(bucket) * tsr__handle_cols(bucket);
}

int tsr__insert_bucket_pack(const tsr_task_opts_t *o, starpu_data_handle_t bucket, int64_t off,
                            starpu_data_handle_t src, int r0, int rows) {
  tsr_bucket_args_t a = {r0, rows, off};
  if (!fits_bucket(src, bucket, &a)) return TSR_ESHAPE;
  starpu_data_handle_t h[2] = {bucket, src};
  return tsr__submit(o, &tsr_cl_bucket_pack, &a, sizeof a, 2, h);
}

int tsr__insert_bucket_unpack(const tsr_task_opts_t *o, starpu_data_handle_t dst, int r0, int rows,
                              starpu_data_handle_t bucket, int64_t off) {
  tsr_bucket_args_t a = {r0, rows, off};
  if (!fits_bucket(dst, bucket, &a)) return TSR_ESHAPE;
  starpu_data_handle_t h[2] = {dst, bucket};
  return tsr__submit(o, &tsr_cl_bucket_unpack, &a, sizeof a, 2, h);
}
