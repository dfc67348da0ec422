/* The network's insides, shared by the layer files (dense.c, ...), the
 * network (net.c) and the synchronization code in src/parallel/, which replaces
 * what happens to a parameter once its gradient is known. No StarPU here:
 * layers work on tiled matrices through src/tile/ops.h. */
#ifndef TSR_NET_IMPL_H
#define TSR_NET_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "nn/layout.h"
#include "optim/optim.h"
#include "rng.h"
#include "runtime/task_opts.h"
#include "tile/domain.h"
#include "tile/ops.h"
#include "tessera/augment.h"
#include "tessera/net.h"
#include "tessera/tiles.h"

/* A trainable tensor; its optimizer state belongs to the net's optimizer. */
typedef struct {
  tsr_tiles_t *w, *g; /* value and gradient, same shape and tiling */
  bool decay;         /* weight decay applies (weights yes, biases no) */
  int index;          /* the parameter's number in the net's optimizer (tsr__optim_state) */
} tsr_param_t;

typedef struct tsr_layer tsr_layer_t;

typedef struct {
  const char *name;
  /* l->y (batch, fout) = f(x[0], ... x[n_inputs - 1]) (each (batch, its features)); train is
   * false during evaluation. Tasks are submitted with o (tsr__net_critical(o) for input
   * gradients). */
  int (*forward)(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                 const tsr_task_opts_t *o);
  /* From l->dy: the parameters' gradients, and dx[k] (tiled like x[k]) of each input k unless
   * NULL. May overwrite l->dy. */
  int (*backward)(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                  tsr_tiles_t *const *dx, const tsr_task_opts_t *o);
} tsr_layer_ops_t;

struct tsr_layer {
  const tsr_layer_ops_t *ops;
  const tsr_layout_layer_t *lay; /* borrowed from net->layout: its inputs, tiles, decisions */
  int fin, fout;                 /* features per sample, in (input 0) and out */
  bool relu;                     /* dense, conv: a following ReLU fused into the bias add */
  int in_nb, out_nb;             /* column tile of the input and of y (fin, fout: whole samples) */
  tsr_conv_geom_t geom;          /* sample shape in (h, w, c) and out (oh, ow, oc), channels-last */
  tsr_layer_spec_t spec;         /* what the layer was built from */
  int index;                     /* 1-based position in the model description (for messages) */
  uint64_t calls; /* dropout: training forward passes so far (part of the mask's seed) */
  tsr_tiles_t *scratch[TSR_LAYER_MAX_SCRATCH]; /* owned, as the layout's (NULL: no rows) */
  int nbuffers; /* non-trained state, as lay->buffers says (batchnorm: running mean,
                 * running variance, each (1, C)); owned */
  tsr_tiles_t *buffers[TSR_LAYER_MAX_BUFFERS];
  int64_t batches_tracked; /* batchnorm: training steps whose statistics moved the buffers */
  bool relu_grad_by_next;  /* the next layer's backward applies this layer's fused ReLU */
  bool relu_grad_in;       /* this layer's backward applies the previous layer's fused ReLU */
  int nparams;
  tsr_param_t params[TSR_LAYER_MAX_PARAMS]; /* dense: W (fin, fout), b (1, fout) */
  tsr_tiles_t *y, *dy;                      /* (batch, fout) output and its gradient */
  tsr_tiles_t **grads;    /* owned, [lay->consumers - 1] (batch, fout) like dy: the gradients its
                           * other readers write, added into dy in a fixed order (fan-out) */
  bool split;             /* grid: y's column tiles (and a dense layer's) spread over the column */
  tsr_tiles_t **gathered; /* grid, dense: [grid_rows] (batch, fin) per rank: input tiles gathered */
  tsr_tiles_t **partials; /* grid, dense: [grid_rows] (batch, fin) per rank: input-gradient sums */
  tsr_tiles_t *dx_sums;   /* grid, dense over a replicated layer: (batch, fin) spread by column
                           * tile, the input gradient before every rank of the column gets it */
  tsr_domain_t *domain;   /* grid, --domain rows, conv and pooling: slabs, halos, partials */
  tsr_tiles_t *whole_x, *whole_dx; /* lay->gathers_bands: per-node (batch, fin), the bands
                                    * all-gathered, and the input gradient before its bands */
  /* Tied parameters (lmhead): the embedding layer's token table this layer reads, borrowed; its
   * backward writes the table's gradient first (the layer runs after the embedding, so its
   * backward runs before), and the owner's backward adds its own (shared_grad_written). */
  tsr_param_t *shared;
  bool shared_grad_written; /* embedding: a later layer writes params[0].g before its backward */
  bool stepped;             /* its backward's tasks took this step's update (tsr__net_fused_step) */
};

