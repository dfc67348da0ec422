/* Domain parallelism (--grid PrxPc --domain rows): Gholami et al.'s third dimension. A grid
 * column's Pr ranks cut the images of a convolution's or pooling's output into bands of rows
 * (tsr__k_band: ceil(oh / Pr) rows each, band p on the column's row p), which are the output's
 * column tiles: samples are rows stored (h, w, c), so image rows [r0, r1) are the columns
 * [r0 w c, r1 w c) of a sample's row. Each rank computes its own band from a slab of its
 * input, the input rows its output rows' windows read (tsr__k_band_window): its own input band
 * and the halo rows the ranks of the neighbouring bands send it (each owner copies them out
 * into a small tile first, so that only halo rows travel). Backward, the gradient of the slab
 * comes back the same way: the halo rows' parts go to their owners, who add them to their own
 * band's gradient in band order. A convolution's weight and bias gradients, each rank's from
 * its own band, are summed on row 0 in band order and sent back to every rank of the column,
 * whose copies of the (replicated) parameters then take the same step.
 *
 * The input is another domain layer's banded output, or the input batch (every rank of the
 * column holds it whole: the slab is copied out of it, nothing travels). Every rank of the
 * column makes every call alike; each task is a plain StarPU task on the rank of its band, each
 * transfer explicit (starpu_mpi_get_data_on_node_detached). Transfers are counted in tr (the
 * grid's traffic; the halo rows also in halo_bytes_sent, on the rank sending). */
#ifndef TSR_TILE_DOMAIN_H
#define TSR_TILE_DOMAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "runtime/task_opts.h"
#include "tile/ops.h"
#include "tessera/tiles.h"

typedef struct tsr_domain tsr_domain_t;

/* The slabs, halos and partial gradients of one layer of geometry g (its input c h w, window,
 * output oc oh ow) over a column of pr ranks (ranks[p]: row p's rank; copied), for activations
 * of `batch` rows in mb-row tiles: banded_in, its input is banded (else the input batch,
 * whole on every rank); dx, its input gradient is computed (banded_in only); params, it has a
 * weight (kh kw c, oc) and bias (1, oc) whose gradients are summed over the column. Each rank
 * allocates only its own. */
int tsr__domain_create(tsr_domain_t **out, const tsr_conv_geom_t *g, int pr, const int *ranks,
                       int64_t batch, int mb, bool banded_in, bool dx, bool params);
void tsr__domain_destroy(tsr_domain_t **d);
/* Floats rank `row` of the column stores for d (slabs, halos, partial gradients). */
int64_t tsr__domain_floats(const tsr_conv_geom_t *g, int pr, int row, int64_t batch, bool banded_in,
                           bool dx, bool params);

/* Forward: each rank's slab from x (banded like the layer's input bands, or the input batch),
 * then y's bands (y: (batch, oh ow oc) in band-wide column tiles, band p on row p): the
 * convolution (w, b per-node, relu fused) or the pooling (max or mean). */
int tsr__domain_conv_fwd(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *y,
                         const tsr_tiles_t *x, const tsr_tiles_t *w, const tsr_tiles_t *b,
                         bool relu, tsr_traffic_t *tr);
int tsr__domain_pool_fwd(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *y,
                         const tsr_tiles_t *x, bool max, tsr_traffic_t *tr);
/* Backward from dy (banded like y): the input gradient dx (banded like x; NULL: none), and for
 * a convolution the weight and bias gradients dw, db (per-node: every rank of the column gets
 * the column's sum). Pooling reads the forward output y (max) and applies a fused ReLU's
 * backward (relu, max only) as tsr__tiles_pool_bwd does. critical: the options of the input
 * gradient's tasks. */
int tsr__domain_conv_bwd(const tsr_task_opts_t *o, const tsr_task_opts_t *critical, tsr_domain_t *d,
                         tsr_tiles_t *dx, const tsr_tiles_t *dy, const tsr_tiles_t *w,
                         tsr_tiles_t *dw, tsr_tiles_t *db, tsr_traffic_t *tr);
int tsr__domain_pool_bwd(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *dx,
                         const tsr_tiles_t *dy, const tsr_tiles_t *y, bool max, bool relu,
                         tsr_traffic_t *tr);

/* Batch normalization over banded samples (geometry g: its c h w): each band's statistics over
 * its rows (per batch-row tile, then the one process's tree), combined on row 0 in band order
 * and sent to every rank of the column, where they normalize each band alike. */
int tsr__domain_bn_create(tsr_domain_t **out, const tsr_conv_geom_t *g, int pr, const int *ranks,
                          int64_t batch, int mb);
int64_t tsr__domain_bn_floats(const tsr_conv_geom_t *g, int pr, int row, int64_t batch, int mb);
/* out (a local (3, c) tile on every rank of the column) = the column's partials of x's first
 * valid rows (count, mean, M2 per channel); with dy, the backward sums of dy and dy xhat
 * instead (xhat from s; y read for a fused ReLU, relu). */
int tsr__domain_bn_reduce(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *out,
                          const tsr_tiles_t *x, const tsr_tiles_t *dy, const tsr_tiles_t *y,
                          const tsr_tiles_t *s, int valid, bool relu, tsr_traffic_t *tr);
/* y's bands = normalize(x's) with s, scale, shift (local tiles), as tsr__tiles_bn_normalize. */
int tsr__domain_bn_normalize(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *y,
                             const tsr_tiles_t *x, const tsr_tiles_t *s, const tsr_tiles_t *scale,
                             const tsr_tiles_t *shift, bool relu);
/* dx's bands, as tsr__tiles_bn_dx, from the column's sums p. */
int tsr__domain_bn_dx(const tsr_task_opts_t *o, tsr_domain_t *d, tsr_tiles_t *dx,
                      const tsr_tiles_t *dy, const tsr_tiles_t *x, const tsr_tiles_t *y,
                      const tsr_tiles_t *s, const tsr_tiles_t *scale, const tsr_tiles_t *p,
                      int valid, bool relu);

/* A layer computed whole over a banded input (past --domain rows:K): every rank of the column
 * (pr ranks, ranks[p] row p's) receives x's bands (tile (i, q) on row q) into its own whole
 * copy `whole` (per-node, (batch, h w c) one tile wide); backward, each band's gradient (dx,
 * banded like x) is its columns of the whole gradient `whole_dx`, the same on every rank. */
int tsr__domain_allgather(const tsr_task_opts_t *o, const tsr_tiles_t *x, tsr_tiles_t *whole,
                          int pr, const int *ranks, tsr_traffic_t *tr);
int tsr__domain_take_bands(const tsr_task_opts_t *o, tsr_tiles_t *dx, const tsr_tiles_t *whole_dx,
                           int pr, const int *ranks);

/* The input rows of band q that output band p's windows read, when q != p (0 otherwise): the
 * halo rows rank q sends rank p forward (and p sends q back, their gradients). */
int tsr__domain_halo_rows(const tsr_conv_geom_t *g, int pr, int p, int q);

#endif
