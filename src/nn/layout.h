/* A network's layout: the one description of what tsr_net_create builds, computed once from
 * the model spec, the input shape, the rank's batch, its workers, the grid rows and the
 * optimizer's state count, without building anything. Per layer: its inputs (the graph), output
 * shape, tiling, parameter shapes and tiles, placement under a grid, fusion decisions and bytes.
 * src/nn/net.c builds a network from it, tsr_net_estimate sums its bytes, and the planner
 * (src/plan/) prices its tasks (each layer type describes its own to a tsr_cost_sink_t) and
 * counts its transfers. Each layer type fills its part through its registry entry (layers.h);
 * nobody else tests a layer kind. No StarPU here. */
#ifndef TSR_NN_LAYOUT_H
#define TSR_NN_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "grid.h" /* tsr_placement_t: how a matrix sits on a grid column */
#include "kernels/kernels.h"
#include "tessera/net.h"

#define TSR_LAYER_MAX_PARAMS 2
#define TSR_LAYER_MAX_BUFFERS 2
#define TSR_LAYER_MAX_SCRATCH                                                                      \
  4 /* a layer's own matrices (conv: gradient partials, reordered weights) */

struct tsr_layer_type;

/* A matrix the network creates: rows x cols floats in mb x nb tiles (as given to
 * tsr_tiles_create, which clamps them to the matrix). */
typedef struct {
  int64_t rows, cols;
  int mb, nb;
  bool decay; /* parameters: weight decay applies (weights yes, biases no) */
} tsr_layout_matrix_t;

/* One input of a layer: an edge of the graph. */
typedef struct {
  int from;              /* the layer (index in tsr_net_layout_t.layers) whose output it reads; -1:
                          * the input batch */
  int slot;              /* the gradient this layer's backward writes: 0 the producer's dy itself,
                          * k > 0 the producer's k-th extra gradient, added into dy right after */
  bool dx;               /* its gradient is computed in training (not for the input batch) */
  tsr_conv_geom_t shape; /* the sample shape read (c, h, w; after a flatten: 1 x 1 x c h w) */
  tsr_conv_geom_t shown; /* the sample shape as its producer made it, for messages */
  int nb;                /* the column tile of the matrix read */
  int spec;              /* the spec layer named as the input (-1: the input batch), for messages */
} tsr_layout_input_t;

