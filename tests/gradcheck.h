/* Float64 finite-difference gradient checks of whole networks, shared by the
 * dense (test_grad.c), convolutional (test_conv.c) and graph (test_graph.c) suites: a float64
 * reference forward pass for every registered layer type (ref_types, keyed by
 * the registry's type name, with a small example network each), a float64
 * forward pass and loss that follows the graph (each layer's named inputs, resolved here) and
 * the registry's shape inference, and a
 * check that runs one engine step (no update) over edge tiles and compares
 * every parameter gradient and the input gradient with central differences.
 * A registered type without a reference fails every check that meets it and
 * grad/every_registered_layer_type_has_a_reference. */
#ifndef TSR_TEST_GRADCHECK_H
#define TSR_TEST_GRADCHECK_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "rng.h"
#include "spec.h"
#include "tessera/tessera.h"

/* Direct convolution, channels-last, in double: y (n, oh ow oc). */
static void conv_ref(const tsr_conv_geom_t *g, int n, double *y, const double *x, const double *w,
                     const double *b) {
  for (int s = 0; s < n; s++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++)
        for (int o = 0; o < g->oc; o++) {
          double acc = b[o];
          for (int ky = 0; ky < g->kh; ky++)
            for (int kx = 0; kx < g->kw; kx++)
              for (int c = 0; c < g->c; c++) {
                int iy = oy * g->sh - g->ph + ky, ix = ox * g->sw - g->pw + kx;
                if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
                acc += x[(long)s * g->h * g->w * g->c + ((long)iy * g->w + ix) * g->c + c] *
                       w[(((long)ky * g->kw + kx) * g->c + c) * g->oc + o];
              }
          y[(long)s * g->oh * g->ow * g->oc + ((long)oy * g->ow + ox) * g->oc + o] = acc;
        }
}

/* PyTorch's MaxPool2d and AvgPool2d (count_include_pad=True): the padding is -inf in a max
 * and zeros in a mean, whose divisor is kh kw. */
static void pool_ref(const tsr_conv_geom_t *g, bool max, int n, double *y, const double *x) {
  for (int s = 0; s < n; s++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++)
        for (int c = 0; c < g->c; c++) {
          double acc = max ? -INFINITY : 0.0;
          for (int ky = 0; ky < g->kh; ky++)
            for (int kx = 0; kx < g->kw; kx++) {
              int iy = oy * g->sh - g->ph + ky, ix = ox * g->sw - g->pw + kx;
              if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
              double v = x[(long)s * g->h * g->w * g->c + ((long)iy * g->w + ix) * g->c + c];
              acc = max ? fmax(acc, v) : acc + v;
            }
          y[(long)s * g->oh * g->ow * g->c + ((long)oy * g->ow + ox) * g->c + c] =
              max ? acc : acc / (g->kh * g->kw);
        }
}

static void fill(float *v, double *d, long n, tsr_rng_t *rng) {
  for (long i = 0; i < n; i++) {
    v[i] = (float)(2 * tsr__rng_uniform(rng) - 1);
    if (d) d[i] = v[i];
  }
}

/* What a layer's reference forward pass gets. */
typedef struct {
  const tsr_layer_spec_t *s;
  const tsr_conv_geom_t *g; /* from the registry's shape(): input 0, window and output */
  int n_in;                 /* inputs, and their sample shapes (c, h, w) */
  const tsr_conv_geom_t *in;
  int n;                       /* samples */
  const double *const *params; /* the layer's, in the engine's order (dense, conv: W, b) */
  uint64_t seed;               /* the net's (dropout masks) */
  int index;                   /* 1-based position in the spec (dropout masks) */
  const double *table; /* the token table of the network's embedding (a tied head reads it) */
} ref_layer_t;

/* y (n, oh ow oc) = the layer applied to its inputs x[k] (n, h w c of in[k]), in double. */
typedef void (*ref_forward_fn)(const ref_layer_t *r, double *y, const double *const *xs);

