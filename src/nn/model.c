/* Model descriptions: the CLI shorthand ("mlp:512,512") and INI model files
 * with one section per layer, whose types, keys and descriptions come from
 * the layer registry (layers.h). Model files and model text in memory
 * (tsr_model_parse_ini_text for checkpoints, tsr__model_load_ini_mem for the
 * fuzzer in tests/fuzz/) go through the same parser, on a stdio stream. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/datafile.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "tessera/net.h"
#include "try.h"

void tsr_model_spec_init(tsr_model_spec_t *spec) {
  *spec = (tsr_model_spec_t){0};
}

void tsr_model_spec_fini(tsr_model_spec_t *spec) {
  free(spec->layers);
  tsr_model_spec_init(spec);
}

int tsr_model_spec_add(tsr_model_spec_t *spec, const tsr_layer_spec_t *layer) {
  if (spec->n_layers == spec->cap) {
    int cap = spec->cap ? 2 * spec->cap : 16;
    tsr_layer_spec_t *more = realloc(spec->layers, sizeof *more * (size_t)cap);
    if (!more) return TSR_ENOMEM;
    spec->layers = more, spec->cap = cap;
  }
  spec->layers[spec->n_layers++] = *layer;
  return 0;
}

int tsr_model_spec_copy(tsr_model_spec_t *dst, const tsr_model_spec_t *src) {
  tsr_model_spec_init(dst);
  if (src->n_layers == 0) return 0;
  dst->layers = malloc(sizeof *dst->layers * (size_t)src->n_layers);
  if (!dst->layers) return TSR_ENOMEM;
  memcpy(dst->layers, src->layers, sizeof *dst->layers * (size_t)src->n_layers);
  dst->n_layers = dst->cap = src->n_layers;
  return 0;
}

/* Appends the comma-separated names to got[*n ..]: 0, or TSR_EINVAL for an empty or too long
 * name, one with a character of ; # = [ ], or more than TSR_MAX_INPUTS in all. */
static int append_names(char (*got)[TSR_NAME_MAX], int *n, const char *names) {
  const char *p = names;
  while (*p == ' ' || *p == '\t')
    p++;
  while (*p) {
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    const char *last = end;
    while (last > p && (last[-1] == ' ' || last[-1] == '\t'))
      last--;
    size_t len = (size_t)(last - p);
    if (len == 0 || len >= TSR_NAME_MAX || *n == TSR_MAX_INPUTS) return TSR_EINVAL;
    for (size_t c = 0; c < len; c++) /* what an INI line could not say back */
      if (strchr(";#=[]", p[c])) return TSR_EINVAL;
    memset(got[*n], 0, TSR_NAME_MAX);
    memcpy(got[(*n)++], p, len);
    if (!*end) break;
    p = end + 1;
    while (*p == ' ' || *p == '\t')
      p++;
    if (!*p) return TSR_EINVAL; /* "a," */
  }
  return 0;
}

int tsr_layer_spec_set_inputs(tsr_layer_spec_t *layer, const char *names) {
  char got[TSR_MAX_INPUTS][TSR_NAME_MAX] = {{0}};
  int n = 0;
  TSR_TRY(append_names(got, &n, names));
  memcpy(layer->inputs, got, sizeof got);
  layer->n_inputs = n;
  return 0;
}

void tsr__layer_name(const tsr_model_spec_t *spec, int i, char *buf, size_t size) {
  if (spec->layers[i].name[0])
    snprintf(buf, size, "%s", spec->layers[i].name);
  else
    snprintf(buf, size, "layer%d", i + 1);
}

bool tsr__layer_is(const tsr_model_spec_t *spec, int i, const char *name) {
  if (spec->layers[i].name[0]) return strcmp(spec->layers[i].name, name) == 0;
  char own[32];
  snprintf(own, sizeof own, "layer%d", i + 1);
  return strcmp(own, name) == 0;
}

static int add_layer(tsr_model_spec_t *spec, tsr_layer_kind_t kind, int units) {
  return tsr_model_spec_add(spec, &(tsr_layer_spec_t){.kind = kind, .units = units});
}

/* A window layer (conv, pools) with a square kernel, default strides and
 * zero padding `pad` on every side. */
static int add_window(tsr_model_spec_t *spec, tsr_layer_kind_t kind, int units, int kernel,
                      int pad) {
  return tsr_model_spec_add(spec, &(tsr_layer_spec_t){.kind = kind,
                                                      .units = units,
                                                      .kernel_h = kernel,
                                                      .kernel_w = kernel,
                                                      .pad_h = pad,
                                                      .pad_w = pad});
}

static int parse_int(const char *s, char **end, long max, long *out) {
  errno = 0;
  long v = strtol(s, end, 10);
  if (*end == s || errno || v <= 0 || v > max) return TSR_EINVAL;
  *out = v;
  return 0;
}

/* Appends a named layer reading `inputs` (a comma-separated list; "" for the previous one). */
static int add_named(tsr_model_spec_t *spec, tsr_layer_spec_t l, const char *name,
                     const char *inputs) {
  snprintf(l.name, sizeof l.name, "%s", name);
  int rc = tsr_layer_spec_set_inputs(&l, inputs);
  return rc ? rc : tsr_model_spec_add(spec, &l);
}

