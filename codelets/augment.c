/* Batch assembly with augmentation: as gather.c, the dataset rows a batch-row tile needs, each
 * one cropped and flipped as its draws say (kernels/augment.h) on the way into the tile. The
 * geometry, the padded pixels' values and the row indices travel with the task, so callers may
 * reuse their arrays at once; the dataset stays borrowed until the task ran. */
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "tessera/error.h"

/* Followed in the same allocation by fill[g.c] floats, then rows[nvalid] indices. */
struct augment_args {
  tsr_augment_geom_t g;
  const float *src;
  int64_t lds;
  int col0;
  int nvalid;
};

static void augment_cpu(void *buffers[], void *cl_arg) {
  const struct augment_args *a = cl_arg;
  const float *fill = (const float *)(a + 1);
  const int32_t *rows = (const int32_t *)(fill + a->g.c);
  tsr__k_augment_rows(&a->g, fill, TSR_ROWS(buffers[0]), TSR_COLS(buffers[0]), TSR_PTR(buffers[0]),
                      TSR_LD(buffers[0]), a->src, (int)a->lds, a->col0, rows, a->nvalid);
}

static struct starpu_perfmodel augment_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "tessera_augment_f32",
};

struct starpu_codelet tsr_cl_augment = {
    .name = "augment",
    .cpu_funcs = {augment_cpu},
    .cpu_funcs_name = {"augment_cpu"},
    .nbuffers = 1,
    .modes = {STARPU_W},
    .model = &augment_model,
};

int tsr__insert_augment(const tsr_task_opts_t *o, starpu_data_handle_t dst,
                        const tsr_augment_geom_t *g, const float *fill, const float *src,
                        int64_t lds, int col0, const int32_t *rows, int nvalid) {
  int64_t image = (int64_t)g->c * g->h * g->w;
  if (nvalid < 0 || nvalid > tsr__handle_rows(dst) || col0 < 0 || g->c <= 0 || g->h <= 0 ||
      g->w <= 0 || g->pad < 0 || col0 + tsr__handle_cols(dst) > image || image > lds)
    return TSR_ESHAPE;
  size_t size =
      sizeof(struct augment_args) + sizeof(float) * (size_t)g->c + sizeof(int32_t) * (size_t)nvalid;
  struct augment_args *args = malloc(size);
  if (!args) return TSR_ENOMEM;
  *args = (struct augment_args){*g, src, lds, col0, nvalid};
  float *at = (float *)(args + 1);
  memcpy(at, fill, sizeof(float) * (size_t)g->c);
  memcpy(at + g->c, rows, sizeof(int32_t) * (size_t)nvalid);
  int rc = tsr__submit(o, &tsr_cl_augment, args, size, 1, &dst);
  free(args);
  return rc;
}
