/* Networks: a directed acyclic graph of layers described by a model spec (a stack when each
 * layer reads the previous one), with parameters, gradients, optimizer state and activations
 * held as tiled matrices.
 *
 * A network is built for one batch size. Every call that trains or evaluates
 * only submits tasks and returns; tsr_net_wait waits for all of them. */
#ifndef TESSERA_NET_H
#define TESSERA_NET_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/data.h"
#include "tessera/error.h"
#include "tessera/optim.h"

TSR_EXTERN_C_BEGIN

/* Names of layers (a model file's section names) hold at most TSR_NAME_MAX - 1 = 49 characters
 * (what the INI reader keeps of a section name); a layer reads at most TSR_MAX_INPUTS others (a
 * concat of that many). A model has no limit on its number of layers. */
#define TSR_NAME_MAX 50
#define TSR_MAX_INPUTS 8

/* Layer types. Each one is described by one registry entry inside the
 * library (src/nn/layers.c), which model files, descriptions and network
 * building go through. */
typedef enum {
  TSR_LAYER_DENSE,
  TSR_LAYER_RELU,
  TSR_LAYER_CONV,    /* 2-D convolution with bias */
  TSR_LAYER_MAXPOOL, /* 2-D max pooling per channel */
  TSR_LAYER_AVGPOOL, /* 2-D mean pooling per channel */
  TSR_LAYER_FLATTEN, /* (c, h, w) -> (1, 1, c h w); the storage is unchanged */
  TSR_LAYER_DROPOUT, /* inverted dropout in training, identity in evaluation */
  TSR_LAYER_ADD,     /* element-wise sum of inputs of one shape (a residual connection) */
  TSR_LAYER_CONCAT,  /* inputs side by side along channels (features for 1 x 1 samples) */
  /* batch normalization per channel (per feature for 1 x 1 samples), learnable scale and
   * shift, running statistics for evaluation */
  TSR_LAYER_BATCHNORM,
  /* the mean of each channel over a sample's pixels: (h, w, c) -> (1, 1, c) */
  TSR_LAYER_GLOBALAVGPOOL,
  /* token embedding: a sample of T token ids (T x 1 x 1, exact integers in float, each in
   * [0, vocab)) -> T x 1 x units, rows of a (vocab, units) table, plus a learned position
   * embedding (context, units) when context > 0 (GPT-2's wte and wpe) */
  TSR_LAYER_EMBEDDING,
  /* layer normalization over each position's channels (h x w x c: per pixel, over c), eps
   * 1e-5 (or eps), learnable scale (init 1) and shift (init 0) of c values */
  TSR_LAYER_LAYERNORM,
  /* GELU, the tanh approximation (GPT-2's) */
  TSR_LAYER_GELU,
  /* causal multi-head self-attention over a sequence T x 1 x 3D of [q | k | v] per position
   * (head h: columns h D/H .. (h + 1) D/H - 1 of each) -> T x 1 x D, softmax(q k^T / sqrt(D/H)
   * + causal mask) v per head; heads = H */
  TSR_LAYER_ATTENTION,
  /* the language-model head: logits T x 1 x vocab = x (T x 1 x D) times the transposed token
   * table of the network's embedding layer (tied: one parameter, its gradient summed from both
   * uses); units = vocab. As the last layer its loss is the cross-entropy at every position,
   * averaged over the tokens. */
  TSR_LAYER_LMHEAD
} tsr_layer_kind_t;

/* One layer. Spatial activations hold one sample per row, channels-last:
 * h w c columns. Zero fields take the defaults said below. */