/* What happens to a parameter once its gradient has been submitted: the
 * optimizer step by default; distributed synchronization policies replace it. end, when not
 * NULL, is called once every parameter's gradient has been handed to fn (--clip-grad: the
 * updates wait for the norm of all the gradients, so fn adds to it and end updates); o: the
 * first layer's backward options. */
typedef int (*tsr_grad_hook_fn)(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *o,
                                void *ctx);
typedef int (*tsr_grad_end_fn)(tsr_net_t *net, const tsr_task_opts_t *o, void *ctx);
typedef struct {
  tsr_grad_hook_fn fn;
  void *ctx;
  tsr_grad_end_fn end;
} tsr_grad_hook_t;

/* Batch statistics reduced beyond this process (--sync-bn, installed by src/parallel/): a
 * batchnorm layer hands it its batch's combined partial p's tile 0 ((3, C), src/tile/ops.h):
 * in the forward pass (count, mean, M2) per channel, to be combined with the other ranks' by
 * Chan's formula, in the backward pass (sum dy, sum dy xhat, 0), to be added; every rank
 * gets the result in p. fn NULL: the statistics stay this process's. */
typedef int (*tsr_stats_hook_fn)(tsr_net_t *net, tsr_tiles_t *p, bool backward,
                                 const tsr_task_opts_t *o, void *ctx);
typedef struct {
  tsr_stats_hook_fn fn;
  void *ctx;
} tsr_stats_hook_t;

struct tsr_net {
  int inputs, classes, batch, mb, nb; /* nb: feature tile; the logits are one tile wide */
  tsr_net_opts_t opts;
  tsr_model_spec_t spec;    /* owned copy of what the net was built from */
  tsr_net_layout_t layout;  /* owned: what was built, layer by layer */
  int n_layers;             /* layers built, in the order they run */
  tsr_layer_t *layers;      /* owned, [n_layers] */
  tsr_tiles_t *x0, *dx0;    /* (batch, inputs) input and, when kept, its gradient */
  tsr_tiles_t **dx0_grads;  /* kept input gradient: [layout.in_consumers - 1] like dx0 (fan-out) */
  tsr_tiles_t *labels;      /* (batch, 1) */
  tsr_tiles_t *train_stats; /* (mt, 2) [loss sum, correct] per batch-row tile */
  tsr_tiles_t *eval_stats;
  tsr_tiles_t *grad_sq;      /* --clip-grad: (1, 1) the step's sum of squared gradients */
  tsr_optim_t *optim;        /* owned: step count, current rate, every parameter's state */
  uint64_t tasks_per_step;   /* measured on the first training step */
  uint64_t submitted;        /* tasks submitted with the net's options (its own and its hooks') */
  int64_t step_label;        /* training step that tasks are labelled with (0: none) */
  tsr_grad_hook_t on_grad;   /* the optimizer step unless a sync policy installed its own */
  bool updating;             /* inside the backward pass of a step that updates */
  tsr_stats_hook_t on_stats; /* none unless --sync-bn installed one */
  int valid;             /* rows of the batch loaded last that are samples (the rest: padding) */
  int grid_rows;         /* Pr (1: no grid) */
  int *grid_slot;        /* [grid_rows] the ranks of this rank's grid column (rank_of contexts) */
  tsr_traffic_t traffic; /* grid transfers inside the column so far */
  tsr_augment_t augment; /* training batches' crop and flip (augment.c); fill: augment_fill */
  float *augment_fill;   /* owned, (input channels) the padded pixels' values, or NULL */
  int epoch;             /* keys the augmentation's draws (tsr_net_set_epoch) */
  float bn_momentum;     /* > 0: every batchnorm's momentum in the forward pass being submitted
                          * (tsr_net_stats_step's cumulative mean); 0: each layer's own */
  int positions;         /* predictions per sample: 1, or the last layer's T when its type
                          * predicts per position (lmhead): labels (batch, positions) */
};

