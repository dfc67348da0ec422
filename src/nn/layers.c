/* The layer registry: the table of layer types (layers.h). Adding a type:
 * its descriptor in its own file in src/nn/, and its name in the two lists
 * below. */
#include <string.h>

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