typedef struct {
  tsr_layer_kind_t kind;
  int units;              /* dense: output features; conv: output channels */
  int kernel_h, kernel_w; /* conv, pools: window, required (kernel_w 0: square) */
  int stride_h, stride_w; /* conv: default 1; pools: default the kernel */
  int pad_h, pad_w;       /* conv: zero padding on each side, default 0; pools: padding on
                           * each side, at most half the kernel, default 0 (never a max;
                           * zeros in a mean, whose divisor stays kh kw) */
  int in_channels;        /* conv: input channels the layer expects (0: whatever comes) */
  int in_features;        /* dense: fan-in the layer expects (0: whatever comes) */
  float rate;             /* dropout: probability of zeroing a feature, in [0, 1) */
  float momentum;         /* batchnorm: running statistics' momentum, in (0, 1] (0: 0.1) */
  float eps;              /* batchnorm, layernorm: added to the variance, in (0, 1] (0: 1e-5) */
  int heads;              /* attention: heads H, dividing the width D (required) */
  int vocab;              /* embedding: token ids below vocab (required) */
  int context;            /* embedding: positions of the learned position table (0: none);
                           * a sample's T must be at most this */
  /* The layer's name, by which others name it as an input ("": unnamed; it is then called
   * "layer<N>", N its 1-based position in the spec). Model files: the section's name. */
  char name[TSR_NAME_MAX];
  /* The layers whose outputs it reads, by name, in order (a concat's order along channels);
   * "input" names the input batch. n_inputs 0: the previous layer of the spec (the input
   * batch for the first), as in a stack. */
  int n_inputs;
  char inputs[TSR_MAX_INPUTS][TSR_NAME_MAX];
} tsr_layer_spec_t;

/* A network description: its layers in order. The last one is the output (a dense layer of one
 * unit per class); every other layer's output must be read by some layer. The spec owns its
 * array: tsr_model_spec_init (or a function that fills a spec: tsr_model_parse,
 * tsr_model_load_ini, tsr_model_parse_ini_text, tsr_model_spec_copy) starts one, and
 * tsr_model_spec_fini frees it. Read layers[0 .. n_layers) directly; grow it with
 * tsr_model_spec_add only. */
typedef struct {
  int n_layers;
  tsr_layer_spec_t *layers; /* owned, [n_layers] (room for cap) */
  int cap;
} tsr_model_spec_t;

/* An empty spec (no allocation). */
TSR_API void tsr_model_spec_init(tsr_model_spec_t *spec);
/* Frees the layers and leaves spec empty, as tsr_model_spec_init does (a no-op on an empty spec).
 */
TSR_API void tsr_model_spec_fini(tsr_model_spec_t *spec);
/* Appends a copy of *layer (borrowed). TSR_ENOMEM leaves spec as it was. */
TSR_API int tsr_model_spec_add(tsr_model_spec_t *spec, const tsr_layer_spec_t *layer);
/* dst = a copy of src (dst is started by the call, its old contents not freed: fini it first).
 * TSR_ENOMEM leaves dst empty. */
TSR_API int tsr_model_spec_copy(tsr_model_spec_t *dst, const tsr_model_spec_t *src);
/* Sets layer's inputs from a comma-separated list of names ("a, b"; "" for the default).
 * TSR_EINVAL, layer unchanged, for more than TSR_MAX_INPUTS names, an empty or too long one, or
 * one holding any of ; # = [ ] (which a model file could not say). */
TSR_API int tsr_layer_spec_set_inputs(tsr_layer_spec_t *layer, const char *names);

/* A dense layer's units that are the number of classes (a model file's `units = classes`),
 * until tsr_model_bind_classes says how many: a network cannot be built before. */
#define TSR_UNITS_CLASSES (-1)

/* Parses a CLI shorthand: "mlp" (the default 512,512), "mlp:W1,W2,..."
 * (hidden dense layers with ReLU), "linear", or "cnn" (conv 3x3 32 - ReLU -
 * maxpool 2 - conv 3x3 64 - ReLU - maxpool 2 - dense 128 - ReLU, convolutions
 * with padding 1). The output dense layer of `classes` units is appended. A stack: its layers
 * are unnamed and each reads the previous one. "gpt:L,D,H,T" ("gpt": 4,256,4,128): GPT-2's
 * language model of L pre-norm blocks of width D, H heads and context T over a vocabulary of
 * `classes` tokens, as a graph of named layers (embed, h<b>.ln1, h<b>.qkv, h<b>.attn, h<b>.proj,
 * h<b>.res1, h<b>.ln2, h<b>.fc, h<b>.gelu, h<b>.fc2, h<b>.res2, lnf, head; the per-token
 * projections are convolutions of kernel 1); D not a multiple of H is refused. Any other bare name
 * (letters, digits, - and _) is a model of the zoo: the model file NAME.ini of the installed
 * share/tessera/models/ (the data folders of tsr_model_load_ini, not the current folder:
 * "resnet50"), read by tsr_model_load_ini and bound to `classes` (tsr_model_bind_classes); its
 * errors are that function's. spec is started by the call (on an error it is left empty); fini it.
 */
