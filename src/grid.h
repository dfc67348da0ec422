/* How a matrix sits on the Pr ranks of a grid column (--grid PrxPc, rank q on row q % Pr of
 * column q / Pr), and which row holds each of its tile columns: the one rule of tile ownership.
 * The network's tile owners (src/nn/net.c), the averaging's slices and chunk homes
 * (src/parallel/placement.c), the planner (src/plan/plan.c, the layer types' cost hooks) and the
 * memory estimate (src/nn/layout.c) all ask tsr__placed_row. A shared helper of src/, below
 * every folder: plain C, no StarPU, no tiles. */
#ifndef TSR_GRID_H
#define TSR_GRID_H

#include <stdbool.h>

/* How a matrix of activations (batch rows x a layer's features) sits on the Pr ranks of a grid
 * column, one value per matrix: the layout decides it (place() in src/nn/layout.c), the network
 * builds the tiles by it (net.c), the planner prices and counts by it (src/plan/), and a layer's
 * parameters follow its output (spread only when the output is TSR_PLACE_SPREAD). */
typedef enum {
  TSR_PLACE_WHOLE,  /* every rank of the column holds all of it (the only placement without a
                     * grid) */
  TSR_PLACE_SPREAD, /* its column tile j on grid row j % Pr (a dense layer's output features) */
  TSR_PLACE_BANDS,  /* its column tile p is a band of image rows, on grid row p (--domain rows);
                     * spread too, band by band */
} tsr_placement_t;

/* Whether p spreads a matrix over the grid column (by feature columns or by bands). */
static inline bool tsr__placed_spread(tsr_placement_t p) {
  return p != TSR_PLACE_WHOLE;
}

/* The grid row (0 .. pr - 1) that holds tile column j of a matrix placed as `place` on a grid
 * column of pr rows, or -1 when every row holds it whole; with `at` not NULL, also the column's
 * position among the tile columns its row holds (j itself when whole). A spread matrix's tile
 * column j is on row j mod pr, the (j / pr)-th of that row's (a matrix in bands has pr tile
 * columns, band p on row p: the same rule). Row p holds column j when the result is -1 or p. */
static inline int tsr__placed_row(tsr_placement_t place, int j, int pr, int *at) {
  bool spread = tsr__placed_spread(place);
  if (at) *at = spread ? j / pr : j;
  return spread ? j % pr : -1;
}

#endif
