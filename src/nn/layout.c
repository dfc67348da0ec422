/* The layout (layout.h): the one walk over a model's layers. In phases: the spec's own checks;
 * the graph (names resolved, a topological order, cycles and unread outputs refused); each
 * layer's shapes through its type's shape check; the fusion decisions (a ReLU into the layer it
 * alone reads); the layers built and their inputs; the tiling (which matrices must hold whole
 * samples, as classes of matrices that element-wise layers tie together); the placement under
 * a grid; each type's own part (parameters, scratch, workspace); the bytes. */
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/layout.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "tile/domain.h"
#include "try.h"

/* The registered type of spec layer i (check_spec made sure there is one). */
static const tsr_layer_type_t *type_of(const tsr_model_spec_t *spec, int i) {
  const tsr_layer_type_t *t = tsr__layer_type(spec->layers[i].kind);
  assert(t);
  return t;
}

/* Default tiles, for this process's workers (under MPI, each rank's), from
 * the training benchmark's sweeps (README). Feature tiles cut the widest
 * layer into about two tiles per worker, between 256 and 1024 features:
 * fewer, larger GEMM tasks let BLIS run near its peak, and two per worker
 * keep every worker busy while another waits on a dependency. One worker
 * gains nothing from more tasks: 1024 (2 ranks x 1 worker, --sync batch:
 * 35k samples/s with 64x1024 against 27k with 64x256). Where the features
 * give fewer tiles than workers, the batch is cut too: 4 ranks x 4 workers
 * on a 16-core node trained 2x faster with 32x256 tiles than with 64x1024
 * (issue 11). Batch-row tiles hold at most 512 samples. Averaging over MPI
 * does not need large tiles: it moves chunks sized on their own
 * (src/parallel/placement.c). */
static void choose_tiles(const tsr_model_spec_t *spec, int inputs, const tsr_net_opts_t *o,
                         int workers, int *mb, int *nb) {
  bool spatial = false;
  for (int i = 0; i < spec->n_layers; i++)
    spatial |= type_of(spec, i)->whole_samples;
  int widest = 0;
  for (int i = 0; i < spec->n_layers - 1; i++)
    if (type_of(spec, i)->cuts_features && spec->layers[i].units > widest)
      widest = spec->layers[i].units;
  if (widest == 0) widest = inputs;
  int cols = workers == 1 ? 1024 : 256;
  while (cols < 1024 && widest / (2 * workers) >= 2 * cols)
    cols *= 2;
  /* A grid column's Pr ranks share the widest layer's column tiles: at least one each. */
  int rows = o->grid_rows;
  if (rows > 1 && cols > (widest + rows - 1) / rows) cols = (widest + rows - 1) / rows;
  int batch = o->batch <= 512 ? o->batch : 512;
  int col_tiles = (widest + cols - 1) / cols;
  if (col_tiles < workers) {
    int cuts = (workers + col_tiles - 1) / col_tiles; /* batch-row tiles wanted */
    batch = (batch + cuts - 1) / cuts;
    batch = batch < 16 ? (o->batch < 16 ? o->batch : 16) : batch;
  }
  *mb = o->tile_rows > 0 ? o->tile_rows : batch;
  /* Convolutions are one task per batch-row tile (their activations are one
   * tile wide): cut the batch into one tile per worker (spatial_rows, once the shapes are
   * known). With the default CNN at batch 64 on 2 workers, tiles of 32 rows trained 5% faster
   * than 16 and 40% faster than 64 (benchmarks/bench_cnn --tile R, quiet machine). */
  if (spatial && o->tile_rows == 0) *mb = 0;
  *nb = o->tile_cols > 0 ? o->tile_cols : cols;
}

static int check_spec(const tsr_model_spec_t *spec, int inputs, int classes, tsr_errbuf_t *err) {
  if (inputs <= 0 || classes < 2)
    return tsr_error_set(err, TSR_EINVAL, "a network needs inputs > 0 and at least 2 classes");
  if (spec->n_layers <= 0)
    return tsr_error_set(err, TSR_EINVAL, "a model needs at least one layer (got %d)",
                         spec->n_layers);
  TSR_TRY(tsr_model_check_classes(spec, classes, NULL, err));
  for (int i = 0; i < spec->n_layers; i++)
    if (!tsr__layer_type(spec->layers[i].kind))
      return tsr_error_set(err, TSR_EINVAL, "layer %d: unknown layer kind %d", i + 1,
                           (int)spec->layers[i].kind);
  return 0;
}

/* The input sample's shape: the options', or a square one-channel image
 * when inputs is a perfect square, or 1 x 1 x inputs. */
static int input_geometry(const tsr_net_opts_t *o, int inputs, tsr_conv_geom_t *g,
                          tsr_errbuf_t *err) {
  *g = (tsr_conv_geom_t){.c = o->in_channels, .h = o->in_height, .w = o->in_width};
  if (g->c == 0 && g->h == 0 && g->w == 0) {
    int side = (int)lround(sqrt((double)inputs));
    *g = side * side == inputs ? (tsr_conv_geom_t){.c = 1, .h = side, .w = side}
                               : (tsr_conv_geom_t){.c = inputs, .h = 1, .w = 1};
    return 0;
  }
  if (g->c <= 0 || g->h <= 0 || g->w <= 0 || (int64_t)g->c * g->h * g->w != inputs)
    return tsr_error_set(err, TSR_ESHAPE,
                         "input geometry %d channels x %d x %d does not match the %d input "
                         "features of a sample",
                         g->c, g->h, g->w, inputs);
  return 0;
}