TSR_API int tsr_model_parse(tsr_model_spec_t *spec, const char *text, int classes,
                            tsr_errbuf_t *err);
/* Reads an INI model file: one section per layer in file order, each with
 * `type = dense | relu | conv | maxpool | avgpool | globalavgpool | flatten | dropout | add |
 * concat | batchnorm | attention`. dense: `units = N` (or `units = classes`: TSR_UNITS_CLASSES, see
 * tsr_model_bind_classes), optional `activation = relu | none`, `in_features = N`. conv:
 * `filters = N` (or units), `kernel = K | KHxKW`, optional `stride`,
 * `padding` (N or NHxNW), `activation`, `in_channels`. Pools: `kernel`,
 * optional `stride`, `padding` (N or NHxNW, at most half the kernel). globalavgpool: no keys.
 * dropout: `rate = P`. add: optional `activation`. batchnorm: optional
 * `activation`, `momentum = M` (0 < M <= 1, default 0.1), `eps = E` (0 < E <= 1, default
 * 1e-5); per channel of h x w x c inputs, per feature of 1 x 1 x F ones. attention: `heads =
 * H` (required, dividing the width D: its input has 3 D channels). Any layer: `input = NAME`
 * or `inputs = A, B, ...` (section names, or `input` for the input batch; default: the
 * previous section; `inputs` may be repeated, each line adding names, for lists longer than a
 * line of 200 characters). A section with `activation = relu` becomes two layers, NAME and a ReLU
 * named NAME.relu, and other sections naming NAME read the ReLU's output. Errors name the
 * file, line and key; the graph itself (unknown names, cycles, shapes) is checked when a
 * network is built or estimated. spec is started by the call (left empty on an error); fini it. */
TSR_API int tsr_model_load_ini(tsr_model_spec_t *spec, const char *path, tsr_errbuf_t *err);
/* Sets every dense layer's TSR_UNITS_CLASSES units (`units = classes`) to classes; the other
 * layers are left as they are. */
TSR_API void tsr_model_bind_classes(tsr_model_spec_t *spec, int classes);
/* Whether spec (bound to its classes) can end in `classes` outputs: its last layer of a type
 * that can be the output (dense, lmhead) with units = classes. 0, or TSR_ESHAPE naming the
 * layer, its type and units and the fix (units = classes), after `file` (may be NULL: the
 * model file it was read from). Building a network checks it too, without the file. */
TSR_API int tsr_model_check_classes(const tsr_model_spec_t *spec, int classes, const char *file,
                                    tsr_errbuf_t *err);
/* An INI model file's text (name: for messages, as the file's path would be). */
TSR_API int tsr_model_parse_ini_text(tsr_model_spec_t *spec, const char *text, const char *name,
                                     tsr_errbuf_t *err);
/* Writes spec as an INI model file that tsr_model_parse_ini_text (or
 * tsr_model_load_ini) reads back to the same spec: one section per layer named as the layer
 * (layer<N> when unnamed), every key that differs from its default, the inputs where they are
 * not the previous layer. TSR_EINVAL when buf (size bytes) is too small. */
TSR_API int tsr_model_to_ini(const tsr_model_spec_t *spec, char *buf, size_t size);
/* Writes a one-line description, e.g. "784-512-relu-512-relu-10"; a layer that does not read
 * the previous one shows its inputs, "add[a,b.relu]". One that does not fit in buf's size bytes
 * is cut and ends with "..."; returns the whole description's length (as snprintf does). */