typedef struct {
  tsr_layer_kind_t kind;
  const struct tsr_layer_type *type; /* its registry entry */
  int spec;                          /* its index in the spec */
  int index;                         /* spec + 1: its position in the model description (messages,
                                      * checkpoint tensor names, dropout seeds) */
  char name[TSR_NAME_MAX];           /* the name it goes by (layer<index> when unnamed) */
  int n_inputs;
  tsr_layout_input_t in[TSR_MAX_INPUTS];
  int fin, fout;          /* features of a sample read (input 0) and written */
  int in_nb, out_nb;      /* column tile of input 0 and of the output (whole samples: fin, fout) */
  tsr_conv_geom_t geom;   /* input 0's c h w, the window where the type has one, oc oh ow out */
  bool whole_samples;     /* works on whole samples (one task per batch-row tile) */
  bool relu;              /* the ReLU reading it is fused into it (it alone read its output) */
  bool relu_grad_by_next; /* its one reader's backward applies that ReLU's backward */
  bool relu_grad_in;      /* this layer's backward applies its input's fused ReLU's backward */
  bool has_dx;            /* input 0's gradient is computed in training */
  int consumers;          /* inputs of other layers that read its output (its gradient slots) */
  int folds_bn;           /* conv: 1 + the batchnorm layer evaluation folds into it (0: none) */
  bool folded;            /* batchnorm: evaluation computes it inside its convolution's task */
  /* Grid (opts->grid_rows > 1): */
  tsr_placement_t place;    /* its output's (y, dy, its other readers' gradients) */
  tsr_placement_t in_place; /* its inputs' as their producers made them: TSR_PLACE_BANDS when
                             * one is in bands, else TSR_PLACE_SPREAD when one is spread (where
                             * inputs placed unlike cannot work, grid_rc says so); a layer that
                             * gathers_bands reads them whole (tsr__reads_spread) */
  bool cuts; /* it cuts its own output over the column (a dense layer): forward it gathers
              * a spread input, backward it sums partial input gradients */
  bool gathers, partials, dx_sums; /* the grid scratch it holds (net_impl.h, tsr_layer_t) */
  /* Grid with --domain rows (lay->domain): */
  bool domain;        /* it computes its output in bands of image rows from slabs of its input
                       * (its type splits_rows; src/tile/domain.h); its output is in bands, so is
                       * an element-wise layer's over inputs in bands */
  bool gathers_bands; /* a layer on whole samples over a banded input, not cut itself (past
                       * --domain rows:K): every rank all-gathers the bands, computes it whole */
  int nparams;
  tsr_layout_matrix_t params[TSR_LAYER_MAX_PARAMS]; /* in the order of tsr_layer_t.params */
  /* Non-trained state the layer keeps across steps (batchnorm: running mean and variance):
   * checkpointed under its type's buffer_names and averaged with the weights by the
   * weight-averaging policies. */
  int nbuffers;
  tsr_layout_matrix_t buffers[TSR_LAYER_MAX_BUFFERS];
  int nscratch;
  tsr_layout_matrix_t
      scratch[TSR_LAYER_MAX_SCRATCH]; /* its own matrices, as its type lays them
                                       * out (conv:
                                       * per-batch-tile gradient partials, the weights reordered for
                                       * oneDNN); a matrix of no rows is not made */
  int64_t workspace;                  /* floats of per-worker scratch one of its tasks needs */
  /* Floats the busiest rank of a grid column (row 0) holds: */
  int64_t share;        /* output columns */
  int64_t param_floats; /* parameters (as many again of gradients, nstate times of state) */
  int64_t act_floats;   /* output and gradient, extra gradients, grid scratch, own scratch and
                         * buffers */
} tsr_layout_layer_t;

typedef struct {
  int batch, mb, nb;          /* the rank's batch; the batch-row and feature tiles chosen */
  int workers;                /* CPU workers the tiles were chosen for */
  int grid_rows;              /* Pr (1: no grid) */
  bool domain;                /* --domain rows under the grid (Pr > 1) */
  int domain_layers;          /* how many layers of a splits_rows type are cut (INT_MAX: all) */
  int nstate;                 /* optimizer state matrices per parameter */
  int inputs, classes;        /* features of a sample, classes (the output layer's units) */
  int positions;              /* predictions per sample: 1, or the oh ow of a last layer whose
                               * type predicts per position (labels (batch, positions)) */
  tsr_conv_geom_t in_geom;    /* the input sample (c, h, w) */
  int in_nb;                  /* column tile of the input batch */
  int in_consumers;           /* layer inputs that read the input batch */
  int n_layers;               /* layers built, in the order they run (a topological order) */
  tsr_layout_layer_t *layers; /* owned: [n_layers] */
  /* A placement under the grid that cannot run: tsr_net_create and tsr_net_estimate refuse it
   * with this message; the planner prices the layout regardless. 0: none. */
  int grid_rc;
  tsr_errbuf_t grid_err;
  tsr_net_memory_t memory; /* tsr_net_estimate's bytes */
} tsr_net_layout_t;

/* Whether l computes from spread inputs: they are, and it does not gather them whole first. */
static inline bool tsr__reads_spread(const tsr_layout_layer_t *l) {
  return tsr__placed_spread(l->in_place) && !l->gathers_bands;
}

/* The layers tsr_net_create(spec, inputs, classes, opts) builds in a process with `workers` CPU
 * workers and an optimizer keeping `nstate` state matrices per parameter, with the same checks
 * and messages (graph and shapes; a grid misfit only in out->grid_rc). out is filled (and owns
 * its layers: tsr__net_layout_fini) on success, left empty on an error. */
int tsr__net_layout_build(tsr_net_layout_t *out, const tsr_model_spec_t *spec, int inputs,
                          int classes, const tsr_net_opts_t *opts, int workers, int nstate,
                          tsr_errbuf_t *err);