/* A per-token projection: a convolution with kernel 1 over the T x 1 x C sequence. */
static tsr_layer_spec_t token_dense(int units) {
  return (tsr_layer_spec_t){.kind = TSR_LAYER_CONV, .units = units, .kernel_h = 1, .kernel_w = 1};
}

/* GPT-2's architecture, pre-norm: the embedding of `vocab` tokens and t positions, l blocks
 * (layer norm, causal attention of h heads with its output projection, a residual add; layer
 * norm, a 4d MLP with GELU, a residual add), a final layer norm and the tied language-model
 * head (docs/language-models.md). */
static int add_gpt(tsr_model_spec_t *spec, int l, int d, int h, int t, int vocab) {
  TSR_TRY(add_named(
      spec,
      (tsr_layer_spec_t){.kind = TSR_LAYER_EMBEDDING, .units = d, .vocab = vocab, .context = t},
      "embed", ""));
  char stream[TSR_NAME_MAX] = "embed", name[TSR_NAME_MAX], in[2 * TSR_NAME_MAX + 2];
#define TSR_GPT_LAYER(suffix, spec_, inputs)                                                       \
  do {                                                                                             \
    snprintf(name, sizeof name, "h%d.%s", b, suffix);                                              \
    TSR_TRY(add_named(spec, spec_, name, inputs));                                                 \
  } while (0)
  for (int b = 0; b < l; b++) {
    TSR_GPT_LAYER("ln1", ((tsr_layer_spec_t){.kind = TSR_LAYER_LAYERNORM}), stream);
    TSR_GPT_LAYER("qkv", token_dense(3 * d), "");
    TSR_GPT_LAYER("attn", ((tsr_layer_spec_t){.kind = TSR_LAYER_ATTENTION, .heads = h}), "");
    TSR_GPT_LAYER("proj", token_dense(d), "");
    snprintf(in, sizeof in, "%s, h%d.proj", stream, b);
    TSR_GPT_LAYER("res1", ((tsr_layer_spec_t){.kind = TSR_LAYER_ADD}), in);
    TSR_GPT_LAYER("ln2", ((tsr_layer_spec_t){.kind = TSR_LAYER_LAYERNORM}), "");
    TSR_GPT_LAYER("fc", token_dense(4 * d), "");
    TSR_GPT_LAYER("gelu", ((tsr_layer_spec_t){.kind = TSR_LAYER_GELU}), "");
    TSR_GPT_LAYER("fc2", token_dense(d), "");
    snprintf(in, sizeof in, "h%d.res1, h%d.fc2", b, b);
    TSR_GPT_LAYER("res2", ((tsr_layer_spec_t){.kind = TSR_LAYER_ADD}), in);
    snprintf(stream, sizeof stream, "h%d.res2", b);
  }
#undef TSR_GPT_LAYER
  TSR_TRY(add_named(spec, (tsr_layer_spec_t){.kind = TSR_LAYER_LAYERNORM}, "lnf", stream));
  return add_named(spec, (tsr_layer_spec_t){.kind = TSR_LAYER_LMHEAD, .units = vocab}, "head", "");
}

/* "gpt" (4,256,4,128) or "gpt:L,D,H,T". */
static int parse_gpt(tsr_model_spec_t *spec, const char *text, int classes, tsr_errbuf_t *err) {
  const char *hint = "use gpt:L,D,H,T (layers, width, heads, context), e.g. gpt:4,256,4,128";
  const char *p = strcmp(text, "gpt") == 0 ? "4,256,4,128" : text + 4;
  long v[4];
  for (int k = 0; k < 4; k++) {
    char *end;
    if (parse_int(p, &end, 1 << 16, &v[k]) || *end != (k < 3 ? ',' : '\0'))
      return tsr_error_set(err, TSR_EINVAL, "--model '%s': expected four positive integers; %s",
                           text, hint);
    p = end + 1;
  }
  if (v[1] % v[2] != 0)
    return tsr_error_set(err, TSR_EINVAL,
                         "--model '%s': the width %ld is not divisible by the %ld heads; make D a "
                         "multiple of H",
                         text, v[1], v[2]);
  return add_gpt(spec, (int)v[0], (int)v[1], (int)v[2], (int)v[3], classes);
}

/* " (did you mean NAME?)" for the shorthand or zoo model nearest the name text begins with (up
 * to a ':'), when it is a typo's distance away (1 edit under 5 letters, else 2); else "". */
static void nearest_model(const char *text, char *buf, size_t size) {
  static const char *const names[] = {"mlp",      "linear",   "cnn",      "gpt",      "resnet20",
                                      "resnet32", "resnet56", "resnet18", "resnet50", "vgg11",
                                      "vgg16",    "alexnet",  "googlenet"};
  size_t n = strcspn(text, ":");
  const char *best = NULL;
  int best_d = 99;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    int d = tsr_edit_distance(text, n, names[i]);
    if (d < best_d) best_d = d, best = names[i];
  }
  buf[0] = '\0';
  if (best && best_d > 0 && best_d <= (n < 5 ? 1 : 2))
    snprintf(buf, size, " (did you mean %s%s?)", best, text[n] ? text + n : "");
}