TSR_API int tsr_model_describe(const tsr_model_spec_t *spec, int inputs, char *buf, int size);
/* The whole description, however long, in a string the caller frees; NULL when out of memory. */
TSR_API char *tsr_model_description(const tsr_model_spec_t *spec, int inputs);

/* How the learning rate moves over a run (tsr_train_opts_t.lr_schedule), after a warm-up
 * (tsr_lr_opts_t.warmup) if there is one; docs/training.md, "Learning-rate schedules". */
typedef enum {
  TSR_LR_CONSTANT,
  /* lr * (1 + cos(pi * t / T)) / 2 at step t = 0 .. T - 1 of the run (T: steps per epoch times
   * epochs; under MPI a step is one of each rank's), decayed every step; after a warm-up of W
   * steps, t - W of T - W */
  TSR_LR_COSINE,
  /* lr times factor after each of the milestone epochs (PyTorch's MultiStepLR) */
  TSR_LR_STEP,
  /* lr times factor when the validation loss stopped falling (PyTorch's ReduceLROnPlateau) */
  TSR_LR_PLATEAU
} tsr_lr_schedule_t;

#define TSR_LR_MILESTONES 32

/* A schedule's parameters beside its kind (tsr_lr_schedule_parse fills them). */
typedef struct {
  int warmup; /* steps of linear warm-up before the schedule: step t < warmup (0-based) takes the
                 schedule's rate times (t + 1) / warmup; 0: none */
  int n_milestones;                  /* step: how many */
  int milestones[TSR_LR_MILESTONES]; /* step: epochs (1-based, strictly increasing) after which
                                        the rate is multiplied by factor */
  double factor;                     /* step: > 0; plateau: in (0, 1) [0.1] */
  int patience;                      /* plateau: epochs without improvement tolerated [10] */
  double threshold;                  /* plateau: the relative improvement that counts [1e-4] */
} tsr_lr_opts_t;

/* How tsr_net_create initializes dense and conv parameters (tsr_net_opts_t.init), fan_in
 * being a dense layer's input features or a conv's kh kw c_in. */
typedef enum {
  /* PyTorch's defaults for nn.Linear and nn.Conv2d: weights kaiming-uniform with a = sqrt(5),
   * i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in));
   * an untrained network's loss is near ln(classes) */
  TSR_INIT_PYTORCH,
  /* He-uniform weights U(-sqrt(6/fan_in), sqrt(6/fan_in)), zero biases (tessera's only
   * initialization before there was a choice) */
  TSR_INIT_HE,
  /* GPT-2's: dense, conv and embedding weights normal(0, 0.02), biases 0; the weights of a
   * layer read only by an add layer (a residual branch's last projection) scaled by
   * 1/sqrt(the network's add layers) (1/sqrt(2L) in an L-block GPT); layernorm scale 1, shift 0 */
  TSR_INIT_GPT2
} tsr_init_t;

/* "pytorch" or "he" (NULL for a value that is neither). */
TSR_API const char *tsr_init_name(tsr_init_t init);
/* *init for a name tsr_init_name gives; TSR_EINVAL for any other name (init untouched). */
TSR_API int tsr_init_from_name(tsr_init_t *init, const char *name);

