/* Batch assembly: copies the dataset rows a batch-row tile needs, in the
 * epoch's shuffled order, into an activation (or label) tile. The row indices
 * travel with the task (a few hundred bytes), so callers may reuse their
 * index array at once; the dataset itself stays borrowed until the task ran. */
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "kernels/kernels.h"
#include "tessera/error.h"

struct gather_args {
  const float *src;
  int64_t lds;
  int col0;
  int nvalid;
  int32_t rows[]; /* nvalid dataset row indices */
};

static void gather_cpu(void *buffers[], void *cl_arg) {
  const struct gather_args *a = cl_arg;
  tsr__k_gather_rows(TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                     TSR_LD(buffers[0]), a->src, (int)a->lds, a->col0, a->rows, a->nvalid);
}

static struct starpu_perfmodel gather_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_gather_f32",
};

struct starpu_codelet tsr_cl_gather = {
    .name = "gather",
    .cpu_funcs = {gather_cpu},
    .cpu_funcs_name = {"gather_cpu"},
    .nbuffers = 1,
    .modes = {STARPU_W},
    .model = &gather_model,
};

int tsr__insert_gather(const tsr_task_opts_t *o, starpu_data_handle_t dst, const float *src,
                       int64_t lds, int col0, const int32_t *rows, int nvalid) {
  if (nvalid < 0 || nvalid > tsr__handle_rows(dst) || col0 < 0 ||
      col0 + tsr__handle_cols(dst) > lds)
    return TSR_ESHAPE;
  size_t size = sizeof(struct gather_args) + sizeof(int32_t) * (size_t)nvalid;
  struct gather_args *args = malloc(size);
  if (!args) return TSR_ENOMEM;
  *args = (struct gather_args){src, lds, col0, nvalid};
  memcpy(args->rows, rows, sizeof(int32_t) * (size_t)nvalid);
  int rc = tsr__submit(o, &tsr_cl_gather, args, size, 1, &dst);
  free(args);
  return rc;
}