static int parse_shorthand(tsr_model_spec_t *spec, const char *text, int classes,
                           tsr_errbuf_t *err) {
  if (strcmp(text, "gpt") == 0 || strncmp(text, "gpt:", 4) == 0)
    return parse_gpt(spec, text, classes, err);
  const char *hint =
      "use mlp, mlp:W1,W2,... (hidden widths), linear, cnn, gpt:L,D,H,T, a model of the zoo "
      "(resnet20, "
      "resnet50, vgg16, alexnet, googlenet, ...: docs/training.md) or a model file (.ini)";
  if (strcmp(text, "linear") == 0) return add_layer(spec, TSR_LAYER_DENSE, classes);
  if (strcmp(text, "cnn") == 0) {
    /* conv 3x3 32 - ReLU - maxpool 2 - conv 3x3 64 - ReLU - maxpool 2 - dense 128 - ReLU.
     * The convolutions keep their input's size (padding 1): on Fashion-MNIST
     * that was worth +0.5 to 1 point of test accuracy over unpadded ones
     * (README), for 1.6x the convolution work. */
    int rc = add_window(spec, TSR_LAYER_CONV, 32, 3, 1);
    if (rc == 0) rc = add_layer(spec, TSR_LAYER_RELU, 0);
    if (rc == 0) rc = add_window(spec, TSR_LAYER_MAXPOOL, 0, 2, 0);
    if (rc == 0) rc = add_window(spec, TSR_LAYER_CONV, 64, 3, 1);
    if (rc == 0) rc = add_layer(spec, TSR_LAYER_RELU, 0);
    if (rc == 0) rc = add_window(spec, TSR_LAYER_MAXPOOL, 0, 2, 0);
    if (rc == 0) rc = add_layer(spec, TSR_LAYER_FLATTEN, 0);
    if (rc == 0) rc = add_layer(spec, TSR_LAYER_DENSE, 128);
    if (rc == 0) rc = add_layer(spec, TSR_LAYER_RELU, 0);
    if (rc == 0) rc = add_layer(spec, TSR_LAYER_DENSE, classes);
    return rc;
  }
  const char *widths = NULL;
  if (strcmp(text, "mlp") == 0)
    widths = "512,512";
  else if (strncmp(text, "mlp:", 4) == 0)
    widths = text + 4;
  else {
    char near[96];
    nearest_model(text, near, sizeof near);
    return tsr_error_set(err, TSR_EINVAL, "--model '%s': unknown model%s; %s", text, near, hint);
  }
  const char *p = widths;
  if (!*p)
    return tsr_error_set(err, TSR_EINVAL, "--model '%s': no widths after 'mlp:'; %s", text, hint);
  while (*p) {
    char *end;
    long w;
    if (parse_int(p, &end, 1 << 20, &w) || (*end && *end != ',') || (*end == ',' && !end[1]))
      return tsr_error_set(err, TSR_EINVAL, "--model '%s': '%s' is not a positive width; %s", text,
                           p, hint);
    int rc = add_layer(spec, TSR_LAYER_DENSE, (int)w);
    if (rc == 0) rc = add_layer(spec, TSR_LAYER_RELU, 0);
    if (rc) return rc;
    p = *end ? end + 1 : end;
  }
  return add_layer(spec, TSR_LAYER_DENSE, classes);
}

void tsr_model_bind_classes(tsr_model_spec_t *spec, int classes) {
  for (int i = 0; i < spec->n_layers; i++)
    if (spec->layers[i].units == TSR_UNITS_CLASSES) spec->layers[i].units = classes;
}

int tsr_model_check_classes(const tsr_model_spec_t *spec, int classes, const char *file,
                            tsr_errbuf_t *err) {
  if (spec->n_layers <= 0) return 0; /* said by whoever builds it */
  int i = spec->n_layers - 1;
  const tsr_layer_spec_t *last = &spec->layers[i];
  const tsr_layer_type_t *t = tsr__layer_type(last->kind);
  char name[TSR_NAME_MAX + 8], in[PATH_MAX + 8] = "";
  tsr__layer_name(spec, i, name, sizeof name);
  if (file) snprintf(in, sizeof in, "%s: ", file);
  if (t && t->output && last->units == TSR_UNITS_CLASSES)
    return tsr_error_set(err, TSR_EINVAL,
                         "%sthe last layer [%s] says units = classes, but the model was not bound "
                         "to the %d classes (tsr_model_bind_classes)",
                         in, name, classes);
  if (!t || !t->output)
    return tsr_error_set(err, TSR_ESHAPE,
                         "%sthe last layer must be dense with one unit per class (%d); [%s] is %s: "
                         "end the model with a dense layer of units = classes",
                         in, classes, name, t ? t->name : "of an unknown type");
  if (last->units != classes)
    return tsr_error_set(err, TSR_ESHAPE,
                         "%sthe last layer [%s] (%s) has %d units, but the data has %d classes: "
                         "give it units = classes (one per class, whatever the data)",
                         in, name, t->name, last->units, classes);
  return 0;
}

