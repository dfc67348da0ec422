/* GELU on a tile, the tanh approximation (src/kernels/sequence.h): forward y = GELU(x), backward
 * dx = dy GELU'(x) from the forward's input. Element-wise, any tile. CPU only. */
#include "codelets.h"
#include "kernels/sequence.h"
#include "tessera/error.h"

/* buffers: y W, x R */
static void gelu_fwd_cpu(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  tsr__k_gelu_fwd(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                  TSR_LD(buffers[0]), TSR_PTR(buffers[1]), TSR_LD(buffers[1]));
}

/* buffers: dx W, dy R, x R */
static void gelu_bwd_cpu(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  tsr__k_gelu_bwd(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                  TSR_LD(buffers[0]), TSR_PTR(buffers[1]), TSR_LD(buffers[1]), TSR_PTR(buffers[2]),
                  TSR_LD(buffers[2]));
}

static struct starpu_perfmodel gelu_fwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_gelu_fwd_f32",
};

static struct starpu_perfmodel gelu_bwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_gelu_bwd_f32",
};

struct starpu_codelet tsr_cl_gelu_fwd = {
    .name = "gelu_fwd",
    .cpu_funcs = {gelu_fwd_cpu},
    .cpu_funcs_name = {"gelu_fwd_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_W, STARPU_R},
    .model = &gelu_fwd_model,
};

struct starpu_codelet tsr_cl_gelu_bwd = {
    .name = "gelu_bwd",
    .cpu_funcs = {gelu_bwd_cpu},
    .cpu_funcs_name = {"gelu_bwd_cpu"},
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
    .model = &gelu_bwd_model,
};

static bool same_shape(starpu_data_handle_t a, starpu_data_handle_t b) {
  return tsr__handle_rows(a) == tsr__handle_rows(b) && tsr__handle_cols(a) == tsr__handle_cols(b);
}

int tsr__insert_gelu_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y, starpu_data_handle_t x) {
  if (!same_shape(y, x)) return TSR_ESHAPE;
  starpu_data_handle_t h[2] = {y, x};
  return tsr__submit(o, &tsr_cl_gelu_fwd, NULL, 0, 2, h);
}

int tsr__insert_gelu_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dx, starpu_data_handle_t dy,
                         starpu_data_handle_t x) {
  if (!same_shape(dx, dy) || !same_shape(dx, x)) return TSR_ESHAPE;
  starpu_data_handle_t h[3] = {dx, dy, x};
  return tsr__submit(o, &tsr_cl_gelu_bwd, NULL, 0, 3, h);
}