static void dense_forward_ref(const ref_layer_t *r, double *y, const double *const *xs) {
  const double *x = xs[0];
  const double *W = r->params[0], *b = r->params[1]; /* (fin, units), (1, units) */
  int fin = r->g->c * r->g->h * r->g->w, units = r->g->oc;
  for (int i = 0; i < r->n; i++)
    for (int j = 0; j < units; j++) {
      double acc = b[j];
      for (int k = 0; k < fin; k++)
        acc += x[(long)i * fin + k] * W[(long)k * units + j];
      y[(long)i * units + j] = acc;
    }
}

static void relu_forward_ref(const ref_layer_t *r, double *y, const double *const *x) {
  for (long i = 0; i < (long)r->n * r->g->c * r->g->h * r->g->w; i++)
    y[i] = x[0][i] > 0 ? x[0][i] : 0;
}

static void conv_forward_ref(const ref_layer_t *r, double *y, const double *const *x) {
  conv_ref(r->g, r->n, y, x[0], r->params[0], r->params[1]);
}

static void maxpool_forward_ref(const ref_layer_t *r, double *y, const double *const *x) {
  pool_ref(r->g, true, r->n, y, x[0]);
}

static void avgpool_forward_ref(const ref_layer_t *r, double *y, const double *const *x) {
  pool_ref(r->g, false, r->n, y, x[0]);
}

/* The mean of each channel over the sample's pixels: y (n, c). */
static void globalavgpool_forward_ref(const ref_layer_t *r, double *y, const double *const *x) {
  int pixels = r->g->h * r->g->w, c = r->g->c;
  for (int s = 0; s < r->n; s++)
    for (int q = 0; q < c; q++) {
      double acc = 0;
      for (int p = 0; p < pixels; p++)
        acc += x[0][((long)s * pixels + p) * c + q];
      y[(long)s * c + q] = acc / pixels;
    }
}

static void flatten_forward_ref(const ref_layer_t *r, double *y, const double *const *x) {
  memcpy(y, x[0], sizeof(double) * (size_t)r->n * (size_t)(r->g->c * r->g->h * r->g->w));
}

/* The sum of the inputs, all of one shape. */
static void add_forward_ref(const ref_layer_t *r, double *y, const double *const *x) {
  long size = (long)r->n * r->g->c * r->g->h * r->g->w;
  for (long i = 0; i < size; i++) {
    double acc = 0;
    for (int k = 0; k < r->n_in; k++)
      acc += x[k][i];
    y[i] = acc;
  }
}

/* Channels side by side, pixel by pixel (channels-last): input k's c channels at its offset. */
static void concat_forward_ref(const ref_layer_t *r, double *y, const double *const *x) {
  int pixels = r->g->oh * r->g->ow, oc = r->g->oc;
  for (int s = 0; s < r->n; s++)
    for (int p = 0; p < pixels; p++)
      for (int k = 0, off = 0; k < r->n_in; off += r->in[k].c, k++)
        for (int c = 0; c < r->in[k].c; c++)
          y[((long)s * pixels + p) * oc + off + c] = x[k][((long)s * pixels + p) * r->in[k].c + c];
}

/* Training mode: each channel (each feature of 1 x 1 x F samples) normalized with the
 * statistics of the n samples' values (biased variance), then scale and shift. */
static void batchnorm_forward_ref(const ref_layer_t *r, double *y, const double *const *xs) {
  const double *x = xs[0], *scale = r->params[0], *shift = r->params[1];
  int c = r->g->c, hw = r->g->h * r->g->w;
  double eps = r->s->eps > 0 ? r->s->eps : 1e-5, count = (double)r->n * hw;
  for (int ch = 0; ch < c; ch++) {
    double mean = 0, var = 0;
    for (long k = 0; k < (long)r->n * hw; k++)
      mean += x[k * c + ch];
    mean /= count;
    for (long k = 0; k < (long)r->n * hw; k++)
      var += (x[k * c + ch] - mean) * (x[k * c + ch] - mean);
    var /= count;
    for (long k = 0; k < (long)r->n * hw; k++)
      y[k * c + ch] = (x[k * c + ch] - mean) / sqrt(var + eps) * scale[ch] + shift[ch];
  }
}

