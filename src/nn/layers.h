/* The layer registry: one descriptor per layer type says everything the
 * model parser (model.c), the layout (layout.c: shapes, tiling, parameters, bytes), the network
 * builder (net.c), the planner (its tasks, through the cost hook) and tsr_model_describe
 * need to know about the type, so that a layer type is its own file (its
 * descriptor next to its forward and backward functions) plus one
 * line in layers.c. No StarPU here. */
#ifndef TSR_LAYERS_H
#define TSR_LAYERS_H

#include <stdbool.h>
#include <stddef.h>

#include "nn/net_impl.h"

/* The form of a model-file key's value; each form has its own message for a
 * bad value ("expected a positive integer", ...). */
typedef enum {
  TSR_KEY_COUNT,       /* a positive integer, into the int at field */
  TSR_KEY_SIZE,        /* N or NHxNW, each >= 1, into the ints at field (h) and field2 (w) */
  TSR_KEY_PADDING,     /* N or NHxNW, each >= 0, into the ints at field and field2 */
  TSR_KEY_PROBABILITY, /* a number in [0, 1), into the float at field */
  TSR_KEY_ACTIVATION,  /* relu or none: relu adds a ReLU layer right after this one */
  TSR_KEY_UNITS,       /* a positive integer, or `classes` (TSR_UNITS_CLASSES until
                        * tsr_model_bind_classes), into the int at field */
  TSR_KEY_FRACTION     /* a number in (0, 1], into the float at field (0 there: the default) */
} tsr_key_form_t;

/* Where a key's value goes in the spec, for tsr_layer_key_t's field and field2. */
#define TSR_SPEC_FIELD(f) offsetof(tsr_layer_spec_t, f)

/* One key of a layer's model-file section, besides `type`. */
typedef struct {
  const char *name;     /* as written; "known:" messages list these in table order */
  const char *alias;    /* also accepted (conv: units for filters), or NULL */
  tsr_key_form_t form;  /* how the value parses */
  size_t field, field2; /* offsetof(tsr_layer_spec_t, ...) of what the value sets */
  const char *missing;  /* a required key: the message after "FILE: section [S] " when a
                         * section lacks it ("has no 'kernel'; add ..."); NULL: optional */
} tsr_layer_key_t;

/* A layer's place in the network being built. */
typedef struct {
  int index;             /* 1-based position in the model description (for messages) */
  const char *name;      /* the name it goes by (for messages about its inputs) */
  bool last;             /* the last layer: its output is the logits */
  tsr_conv_geom_t shown; /* input 0's sample shape as the model shows it (before a
                          * flatten), for messages; input side only */
  int n_in;              /* its inputs: their sample shapes (c, h, w; in[0] is g's) and names */
  const tsr_conv_geom_t *in;
  const char *const *in_names;
  tsr_rng_t *rng;    /* borrowed: parameter initialization */
  double init_std;   /* TSR_INIT_GPT2's weight std for this layer: 0.02, over sqrt(the network's
                      * residual layers) when residual layers alone read it */
  tsr_errbuf_t *err; /* borrowed, may be NULL: what does not fit */
} tsr_layer_site_t;

