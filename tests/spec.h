/* Model specs written inline in tests: SPEC(layer, layer, ...) is a tsr_model_spec_t holding
 * copies of the layers (designated initializers of tsr_layer_spec_t), owned by the caller
 * (tsr_model_spec_fini; a Criterion test's process may also just end). */
#ifndef TSR_TEST_SPEC_H
#define TSR_TEST_SPEC_H

#include <criterion/criterion.h>

#include "tessera/net.h"

static inline tsr_model_spec_t spec_of(const tsr_layer_spec_t *layers, int n) {
  tsr_model_spec_t spec;
  tsr_model_spec_init(&spec);
  for (int i = 0; i < n; i++)
    cr_assert_eq(tsr_model_spec_add(&spec, &layers[i]), 0);
  return spec;
}

#define SPEC(...)                                                                                  \
  spec_of((const tsr_layer_spec_t[]){__VA_ARGS__},                                                 \
          (int)(sizeof((const tsr_layer_spec_t[]){__VA_ARGS__}) / sizeof(tsr_layer_spec_t)))

#endif