/* The engine's mask of the first training step, scaled by 1 / (1 - rate). */
static void dropout_forward_ref(const ref_layer_t *r, double *y, const double *const *xs) {
  const double *x = xs[0];
  uint64_t seed = tsr__dropout_seed(r->seed, r->index, 1);
  int width = r->g->c * r->g->h * r->g->w;
  for (int i = 0; i < r->n; i++)
    for (int j = 0; j < width; j++)
      y[(long)i * width + j] = tsr__k_dropout_keep(seed, i, j, r->s->rate)
                                   ? x[(long)i * width + j] / (1.0 - r->s->rate)
                                   : 0.0;
}

/* Causal multi-head self-attention in double, the plain way: per sample and head the whole
 * (t, t) score matrix, softmax(q k^T / sqrt(dh) + mask) v with the mask -inf above the
 * diagonal. x (n, t 3d) holds [q | k | v] per position (head h at columns h dh .. of each),
 * y (n, t d). */
static void attention_ref(int n, int t, int d, int heads, double *y, const double *x) {
  int dh = d / heads;
  double *p = malloc(sizeof *p * (size_t)t);
  for (int r = 0; r < n; r++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < t; i++) {
        const double *q = x + (long)r * t * 3 * d + (long)i * 3 * d + h * dh;
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < t; j++) {
          const double *k = x + (long)r * t * 3 * d + (long)j * 3 * d + d + h * dh;
          double dot = 0;
          for (int c = 0; c < dh; c++)
            dot += q[c] * k[c];
          p[j] = j <= i ? dot / sqrt((double)dh) : -INFINITY;
          m = fmax(m, p[j]);
        }
        for (int j = 0; j < t; j++)
          sum += p[j] = exp(p[j] - m);
        for (int c = 0; c < dh; c++) {
          double acc = 0;
          for (int j = 0; j < t; j++)
            acc += p[j] * x[(long)r * t * 3 * d + (long)j * 3 * d + 2 * d + h * dh + c];
          y[(long)r * t * d + (long)i * d + h * dh + c] = acc / sum;
        }
      }
  free(p);
}

/* The sample's h w positions as the sequence. */
static void attention_forward_ref(const ref_layer_t *r, double *y, const double *const *xs) {
  attention_ref(r->n, r->g->h * r->g->w, r->g->oc, r->s->heads, y, xs[0]);
}

/* Rows of the token table (the token ids rounded: their finite differences change nothing) plus
 * rows of the position table: y (n, T units). */
static void embedding_forward_ref(const ref_layer_t *r, double *y, const double *const *xs) {
  const double *wte = r->params[0], *wpe = r->params[1];
  int t = r->g->h, d = r->g->oc;
  for (int s = 0; s < r->n; s++)
    for (int p = 0; p < t; p++) {
      long tok = lround(xs[0][(long)s * t + p]);
      cr_assert(tok >= 0 && tok < r->s->vocab, "token %ld outside the vocabulary", tok);
      for (int k = 0; k < d; k++)
        y[((long)s * t + p) * d + k] = wte[tok * d + k] + wpe[(long)p * d + k];
    }
}

/* PyTorch's nn.LayerNorm over each position's c values (biased variance). */
static void layernorm_forward_ref(const ref_layer_t *r, double *y, const double *const *xs) {
  const double *x = xs[0], *scale = r->params[0], *shift = r->params[1];
  int c = r->g->c;
  double eps = r->s->eps > 0 ? r->s->eps : 1e-5;
  for (long q = 0; q < (long)r->n * r->g->h * r->g->w; q++) {
    double mean = 0, var = 0;
    for (int k = 0; k < c; k++)
      mean += x[q * c + k];
    mean /= c;
    for (int k = 0; k < c; k++)
      var += (x[q * c + k] - mean) * (x[q * c + k] - mean);
    var /= c;
    for (int k = 0; k < c; k++)
      y[q * c + k] = (x[q * c + k] - mean) / sqrt(var + eps) * scale[k] + shift[k];
  }
}

