/* Causal multi-head self-attention on one batch-row tile of whole sequences
 * (src/kernels/attention.c): the forward pass writes the output and each row's log-sum-exp, the
 * backward pass the gradient of the [q | k | v] input. All heads of all the tile's samples are
 * one task; the block scores live in the worker's workspace. CPU functions only: no OpenCL
 * kernel yet (StarPU runs these on the CPU workers). */
#include "codelets.h"
#include "kernels/attention.h"
#include "tessera/error.h"

static void attention_fwd_cpu(void *b[], void *cl_arg) {
  const tsr_attn_geom_t *g = cl_arg;
  tsr__k_attention_fwd(g, TSR_ROWS(b[0]), TSR_PTR(b[0]), TSR_LD(b[0]), TSR_PTR(b[1]), TSR_LD(b[1]),
                       TSR_PTR(b[2]), TSR_LD(b[2]), tsr__workspace(tsr__k_attention_work(g)));
}

static void attention_bwd_cpu(void *b[], void *cl_arg) {
  const tsr_attn_geom_t *g = cl_arg;
  tsr__k_attention_bwd(g, TSR_ROWS(b[0]), TSR_PTR(b[0]), TSR_LD(b[0]), TSR_PTR(b[1]), TSR_LD(b[1]),
                       TSR_PTR(b[2]), TSR_LD(b[2]), TSR_PTR(b[3]), TSR_LD(b[3]), TSR_PTR(b[4]),
                       TSR_LD(b[4]), tsr__workspace(tsr__k_attention_work(g)));
}

static struct starpu_perfmodel attention_fwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_attention_fwd_f32",
};

static struct starpu_perfmodel attention_bwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_attention_bwd_f32",
};

struct starpu_codelet tsr_cl_attention_fwd = {
    .name = "attention_fwd",
    .cpu_funcs = {attention_fwd_cpu},
    .cpu_funcs_name = {"attention_fwd_cpu"},
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_W, STARPU_R},
    .model = &attention_fwd_model,
};

struct starpu_codelet tsr_cl_attention_bwd = {
    .name = "attention_bwd",
    .cpu_funcs = {attention_bwd_cpu},
    .cpu_funcs_name = {"attention_bwd_cpu"},
    .nbuffers = 5,
    .modes = {STARPU_W, STARPU_R, STARPU_R, STARPU_R, STARPU_R},
    .model = &attention_bwd_model,
};

/* Whether a tile has `rows` rows of `cols` columns. */
static bool has_shape(starpu_data_handle_t h, int rows, int cols) {
  return tsr__handle_rows(h) == rows && tsr__handle_cols(h) == cols;
}

/* g describes a sequence the kernel can take, and qkv's rows are its samples. */
static bool geom_ok(const tsr_attn_geom_t *g, starpu_data_handle_t qkv) {
  return g->t > 0 && g->heads > 0 && g->d > 0 && g->d % g->heads == 0 &&
         tsr__handle_cols(qkv) == 3 * g->t * g->d;
}

int tsr__insert_attention_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y,
                              starpu_data_handle_t lse, starpu_data_handle_t qkv,
                              const tsr_attn_geom_t *g) {
  int n = tsr__handle_rows(qkv);
  if (!geom_ok(g, qkv) || !has_shape(y, n, g->t * g->d) || !has_shape(lse, n, g->heads * g->t))
    return TSR_ESHAPE;
  starpu_data_handle_t h[3] = {y, lse, qkv};
  return tsr__submit(o, &tsr_cl_attention_fwd, g, sizeof *g, 3, h);
}

int tsr__insert_attention_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dqkv,
                              starpu_data_handle_t dy, starpu_data_handle_t qkv,
                              starpu_data_handle_t y, starpu_data_handle_t lse,
                              const tsr_attn_geom_t *g) {
  int n = tsr__handle_rows(qkv);
  if (!geom_ok(g, qkv) || !has_shape(dqkv, n, 3 * g->t * g->d) || !has_shape(dy, n, g->t * g->d) ||
      !has_shape(y, n, g->t * g->d) || !has_shape(lse, n, g->heads * g->t))
    return TSR_ESHAPE;
  starpu_data_handle_t h[5] = {dqkv, dy, qkv, y, lse};
  return tsr__submit(o, &tsr_cl_attention_bwd, g, sizeof *g, 5, h);
}