/* ---- The graph ----------------------------------------------------------- */

/* A spec layer and the name it goes by. */
typedef struct {
  char name[TSR_NAME_MAX];
  int index;
} named_t;

/* What the walk keeps per spec layer (arrays of n). */
typedef struct {
  const tsr_model_spec_t *spec;
  int n;
  const tsr_layer_type_t **type;
  int (*src)[TSR_MAX_INPUTS]; /* the spec layer each input reads; -1: the input batch */
  int *n_src;
  int *readers;        /* inputs of other spec layers that read its output */
  int *order;          /* the spec layers in the order they run */
  named_t *byname;     /* every layer's name, sorted (then by index) */
  tsr_conv_geom_t *io; /* shape(): its input 0, window and output */
  int *tensor;         /* the spec layer whose built output its output is (-1: the input
                        * batch): itself, or what a flatten or fused ReLU passes on */
  int *built;          /* its index among the layers built, or -1 */
  bool *fused;         /* a ReLU reading it is fused into it */
} walk_t;

static void walk_fini(walk_t *w) {
  free(w->type), free(w->src), free(w->n_src), free(w->readers), free(w->order);
  free(w->byname), free(w->io), free(w->tensor), free(w->built), free(w->fused);
}

static int walk_init(walk_t *w, const tsr_model_spec_t *spec) {
  int n = spec->n_layers;
  size_t z = (size_t)(unsigned)n;
  *w = (walk_t){.spec = spec, .n = n};
  w->type = calloc(z, sizeof *w->type), w->src = calloc(z, sizeof *w->src);
  w->n_src = calloc(z, sizeof *w->n_src), w->readers = calloc(z, sizeof *w->readers);
  w->order = calloc(z, sizeof *w->order), w->byname = calloc(z, sizeof *w->byname);
  w->io = calloc(z, sizeof *w->io), w->tensor = calloc(z, sizeof *w->tensor);
  w->built = calloc(z, sizeof *w->built), w->fused = calloc(z, sizeof *w->fused);
  if (!w->type || !w->src || !w->n_src || !w->readers || !w->order || !w->byname || !w->io ||
      !w->tensor || !w->built || !w->fused) {
    walk_fini(w);
    return TSR_ENOMEM;
  }
  for (int i = 0; i < n; i++)
    w->type[i] = type_of(spec, i);
  return 0;
}

/* "layer 3 [h] (dense)" for messages, or "layer 3 (dense)" for a layer that goes by its
 * position only (its name is "" or layer<index>). */
static const char *layer_label(int index, const char *name, const char *type, char *buf,
                               size_t size) {
  char own[32];
  snprintf(own, sizeof own, "layer%d", index);
  if (name[0] && strcmp(name, own) != 0)
    snprintf(buf, size, "layer %d [%s] (%s)", index, name, type);
  else
    snprintf(buf, size, "layer %d (%s)", index, type);
  return buf;
}

/* Spec layer i's label. */
static const char *label(const walk_t *w, int i, char *buf, size_t size) {
  return layer_label(i + 1, w->spec->layers[i].name, w->type[i]->name, buf, size);
}

static int by_name(const void *a, const void *b) {
  const named_t *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : x->index - y->index;
}