/* A bare name (letters, digits, '-', '_') that may be a model file's: NAME.ini. */
static bool zoo_name(const char *text) {
  if (!*text || strlen(text) > 64) return false;
  for (const char *p = text; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_') return false;
  return true;
}

int tsr_model_parse(tsr_model_spec_t *spec, const char *text, int classes, tsr_errbuf_t *err) {
  tsr_model_spec_init(spec);
  char file[80], found[PATH_MAX];
  if (zoo_name(text) && strcmp(text, "mlp") && strcmp(text, "linear") && strcmp(text, "cnn") &&
      strcmp(text, "gpt") && snprintf(file, sizeof file, "%s.ini", text) < (int)sizeof file &&
      tsr__datafile_find(&tsr__datafile_models, file, found, sizeof found)) {
    int rc = tsr_model_load_ini(spec, found, err);
    if (rc == 0) tsr_model_bind_classes(spec, classes);
    return rc;
  }
  int rc = parse_shorthand(spec, text, classes, err);
  if (rc == TSR_ENOMEM) tsr_error_set(err, rc, "--model '%s': out of memory", text);
  if (rc) tsr_model_spec_fini(spec);
  return rc;
}

struct ini_state {
  tsr_model_spec_t *spec;
  const char *path;
  tsr_errbuf_t *err;
  int rc;
  int line;                  /* the line being read (1-based), counted by read_line */
  int header_line;           /* the line of the last [section] header read */
  int section_line;          /* the current section's header line */
  char where[PATH_MAX + 16]; /* "path:line" of the key being read, for messages */
  char section[256];
  bool has_type;   /* the current section said its type */
  bool has_input;  /* ... and `input` (once, alone) */
  unsigned seen;   /* the current section's keys given so far, bit k for its type's keys[k] */
  int layer;       /* index of the current section's layer in spec */
  bool *activated; /* [spec cap] a layer whose section said activation = relu (the ReLU follows) */
  int activated_cap;
};

/* "dense, relu, ... or dropout": the registered type names. */
static void type_list(char *buf, size_t size) {
  int n = tsr__layer_type_count(), at = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && at >= 0 && (size_t)at < size; i++) {
    const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";
    at += snprintf(buf + at, size - (size_t)at, "%s%s", sep, tsr__layer_type_at(i)->name);
  }
}

/* "type, units, ...": the keys a section of type t knows. */
static void key_list(const tsr_layer_type_t *t, char *buf, size_t size) {
  int at = snprintf(buf, size, "type");
  for (int k = 0; t->keys && t->keys[k].name && at >= 0 && (size_t)at < size; k++)
    at += snprintf(buf + at, size - (size_t)at, ", %s", t->keys[k].name);
}

/* The index of key `name` (or an alias) in t->keys, or -1. */
static int find_key(const tsr_layer_type_t *t, const char *name) {
  for (int k = 0; t->keys && t->keys[k].name; k++)
    if (strcmp(name, t->keys[k].name) == 0 ||
        (t->keys[k].alias && strcmp(name, t->keys[k].alias) == 0))
      return k;
  return -1;
}

/* "N" or "NHxNW", each in [lo, 1 << 16]. */
static int parse_pair(const char *v, int lo, int *a, int *b) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10), y = x;
  if (end == v || errno) return TSR_EINVAL;
  if (*end == 'x' || *end == 'X') {
    const char *p = end + 1;
    y = strtol(p, &end, 10);
    if (end == p || errno) return TSR_EINVAL;
  }
  if (*end || x < lo || y < lo || x > (1 << 16) || y > (1 << 16)) return TSR_EINVAL;
  *a = (int)x, *b = (int)y;
  return 0;
}

/* A section ends: it said its type and every key its type requires. */
static int section_done(struct ini_state *st) {
  if (st->section[0] == '\0' && !st->has_type) return 0; /* nothing started yet */
  snprintf(st->where, sizeof st->where, "%s:%d", st->path, st->section_line);
  if (!st->has_type) {
    char types[256];
    type_list(types, sizeof types);
    return tsr_error_set(st->err, TSR_EFORMAT, "%s: section [%s] has no 'type' key; add type = %s",
                         st->where, st->section, types);
  }
  const tsr_layer_type_t *t = tsr__layer_type(st->spec->layers[st->layer].kind);
  for (int k = 0; t->keys && t->keys[k].name; k++)
    if (t->keys[k].missing && !(st->seen & (1u << k)))
      return tsr_error_set(st->err, TSR_EFORMAT, "%s: section [%s] %s", st->where, st->section,
                           t->keys[k].missing);
  return 0;
}

/* `activation = relu` on layer st->layer: a ReLU layer right after it, named NAME.relu, which
 * the other sections that name NAME read (resolve_activations). TSR_ENOMEM or 0. */
static int add_activation(struct ini_state *st) {
  tsr_model_spec_t *spec = st->spec;
  if (st->activated_cap < spec->n_layers + 1) {
    int cap = 2 * (spec->n_layers + 1);
    bool *more = realloc(st->activated, sizeof *more * (size_t)cap);
    if (!more) return TSR_ENOMEM;
    memset(more + st->activated_cap, 0, sizeof *more * (size_t)(cap - st->activated_cap));
    st->activated = more, st->activated_cap = cap;
  }
  tsr_layer_spec_t relu = {.kind = TSR_LAYER_RELU};
  char name[TSR_NAME_MAX + 8];
  tsr__layer_name(spec, st->layer, name, sizeof name);
  strcat(name, ".relu");
  if (strlen(name) < TSR_NAME_MAX) memcpy(relu.name, name, strlen(name));
  TSR_TRY(tsr_model_spec_add(spec, &relu));
  st->activated[st->layer] = true;
  return 0;
}