/* GELU, the tanh approximation. */
static void gelu_forward_ref(const ref_layer_t *r, double *y, const double *const *xs) {
  for (long i = 0; i < (long)r->n * r->g->c * r->g->h * r->g->w; i++) {
    double v = xs[0][i];
    y[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
}

/* The logits of each position: its D values times the transposed token table (V, D). */
static void lmhead_forward_ref(const ref_layer_t *r, double *y, const double *const *xs) {
  int d = r->g->c, v = r->g->oc;
  cr_assert(r->table, "an lmhead needs the embedding's token table earlier in the network");
  for (long q = 0; q < (long)r->n * r->g->h * r->g->w; q++)
    for (int j = 0; j < v; j++) {
      double acc = 0;
      for (int k = 0; k < d; k++)
        acc += xs[0][q * d + k] * r->table[(long)j * d + k];
      y[q * v + j] = acc;
    }
}

/* One registered layer type's reference, and a small network that checks it
 * (grad/every_registered_layer_type_passes_its_gradient_check). */
typedef struct {
  const char *type; /* the registry's name */
  int nparams;      /* parameters the engine gives the layer, in the order forward reads them */
  bool table;       /* its params[0] is the token table a tied layer reads (ref_layer_t.table) */
  ref_forward_fn forward;
  int in[3]; /* the example's input sample: c, h, w */
  struct {
    int n_layers;
    tsr_layer_spec_t layers[8];
  } example; /* uses the type, ends with a dense layer of 3 classes (or an lmhead of 3 tokens) */
} ref_type_t;

#define OUT3                                                                                       \
  { .kind = TSR_LAYER_DENSE, .units = 3 }
static const ref_type_t ref_types[] = {
    {
        .type = "dense",
        .nparams = 2,
        .forward = dense_forward_ref,
        .in = {5, 1, 1},
        .example = {1, {OUT3}},
    },
    {
        .type = "relu",
        .forward = relu_forward_ref,
        .in = {6, 1, 1},
        .example = {2, {{.kind = TSR_LAYER_RELU}, OUT3}},
    },
    {
        .type = "conv",
        .nparams = 2,
        .forward = conv_forward_ref,
        .in = {2, 5, 4},
        .example = {2,
                    {{.kind = TSR_LAYER_CONV,
                      .units = 2,
                      .kernel_h = 3,
                      .kernel_w = 2,
                      .stride_h = 2,
                      .pad_h = 1},
                     OUT3}},
    },
    {
        .type = "maxpool",
        .forward = maxpool_forward_ref,
        .in = {2, 4, 4},
        /* ResNet's stem pooling: 3x3, stride 2, padding 1 */
        .example =
            {2,
             {{.kind = TSR_LAYER_MAXPOOL, .kernel_h = 3, .stride_h = 2, .pad_h = 1, .pad_w = 1},
              OUT3}},
    },
    {
        .type = "avgpool",
        .forward = avgpool_forward_ref,
        .in = {2, 5, 4},
        .example = {2,
                    {{.kind = TSR_LAYER_AVGPOOL,
                      .kernel_h = 3,
                      .kernel_w = 2,
                      .stride_h = 2,
                      .stride_w = 1,
                      .pad_h = 1,
                      .pad_w = 1},
                     OUT3}},
    },
    {
        .type = "globalavgpool",
        .forward = globalavgpool_forward_ref,
        .in = {3, 3, 4},
        .example = {2, {{.kind = TSR_LAYER_GLOBALAVGPOOL}, OUT3}},
    },
    {
        .type = "flatten",
        .forward = flatten_forward_ref,
        .in = {2, 4, 4},
        .example =
            {3, {{.kind = TSR_LAYER_AVGPOOL, .kernel_h = 2}, {.kind = TSR_LAYER_FLATTEN}, OUT3}},
    },
    {
        .type = "dropout",
        .forward = dropout_forward_ref,
        .in = {7, 1, 1},
        .example = {2, {{.kind = TSR_LAYER_DROPOUT, .rate = 0.4f}, OUT3}},
    },
    {
        /* a residual block: the input batch plus a dense layer of it, then the output */
        .type = "add",
        .forward = add_forward_ref,
        .in = {4, 1, 1},
        .example = {3,
                    {{.kind = TSR_LAYER_DENSE, .units = 4, .name = "h"},
                     {.kind = TSR_LAYER_ADD, .n_inputs = 2, .inputs = {"input", "h"}},
                     OUT3}},
    },
    {
        /* two convolutions of the input side by side along channels */
        .type = "concat",
        .forward = concat_forward_ref,
        .in = {2, 3, 3},
        .example = {4,
                    {{.kind = TSR_LAYER_CONV,
                      .units = 2,
                      .kernel_h = 3,
                      .pad_h = 1,
                      .pad_w = 1,
                      .name = "a"},
                     {.kind = TSR_LAYER_CONV,
                      .units = 3,
                      .kernel_h = 1,
                      .name = "b",
                      .n_inputs = 1,
                      .inputs = {"input"}},
                     {.kind = TSR_LAYER_CONCAT, .n_inputs = 3, .inputs = {"a", "b", "input"}},
                     OUT3}},
    },
    {
        /* per channel of 2 x 2 x 3 samples, its ReLU fused */
        .type = "batchnorm",
        .nparams = 2,
        .forward = batchnorm_forward_ref,
        .in = {3, 2, 2},
        .example = {3, {{.kind = TSR_LAYER_BATCHNORM}, {.kind = TSR_LAYER_RELU}, OUT3}},
    },
    {
        /* a sequence of 5 positions: [q | k | v] by a kernel-1 conv, 2 heads of width 2 */
        .type = "attention",
        .forward = attention_forward_ref,
        .in = {2, 5, 1},
        .example = {3,
                    {{.kind = TSR_LAYER_CONV, .units = 12, .kernel_h = 1},
                     {.kind = TSR_LAYER_ATTENTION, .heads = 2},
                     OUT3}},
    },
    {
        /* 3 token ids below 5 per sample, a position table of 4 rows (the last one unused) */
        .type = "embedding",
        .nparams = 2,
        .table = true,
        .forward = embedding_forward_ref,
        .in = {1, 3, 1},
        .example = {2, {{.kind = TSR_LAYER_EMBEDDING, .vocab = 5, .units = 3, .context = 4}, OUT3}},
    },
    {
        /* per pixel of 2 x 2 x 3 samples */
        .type = "layernorm",
        .nparams = 2,
        .forward = layernorm_forward_ref,
        .in = {3, 2, 2},
        .example = {2, {{.kind = TSR_LAYER_LAYERNORM}, OUT3}},
    },
    {
        .type = "gelu",
        .forward = gelu_forward_ref,
        .in = {6, 1, 1},
        .example = {2, {{.kind = TSR_LAYER_GELU}, OUT3}},
    },
    {
        /* a tiny language model, the head tied to the embedding (the table's gradient sums both
         * uses), the loss at each of 4 positions over 3 tokens */
        .type = "lmhead",
        .forward = lmhead_forward_ref,
        .in = {1, 4, 1},
        .example = {5,
                    {{.kind = TSR_LAYER_EMBEDDING, .vocab = 3, .units = 4, .context = 5},
                     {.kind = TSR_LAYER_LAYERNORM},
                     {.kind = TSR_LAYER_CONV, .units = 4, .kernel_h = 1},
                     {.kind = TSR_LAYER_GELU},
                     {.kind = TSR_LAYER_LMHEAD, .units = 3}}},
    },
};
#undef OUT3

/* The reference of a registered type name, or NULL. */
static const ref_type_t *ref_type(const char *name) {
  for (size_t i = 0; i < sizeof ref_types / sizeof *ref_types; i++)
    if (strcmp(ref_types[i].type, name) == 0) return &ref_types[i];
  return NULL;
}

/* The registered type of spec layer l and its reference; fails the test when
 * either is missing. */
static const ref_type_t *ref_for(const tsr_layer_spec_t *s, int l) {
  const tsr_layer_type_t *t = tsr__layer_type(s->kind);
  cr_assert(t, "layer %d: kind %d is not a registered layer type", l + 1, (int)s->kind);
  const ref_type_t *ref = ref_type(t->name);
  cr_assert(ref,
            "layer type '%s' is registered but has no float64 reference: add one to ref_types in "
            "tests/gradcheck.h",
            t->name);
  return ref;
}

/* Parameters the references of spec's layers use, in all. */
static int ref_nparams(const tsr_model_spec_t *spec) {
  int p = 0;
  for (int l = 0; l < spec->n_layers; l++)
    p += ref_for(&spec->layers[l], l)->nparams;
  return p;
}

/* The spec layer input k of layer l reads, resolved here by name (-1: the input batch); the
 * test models list layers after their inputs. */
static int ref_input(const tsr_model_spec_t *spec, int l, int k) {
  const tsr_layer_spec_t *s = &spec->layers[l];
  if (s->n_inputs == 0) return l - 1;
  for (int j = 0; j < l; j++)
    if (tsr__layer_is(spec, j, s->inputs[k])) return j;
  cr_assert(strcmp(s->inputs[k], "input") == 0, "layer %d: input '%s' is not an earlier layer",
            l + 1, s->inputs[k]);
  return -1;
}

typedef struct {
  const tsr_model_spec_t *spec;
  int c, h, w; /* input geometry */
  int n, classes;
  int positions;       /* predictions per sample (a last layer per position: its oh ow) */
  const double *x;     /* (n, c h w) */
  const float *labels; /* (n, positions) */
  double **params;     /* [the engine's parameters], in its order (spec order, each layer's own) */
  uint64_t seed;       /* the net's, for dropout masks (first training step) */
} ref_t;

/* Mean softmax cross-entropy of the float64 forward pass, layer by layer in spec order, each
 * layer reading its inputs' outputs, over every prediction (each sample's, or each position's of
 * a per-position last layer). Each layer's output shape comes from the registry's shape
 * inference. */
static double ref_loss(const ref_t *r) {
  const tsr_model_spec_t *spec = r->spec;
  int nl = spec->n_layers, p = 0;
  const double *table = NULL;
  tsr_conv_geom_t *out = malloc(sizeof *out * (size_t)nl);
  double **y = calloc((size_t)nl, sizeof *y);
  tsr_conv_geom_t input = {.c = r->c, .h = r->h, .w = r->w};
  for (int l = 0; l < nl; l++) {
    const tsr_layer_spec_t *s = &spec->layers[l];
    const ref_type_t *ref = ref_for(s, l);
    int n_in = s->n_inputs ? s->n_inputs : 1;
    tsr_conv_geom_t in[TSR_MAX_INPUTS];
    const double *x[TSR_MAX_INPUTS];
    for (int k = 0; k < n_in; k++) {
      int j = ref_input(spec, l, k);
      in[k] = j < 0 ? input : out[j];
      x[k] = j < 0 ? r->x : y[j];
    }
    tsr_errbuf_t err = {""};
    tsr_layer_site_t at = {.index = l + 1, .shown = in[0], .n_in = n_in, .in = in, .err = &err};
    tsr_conv_geom_t g = {.c = in[0].c, .h = in[0].h, .w = in[0].w};
    cr_assert_eq(tsr__layer_type(s->kind)->shape(s, &g, &at), 0, "%s", err.msg);
    out[l] = (tsr_conv_geom_t){.c = g.oc, .h = g.oh, .w = g.ow};
    y[l] = malloc(sizeof(double) * (size_t)r->n * (size_t)(g.oc * g.oh * g.ow));
    if (ref->table && !table) table = r->params[p];
    ref_layer_t rl = {s,       &g,    n_in, in, r->n, (const double *const *)&r->params[p],
                      r->seed, l + 1, table};
    ref->forward(&rl, y[l], x);
    p += ref->nparams;
  }
  const double *a = y[nl - 1];
  int width = out[nl - 1].c * out[nl - 1].h * out[nl - 1].w / r->positions;
  cr_assert_eq(width, r->classes, "the references end with %d features, not the %d classes", width,
               r->classes);
  double loss = 0;
  for (int i = 0; i < r->n * r->positions; i++) {
    double m = a[(long)i * width];
    for (int j = 1; j < width; j++)
      m = fmax(m, a[(long)i * width + j]);
    double s = 0;
    for (int j = 0; j < width; j++)
      s += exp(a[(long)i * width + j] - m);
    loss += log(s) + m - a[(long)i * width + (int)r->labels[i]];
  }
  for (int l = 0; l < nl; l++)
    free(y[l]);
  free(y), free(out);
  return loss / (r->n * r->positions);
}

static void check_close(const char *what, int p, long idx, double got, double want) {
  cr_assert(fabs(got - want) <= 2e-4 + 2e-3 * fabs(want),
            "%s (param %d)[%ld]: engine %.7g, finite difference %.7g", what, p, idx, got, want);
}

/* One step without update on the first n of `batch` samples of shape (c, h, w);
 * every parameter gradient and the input gradient against central differences. */
static void gradient_check_with(const tsr_model_spec_t *spec, int c, int h, int w, int classes,
                                int batch, int n, int tile_rows, int tile_cols) {
  int inputs = c * h * w;
  tsr_rng_t rng = {42};
  tsr_dataset_t ds = {.n = batch, .features = inputs, .classes = classes};
  ds.x = malloc(sizeof(float) * (size_t)batch * (size_t)inputs);
  fill(ds.x, NULL, (long)batch * inputs, &rng);
  /* A first layer with a vocabulary (an embedding) reads token ids below it. */
  int vocab = spec->layers[0].vocab;
  for (long k = 0; vocab > 0 && k < (long)batch * inputs; k++)
    ds.x[k] = (float)tsr__rng_below(&rng, (uint64_t)vocab);
  int32_t rows[64];
  for (int i = 0; i < batch; i++)
    rows[i] = batch - 1 - i;

  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = batch, o.tile_rows = tile_rows, o.tile_cols = tile_cols, o.seed = 5;
  o.in_channels = c, o.in_height = h, o.in_width = w;
  tsr_net_t *net;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, spec, inputs, classes, &o, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_net_keep_input_grad(net), 0);
  int positions = tsr_net_positions(net);
  ds.targets = positions;
  ds.y = malloc(sizeof(float) * (size_t)batch * (size_t)positions);
  for (int i = 0; i < batch * positions; i++)
    ds.y[i] = (float)((i % positions + i / positions) % classes);
  int np = tsr_net_n_params(net);
  cr_assert_eq(ref_nparams(spec), np, "the references use %d parameters, the engine has %d",
               ref_nparams(spec), np);
  /* Non-zero biases keep pre-activations off ReLU's kink (the odd parameters of one row). */
  for (int p = 1; p < np; p += 2) {
    int64_t pr, pc;
    cr_assert_eq(tsr_net_param_info(net, p, &pr, &pc), 0);
    if (pr != 1) continue;
    float bias[256];
    for (int64_t k = 0; k < pc; k++)
      bias[k] = (float)(tsr__rng_uniform(&rng) - 0.5);
    cr_assert_eq(tsr_net_param_set(net, p, bias), 0);
  }
  cr_assert_eq(tsr_net_train_step(net, &ds, rows, n, false), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);

  double *x = malloc(sizeof(double) * (size_t)n * (size_t)inputs);
  float *labels = malloc(sizeof(float) * (size_t)n * (size_t)positions);
  for (int i = 0; i < n; i++) {
    for (int q = 0; q < positions; q++)
      labels[(long)i * positions + q] = ds.y[(long)rows[i] * positions + q];
    for (int k = 0; k < inputs; k++)
      x[(long)i * inputs + k] = ds.x[(long)rows[i] * inputs + k];
  }
  ref_t r = {.spec = spec,
             .c = c,
             .h = h,
             .w = w,
             .n = n,
             .classes = classes,
             .positions = positions,
             .x = x,
             .labels = labels,
             .seed = o.seed};
  float **grads = calloc((size_t)np, sizeof *grads);
  int64_t *sizes = calloc((size_t)np, sizeof *sizes);
  r.params = calloc((size_t)np, sizeof *r.params);
  for (int p = 0; p < np; p++) {
    int64_t pr, pc;
    cr_assert_eq(tsr_net_param_info(net, p, &pr, &pc), 0);
    sizes[p] = pr * pc;
    float *v = malloc(sizeof(float) * (size_t)sizes[p]);
    grads[p] = malloc(sizeof(float) * (size_t)sizes[p]);
    cr_assert_eq(tsr_net_param_get(net, p, v), 0);
    cr_assert_eq(tsr_net_grad_get(net, p, grads[p]), 0);
    r.params[p] = malloc(sizeof(double) * (size_t)sizes[p]);
    for (int64_t k = 0; k < sizes[p]; k++)
      r.params[p][k] = v[k];
    free(v);
  }
  const double eps = 1e-6;
  for (int p = 0; p < np; p++)
    for (int64_t k = 0; k < sizes[p]; k++) {
      double keep = r.params[p][k];
      r.params[p][k] = keep + eps;
      double up = ref_loss(&r);
      r.params[p][k] = keep - eps;
      double down = ref_loss(&r);
      r.params[p][k] = keep;
      check_close(p % 2 ? "db" : "dW", p, (long)k, grads[p][k], (up - down) / (2 * eps));
    }
  float *dx = malloc(sizeof(float) * (size_t)batch * (size_t)inputs);
  cr_assert_eq(tsr_net_input_grad_get(net, dx), 0);
  for (long k = 0; k < (long)n * inputs; k++) {
    double keep = x[k];
    x[k] = keep + eps;
    double up = ref_loss(&r);
    x[k] = keep - eps;
    double down = ref_loss(&r);
    x[k] = keep;
    check_close("dX", -1, k, dx[k], (up - down) / (2 * eps));
  }
  for (long k = (long)n * inputs; k < (long)batch * inputs; k++)
    cr_assert_float_eq(dx[k], 0.0f, 0, "padding row gradient must be 0");
  for (int p = 0; p < np; p++)
    free(grads[p]), free(r.params[p]);
  free(grads), free(sizes), free(r.params);
  free(dx), free(x), free(labels), free(ds.x), free(ds.y);
  tsr_net_destroy(&net);
}

/* Checks the gradients of spec's network (gradient_check_with), and where it has convolutions
 * once with each of their CPU implementations (oneDNN's where built, the lowered BLIS one),
 * forced by restarting the runtime with --kernels' choice; the runtime ends as the suite
 * started it (default options). */
static void gradient_check(const tsr_model_spec_t *spec, int c, int h, int w, int classes,
                           int batch, int n, int tile_rows, int tile_cols) {
  bool convs = false;
  for (int i = 0; i < spec->n_layers; i++)
    convs |= spec->layers[i].kind == TSR_LAYER_CONV;
  if (!convs) {
    gradient_check_with(spec, c, h, w, classes, batch, n, tile_rows, tile_cols);
    return;
  }
  const tsr_kernels_t choices[] = {TSR_KERNELS_ONEDNN, TSR_KERNELS_BLIS};
  for (int k = 0; k < 2; k++) {
    if (choices[k] == TSR_KERNELS_ONEDNN && !tsr_runtime_onednn_built()) continue;
    tsr_errbuf_t err = {""};
    tsr_runtime_opts_t ro;
    tsr_runtime_opts_init(&ro);
    ro.kernels = choices[k];
    tsr_runtime_fini();
    cr_assert_eq(tsr_runtime_init(&ro, &err), 0, "%s", err.msg);
    cr_assert_eq(tsr_runtime_kernels(), choices[k]);
    gradient_check_with(spec, c, h, w, classes, batch, n, tile_rows, tile_cols);
  }
  tsr_errbuf_t err = {""};
  tsr_runtime_fini();
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

/* A registered type's example network as a spec (owned by the caller). */
static inline tsr_model_spec_t ref_example(const ref_type_t *ref) {
  return spec_of(ref->example.layers, ref->example.n_layers);
}

#endif
