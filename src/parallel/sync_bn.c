/* --sync-bn: batch statistics over the batches of every rank (synchronized batch
 * normalization, as PyTorch's SyncBatchNorm), by StarPU-MPI tasks every step. Installed as the
 * net's statistics hook (net_impl.h): a layer whose type reduces batch statistics
 * (batch_stats, layers.h) hands over the (3, C) partial of its batch, tile 0 of its scratch[0];
 * the first rank of a group combines every rank's into its own in rank order (forward: count,
 * mean, M2 by Chan's formula; backward: the sums added), then every rank of the group gets a
 * copy. Without a grid the group is every rank. Under --grid PrxPc a column's ranks already
 * hold the column's statistics (batchnorm is computed whole on each, or its bands' are reduced
 * inside the column under --domain rows), so the groups are the grid's rows: rank r with the
 * ranks c Pr + r % Pr of the other columns. Fixed order: deterministic. Bytes per layer and
 * pass: 2 (Pc - 1) tiles of 3 C floats through each row's first rank (Pc = P without a grid).
 *
 * Batches of different sizes (--shares, a short last batch): rank q's dy is its own loss's,
 * the mean over its n_q samples, N / n_q times the global mean loss's (N = sum n_q), and so is
 * every gradient it computes. Its input gradient needs the global sums of g = dL/dy, each
 * rank's sums S_q scaled by n_q / N, in its own scale N / n_q, over the count N the
 * statistics give: the backward sums rank q gets are sum_q' (n_q' / n_q) S_q'. Added on the
 * group's first rank with samples (r) as S_r + sum_q (n_q / n_r) S_q, then sent to each q
 * times n_r / n_q; a rank without samples keeps its zeros. Equal batches take the plain sum
 * (the same value, not rounded twice). The forward's counts are in the partials already. */
#include <stdlib.h>

#include "nn/layers.h"
#include "parallel/sync_bn.h"
#include "tile/ops.h"
#include "tile/tiles_impl.h"
#include "tessera/dist.h"
#include "try.h"

typedef struct {
  tsr_tiles_t *p;     /* the layer's partials (borrowed) */
  tsr_tiles_t **view; /* [size] replica views of p: rank q's copy */
} bn_entry_t;

struct tsr_sync_bn {
  tsr_net_t *net;
  int size, n;
  int rows;      /* groups: the grid's rows (Pr; 1 without a grid), rank q in row q % rows */
  bn_entry_t *e; /* [n], one per batchnorm layer in layer order */
  int *count;    /* [size] samples each rank takes in the coming step (tsr__sync_bn_count) */
  bool uneven;   /* some group's ranks take different counts */
  tsr_stats_hook_t previous;
};

/* The backward sums of group `row` under batches of different sizes (the header's formula). */
static int weighted_sums(const tsr_sync_bn_t *s, const bn_entry_t *e, int row,
                         const tsr_task_opts_t *mpi) {
  int first = -1;
  for (int q = row; q < s->size && first < 0; q += s->rows)
    if (s->count[q] > 0) first = q;
  if (first < 0) return 0; /* nobody has samples: every sum is zero */
  double nr = s->count[first];
  for (int q = row; q < s->size; q += s->rows)
    if (q != first && s->count[q] > 0)
      TSR_TRY(tsr__tile_axpby(mpi, (float)(s->count[q] / nr), e->view[q], 1.0f, e->view[first], 0,
                              0, false));
  for (int q = row; q < s->size; q += s->rows)
    if (q != first && s->count[q] > 0)
      TSR_TRY(tsr__tile_axpby(mpi, (float)(nr / s->count[q]), e->view[first], 0.0f, e->view[q], 0,
                              0, false));
  return 0;
}

static int stats_hook(tsr_net_t *net, tsr_tiles_t *p, bool backward, const tsr_task_opts_t *o,
                      void *ctx) {
  (void)net;
  tsr_sync_bn_t *s = ctx;
  bn_entry_t *e = NULL;
  for (int k = 0; k < s->n && !e; k++)
    if (s->e[k].p == p) e = &s->e[k];
  if (!e) return TSR_EINVAL;
  tsr_task_opts_t mpi = *o;
  mpi.mpi = true;
  for (int row = 0; row < s->rows; row++) { /* every rank submits every row's tasks */
    if (backward && s->uneven) {
      TSR_TRY(weighted_sums(s, e, row, &mpi));
      continue;
    }
    for (int q = row + s->rows; q < s->size; q += s->rows)
      TSR_TRY(tsr__tile_bn_combine(&mpi, e->view[row], e->view[q], backward));
    for (int q = row + s->rows; q < s->size; q += s->rows)
      TSR_TRY(tsr__tile_copy(&mpi, e->view[q], e->view[row], 0, 0));
  }
  return 0;
}

void tsr__sync_bn_count(tsr_sync_bn_t *s, const int *samples_per_rank) {
  s->uneven = false;
  for (int q = 0; q < s->size; q++) {
    s->count[q] = samples_per_rank[q];
    if (q >= s->rows && s->count[q] != s->count[q % s->rows]) s->uneven = true;
  }
}

void tsr__sync_bn_destroy(tsr_sync_bn_t **sp) {
  tsr_sync_bn_t *s = *sp;
  if (!s) return;
  if (s->net) tsr__net_set_stats_hook(s->net, s->previous);
  for (int k = 0; s->e && k < s->n; k++) {
    for (int q = 0; s->e[k].view && q < s->size; q++)
      tsr_tiles_destroy(&s->e[k].view[q]);
    free(s->e[k].view);
  }
  free(s->e), free(s->count), free(s);
  *sp = NULL;
}

int tsr__sync_bn_create(tsr_sync_bn_t **out, tsr_net_t *net) {
  *out = NULL;
  tsr_sync_bn_t *s = calloc(1, sizeof *s);
  if (!s) return TSR_ENOMEM;
  s->size = tsr_dist_size(), s->rows = tsr_net_grid_rows(net);
  for (int i = 0; i < net->n_layers; i++)
    s->n += net->layers[i].lay->type->batch_stats;
  s->e = calloc((size_t)s->n + 1, sizeof *s->e);
  s->count = calloc((size_t)s->size, sizeof *s->count);
  int rc = s->e && s->count ? 0 : TSR_ENOMEM;
  for (int i = 0, k = 0; i < net->n_layers && rc == 0; i++) {
    tsr_layer_t *l = &net->layers[i];
    if (!l->lay->type->batch_stats) continue;
    bn_entry_t *e = &s->e[k++];
    e->p = l->scratch[0];
    if (!(e->view = calloc((size_t)s->size, sizeof *e->view))) rc = TSR_ENOMEM;
    for (int q = 0; q < s->size && rc == 0; q++)
      rc = tsr__tiles_replica(&e->view[q], e->p, q);
  }
  if (rc) {
    tsr__sync_bn_destroy(&s);
    return rc;
  }
  s->net = net;
  s->previous = tsr__net_set_stats_hook(net, (tsr_stats_hook_t){stats_hook, s});
  *out = s;
  return 0;
}