/* Sets what key k says in spec->layers[layer]: 0, TSR_EINVAL for a value
 * that does not parse, or TSR_ENOMEM. */
static int parse_value(const tsr_layer_key_t *k, struct ini_state *st, const char *value) {
  char *at = (char *)&st->spec->layers[st->layer];
  int *a = (int *)(at + k->field), *b = (int *)(at + k->field2);
  switch (k->form) {
  case TSR_KEY_COUNT: {
    char *end;
    long v;
    if (parse_int(value, &end, 1 << 20, &v) || *end) return TSR_EINVAL;
    *a = (int)v;
    return 0;
  }
  case TSR_KEY_UNITS: {
    char *end;
    long v;
    if (strcmp(value, "classes") == 0)
      v = TSR_UNITS_CLASSES;
    else if (parse_int(value, &end, 1 << 20, &v) || *end)
      return TSR_EINVAL;
    *a = (int)v;
    return 0;
  }
  case TSR_KEY_SIZE: return parse_pair(value, 1, a, b);
  case TSR_KEY_PADDING: return parse_pair(value, 0, a, b);
  case TSR_KEY_PROBABILITY: {
    char *end;
    errno = 0;
    double r = strtod(value, &end);
    if (end == value || *end || errno || !(r >= 0.0 && r < 1.0)) return TSR_EINVAL;
    *(float *)(at + k->field) = (float)r;
    return 0;
  }
  case TSR_KEY_FRACTION: {
    char *end;
    errno = 0;
    double r = strtod(value, &end);
    if (end == value || *end || errno || !(r > 0.0 && r <= 1.0) || (float)r <= 0.0f)
      return TSR_EINVAL;
    *(float *)(at + k->field) = (float)r;
    return 0;
  }
  case TSR_KEY_ACTIVATION:
    if (strcmp(value, "relu") == 0) return add_activation(st);
    return strcmp(value, "none") == 0 ? 0 : TSR_EINVAL;
  }
  return TSR_EINVAL;
}

/* What a bad value of each form should have been. */
static const char *expected(tsr_key_form_t form) {
  switch (form) {
  case TSR_KEY_COUNT: return "expected a positive integer";
  case TSR_KEY_SIZE: return "expected a positive integer N or NHxNW";
  case TSR_KEY_PADDING: return "expected an integer N >= 0 or NHxNW";
  case TSR_KEY_PROBABILITY: return "expected a probability in [0, 1)";
  case TSR_KEY_ACTIVATION: return "use relu or none";
  case TSR_KEY_UNITS: return "expected a positive integer or classes";
  case TSR_KEY_FRACTION: return "expected a number in (0, 1]";
  }
  return "see the README";
}

/* A new layer of type t for the current section, named as it. */
static int add_section_layer(struct ini_state *st, const tsr_layer_type_t *t, const char *section) {
  tsr_layer_spec_t l = {.kind = t->kind};
  snprintf(l.name, sizeof l.name, "%s", section);
  TSR_TRY(tsr_model_spec_add(st->spec, &l));
  st->has_type = true, st->has_input = false;
  st->seen = 0;
  st->layer = st->spec->n_layers - 1;
  return 0;
}

