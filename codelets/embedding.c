/* The embedding's tasks on one batch-row tile of token ids (n, T): the lookup y (n, T D) =
 * wte[tok] + wpe[position], and the gradient scattered into the tables. The backward tiles of a
 * batch form a chain into the one pair of tables (the first writing or adding, as the caller
 * says, the next ones adding), so the sums are deterministic and the same for every batch-row
 * tiling (src/kernels/sequence.h). CPU only: a gather and a scatter, memory-bound. */
#include "codelets.h"
#include "kernels/sequence.h"
#include "tessera/error.h"

struct embed_args {
  int vocab, context;      /* rows of the tables (context 0: no position table) */
  bool zero_tok, zero_pos; /* backward: the task writes the tables (zeroes them first) */
};

/* buffers: y W, tok R, wte R, [wpe R] */
static void embed_fwd_cpu(void *buffers[], void *cl_arg) {
  const struct embed_args *a = cl_arg;
  int n = TSR_ROWS(buffers[1]), t = TSR_COLS(buffers[1]), d = TSR_COLS(buffers[2]);
  tsr__k_embed_fwd(n, t, d, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), TSR_PTR(buffers[1]),
                   TSR_LD(buffers[1]), TSR_PTR(buffers[2]), TSR_LD(buffers[2]), a->vocab,
                   a->context ? TSR_PTR(buffers[3]) : NULL, a->context ? TSR_LD(buffers[3]) : 0);
}

/* buffers: dwte, [dwpe], tok R, dy R */
static void embed_bwd_cpu(void *buffers[], void *cl_arg) {
  const struct embed_args *a = cl_arg;
  int k = a->context ? 2 : 1;
  int n = TSR_ROWS(buffers[k]), t = TSR_COLS(buffers[k]), d = TSR_COLS(buffers[0]);
  tsr__k_embed_bwd(n, t, d, TSR_PTR(buffers[0]), TSR_LD(buffers[0]), a->vocab, a->zero_tok,
                   a->context ? TSR_PTR(buffers[1]) : NULL, a->context ? TSR_LD(buffers[1]) : 0,
                   a->context, a->zero_pos, TSR_PTR(buffers[k]), TSR_LD(buffers[k]),
                   TSR_PTR(buffers[k + 1]), TSR_LD(buffers[k + 1]));
}

static struct starpu_perfmodel embed_fwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_embed_fwd_f32",
};

static struct starpu_perfmodel embed_bwd_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_embed_bwd_f32",
};

struct starpu_codelet tsr_cl_embed_fwd = {
    .name = "embed_fwd",
    .cpu_funcs = {embed_fwd_cpu},
    .cpu_funcs_name = {"embed_fwd_cpu"},
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_R, STARPU_R, STARPU_R},
    .model = &embed_fwd_model,
};

struct starpu_codelet tsr_cl_embed_fwd_nopos = {
    .name = "embed_fwd",
    .cpu_funcs = {embed_fwd_cpu},
    .cpu_funcs_name = {"embed_fwd_cpu"},
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
    .model = &embed_fwd_model,
};

/* The position table is written by the chain's first task and added to by the others; the
 * token table is added to unless the first task writes it (nothing else wrote it this step). */
struct starpu_codelet tsr_cl_embed_bwd = {
    .name = "embed_bwd",
    .cpu_funcs = {embed_bwd_cpu},
    .cpu_funcs_name = {"embed_bwd_cpu"},
    .nbuffers = 4,
    .modes = {STARPU_RW, STARPU_RW, STARPU_R, STARPU_R},
    .model = &embed_bwd_model,
};

struct starpu_codelet tsr_cl_embed_bwd_w = {
    .name = "embed_bwd",
    .cpu_funcs = {embed_bwd_cpu},
    .cpu_funcs_name = {"embed_bwd_cpu"},
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_W, STARPU_R, STARPU_R},
    .model = &embed_bwd_model,
};

struct starpu_codelet tsr_cl_embed_bwd_nopos = {
    .name = "embed_bwd",
    .cpu_funcs = {embed_bwd_cpu},
    .cpu_funcs_name = {"embed_bwd_cpu"},
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_R, STARPU_R},
    .model = &embed_bwd_model,
};

struct starpu_codelet tsr_cl_embed_bwd_nopos_w = {
    .name = "embed_bwd",
    .cpu_funcs = {embed_bwd_cpu},
    .cpu_funcs_name = {"embed_bwd_cpu"},
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
    .model = &embed_bwd_model,
};

/* The tables agree with the tile: wte (vocab, D), wpe (context >= T, D) or NULL, tok (n, T) and
 * rows (n, T D) of y or dy. */
static bool embed_fits(starpu_data_handle_t rows, starpu_data_handle_t tok,
                       starpu_data_handle_t wte, starpu_data_handle_t wpe) {
  int t = tsr__handle_cols(tok), d = tsr__handle_cols(wte);
  if (tsr__handle_rows(rows) != tsr__handle_rows(tok) || tsr__handle_cols(rows) != t * d)
    return false;
  return !wpe || (tsr__handle_cols(wpe) == d && tsr__handle_rows(wpe) >= t);
}

int tsr__insert_embed_fwd(const tsr_task_opts_t *o, starpu_data_handle_t y,
                          starpu_data_handle_t tok, starpu_data_handle_t wte,
                          starpu_data_handle_t wpe) {
  if (!embed_fits(y, tok, wte, wpe)) return TSR_ESHAPE;
  struct embed_args args = {tsr__handle_rows(wte), wpe ? tsr__handle_rows(wpe) : 0, false, false};
  starpu_data_handle_t h[4] = {y, tok, wte, wpe};
  return tsr__submit(o, wpe ? &tsr_cl_embed_fwd : &tsr_cl_embed_fwd_nopos, &args, sizeof args,
                     wpe ? 4 : 3, h);
}

int tsr__insert_embed_bwd(const tsr_task_opts_t *o, starpu_data_handle_t dwte,
                          starpu_data_handle_t dwpe, starpu_data_handle_t tok,
                          starpu_data_handle_t dy, bool write_tokens, bool write_positions) {
  if (!embed_fits(dy, tok, dwte, dwpe)) return TSR_ESHAPE;
  struct embed_args args = {tsr__handle_rows(dwte), dwpe ? tsr__handle_rows(dwpe) : 0, write_tokens,
                            dwpe && write_positions};
  if (!dwpe) {
    starpu_data_handle_t h[3] = {dwte, tok, dy};
    return tsr__submit(o, write_tokens ? &tsr_cl_embed_bwd_nopos_w : &tsr_cl_embed_bwd_nopos, &args,
                       sizeof args, 3, h);
  }
  starpu_data_handle_t h[4] = {dwte, dwpe, tok, dy};
  bool w = write_tokens && write_positions;
  return tsr__submit(o, w ? &tsr_cl_embed_bwd_w : &tsr_cl_embed_bwd, &args, sizeof args, 4, h);
}