typedef struct {
  int batch;       /* samples per training step */
  int tile_rows;   /* batch rows per tile (0: chosen from the shapes and workers) */
  int tile_cols;   /* features per tile (0: chosen) */
  uint64_t seed;   /* weight initialization and dropout masks */
  tsr_init_t init; /* how the parameters start [TSR_INIT_PYTORCH] */
  /* PyTorch's label smoothing eps in [0, 1) [0]: the loss, training's and evaluation's, is the
   * cross-entropy with the target (1 - eps) onehot + eps / classes, and the gradient its own;
   * 0 is the one-hot cross-entropy. */
  float label_smoothing;
  /* Gradient-norm clipping, PyTorch's clip_grad_norm_ [0: none]: before each update every
   * gradient is scaled by min(1, clip_grad / (norm + 1e-6)), norm the 2-norm of all the
   * parameters' gradients together (under --sync batch, of the averaged gradient: across the
   * ranks; under the other policies each replica clips its own). Not with a grid. */
  float clip_grad;
  /* Geometry of an input sample, channels-last (c h w = inputs); all 0: a
   * square one-channel image when inputs is a perfect square, else 1 x 1 x inputs. */
  int in_channels, in_height, in_width;
  tsr_optimizer_t opt; /* tessera/optim.h */
  /* Pr of a --grid PrxPc run under MPI (0 or 1: none). Rank q sits in grid column q / Pr, row
   * q % Pr; the Pr ranks of a column hold one replica between them: a dense layer's column tile
   * j (of W, the bias, y and dy) lives on the column's row j mod Pr, while convolutions,
   * pooling and the input batch are replicated on every rank of the column (unless domain). Every
   * rank of a column calls every function of the net alike; the ranks must be a multiple of Pr. */
  int grid_rows;
  /* Domain parallelism under a grid (--domain rows) [false]: convolutions and pooling cut their
   * output images' rows into bands over the column's Pr ranks, exchanging halo rows
   * (src/tile/domain.h), instead of every rank computing them whole; their parameters stay
   * replicated, their gradients summed over the column. */
  bool domain;
  /* With domain, how many of those layers, in the order they run, are cut (0: all); a later
   * convolution or pooling reads the bands all-gathered and is computed whole on every rank of
   * the column (Gholami's integrated formulation: early layers' large images split, late
   * layers' small ones not; --domain rows:K). */
  int domain_layers;
  /* Dense layers' SGD steps as tasks of their own [false]: by default, where the optimizer is
   * SGD (plain or Nesterov) and its step is the gradient's only reader (no --sync policy's hook,
   * no --clip-grad, no grid, one process's tasks), the tasks that complete a weight or bias
   * gradient tile take the tile's step themselves (the same digits, fewer tasks and passes). */
  bool unfused_steps;
} tsr_net_opts_t;

/* batch 64, SGD lr 0.01 momentum 0.9, seed 1, PyTorch's initialization, tiles chosen
 * automatically. */
TSR_API void tsr_net_opts_init(tsr_net_opts_t *opts);

typedef struct tsr_net tsr_net_t;

/* Builds a network for `inputs` features and `classes` classes; the last
 * layer must be dense with `classes` units. Parameters are initialized as opts->init says
 * from opts->seed. The runtime must be started. spec is borrowed (the net keeps
 * its own copy). The graph is checked first, each error naming the layers and shapes: an
 * unknown or ambiguous input name, a cycle, a layer whose output nothing reads, inputs of
 * different shapes at an add or of different h x w at a concat, a grid placement that cannot
 * work. Layers run in the spec's order where it allows (a layer after its inputs). */
TSR_API int tsr_net_create(tsr_net_t **net, const tsr_model_spec_t *spec, int inputs, int classes,
                           const tsr_net_opts_t *opts, tsr_errbuf_t *err);
TSR_API void tsr_net_destroy(tsr_net_t **net);

/* The grid's Pr (1 without a grid) and the grid transfers inside this rank's grid column so
 * far (the forward all-gathers and the backward reduce-scatters of its dense layers), as this
 * rank sent and received them: bytes and messages, counted from the tiles' owners. */
TSR_API int tsr_net_grid_rows(const tsr_net_t *net);
TSR_API void tsr_net_grid_traffic(const tsr_net_t *net, uint64_t *bytes_sent,
                                  uint64_t *bytes_received, int64_t *messages_sent,
                                  int64_t *messages_received);
/* Of what tsr_net_grid_traffic counts as sent, the halo rows of the layers cut into bands of
 * image rows (--domain rows): bytes and messages this rank sent so far, forward and backward. */
TSR_API void tsr_net_halo_traffic(const tsr_net_t *net, uint64_t *bytes_sent,
                                  int64_t *messages_sent);
/* Bytes of parameter tiles (weights and biases) this process stores. */
TSR_API int64_t tsr_net_param_local_bytes(const tsr_net_t *net);