/* `input = NAME` (once) or `inputs = A, B, ...` (each line adding names), any type's keys. */
static int on_inputs(struct ini_state *st, const char *section, const char *name,
                     const char *value) {
  tsr_layer_spec_t *l = &st->spec->layers[st->layer];
  bool single = strcmp(name, "input") == 0;
  if (st->has_input || (single && l->n_inputs > 0))
    return tsr_error_set(st->err, TSR_EFORMAT,
                         "%s: [%s] %s: the section already said its inputs; give input once, or "
                         "inputs (on one or more lines)",
                         st->where, section, name);
  st->has_input = single;
  int before = l->n_inputs;
  if (append_names(l->inputs, &l->n_inputs, value) || l->n_inputs == before ||
      (single && l->n_inputs != 1))
    return tsr_error_set(
        st->err, TSR_EFORMAT,
        "%s: [%s] %s = %s: expected %s (at most %d in all, each 1 to %d characters)", st->where,
        section, name, value,
        single ? "one section name, or input for the input batch"
               : "section names separated by commas",
        single ? 1 : TSR_MAX_INPUTS, TSR_NAME_MAX - 1);
  return 0;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
  struct ini_state *st = user;
  if (st->rc) return 0;
  if (strcmp(section, st->section) != 0) {
    if ((st->rc = section_done(st))) return 0;
    st->section_line = section[0] ? st->header_line : st->line;
    snprintf(st->where, sizeof st->where, "%s:%d", st->path, st->line);
    /* A section named as the layer right before it would be read back as the same section
     * once written out (tsr_model_to_ini): that layer is the keys before the first section,
     * which go by layer<N>, or the ReLU of the section before's activation = relu, which goes
     * by NAME.relu (the fuzzer's finds, kept in its corpus). */
    char before[TSR_NAME_MAX + 8];
    int last = st->spec->n_layers - 1;
    if (last >= 0) tsr__layer_name(st->spec, last, before, sizeof before);
    if (last >= 0 && strcmp(before, section) == 0) {
      if (st->spec->layers[last].name[0] == '\0')
        st->rc = tsr_error_set(st->err, TSR_EFORMAT,
                               "%s: [%s] follows the keys before the first section, which are a "
                               "layer that goes by %s too; put those keys under a section of "
                               "their own, or rename this one",
                               st->where, section, before);
      else
        st->rc = tsr_error_set(st->err, TSR_EFORMAT,
                               "%s: [%s] follows a section with activation = relu, whose ReLU "
                               "layer goes by %s too; rename this section",
                               st->where, section, before);
      return 0;
    }
    /* A control character (a carriage return, a tab) would not read back from the file that
     * tsr_model_to_ini writes: the fuzzer's find, kept in its corpus. */
    for (const unsigned char *c = (const unsigned char *)section; *c; c++)
      if (*c < 0x20 || *c == 0x7f) {
        st->rc = tsr_error_set(st->err, TSR_EFORMAT,
                               "%s: section [%s]: a control character (0x%02x) in its name; "
                               "use letters, digits, '.', '-' and '_'",
                               st->where, section, *c);
        return 0;
      }
    snprintf(st->section, sizeof st->section, "%s", section);
    st->has_type = false;
  }
  snprintf(st->where, sizeof st->where, "%s:%d", st->path, st->line);
  tsr_model_spec_t *spec = st->spec;
  if (strcmp(name, "type") == 0) {
    const tsr_layer_type_t *t = tsr__layer_type_named(value);
    if (!t) {
      char types[256];
      type_list(types, sizeof types);
      st->rc = tsr_error_set(st->err, TSR_EFORMAT, "%s: [%s] type = %s: unknown layer type; use %s",
                             st->where, section, value, types);
      return 0;
    }
    if (st->has_type) {
      st->rc = tsr_error_set(st->err, TSR_EFORMAT,
                             "%s: [%s]: a second 'type' key in one section (one section per "
                             "layer)",
                             st->where, section);
      return 0;
    }
    st->rc = add_section_layer(st, t, section);
    if (st->rc) tsr_error_set(st->err, st->rc, "%s: [%s]: out of memory", st->where, section);
    return st->rc == 0;
  }
  if (!st->has_type) {
    st->rc =
        tsr_error_set(st->err, TSR_EFORMAT, "%s: [%s] %s comes before 'type'; put type = ... first",
                      st->where, section, name);
    return 0;
  }
  if (strcmp(name, "input") == 0 || strcmp(name, "inputs") == 0) {
    st->rc = on_inputs(st, section, name, value);
    return st->rc == 0;
  }
  const tsr_layer_type_t *t = tsr__layer_type(spec->layers[st->layer].kind);
  int k = find_key(t, name);
  if (k < 0) {
    char known[256];
    key_list(t, known, sizeof known);
    st->rc = tsr_error_set(st->err, TSR_EFORMAT,
                           "%s: [%s] unknown key '%s' for a %s layer (known: %s, input, inputs)",
                           st->where, section, name, t->name, known);
    return 0;
  }
  assert(k < 32);
  if (t->keys[k].form == TSR_KEY_ACTIVATION && (st->seen & (1u << k))) {
    st->rc = tsr_error_set(st->err, TSR_EFORMAT,
                           "%s: [%s] %s: a second activation for one layer; give it once",
                           st->where, section, name);
    return 0;
  }
  st->seen |= 1u << k;
  int rc = parse_value(&t->keys[k], st, value);
  if (rc == TSR_EINVAL)
    st->rc = tsr_error_set(st->err, TSR_EFORMAT, "%s: [%s] %s = %s: %s", st->where, section, name,
                           value, expected(t->keys[k].form));
  else if (rc)
    st->rc = tsr_error_set(st->err, rc, "%s: [%s]: out of memory", st->where, section);
  return st->rc == 0;
}

/* How many layers of spec are called `name`, and the last of them (-1: none). */
static int count_named(const tsr_model_spec_t *spec, const char *name, int *found) {
  int n = 0;
  *found = -1;
  for (int j = 0; j < spec->n_layers; j++)
    if (tsr__layer_is(spec, j, name)) n++, *found = j;
  return n;
}

/* Whether spec layer i reads what it would without inputs: the previous layer (the input batch
 * for the first), named unambiguously, or nothing named. */
static bool reads_default(const tsr_model_spec_t *spec, int i) {
  const tsr_layer_spec_t *l = &spec->layers[i];
  if (l->n_inputs != 1) return l->n_inputs == 0;
  int j, n = count_named(spec, l->inputs[0], &j);
  if (i == 0) return strcmp(l->inputs[0], "input") == 0 && n == 0;
  return n == 1 && j == i - 1;
}

/* After the whole file: a name of a section that said activation = relu means the ReLU's
 * output; an input that is the default (the previous layer, or the input batch for the first)
 * is not kept as a name; a name that is the default one (layer<N>) neither, so that the file
 * tsr_model_to_ini writes reads back to the same spec. Ambiguous names stay as written: the
 * graph check names them. */
