/* GEMM over the positions of sequence tiles: c = alpha op(a) op(b) + beta c, where an operand
 * given with p positions is a batch-row tile (m, p k) of whole, contiguous samples seen as the
 * (m p, k) matrix of its positions (ld = p k, so ld / p = k). The language-model head's three
 * products are of this kind: logits (m T, V) = x (m T, D) wte^T, dx = dy wte, and wte's
 * gradient dy^T x. BLIS inside the task, as codelets/gemm.c. CPU only. */
#include <starpu.h>

#include "codelets.h"
#include "tessera/error.h"

struct seq_gemm_args {
  bool ta, tb;
  float alpha, beta;
  int pa, pb, pc; /* positions per row of a, b, c (1: a plain tile) */
};

/* The leading dimension of a tile of p positions per row seen as positions: its row's p
 * blocks of cols / p floats follow each other (the insert helper checked contiguity). */
static int seq_ld(void *buf, int p) {
  return p > 1 ? TSR_COLS(buf) / p : TSR_LD(buf);
}

/* buffers: a R, b R, c W or RW */
static void seq_gemm_cpu(void *buffers[], void *cl_arg) {
  const struct seq_gemm_args *g = cl_arg;
  int m = TSR_ROWS(buffers[2]) * g->pc, n = TSR_COLS(buffers[2]) / g->pc;
  int k = g->ta ? TSR_ROWS(buffers[0]) * g->pa : TSR_COLS(buffers[0]) / g->pa;
  tsr__k_gemm(g->ta, g->tb, m, n, k, g->alpha, TSR_PTR(buffers[0]), seq_ld(buffers[0], g->pa),
              TSR_PTR(buffers[1]), seq_ld(buffers[1], g->pb), g->beta, TSR_PTR(buffers[2]),
              seq_ld(buffers[2], g->pc));
}

static struct starpu_perfmodel seq_gemm_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_seq_gemm_f32",
};

struct starpu_codelet tsr_cl_seq_gemm = {
    .name = "seq_gemm",
    .cpu_funcs = {seq_gemm_cpu},
    .cpu_funcs_name = {"seq_gemm_cpu"},
    .nbuffers = 3,
    .modes = {STARPU_R, STARPU_R, STARPU_RW},
    .model = &seq_gemm_model,
};

struct starpu_codelet tsr_cl_seq_gemm_w = {
    .name = "seq_gemm",
    .cpu_funcs = {seq_gemm_cpu},
    .cpu_funcs_name = {"seq_gemm_cpu"},
    .nbuffers = 3,
    .modes = {STARPU_R, STARPU_R, STARPU_W},
    .model = &seq_gemm_model,
};

/* The (rows, cols) a tile of p positions per row is seen as, or false when it cannot be (its
 * columns not a multiple of p, or its rows not contiguous). */
static bool seen_as(starpu_data_handle_t h, int p, int *rows, int *cols) {
  int r = tsr__handle_rows(h), c = tsr__handle_cols(h);
  if (p < 1 || c % p != 0) return false;
  if (p > 1 && r > 1 && (int)starpu_matrix_get_local_ld(h) != c) return false;
  *rows = r * p, *cols = c / p;
  return true;
}

int tsr__insert_seq_gemm(const tsr_task_opts_t *o, bool ta, bool tb, float alpha,
                         starpu_data_handle_t a, int pa, starpu_data_handle_t b, int pb, float beta,
                         starpu_data_handle_t c, int pc) {
  int ar, ac, br, bc, cr, cc;
  if (!seen_as(a, pa, &ar, &ac) || !seen_as(b, pb, &br, &bc) || !seen_as(c, pc, &cr, &cc))
    return TSR_ESHAPE;
  int am = ta ? ac : ar, ak = ta ? ar : ac, bk = tb ? bc : br, bn = tb ? br : bc;
  if (am != cr || bn != cc || ak != bk) return TSR_ESHAPE;
  struct seq_gemm_args args = {ta, tb, alpha, beta, pa, pb, pc};
  starpu_data_handle_t h[3] = {a, b, c};
  return tsr__submit(o, beta == 0.0f ? &tsr_cl_seq_gemm_w : &tsr_cl_seq_gemm, &args, sizeof args, 3,
                     h);
}