/* What a network would hold in memory, in bytes, as tsr_net_create would
 * build it (the same tiles, for this process's workers): known before
 * anything is allocated, so that a model or a batch that cannot fit is
 * refused with the numbers instead of running the machine out of memory. */
typedef struct {
  int64_t params;      /* weights and biases */
  int64_t grads;       /* their gradients */
  int64_t optimizer;   /* optimizer state (SGD momentum; Adam's two moments) */
  int64_t activations; /* each layer's output and its gradient for one batch, the input batch
                        * and its labels, per-batch-tile weight-gradient partials: all grow with
                        * the batch */
  int64_t workspace;   /* the workers' scratch (the lowered input of a convolution) */
  int64_t total;
} tsr_net_memory_t;

/* Fills *mem for tsr_net_create(spec, inputs, classes, opts) without
 * building anything; a spec that tsr_net_create would refuse is refused the
 * same way. The runtime should be started (tiles depend on its workers).
 * Synchronization under MPI adds its own buffers, not counted here. */
TSR_API int tsr_net_estimate(tsr_net_memory_t *mem, const tsr_model_spec_t *spec, int inputs,
                             int classes, const tsr_net_opts_t *opts, tsr_errbuf_t *err);

/* One row of a model's summary: a layer as the network builds it (a flatten builds none; a
 * ReLU fused into the layer before it is part of that layer's row). */
typedef struct {
  char name[TSR_NAME_MAX]; /* the name it goes by (layer<N> when unnamed) */
  char type[32];           /* its type's name, "+relu" after it when a ReLU is fused */
  int c, h, w;             /* the output sample's shape (1 x 1 x F for features) */
  int64_t params;          /* weights and biases */
  double flops;            /* forward floating-point operations per sample: a multiply-add is 2,
                            * a bias add, a ReLU, a pooling window's compare or add 1 each */
  int64_t act_bytes;       /* bytes of its output per sample (float32) */
} tsr_layer_summary_t;

/* A model's layer table, for one input shape and class count: what tsr_net_create would build.
 * Owned rows: tsr_model_summary_fini frees them. */
typedef struct {
  int n_layers;
  tsr_layer_summary_t *layers; /* owned, [n_layers], in the order they run */
  int in_c, in_h, in_w;        /* the input sample's shape */
  int64_t params;              /* totals of the rows */
  double flops;
  int64_t act_bytes; /* the layers' outputs per sample (not counting the input) */
} tsr_model_summary_t;

/* Fills *out for tsr_net_create(spec, inputs, classes, opts) (opts: the input shape; its batch
 * and tiles do not change the numbers) without building anything or starting the runtime; a
 * spec tsr_net_create would refuse is refused the same way. The numbers come from the layout and
 * each layer type's own flops (src/nn/layers.h). out is left empty on an error. */
TSR_API int tsr_model_summarize(tsr_model_summary_t *out, const tsr_model_spec_t *spec, int inputs,
                                int classes, const tsr_net_opts_t *opts, tsr_errbuf_t *err);
/* The registered layer types as one line of JSON (`tessera summary --layer-types`), what the
 * Python package reads instead of a copy of its own (python/tessera/layer_types.py is written
 * from it): a list, in the order model-file messages name them, of {"name", "alias" (also
 * accepted as `type = alias`, or null), "keys": [{"name", "alias", "form" (count, size, padding,
 * probability, activation, units or fraction), "fields" (the tsr_layer_spec_t fields it sets:
 * none for activation, h and w for a size or padding), "missing" (a required key: the message
 * for a section without it; null: optional)}], "inputs": [least, most], "output" (may be the
 * last layer), "params" (its parameters' names in checkpoints, [] for none), "buffers" (its
 * buffers' and counter's names, as checkpoints store them)}. Owned by the caller (free());
 * NULL: out of memory. */
TSR_API char *tsr_layer_types_json(void);
TSR_API void tsr_model_summary_fini(tsr_model_summary_t *s);