/* The same with the state count of opts->opt's optimizer. */
int tsr__net_layout(tsr_net_layout_t *out, const tsr_model_spec_t *spec, int inputs, int classes,
                    const tsr_net_opts_t *opts, int workers, tsr_errbuf_t *err);
void tsr__net_layout_fini(tsr_net_layout_t *lay);

/* ---- What a layer's tasks cost: the layer types describe, the planner prices. ---- */

/* The planner's side. A layer type's cost hook (layers.h) walks the tasks its forward and
 * backward passes submit, asks the sink for each task's seconds on one worker and adds up its
 * critical path; the sink keeps the totals (work, flops) and what it knows of the machine. */
typedef struct tsr_cost_sink tsr_cost_sink_t;
struct tsr_cost_sink {
  int batch, mb; /* samples per step and the batch-row tile (clamped to the batch) */
  int pr;        /* grid rows: the sink prices row 0, which owns tile columns j % pr == 0 */
  /* One task: max(flops / rate, bytes / memory bandwidth) plus the task overhead. */
  double (*task)(tsr_cost_sink_t *k, double flops, double rate, double bytes);
  /* An optimizer update of n floats of parameters. */
  double (*update)(tsr_cost_sink_t *k, double n);
  /* One worker's flop/s on a GEMM tile of this shape (ta, tb: transposed operands), and on a
   * convolution task of geometry g over n samples (which: 0 forward, 1 input gradient, 2 filter
   * gradient). */
  double (*gemm_rate)(const tsr_cost_sink_t *k, bool ta, bool tb, int rows, int cols, int inner);
  double (*conv_rate)(const tsr_cost_sink_t *k, const tsr_conv_geom_t *g, int n, int which);
  /* One max (max) or mean pooling task of geometry g over n samples (which: 0 forward, 1
   * backward) that touches `bytes`: priced by the kernel's time on this shape where the sink
   * measures kernels, else as memory-bound; counted like task's, its seconds returned. */
  double (*pool_task)(tsr_cost_sink_t *k, const tsr_conv_geom_t *g, int n, bool max, int which,
                      double bytes);
  /* Seconds of the tasks priced so far (a layer's backward work is a difference of two). */
  double (*work)(const tsr_cost_sink_t *k);
};

/* 2 m n k: the flops of a GEMM (m, k) x (k, n). */
static inline double tsr__gemm_flops(int64_t m, int64_t n, int64_t k) {
  return 2.0 * (double)m * (double)n * (double)k;
}

/* A GEMM tile task (rows, cols) += (rows, inner) (inner, cols): reads its two operands, reads
 * and writes its output. */
static inline double tsr__cost_gemm(tsr_cost_sink_t *k, int rows, int cols, int inner,
                                    double rate) {
  double bytes = 4.0 * ((double)rows * inner + (double)inner * cols + 2.0 * rows * cols);
  return k->task(k, tsr__gemm_flops(rows, cols, inner), rate, bytes);
}

/* Pricing helpers shared by the layer types' cost hooks (layout.c). */
int tsr__cost_ntiles(int64_t n, int b);       /* tiles of b in n */
int tsr__cost_tsize(int64_t n, int b, int i); /* size of tile i of n cut in b */
/* Of a layer's per-sample work, the part row 0 of a grid column does: 1, or for a layer whose
 * output is in bands of image rows (TSR_PLACE_BANDS) its band's output rows over all of them. */
double tsr__cost_rows_share(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l);
/* Whether row 0 of a grid column of pr rows, the row the planner prices, holds tile column j of
 * a matrix placed as `place` (src/grid.h's rule: all of a whole one, a spread one's j mod pr = 0).
 */
static inline bool tsr__cost_row0(tsr_placement_t place, int j, int pr) {
  return tsr__placed_row(place, j, pr, NULL) <= 0;
}
/* The cost of a memory-bound layer (pooling, dropout, a ReLU not fused): per output tile one
 * forward task reading its input and writing its output, and a backward task when its input
 * gradient is computed; its backward seconds are counted as half of both. */
double tsr__cost_pass(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l, tsr_cost_sink_t *k,
                      double *bwd);

#endif