typedef struct tsr_layer_type {
  tsr_layer_kind_t kind;       /* the public enum value model specs use */
  const char *name;            /* `type = name` in model files, and in descriptions */
  const char *alias;           /* also accepted as `type = alias` (conv: conv2d), or NULL */
  const tsr_layer_key_t *keys; /* model-file keys, ended by {0}; NULL: none */
  int min_inputs, max_inputs;  /* how many inputs it reads (0, 0: exactly one) */
  bool output;                 /* may be the last layer: its `units` outputs are the logits */
  bool whole_samples;          /* works on whole samples: its input must be one tile wide */
  bool elementwise;            /* feature by feature, or only a new shape over the same storage:
                                * the tiling of its inputs passes through it (all alike) */
  bool cuts_features;          /* its output, `units` features, is cut in feature tiles: the
                                * automatic feature tile is sized from the widest such layer,
                                * and under a grid it spreads its output over the column */
  bool is_relu;                /* a ReLU: a layer before it that fuses_relu applies it itself
                                * when it alone reads that layer, and then no layer is built */
  bool fuses_relu;             /* applies a following ReLU itself (l->relu) */
  bool defers_relu_grad;       /* with a fused ReLU, lets its one reader's backward apply the
                                * ReLU's backward (l->relu_grad_by_next) */
  /* As the last layer: one prediction of `units` classes per position of its output sample
   * (oh ow of them; labels (batch, oh ow), the loss averaged over every position) instead of
   * one per sample (lmhead). */
  bool per_position;
  /* Sums its inputs into a residual stream (add): GPT-2's initialization scales the layers
   * only such layers read (site init_std). */
  bool residual;
  /* Under a grid with --domain rows, cuts its output images' rows into bands over the grid
   * column, each rank computing its band from its input band and halo rows (conv, pooling:
   * src/tile/domain.h); its parameters are replicated. */
  bool splits_rows;
  /* Under --domain rows, takes inputs that are all in bands of image rows (of one h x w: cut
   * alike) and gives its output in the same bands, each band computed on its rank from the
   * inputs' (concat); inputs of which only some are bands are refused. */
  bool joins_bands;
  /* Not taken under a grid (--grid PrxPc with Pr > 1): the sequence layers, which the grid
   * neither splits nor replicates yet (a GPT under --grid 2x1 corrupted the heap). */
  bool no_grid;
  /* Its parameters' names in checkpoints, layers.<i>.<type>.<param_names[k]>, ended by NULL
   * (tsr__weight_bias for most); NULL: it has none. */
  const char *const *param_names;
  /* Its buffers' names (l->buffers, as its layout hook makes them), PyTorch's: checkpoints
   * store buffer k as layers.<i>.<name>.<buffer_names[k]>; ended by NULL; NULL: none. */
  const char *const *buffer_names;
  /* Checkpoints also store l->batches_tracked under this name (batchnorm:
   * num_batches_tracked); NULL: none. */
  const char *counter_name;
  /* Reduces statistics over the batch (batchnorm): tile 0 of its scratch[0] is the (3, C)
   * partial it hands the net's statistics hook (net_impl.h; --sync-bn installs one). */
  bool batch_stats;
  /* Evaluation's batchnorm folding (layout.c): a type that folds_in computes, in evaluation, a
   * folds_out reader (batchnorm) it alone feeds within its own tasks when it has no ReLU of its
   * own (conv.c); the reader then submits nothing. */
  bool folds_in, folds_out;
  /* Optional: refuses (TSR_EINVAL, with a message naming the layer) a training batch of
   * `batch` samples per rank that this layer, laid out as l, cannot take. */
  int (*check_batch)(const tsr_layout_layer_t *l, int batch, tsr_errbuf_t *err);
  /* Required. Checks s against its input sample shape (g's c, h, w; every input's in at->in)
   * and fills the rest of g: the window where the type has one (defaults
   * applied) and the output side (oc, oh, ow). A misfit returns TSR_EINVAL or
   * TSR_ESHAPE with a message in at->err naming layer at->index and the
   * shapes. Reads only at->index, name, shown, n_in, in, in_names and err. */
  int (*shape)(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at);
  /* Optional: whether this instance works on whole samples, from its input shape g (after
   * shape()); NULL: the whole_samples flag. */
  bool (*whole)(const tsr_conv_geom_t *g);
  /* Optional: l's parameters (shapes, tiles, decay), own scratch matrices, per-worker
   * workspace and its ReLU-gradient decisions, once the layout has its shapes, tiles and
   * placement (l->fin, fout, in_nb, out_nb, geom, relu, spread, in[], and the layers before it
   * in lay). NULL: none of these. */
  void (*layout)(tsr_net_layout_t *lay, tsr_layout_layer_t *l);
  /* The tasks of its forward and backward passes in a step (and the updates of its
   * parameters), priced one by one by k; returns its part of the step's critical path and
   * sets *bwd to the seconds of its backward pass. Required for a type that builds a layer. */
  double (*cost)(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l, tsr_cost_sink_t *k,
                 double *bwd);
  /* Optional: the floating-point operations of its forward pass for one sample (a multiply-add
   * is 2, a bias add, a ReLU's max, a pooling window's compare or add, a sum's add are 1 each),
   * from l's shapes (tessera summary). NULL: none (copies, shape changes). */
  double (*flops)(const tsr_layout_layer_t *l);
  /* Its forward and backward passes. NULL: the type only changes the shape and builds no layer
   * (flatten). */
  const tsr_layer_ops_t *ops;
  /* Optional: the initial parameter values (from at->rng) once the network created what the
   * layout says (parameters, activations, scratch). NULL: none (zeros). */
  int (*create)(tsr_net_t *net, tsr_layer_t *l, const tsr_layer_site_t *at);
  /* Writes the type's part of tsr_model_describe ("conv3x3/32p1x1"), as
   * snprintf does. NULL: the name. */
  int (*describe)(const tsr_layer_spec_t *s, char *buf, size_t size);
} tsr_layer_type_t;

/* The parameter names of most types with parameters: weight, bias (PyTorch's). */
extern const char *const tsr__weight_bias[];

/* The registered types, in the order model-file messages list them. */
int tsr__layer_type_count(void);
const tsr_layer_type_t *tsr__layer_type_at(int i);
/* The type of a spec's kind, or of a model file's type name (or alias); NULL
 * when none is registered. */
const tsr_layer_type_t *tsr__layer_type(tsr_layer_kind_t kind);
const tsr_layer_type_t *tsr__layer_type_named(const char *name);

#endif