/* Samples per step the network was built for. */
TSR_API int tsr_net_batch(const tsr_net_t *net);
/* Predictions per sample: 1, or T when the last layer predicts at each of T positions (an
 * lmhead: labels (batch, T), the dataset's targets). tsr_net_take_stats's loss sum and correct
 * count then add each sample's mean over its positions (divided by samples: per token). */
TSR_API int tsr_net_positions(const tsr_net_t *net);
/* Learning rate for the steps submitted from now on (schedules). */
TSR_API void tsr_net_set_lr(tsr_net_t *net, float lr);
TSR_API float tsr_net_base_lr(const tsr_net_t *net); /* the lr the net was created with */
TSR_API float tsr_net_lr(const tsr_net_t *net);      /* the lr of the next step submitted */
/* Tile shape in use (after automatic choice). */
TSR_API void tsr_net_tiles(const tsr_net_t *net, int *tile_rows, int *tile_cols);
TSR_API int64_t tsr_net_param_count(const tsr_net_t *net);

/* Submits one training step on samples rows[0..n) of ds (n <= batch; a short
 * batch is padded and the padding ignored; n = 0 gives zero gradients): forward, loss, backward,
 * and the optimizer update when update is set. rows is copied; ds is borrowed until the step's
 * tasks have run (tsr_net_wait). */
TSR_API int tsr_net_train_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n,
                               bool update);
/* Submits a training forward pass on rows[0..n) of ds (1 <= n <= batch), without loss,
 * gradients or update, for the batchnorm layers' running statistics: each becomes the mean of
 * the batch statistics of this pass and the k passes before it (k = 0: this batch's alone;
 * PyTorch's torch.optim.swa_utils.update_bn), under --sync-bn's hook every rank's batch. The
 * weights, the optimizer and the training steps that follow (dropout's masks included) are
 * untouched; the batchnorm layers' tracked batches count it. */
TSR_API int tsr_net_stats_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n,
                               int k);
/* Submits a forward pass and loss (no gradients) on rows[0..n) of ds. */
TSR_API int tsr_net_eval_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows, int n);
/* Waits until at most `pending` training/eval steps are still in flight (0: all done). */
TSR_API int tsr_net_wait(tsr_net_t *net, int pending);
/* Waits for all steps, then returns the loss sum and correct count
 * accumulated since the last reset (train or eval counters), and resets them. */
TSR_API int tsr_net_take_stats(tsr_net_t *net, bool eval, double *loss_sum, double *correct);
/* The same without the reset: the sums so far, once the steps submitted have run. */
TSR_API int tsr_net_read_stats(tsr_net_t *net, bool eval, double *loss_sum, double *correct);

/* Parameters are numbered in layer order: for each dense layer W (fin, fout)
 * then b (1, fout). Copies go through the runtime (they wait for pending tasks). */
TSR_API int tsr_net_param_info(const tsr_net_t *net, int index, int64_t *rows, int64_t *cols);
TSR_API int tsr_net_n_params(const tsr_net_t *net);
TSR_API int tsr_net_param_get(const tsr_net_t *net, int index, float *dst);
TSR_API int tsr_net_param_set(tsr_net_t *net, int index, const float *src);
TSR_API int tsr_net_grad_get(const tsr_net_t *net, int index, float *dst);
/* Gradient of the mean loss with respect to the input batch (batch, inputs),
 * computed only when opts asked for it (tsr_net_keep_input_grad before steps). */
TSR_API int tsr_net_keep_input_grad(tsr_net_t *net);
TSR_API int tsr_net_input_grad_get(const tsr_net_t *net, float *dst);
/* The last layer's output of the steps submitted so far (it waits for them), before the
 * softmax: dst (batch, positions x classes) row-major (the caller's), the logits of the last
 * step's samples, row r for its r-th sample (rows past a short batch hold the padding's); an
 * lmhead's row holds position p's classes logits at p x classes. After tsr_net_eval_step it is
 * what a generator samples from. TSR_EINVAL when a tile of it is on another process (--grid). */
TSR_API int tsr_net_logits_get(const tsr_net_t *net, float *dst);

TSR_EXTERN_C_END

#endif
