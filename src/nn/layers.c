/* The layer registry: the table of layer types (layers.h), and what it says of them to
 * programs (tsr_layer_types_json: the Python package reads its keys and names from it). Adding
 * a type: its descriptor in its own file in src/nn/, and its name in the two lists below. */
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "nn/layers.h"

const char *const tsr__weight_bias[] = {"weight", "bias", NULL};

extern const tsr_layer_type_t tsr__dense_type, tsr__relu_type, tsr__conv_type, tsr__maxpool_type,
    tsr__avgpool_type, tsr__flatten_type, tsr__dropout_type, tsr__add_type, tsr__concat_type,
    tsr__batchnorm_type, tsr__globalavgpool_type;
extern const tsr_layer_type_t tsr__attention_type, tsr__embedding_type, tsr__layernorm_type,
    tsr__gelu_type, tsr__lmhead_type;

static const tsr_layer_type_t *const types[] = {
    &tsr__dense_type,     &tsr__relu_type,      &tsr__conv_type,          &tsr__maxpool_type,
    &tsr__avgpool_type,   &tsr__flatten_type,   &tsr__dropout_type,       &tsr__add_type,
    &tsr__concat_type,    &tsr__batchnorm_type, &tsr__globalavgpool_type, &tsr__embedding_type,
    &tsr__layernorm_type, &tsr__gelu_type,      &tsr__attention_type,     &tsr__lmhead_type,
};

int tsr__layer_type_count(void) {
  return (int)(sizeof types / sizeof *types);
}

const tsr_layer_type_t *tsr__layer_type_at(int i) {
  return i >= 0 && i < tsr__layer_type_count() ? types[i] : NULL;
}

const tsr_layer_type_t *tsr__layer_type(tsr_layer_kind_t kind) {
  for (int i = 0; i < tsr__layer_type_count(); i++)
    if (types[i]->kind == kind) return types[i];
  return NULL;
}

const tsr_layer_type_t *tsr__layer_type_named(const char *name) {
  for (int i = 0; i < tsr__layer_type_count(); i++)
    if (strcmp(name, types[i]->name) == 0 ||
        (types[i]->alias && strcmp(name, types[i]->alias) == 0))
      return types[i];
  return NULL;
}

/* ---- the registry as JSON ---- */

/* The spec fields model-file keys set, by their offset (tsr_layer_key_t's field, field2). */
static const struct {
  size_t offset;
  const char *name;
} spec_fields[] = {
    {TSR_SPEC_FIELD(units), "units"},
    {TSR_SPEC_FIELD(kernel_h), "kernel_h"},
    {TSR_SPEC_FIELD(kernel_w), "kernel_w"},
    {TSR_SPEC_FIELD(stride_h), "stride_h"},
    {TSR_SPEC_FIELD(stride_w), "stride_w"},
    {TSR_SPEC_FIELD(pad_h), "pad_h"},
    {TSR_SPEC_FIELD(pad_w), "pad_w"},
    {TSR_SPEC_FIELD(in_channels), "in_channels"},
    {TSR_SPEC_FIELD(in_features), "in_features"},
    {TSR_SPEC_FIELD(rate), "rate"},
    {TSR_SPEC_FIELD(momentum), "momentum"},
    {TSR_SPEC_FIELD(eps), "eps"},
    {TSR_SPEC_FIELD(heads), "heads"},
    {TSR_SPEC_FIELD(vocab), "vocab"},
    {TSR_SPEC_FIELD(context), "context"},
};

static const char *const form_names[] = {
    [TSR_KEY_COUNT] = "count",           [TSR_KEY_SIZE] = "size",
    [TSR_KEY_PADDING] = "padding",       [TSR_KEY_PROBABILITY] = "probability",
    [TSR_KEY_ACTIVATION] = "activation", [TSR_KEY_UNITS] = "units",
    [TSR_KEY_FRACTION] = "fraction",
};