static void resolve_names(struct ini_state *st) {
  tsr_model_spec_t *spec = st->spec;
  for (int i = 0; i < spec->n_layers; i++) {
    tsr_layer_spec_t *l = &spec->layers[i];
    for (int k = 0; k < l->n_inputs; k++) {
      int j;
      if (count_named(spec, l->inputs[k], &j) == 1 && j + 1 < spec->n_layers &&
          j < st->activated_cap && st->activated[j]) {
        memset(l->inputs[k], 0, sizeof l->inputs[k]);
        tsr__layer_name(spec, j + 1, l->inputs[k], sizeof l->inputs[k]);
      }
    }
  }
  for (int i = 0; i < spec->n_layers; i++) {
    tsr_layer_spec_t *l = &spec->layers[i];
    if (l->n_inputs == 1 && reads_default(spec, i)) {
      l->n_inputs = 0;
      memset(l->inputs, 0, sizeof l->inputs);
    }
  }
  for (int i = 0; i < spec->n_layers; i++) {
    char own[32];
    snprintf(own, sizeof own, "layer%d", i + 1);
    if (strcmp(spec->layers[i].name, own) == 0)
      memset(spec->layers[i].name, 0, sizeof spec->layers[i].name);
  }
}

/* The model text for inih line by line, counting lines so that messages name them (Debian's
 * libinih is built without INI_HANDLER_LINENO), and stopping at a section header without its
 * ']': inih would go on under the section before, and blame its keys on that one. */
struct ini_lines {
  FILE *f;
  bool whole; /* the last piece read ended its line */
  struct ini_state *st;
};

static char *read_line(char *str, int num, void *stream) {
  struct ini_lines *in = stream;
  struct ini_state *st = in->st;
  if (st->rc || !fgets(str, num, in->f)) return NULL;
  if (in->whole) st->line++;
  size_t n = strlen(str);
  bool first = in->whole;
  in->whole = n > 0 && str[n - 1] == '\n';
  const char *p = str;
  while (first && (*p == ' ' || *p == '\t'))
    p++;
  if (first && *p == '[') {
    size_t len = strcspn(p, "\r\n");
    if (!memchr(p, ']', len) && (in->whole || feof(in->f))) {
      size_t shown = len;
      while (shown > 1 && (p[shown - 1] == ' ' || p[shown - 1] == '\t'))
        shown--;
      st->rc = tsr_error_set(st->err, TSR_EFORMAT,
                             "%s:%d: section header %.*s has no closing ']'; write [name]",
                             st->path, st->line, (int)(shown < 80 ? shown : 80), p);
      return NULL;
    }
    st->header_line = st->line;
  }
  return str;
}

/* Reads the model text of f (borrowed; NULL reads as an empty file) into
 * spec; path names it in messages, with the line. */
static int model_load(tsr_model_spec_t *spec, FILE *f, const char *path, tsr_errbuf_t *err) {
  tsr_model_spec_init(spec);
  struct ini_state st = {.spec = spec, .path = path, .err = err};
  struct ini_lines in = {.f = f, .whole = true, .st = &st};
  int line = f ? ini_parse_stream(read_line, &in, on_key, &st) : 0;
  if (st.rc == 0 && line > 0)
    st.rc = tsr_error_set(err, TSR_EFORMAT,
                          "%s:%d: not an INI line (expected [section] or key = value)", path, line);
  if (st.rc == 0) st.rc = section_done(&st);
  if (st.rc == 0 && spec->n_layers == 0)
    st.rc = tsr_error_set(err, TSR_EFORMAT, "%s: no layers; add one section per layer", path);
  if (st.rc == 0) resolve_names(&st);
  free(st.activated);
  if (st.rc) tsr_model_spec_fini(spec);
  return st.rc;
}

int tsr_model_load_ini(tsr_model_spec_t *spec, const char *path, tsr_errbuf_t *err) {
  tsr_model_spec_init(spec);
  FILE *f;
  char found[PATH_MAX];
  TSR_TRY(tsr__datafile_open(&tsr__datafile_models, path, &f, found, sizeof found, err));
  int rc = model_load(spec, f, found, err);
  fclose(f);
  return rc;
}

int tsr__model_load_ini_mem(tsr_model_spec_t *spec, const void *text, size_t len, const char *name,
                            tsr_errbuf_t *err) {
  tsr_model_spec_init(spec);
  /* fmemopen refuses a size of 0: an empty text reads as no stream at all. */
  FILE *f = len ? fmemopen((void *)text, len, "r") : NULL;
  if (len && !f)
    return tsr_error_set(err, TSR_ENOMEM, "%s: cannot open the text as a stream: %s", name,
                         strerror(errno));
  int rc = model_load(spec, f, name, err);
  if (f) fclose(f);
  return rc;
}

/* Where a description goes: buf's size bytes, and the length the whole of it takes. */
typedef struct {
  char *buf;
  size_t size, n;
} sink_t;

static void put(sink_t *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bool room = s->n < s->size;
  int k = vsnprintf(room ? s->buf + s->n : NULL, room ? s->size - s->n : 0, fmt, ap);
  va_end(ap);
  if (k > 0) s->n += (size_t)k;
}