/* The spec layers called `name`: the first of them in byname at *first, how many. */
static int find_named(const walk_t *w, const char *name, int *first) {
  int lo = 0, hi = w->n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (strcmp(w->byname[mid].name, name) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  int n = 0;
  while (lo + n < w->n && strcmp(w->byname[lo + n].name, name) == 0)
    n++;
  *first = lo;
  return n;
}

/* Every input name to a spec layer index (the previous layer when none is given). */
static int resolve_inputs(walk_t *w, tsr_errbuf_t *err) {
  const tsr_model_spec_t *spec = w->spec;
  for (int i = 0; i < w->n; i++) {
    tsr__layer_name(spec, i, w->byname[i].name, sizeof w->byname[i].name);
    w->byname[i].index = i;
  }
  qsort(w->byname, (size_t)w->n, sizeof *w->byname, by_name);
  char me[160];
  for (int i = 0; i < w->n; i++) {
    const tsr_layer_spec_t *s = &spec->layers[i];
    const tsr_layer_type_t *t = w->type[i];
    int lo = t->min_inputs ? t->min_inputs : 1, hi = t->max_inputs ? t->max_inputs : 1;
    int n_in = s->n_inputs > 0 ? s->n_inputs : 1;
    if (s->n_inputs < 0 || s->n_inputs > TSR_MAX_INPUTS || n_in < lo || n_in > hi) {
      if (hi == 1)
        return tsr_error_set(err, TSR_EINVAL,
                             "%s reads %d inputs; a %s layer reads one (input = NAME): join "
                             "them with an add or a concat first",
                             label(w, i, me, sizeof me), n_in, t->name);
      return tsr_error_set(
          err, TSR_EINVAL, "%s reads %d input%s; %s %s layer reads %d to %d: give inputs = A, B%s",
          label(w, i, me, sizeof me), n_in, n_in == 1 ? "" : "s",
          strchr("aeiou", t->name[0]) ? "an" : "a", t->name, lo, hi,
          s->n_inputs == 0 ? " (without inputs it reads the previous layer only)" : "");
    }
    w->n_src[i] = n_in;
    if (s->n_inputs == 0) {
      w->src[i][0] = i - 1;
      continue;
    }
    for (int k = 0; k < s->n_inputs; k++) {
      const char *name = s->inputs[k];
      int first, count = find_named(w, name, &first);
      bool batch = strcmp(name, "input") == 0;
      char other[160];
      if (count == 0 && batch) {
        w->src[i][k] = -1;
        continue;
      }
      if (batch)
        return tsr_error_set(err, TSR_EINVAL,
                             "%s: input 'input' is ambiguous: it names the input batch and %s; "
                             "rename that section",
                             label(w, i, me, sizeof me),
                             label(w, w->byname[first].index, other, sizeof other));
      if (count == 1) {
        w->src[i][k] = w->byname[first].index;
        if (w->src[i][k] == i)
          return tsr_error_set(err, TSR_EINVAL,
                               "%s reads its own output (input '%s'); a layer reads only layers "
                               "before it in the graph",
                               label(w, i, me, sizeof me), name);
        continue;
      }
      if (count > 1)
        return tsr_error_set(err, TSR_EINVAL,
                             "%s: input '%s' is ambiguous: %d layers go by that name (%s, "
                             "layer %d%s); give every section its own name",
                             label(w, i, me, sizeof me), name, count,
                             label(w, w->byname[first].index, other, sizeof other),
                             w->byname[first + 1].index + 1, count > 2 ? ", ..." : "");
      return tsr_error_set(err, TSR_EINVAL,
                           "%s: input '%s' names no layer; use the name of a section of the "
                           "model, or input for the input batch",
                           label(w, i, me, sizeof me), name);
    }
  }
  return 0;
}

/* A binary min-heap of spec indices: among the layers whose inputs have all run, the earliest
 * in the spec runs first, so a spec already in order runs in its own order. */
typedef struct {
  int *v, n;
} heap_t;

static void heap_push(heap_t *h, int x) {
  int i = h->n++;
  while (i > 0 && h->v[(i - 1) / 2] > x) {
    h->v[i] = h->v[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->v[i] = x;
}

static int heap_pop(heap_t *h) {
  int top = h->v[0], x = h->v[--h->n], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && h->v[c + 1] < h->v[c]) c++;
    if (h->v[c] >= x) break;
    h->v[i] = h->v[c];
    i = c;
  }
  if (h->n > 0) h->v[i] = x;
  return top;
}

/* A cycle among the layers left unordered (each has an input among them): walked backwards
 * through inputs from the first, then written in the direction data flows. */
static int cycle_error(const walk_t *w, const int *pending, tsr_errbuf_t *err) {
  int *seen = calloc((size_t)w->n, sizeof *seen), *path = malloc(sizeof *path * (size_t)w->n);
  if (!seen || !path) {
    free(seen), free(path);
    return tsr_error_set(err, TSR_ENOMEM, "out of memory checking the model's graph");
  }
  int at = 0;
  while (at < w->n && !pending[at])
    at++;
  int len = 0;
  while (!seen[at]) {
    seen[at] = len + 1;
    path[len++] = at;
    int next = -1;
    for (int k = 0; k < w->n_src[at] && next < 0; k++)
      if (w->src[at][k] >= 0 && pending[w->src[at][k]]) next = w->src[at][k];
    assert(next >= 0);
    at = next;
  }
  /* path[i + 1] is an input of path[i]: data flows at -> path[len - 1] -> ... -> at */
  char text[400], name[TSR_NAME_MAX], me[160];
  tsr__layer_name(w->spec, at, name, sizeof name);
  size_t n = (size_t)snprintf(text, sizeof text, "%s", name);
  for (int p = len - 1; p >= seen[at] - 1 && n < sizeof text; p--) {
    tsr__layer_name(w->spec, path[p], name, sizeof name);
    n += (size_t)snprintf(text + n, sizeof text - n, " -> %s", name);
  }
  int rc = tsr_error_set(err, TSR_EINVAL,
                         "the layers %s form a cycle (%s reads its own output through them); a "
                         "layer may read only layers that do not depend on it",
                         text, label(w, at, me, sizeof me));
  free(seen), free(path);
  return rc;
}

/* The order the layers run in (w->order), every layer but the last read by some other. */
static int order_layers(walk_t *w, tsr_errbuf_t *err) {
  int n = w->n, edges = 0;
  assert(n > 0);
  size_t z = (size_t)(unsigned)n;
  int *start = calloc(z + 1, sizeof *start), *pending = calloc(z, sizeof *pending);
  int *next = NULL;
  heap_t h = {malloc(sizeof *h.v * z), 0};
  int rc = start && pending && h.v ? 0 : TSR_ENOMEM;
  for (int i = 0; rc == 0 && i < n; i++)
    for (int k = 0; k < w->n_src[i]; k++)
      if (w->src[i][k] >= 0) start[w->src[i][k] + 1]++, pending[i]++, edges++;
  if (rc == 0) next = malloc(sizeof *next * (size_t)(edges + 1));
  if (rc == 0 && !next) rc = TSR_ENOMEM;
  if (rc) {
    free(start), free(pending), free(h.v);
    return tsr_error_set(err, rc, "out of memory checking the model's graph");
  }
  /* readers of layer j: next[start[j] .. start[j + 1]) */
  for (int j = 0; j < n; j++)
    w->readers[j] = start[j + 1], start[j + 1] += start[j];
  int *fill = malloc(sizeof *fill * z);
  if (!fill) rc = TSR_ENOMEM;
  for (int j = 0; rc == 0 && j < n; j++)
    fill[j] = start[j];
  for (int i = 0; rc == 0 && i < n; i++)
    for (int k = 0; k < w->n_src[i]; k++)
      if (w->src[i][k] >= 0) next[fill[w->src[i][k]]++] = i;
  for (int i = 0; rc == 0 && i < n; i++)
    if (pending[i] == 0) heap_push(&h, i);
  int done = 0;
  while (rc == 0 && h.n > 0) {
    int i = heap_pop(&h);
    w->order[done++] = i;
    for (int e = start[i]; e < start[i + 1]; e++)
      if (--pending[next[e]] == 0) heap_push(&h, next[e]);
  }
  if (rc == 0 && done < n) rc = cycle_error(w, pending, err);
  char me[160];
  for (int i = 0; rc == 0 && i < n - 1; i++)
    if (w->readers[i] == 0)
      rc = tsr_error_set(err, TSR_EINVAL,
                         "%s: nothing reads its output; every layer but the last (the output) "
                         "must feed another: name it in a later layer's input or inputs, or "
                         "remove it",
                         label(w, i, me, sizeof me));
  if (rc == TSR_ENOMEM) tsr_error_set(err, rc, "out of memory checking the model's graph");
  free(start), free(pending), free(next), free(fill), free(h.v);
  return rc;
}

/* The sample shape spec layer j's output has (-1: the input batch). */
static tsr_conv_geom_t out_shape(const walk_t *w, const tsr_conv_geom_t *in, int j) {
  if (j < 0) return (tsr_conv_geom_t){.c = in->c, .h = in->h, .w = in->w};
  return (tsr_conv_geom_t){.c = w->io[j].oc, .h = w->io[j].oh, .w = w->io[j].ow};
}

/* Whether a ReLU reading spec layer j can be fused into the layer p whose output j passes on
 * (through flattens): p applies ReLUs, has none yet, and the ReLU alone reads it. */
static bool fusable(const walk_t *w, int j, int p) {
  if (p < 0 || !w->type[p]->fuses_relu || w->fused[p]) return false;
  for (int q = j;; q = w->src[q][0]) {
    if (w->readers[q] != 1) return false;
    if (q == p) return true;
  }
}

/* Shapes through each type's shape check, in the order the layers run; a ReLU fused into the
 * layer it reads, a type without a layer of its own (flatten) passing its input on. */
static int follow_shapes(walk_t *w, const tsr_conv_geom_t *in, tsr_errbuf_t *err) {
  for (int o = 0; o < w->n; o++) {
    int i = w->order[o];
    const tsr_layer_spec_t *s = &w->spec->layers[i];
    const tsr_layer_type_t *t = w->type[i];
    tsr_conv_geom_t shapes[TSR_MAX_INPUTS];
    char names[TSR_MAX_INPUTS][TSR_NAME_MAX], me[TSR_NAME_MAX];
    const char *name_of[TSR_MAX_INPUTS];
    for (int k = 0; k < w->n_src[i]; k++) {
      int j = w->src[i][k];
      shapes[k] = out_shape(w, in, j);
      if (j < 0)
        snprintf(names[k], sizeof names[k], "input");
      else
        tsr__layer_name(w->spec, j, names[k], sizeof names[k]);
      name_of[k] = names[k];
    }
    tsr__layer_name(w->spec, i, me, sizeof me);
    int j0 = w->src[i][0];
    tsr_layer_site_t at = {.index = i + 1,
                           .name = me,
                           .last = i == w->n - 1,
                           .shown = out_shape(w, in, j0 < 0 ? -1 : w->tensor[j0]),
                           .n_in = w->n_src[i],
                           .in = shapes,
                           .in_names = name_of,
                           .err = err};
    w->io[i] = (tsr_conv_geom_t){.c = shapes[0].c, .h = shapes[0].h, .w = shapes[0].w};
    TSR_TRY(t->shape(s, &w->io[i], &at));
    int p = j0 < 0 ? -1 : w->tensor[j0];
    if (!t->ops) {
      w->tensor[i] = p;
    } else if (t->is_relu && fusable(w, j0, p)) {
      w->fused[p] = true;
      w->tensor[i] = p;
    } else {
      w->tensor[i] = i;
    }
  }
  return 0;
}

/* ---- The layers built ----------------------------------------------------- */

/* Union-find over the matrices (0: the input batch, 1 + j: layer j's output), for the tiling:
 * an element-wise layer's inputs and output are tiled alike, and a class that any layer needs
 * whole (a convolution's input or output, the logits) is whole throughout. */
static int find(int *up, int a) {
  while (up[a] != a)
    a = up[a] = up[up[a]];
  return a;
}

static void unite(int *up, bool *whole, int a, int b) {
  a = find(up, a), b = find(up, b);
  if (a == b) return;
  up[b] = a;
  whole[a] |= whole[b];
}

static bool whole_instance(const tsr_layout_layer_t *l) {
  const tsr_layer_type_t *t = l->type;
  return t->whole ? t->whole(&l->geom) : t->whole_samples;
}

static int choose_layer_tiles(tsr_net_layout_t *lay) {
  int n = lay->n_layers;
  int *up = malloc(sizeof *up * (size_t)(n + 1));
  bool *whole = calloc((size_t)n + 1, sizeof *whole);
  if (!up || !whole) {
    free(up), free(whole);
    return TSR_ENOMEM;
  }
  for (int a = 0; a <= n; a++)
    up[a] = a;
  for (int j = 0; j < n; j++) {
    tsr_layout_layer_t *l = &lay->layers[j];
    bool w = whole_instance(l);
    l->whole_samples = w;
    if (w || j == n - 1) whole[find(up, j + 1)] = true;
    for (int k = 0; k < l->n_inputs; k++) {
      if (w) whole[find(up, l->in[k].from + 1)] = true;
      if (l->type->elementwise) unite(up, whole, j + 1, l->in[k].from + 1);
    }
  }
  lay->in_nb = whole[find(up, 0)] ? lay->inputs : lay->nb;
  for (int j = 0; j < n; j++) {
    tsr_layout_layer_t *l = &lay->layers[j];
    l->out_nb = whole[find(up, j + 1)] ? l->fout : lay->nb;
    for (int k = 0; k < l->n_inputs; k++) {
      int f = l->in[k].from;
      l->in[k].nb = f < 0 ? lay->in_nb : lay->layers[f].out_nb;
    }
    l->in_nb = l->in[0].nb;
  }
  free(up), free(whole);
  return 0;
}

/* The layers built, in the order they run, with their inputs: which layer's output, which of
 * its gradients (the readers of an output, in the order the backward pass reaches them: the
 * first writes its dy, the others their own, added into it). */
static int build_layers(tsr_net_layout_t *lay, walk_t *w, const tsr_conv_geom_t *in) {
  int n = 0;
  for (int o = 0; o < w->n; o++) {
    int i = w->order[o];
    w->built[i] = w->tensor[i] == i ? n++ : -1;
  }
  lay->layers = calloc((size_t)n, sizeof *lay->layers);
  if (!lay->layers) return TSR_ENOMEM;
  lay->n_layers = n;
  for (int o = 0; o < w->n; o++) {
    int i = w->order[o];
    if (w->built[i] < 0) continue;
    tsr_layout_layer_t *l = &lay->layers[w->built[i]];
    const tsr_conv_geom_t *g = &w->io[i];
    l->kind = w->spec->layers[i].kind, l->type = w->type[i];
    l->spec = i, l->index = i + 1;
    tsr__layer_name(w->spec, i, l->name, sizeof l->name);
    l->n_inputs = w->n_src[i];
    for (int k = 0; k < l->n_inputs; k++) {
      int j = w->src[i][k], t = j < 0 ? -1 : w->tensor[j];
      tsr_layout_input_t *e = &l->in[k];
      e->from = t < 0 ? -1 : w->built[t];
      e->dx = e->from >= 0;
      e->shape = out_shape(w, in, j), e->shown = out_shape(w, in, t);
      e->spec = j;
      if (e->from >= 0)
        lay->layers[e->from].consumers++;
      else
        lay->in_consumers++;
    }
    l->geom = *g;
    l->fin = g->c * g->h * g->w, l->fout = g->oc * g->oh * g->ow;
    l->relu = w->fused[i];
    l->has_dx = l->in[0].dx;
  }
  int *slots = calloc((size_t)n + 1, sizeof *slots); /* 0: the input batch */
  if (!slots) return TSR_ENOMEM;
  for (int j = n - 1; j >= 0; j--)
    for (int k = 0; k < lay->layers[j].n_inputs; k++)
      lay->layers[j].in[k].slot = slots[lay->layers[j].in[k].from + 1]++;
  free(slots);
  return choose_layer_tiles(lay);
}

/* Evaluation folds a batchnorm into the convolution it reads where the convolution has no other
 * reader and no ReLU of its own: one task a batch-row tile computes both (conv_bn_fwd, with the
 * weights scaled by the running statistics), the convolution's output unwritten. Not under a
 * grid (bands, replicas of a column). */
static void fold_batchnorms(tsr_net_layout_t *lay) {
  for (int j = 0; j < lay->n_layers && lay->grid_rows == 1; j++) {
    tsr_layout_layer_t *l = &lay->layers[j];
    int p = l->n_inputs == 1 ? l->in[0].from : -1;
    if (!l->type->folds_out || p < 0) continue;
    tsr_layout_layer_t *c = &lay->layers[p];
    if (c->type->folds_in && !c->relu && c->consumers == 1 && !c->folds_bn)
      c->folds_bn = j + 1, l->folded = true;
  }
}

/* ---- Placement under a grid ------------------------------------------------ */

/* Dense layers spread their output columns over the grid column, element-wise layers keep
 * their inputs' placement, the rest stay replicated in the column (every rank computes them);
 * with --domain rows, convolutions and pooling cut their output images' rows into bands over
 * the column instead (tile j of a band-wide tiling: band j on row j), and a concat of bands
 * gives its output in the same bands. What cannot work goes to
 * lay->grid_rc (the first such layer). */
static void place(tsr_net_layout_t *lay) {
  int windows = 0; /* layers of a splits_rows type so far */
  for (int j = 0; j < lay->n_layers && lay->grid_rows > 1; j++) {
    tsr_layout_layer_t *l = &lay->layers[j];
    const tsr_layer_type_t *t = l->type;
    int spread_in = 0, banded_in = 0;
    for (int k = 0; k < l->n_inputs; k++) {
      tsr_placement_t from =
          l->in[k].from >= 0 ? lay->layers[l->in[k].from].place : TSR_PLACE_WHOLE;
      spread_in += tsr__placed_spread(from);
      banded_in += from == TSR_PLACE_BANDS;
      l->in[k].nb = l->in[k].from >= 0 ? lay->layers[l->in[k].from].out_nb
                                       : lay->in_nb; /* a band-wide tiling above */
    }
    l->in_nb = l->in[0].nb;
    l->in_place = banded_in ? TSR_PLACE_BANDS : spread_in ? TSR_PLACE_SPREAD : TSR_PLACE_WHOLE;
    bool cut = t->splits_rows && windows++ < lay->domain_layers;
    l->domain = lay->domain && (cut || (t->batch_stats && l->in_place == TSR_PLACE_BANDS));
    bool joins = t->joins_bands && banded_in == l->n_inputs; /* a concat of bands */
    if (joins) l->whole_samples = false;                     /* it works band by band */
    l->gathers_bands =
        !l->domain && l->in_place == TSR_PLACE_BANDS && l->whole_samples && l->n_inputs == 1;
    if (l->gathers_bands) banded_in = 0; /* it reads the bands gathered */
    bool reads_spread = tsr__reads_spread(l);
    if (l->domain || joins || (t->elementwise && banded_in > 0))
      l->place = TSR_PLACE_BANDS;
    else if (t->cuts_features || (t->elementwise && reads_spread))
      l->place = TSR_PLACE_SPREAD;
    else
      l->place = TSR_PLACE_WHOLE;
    if (l->domain || joins)
      l->out_nb = tsr__k_band_rows(l->geom.oh, lay->grid_rows) * l->geom.ow * l->geom.oc;
    else if (l->place == TSR_PLACE_BANDS)
      l->out_nb = l->in_nb;
    l->cuts = t->cuts_features;
    l->gathers = l->cuts && reads_spread;
    l->partials = l->cuts && (reads_spread || l->has_dx);
    l->dx_sums = l->cuts && !reads_spread && l->has_dx;
    if (lay->grid_rc) continue;
    char me[160];
    if (t->no_grid)
      lay->grid_rc = tsr_error_set(
          &lay->grid_err, TSR_EINVAL,
          "layer %d (%s): a grid (--grid PrxPc with Pr > 1) does not take %s layers yet (a "
          "language model is not split across a column); run it data-parallel, without --grid",
          l->index, l->name, t->name);
    else if (t->joins_bands && banded_in > 0 && banded_in < l->n_inputs)
      lay->grid_rc = tsr_error_set(
          &lay->grid_err, TSR_EINVAL,
          "%s: under --domain rows%s, %d of its %d inputs are bands of image rows and the others "
          "not: a concat joins inputs cut alike; choose K so that every branch it joins is cut "
          "or none is, or use --domain none",
          layer_label(l->index, l->name, t->name, me, sizeof me), lay->domain_layers ? ":K" : "",
          banded_in, l->n_inputs);
    else if (t->elementwise && banded_in > 0 && banded_in < l->n_inputs && lay->domain &&
             spread_in == banded_in)
      lay->grid_rc = tsr_error_set(
          &lay->grid_err, TSR_EINVAL,
          "%s: under --domain rows:%d, %d of its %d inputs are bands of image rows and the others "
          "whole: an element-wise layer takes inputs placed alike; choose K so that its inputs' "
          "branches are cut alike (a residual block's end), or use --domain rows",
          layer_label(l->index, l->name, t->name, me, sizeof me), lay->domain_layers, banded_in,
          l->n_inputs);
    else if (t->elementwise && reads_spread &&
             (spread_in < l->n_inputs || (banded_in > 0 && banded_in < l->n_inputs)))
      lay->grid_rc = tsr_error_set(
          &lay->grid_err, TSR_EINVAL,
          "%s: under --grid, %d of its %d inputs come spread over the grid column (a dense "
          "layer's output%s) and the others %s: an element-wise layer takes inputs placed "
          "alike; put a dense layer on the replicated side, or use --grid 1xP for this model",
          layer_label(l->index, l->name, t->name, me, sizeof me), spread_in, l->n_inputs,
          lay->domain ? ", or bands of image rows" : "",
          lay->domain ? "placed otherwise" : "replicated (the input batch, convolutions, pooling)");
    else if (l->domain && (l->in_place == TSR_PLACE_SPREAD ||
                           (l->in_place == TSR_PLACE_WHOLE && l->in[0].from >= 0)))
      lay->grid_rc = tsr_error_set(
          &lay->grid_err, TSR_EINVAL,
          "%s: under --domain rows, a convolution or pooling reads the input batch or another "
          "one's bands of image rows (through element-wise layers), not %s; use --domain none "
          "or --grid 1xP for this model",
          layer_label(l->index, l->name, t->name, me, sizeof me),
          l->in_place == TSR_PLACE_SPREAD ? "a dense layer's output"
                                          : "a layer computed whole on every rank");
    else if (reads_spread && l->place == TSR_PLACE_WHOLE && l->in_place == TSR_PLACE_BANDS)
      lay->grid_rc = tsr_error_set(
          &lay->grid_err, TSR_EINVAL,
          "%s: under --domain rows, this layer does not take bands of image rows yet "
          "(convolutions, pooling, element-wise and dense layers do); use --domain none or "
          "--grid 1xP for this model",
          layer_label(l->index, l->name, t->name, me, sizeof me));
    else if (reads_spread && l->place == TSR_PLACE_WHOLE)
      lay->grid_rc = tsr_error_set(
          &lay->grid_err, TSR_EINVAL,
          "%s: under --grid, a layer after a dense layer must be dense or element-wise "
          "(convolutions, pooling and concatenations are replicated in a grid column and take "
          "the input batch or another replicated layer's output); use --grid 1xP for this model",
          layer_label(l->index, l->name, t->name, me, sizeof me));
  }
}

/* ---- Bytes ---------------------------------------------------------------- */

/* Columns of an n-wide matrix in nb-wide tiles that row 0 of a grid column holds when its
 * tiles are spread (tsr__placed_row): each of its tile columns' width (the last one's may be
 * narrower than nb). */
static int64_t row0_columns(int64_t n, int nb, int pr) {
  int64_t nt = (n + nb - 1) / nb, held = 0;
  for (int64_t j = 0; j < nt; j++)
    if (tsr__cost_row0(TSR_PLACE_SPREAD, (int)j, pr)) held += n - j * nb < nb ? n - j * nb : nb;
  return held;
}

/* What the busiest rank holds, layer by layer and in all (tsr_net_memory_t). */
static void count_bytes(tsr_net_layout_t *lay) {
  int64_t batch = lay->batch, work = 0, params = 0;
  int64_t acts = batch * lay->inputs + batch * lay->positions; /* the input batch, its labels */
  int pr = lay->grid_rows;
  for (int j = 0; j < lay->n_layers; j++) {
    tsr_layout_layer_t *l = &lay->layers[j];
    l->share = l->fout;
    if (l->place == TSR_PLACE_BANDS) /* row 0's band */
      l->share = l->out_nb < l->fout ? l->out_nb : l->fout;
    else if (l->place == TSR_PLACE_SPREAD && l->cuts)
      l->share = row0_columns(l->fout, l->out_nb, pr);
    else if (l->place == TSR_PLACE_SPREAD) /* as its (first) spread input */
      for (int k = l->n_inputs - 1; k >= 0; k--)
        if (l->in[k].from >= 0 && tsr__placed_spread(lay->layers[l->in[k].from].place))
          l->share = lay->layers[l->in[k].from].share;
    l->param_floats = 0;
    for (int p = 0; p < l->nparams; p++) {
      const tsr_layout_matrix_t *m = &l->params[p];
      l->param_floats +=
          m->rows * (l->place == TSR_PLACE_SPREAD ? row0_columns(m->cols, m->nb, pr) : m->cols);
    }
    /* y and dy, the other readers' gradients, the grid's gathered inputs and partial input
     * gradients, the layer's own scratch */
    l->act_floats = (1 + (l->consumers > 1 ? l->consumers : 1)) * batch * l->share;
    if (l->partials) l->act_floats += 2 * batch * l->fin;
    if (l->gathers_bands) l->act_floats += (l->has_dx ? 2 : 1) * batch * l->fin;
    if (l->domain && l->type->batch_stats) /* each band's statistics */
      l->act_floats += tsr__domain_bn_floats(&l->geom, pr, 0, batch, lay->mb);
    else if (l->domain) /* slabs, halos, the weight gradients' partials */
      l->act_floats += tsr__domain_floats(&l->geom, pr, 0, batch, l->in_place == TSR_PLACE_BANDS,
                                          l->has_dx, l->nparams > 0);
    for (int s = 0; s < l->nscratch; s++)
      l->act_floats += l->scratch[s].rows * l->scratch[s].cols;
    for (int s = 0; s < l->nbuffers; s++)
      l->act_floats += l->buffers[s].rows * l->buffers[s].cols;
    params += l->param_floats, acts += l->act_floats;
    if (l->workspace > work) work = l->workspace;
  }
  int64_t f = (int64_t)sizeof(float);
  tsr_net_memory_t *mem = &lay->memory;
  mem->params = f * params, mem->grads = f * params, mem->optimizer = f * lay->nstate * params;
  mem->activations = f * acts, mem->workspace = f * lay->workers * work;
  mem->total = mem->params + mem->grads + mem->optimizer + mem->activations + mem->workspace;
}

/* ---- The layout ------------------------------------------------------------ */

void tsr__net_layout_fini(tsr_net_layout_t *lay) {
  free(lay->layers);
  memset(lay, 0, sizeof *lay);
}

/* A task's work below which its overhead (a few microseconds of StarPU's) shows: about 0.2 ms
 * of a worker at 80 GFLOP/s. */
#define MIN_TASK_FLOPS 16e6

/* The batch-row tile of a network of whole-sample layers (convolutions, poolings, batch
 * normalizations, on one tile wide activations): one tile per worker, but no tile so small
 * that a typical task falls under MIN_TASK_FLOPS. A typical task is the flops-weighted mean of
 * the layers' forward flops per sample (their types' flops hooks): the convolutions, which do
 * the work, weigh in, not the poolings beside them. A 32x32 ResNet-20 (4.7 MFLOP a sample and
 * convolution) keeps at least 4 samples a tile (the old floor was 8 for every network);
 * ResNet-50 at 224x224 at batch 8 on two workers gets two tiles of 4, where that floor left one
 * worker every convolution of the step to itself. */
static int spatial_rows(const tsr_net_layout_t *lay, int batch, int workers) {
  double sum = 0, weighted = 0;
  for (int j = 0; j < lay->n_layers; j++) {
    const tsr_layout_layer_t *l = &lay->layers[j];
    if (!l->type->whole_samples || !l->type->flops) continue;
    double f = l->type->flops(l);
    sum += f, weighted += f * f;
  }
  int floor_rows = 8; /* nothing priced: the old floor */
  if (sum > 0) {
    double per_task = weighted / sum;
    floor_rows = (int)ceil(MIN_TASK_FLOPS / (per_task > 1 ? per_task : 1));
    floor_rows = floor_rows < 1 ? 1 : floor_rows > 64 ? 64 : floor_rows;
  }
  int rows = (batch + workers - 1) / workers;
  if (rows < floor_rows) rows = batch < floor_rows ? batch : floor_rows;
  return rows > 512 ? 512 : rows;
}

int tsr__net_layout_build(tsr_net_layout_t *out, const tsr_model_spec_t *spec, int inputs,
                          int classes, const tsr_net_opts_t *opts, int workers, int nstate,
                          tsr_errbuf_t *err) {
  memset(out, 0, sizeof *out);
  TSR_TRY(check_spec(spec, inputs, classes, err));
  if (opts->batch <= 0 || opts->tile_rows < 0 || opts->tile_cols < 0 || workers <= 0)
    return tsr_error_set(err, TSR_EINVAL,
                         "batch and workers must be positive and tile sizes non-negative");
  tsr_conv_geom_t in;
  TSR_TRY(input_geometry(opts, inputs, &in, err));
  out->batch = opts->batch, out->workers = workers, out->nstate = nstate;
  out->grid_rows = opts->grid_rows > 1 ? opts->grid_rows : 1;
  out->domain = opts->domain && out->grid_rows > 1;
  out->domain_layers = opts->domain_layers > 0 ? opts->domain_layers : INT_MAX;
  out->inputs = inputs, out->classes = classes, out->in_geom = in;
  choose_tiles(spec, inputs, opts, workers, &out->mb, &out->nb);
  walk_t w;
  int rc = walk_init(&w, spec);
  if (rc) return tsr_error_set(err, rc, "out of memory laying the network out");
  rc = resolve_inputs(&w, err);
  if (rc == 0) rc = order_layers(&w, err);
  if (rc == 0) rc = follow_shapes(&w, &in, err);
  if (rc == 0) {
    rc = build_layers(out, &w, &in);
    if (rc) tsr_error_set(err, rc, "out of memory laying the network out");
  }
  if (rc == 0 && out->mb == 0) out->mb = spatial_rows(out, opts->batch, workers);
  walk_fini(&w);
  if (rc == 0) place(out), fold_batchnorms(out);
  for (int j = 0; rc == 0 && j < out->n_layers; j++) {
    tsr_layout_layer_t *l = &out->layers[j];
    if (l->type->layout) l->type->layout(out, l);
    if (l->relu_grad_in) out->layers[l->in[0].from].relu_grad_by_next = true;
  }
  if (rc == 0) {
    const tsr_layout_layer_t *last = &out->layers[out->n_layers - 1];
    out->positions = last->type->per_position ? last->geom.oh * last->geom.ow : 1;
    count_bytes(out);
  }
  if (rc) tsr__net_layout_fini(out);
  return rc;
}

int tsr__net_layout(tsr_net_layout_t *out, const tsr_model_spec_t *spec, int inputs, int classes,
                    const tsr_net_opts_t *opts, int workers, tsr_errbuf_t *err) {
  memset(out, 0, sizeof *out);
  tsr_optim_t *optim;
  int rc = tsr__optim_create(&optim, &opts->opt);
  if (rc) return tsr_error_set(err, rc, "optimizer: %s", tsr_strerror(rc));
  int nstate = tsr__optim_nstate(optim);
  tsr__optim_destroy(&optim);
  return tsr__net_layout_build(out, spec, inputs, classes, opts, workers, nstate, err);
}

/* ---- Pricing helpers for the types' cost hooks ------------------------------ */

int tsr__cost_ntiles(int64_t n, int b) {
  return (int)((n + b - 1) / b);
}

int tsr__cost_tsize(int64_t n, int b, int i) {
  int64_t r = n - (int64_t)i * b;
  return (int)(r < b ? r : b);
}

double tsr__cost_rows_share(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l) {
  if (l->place != TSR_PLACE_BANDS) return 1;
  int r0, r1;
  tsr__k_band(l->geom.oh, lay->grid_rows, 0, &r0, &r1);
  return (double)(r1 - r0) / l->geom.oh;
}

double tsr__cost_pass(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l, tsr_cost_sink_t *k,
                      double *bwd) {
  int mb = k->mb, mt = tsr__cost_ntiles(k->batch, mb);
  int nb = l->out_nb < l->fout ? l->out_nb : l->fout;
  int nt = l->whole_samples ? 1 : tsr__cost_ntiles(l->fout, nb);
  double chain = 0, before = k->work(k);
  for (int i = 0; i < mt; i++)
    for (int j = 0; j < nt; j++) {
      /* row 0's tile columns: every one of a layer copied whole on each grid row */
      if (!l->whole_samples && !tsr__cost_row0(l->place, j, k->pr)) continue;
      int m = tsr__cost_tsize(k->batch, mb, i);
      double share = tsr__cost_rows_share(lay, l);
      double in = l->whole_samples ? share * l->fin : tsr__cost_tsize(l->fin, nb, j);
      double out = l->whole_samples ? share * l->fout : tsr__cost_tsize(l->fout, nb, j);
      double t = k->task(k, 0, 1, 4.0 * m * (in + out));
      double b = l->has_dx ? k->task(k, 0, 1, 4.0 * m * (2 * in + 2 * out)) : 0;
      if (i == 0 && j == 0) chain += t + b;
    }
  *bwd = (k->work(k) - before) / 2;
  return chain;
}