static const char *field_name(size_t offset) {
  for (size_t i = 0; i < sizeof spec_fields / sizeof *spec_fields; i++)
    if (spec_fields[i].offset == offset) return spec_fields[i].name;
  return NULL;
}

static cJSON *string_or_null(const char *s) {
  return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

/* A NULL-ended list of names (and one more, where not NULL) as an array. */
static cJSON *names(const char *const *list, const char *more) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && list && list[i]; i++)
    cJSON_AddItemToArray(a, cJSON_CreateString(list[i]));
  if (a && more) cJSON_AddItemToArray(a, cJSON_CreateString(more));
  return a;
}

/* One key: its fields as the spec's names (none for activation, which adds a ReLU layer; two
 * for a size or padding, h and w). NULL for a field the table above lacks. */
static cJSON *key_json(const tsr_layer_key_t *k) {
  cJSON *o = cJSON_CreateObject(), *fields = cJSON_CreateArray();
  bool two = k->form == TSR_KEY_SIZE || k->form == TSR_KEY_PADDING, ok = o && fields;
  if (ok && k->form != TSR_KEY_ACTIVATION) {
    const char *f = field_name(k->field), *f2 = two ? field_name(k->field2) : NULL;
    ok = f && (!two || f2);
    if (ok) cJSON_AddItemToArray(fields, cJSON_CreateString(f));
    if (ok && two) cJSON_AddItemToArray(fields, cJSON_CreateString(f2));
  }
  if (!ok) return cJSON_Delete(o), cJSON_Delete(fields), NULL;
  cJSON_AddItemToObject(o, "name", cJSON_CreateString(k->name));
  cJSON_AddItemToObject(o, "alias", string_or_null(k->alias));
  cJSON_AddItemToObject(o, "form", cJSON_CreateString(form_names[k->form]));
  cJSON_AddItemToObject(o, "fields", fields);
  cJSON_AddItemToObject(o, "missing", string_or_null(k->missing));
  return o;
}

char *tsr_layer_types_json(void) {
  cJSON *all = cJSON_CreateArray();
  bool ok = all != NULL;
  for (int i = 0; ok && i < tsr__layer_type_count(); i++) {
    const tsr_layer_type_t *t = types[i];
    cJSON *o = cJSON_CreateObject(), *keys = cJSON_CreateArray(), *inputs = cJSON_CreateArray();
    ok = o && keys && inputs;
    for (const tsr_layer_key_t *k = t->keys; ok && k && k->name; k++) {
      cJSON *x = key_json(k);
      ok = x != NULL;
      if (ok) cJSON_AddItemToArray(keys, x);
    }
    int lo = t->min_inputs ? t->min_inputs : 1, hi = t->max_inputs ? t->max_inputs : 1;
    if (ok) {
      cJSON_AddItemToArray(inputs, cJSON_CreateNumber(lo));
      cJSON_AddItemToArray(inputs, cJSON_CreateNumber(hi));
      cJSON_AddItemToObject(o, "name", cJSON_CreateString(t->name));
      cJSON_AddItemToObject(o, "alias", string_or_null(t->alias));
      cJSON_AddItemToObject(o, "keys", keys);
      cJSON_AddItemToObject(o, "inputs", inputs);
      cJSON_AddItemToObject(o, "output", cJSON_CreateBool(t->output));
      cJSON_AddItemToObject(o, "params", names(t->param_names, NULL));
      cJSON_AddItemToObject(o, "buffers", names(t->buffer_names, t->counter_name));
      cJSON_AddItemToArray(all, o);
    } else {
      cJSON_Delete(o), cJSON_Delete(keys), cJSON_Delete(inputs);
    }
  }
  char *text = ok ? cJSON_PrintUnformatted(all) : NULL, *out = text ? strdup(text) : NULL;
  cJSON_free(text);
  cJSON_Delete(all);
  return out;
}