/* Creates a local tiled matrix (every rank's replica is its own). */
int tsr__net_tiles(tsr_tiles_t **t, int64_t m, int64_t n, int mb, int nb);
/* Installs hook and returns the one it replaces; installing that one again
 * restores it (hooks come in pairs: a synchronization policy installs its
 * own for a run and puts the previous one back at its end). */
tsr_grad_hook_t tsr__net_set_grad_hook(tsr_net_t *net, tsr_grad_hook_t hook);

/* Installs the statistics hook and returns the one it replaces (as tsr__net_set_grad_hook). */
tsr_stats_hook_t tsr__net_set_stats_hook(tsr_net_t *net, tsr_stats_hook_t hook);

/* Submits the optimizer update of p at the net's current step and learning rate. */
int tsr__net_optimizer_step(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *o);
/* Whether layer l (a dense layer: weights and bias) may take this step's update in the tasks
 * that complete its gradients, with options o: a step that updates, with the optimizer's step
 * as the gradient hook (no synchronization policy's, no clipping), an SGD, tasks of one process,
 * no grid, not opts.unfused_steps. If so, fills step and marks the layer (l->stepped), so that
 * the hook is not called for its parameters; its backward must then take the step. */
bool tsr__net_fused_step(tsr_net_t *net, tsr_layer_t *l, const tsr_task_opts_t *o,
                         tsr_sgd_step_t *step);
/* Calls fn(net, p, ctx) for every parameter, in backward order (the last layer's first). */
int tsr__net_each_param(tsr_net_t *net, int (*fn)(tsr_net_t *net, tsr_param_t *p, void *ctx),
                        void *ctx);

/* Options for the tasks of layer (1-based; 0 batch assembly) in the forward
 * or backward pass: labels, and the priority of the critical path. The next
 * step's forward pass needs layer 1's updated weights first, and the
 * backward pass waits on each input gradient: the rest of the backward pass,
 * the updates and the averaging get 2 for the first layer and 1 for the
 * others; the forward pass, which every step does in order anyway, 0. */
tsr_task_opts_t tsr__net_task_opts(const tsr_net_t *net, int layer, bool backward);
/* o for an input gradient: the highest priority (TSR_PRIO_MAX). */
tsr_task_opts_t tsr__net_critical(const tsr_task_opts_t *o);
/* The training step the tasks submitted from now on belong to (1-based over
 * a run; 0: none, e.g. evaluation). */
void tsr__net_label_step(tsr_net_t *net, int64_t step);

/* Layer types (their shape checks and constructors) are registered in
 * layers.h. */
/* The seed of a dropout layer's mask at one training step. */
uint64_t tsr__dropout_seed(uint64_t net_seed, int layer_index, uint64_t step);
/* The key of an epoch's augmentation draws (kernels/augment.h). */
uint64_t tsr__augment_key(uint64_t net_seed, int epoch);
/* The input batch x0 from the dataset rows (n of them), augmented when train is set and the net
 * augments (augment.c). */
int tsr__net_gather_input(tsr_net_t *net, const tsr_task_opts_t *o, const tsr_dataset_t *ds,
                          const int32_t *rows, int n, bool train);
/* tsr_augment_describe of the net's settings ("none" without). */
void tsr__net_augment_describe(const tsr_net_t *net, char *buf, size_t size);
/* Initial values from rng for params[0] (W, (fan_in, fout)) and params[1] (b, (1, fout)) as
 * init says (tessera/net.h's tsr_init_t); TSR_INIT_HE and TSR_INIT_GPT2 (normal(0, std)) write
 * only W. */
int tsr__init_params(tsr_param_t *params, int fan_in, int fout, tsr_init_t init, double std,
                     tsr_rng_t *rng);
/* n values normal(0, std) from rng into t (under a grid, this rank's tiles). */
int tsr__init_normal(tsr_tiles_t *t, size_t n, double std, tsr_rng_t *rng);
/* A batchnorm layer's eps: its spec's, or PyTorch's 1e-5 (batchnorm.c). */
float tsr__bn_eps(const tsr_layer_t *l);

#endif
