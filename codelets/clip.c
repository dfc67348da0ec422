/* Gradient-norm clipping (--clip-grad): acc += the sum of squares of a gradient tile, and a
 * gradient tile scaled by min(1, max / (sqrt(acc) + 1e-6)). acc is a 1 x 1 tile, written by
 * one task after another in submission order (a fixed order: the sum is deterministic). CPU
 * only: the tiles are small next to the step, and each pass is one read of the gradient. */
#include "codelets.h"
#include "kernels/kernels.h"

static void sumsq_add_cpu(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  float *acc = TSR_PTR(buffers[1]);
  acc[0] += (float)tsr__k_sumsq(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                                TSR_LD(buffers[0]));
}

static struct starpu_perfmodel sumsq_add_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_sumsq_add_f32",
};

struct starpu_codelet tsr_cl_sumsq_add = {
    .name = "sumsq_add",
    .cpu_funcs = {sumsq_add_cpu},
    .cpu_funcs_name = {"sumsq_add_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_RW},
    .model = &sumsq_add_model,
};

int tsr__insert_sumsq_add(const tsr_task_opts_t *o, starpu_data_handle_t x,
                          starpu_data_handle_t acc) {
  return tsr__submit(o, &tsr_cl_sumsq_add, NULL, 0, 2, (starpu_data_handle_t[]){x, acc});
}

static void clip_cpu(void *buffers[], void *cl_arg) {
  const float *max_norm = cl_arg;
  const float *acc = TSR_PTR(buffers[1]);
  tsr__k_clip(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]), TSR_LD(buffers[0]),
              acc[0], *max_norm);
}

static struct starpu_perfmodel clip_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_clip_f32",
};

struct starpu_codelet tsr_cl_clip = {
    .name = "clip",
    .cpu_funcs = {clip_cpu},
    .cpu_funcs_name = {"clip_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .model = &clip_model,
};

int tsr__insert_clip(const tsr_task_opts_t *o, starpu_data_handle_t x, starpu_data_handle_t acc,
                     float max_norm) {
  return tsr__submit(o, &tsr_cl_clip, &max_norm, sizeof max_norm, 2,
                     (starpu_data_handle_t[]){x, acc});
}