static size_t describe(const tsr_model_spec_t *spec, int inputs, char *buf, size_t size) {
  sink_t s = {buf, size, 0};
  put(&s, "%d", inputs);
  for (int i = 0; i < spec->n_layers; i++) {
    const tsr_layer_spec_t *l = &spec->layers[i];
    const tsr_layer_type_t *t = tsr__layer_type(l->kind);
    char part[128];
    if (t && t->describe)
      t->describe(l, part, sizeof part);
    else
      snprintf(part, sizeof part, "%s", t ? t->name : "unknown");
    put(&s, "-%s", part);
    /* An input that is the default is not shown, as tsr_model_to_ini does not write it: a spec
     * and the one its INI reads back (a checkpoint's) are described alike. */
    for (int k = 0; k < l->n_inputs && !reads_default(spec, i); k++)
      put(&s, "%s%s%s", k ? "," : "[", l->inputs[k], k == l->n_inputs - 1 ? "]" : "");
  }
  return s.n;
}

int tsr_model_describe(const tsr_model_spec_t *spec, int inputs, char *buf, int size) {
  if (size <= 0) return (int)describe(spec, inputs, NULL, 0);
  size_t n = describe(spec, inputs, buf, (size_t)size);
  if (n >= (size_t)size && size >= 4) memcpy(buf + size - 4, "...", 4); /* cut: says so */
  return (int)n;
}

char *tsr_model_description(const tsr_model_spec_t *spec, int inputs) {
  size_t n = describe(spec, inputs, NULL, 0);
  char *buf = malloc(n + 1);
  if (buf) describe(spec, inputs, buf, n + 1);
  return buf;
}

int tsr_model_parse_ini_text(tsr_model_spec_t *spec, const char *text, const char *name,
                             tsr_errbuf_t *err) {
  return tsr__model_load_ini_mem(spec, text, strlen(text), name, err);
}

/* Appends "key = value" for key k of layer l when its value is not the default (0). */
static int write_key(const tsr_layer_key_t *k, const tsr_layer_spec_t *l, char *buf, size_t size) {
  const char *at = (const char *)l;
  int a = *(const int *)(at + k->field), b = k->field2 ? *(const int *)(at + k->field2) : 0;
  switch (k->form) {
  case TSR_KEY_COUNT: return a ? snprintf(buf, size, "%s = %d\n", k->name, a) : 0;
  case TSR_KEY_SIZE:
    if (!a) return 0;
    return b ? snprintf(buf, size, "%s = %dx%d\n", k->name, a, b)
             : snprintf(buf, size, "%s = %d\n", k->name, a);
  case TSR_KEY_PADDING: return a || b ? snprintf(buf, size, "%s = %dx%d\n", k->name, a, b) : 0;
  case TSR_KEY_PROBABILITY:
    return snprintf(buf, size, "%s = %.9g\n", k->name, (double)*(const float *)(at + k->field));
  case TSR_KEY_ACTIVATION: return 0; /* a ReLU is a layer of its own in a spec */
  case TSR_KEY_UNITS:
    if (a == TSR_UNITS_CLASSES) return snprintf(buf, size, "%s = classes\n", k->name);
    return a ? snprintf(buf, size, "%s = %d\n", k->name, a) : 0;
  case TSR_KEY_FRACTION: {
    double v = (double)*(const float *)(at + k->field);
    return v != 0.0 ? snprintf(buf, size, "%s = %.9g\n", k->name, v) : 0;
  }
  }
  return 0;
}

int tsr_model_to_ini(const tsr_model_spec_t *spec, char *buf, size_t size) {
  size_t n = 0;
  for (int i = 0; i < spec->n_layers; i++) {
    const tsr_layer_spec_t *l = &spec->layers[i];
    const tsr_layer_type_t *t = tsr__layer_type(l->kind);
    if (!t) return TSR_EINVAL;
    char name[TSR_NAME_MAX];
    tsr__layer_name(spec, i, name, sizeof name);
    int w = snprintf(buf + n, n < size ? size - n : 0, "%s[%s]\ntype = %s\n", i ? "\n" : "", name,
                     t->name);
    n += (size_t)(w > 0 ? w : 0);
    /* input = A, or inputs = A, B, ... in lines the INI reader takes whole (under 200); none
     * where the layer reads the previous one */
    for (int k = 0, line = 0; k < l->n_inputs && !reads_default(spec, i); k++) {
      bool start = k == 0 || line + strlen(l->inputs[k]) > 160;
      const char *lead = !start ? ", " : l->n_inputs == 1 ? "input = " : "inputs = ";
      w = snprintf(buf + n, n < size ? size - n : 0, "%s%s%s%s", start && k ? "\n" : "", lead,
                   l->inputs[k], k == l->n_inputs - 1 ? "\n" : "");
      line = start ? w - (k ? 1 : 0) : line + w;
      n += (size_t)(w > 0 ? w : 0);
    }
    for (int k = 0; t->keys && t->keys[k].name; k++) {
      w = write_key(&t->keys[k], l, buf + n, n < size ? size - n : 0);
      n += (size_t)(w > 0 ? w : 0);
    }
  }
  return n < size ? 0 : TSR_EINVAL;
}
