/* Gradient checks: the engine's gradients (float32 tasks over edge tiles)
 * against central finite differences of a float64 reference forward pass,
 * for dense layers, ReLU (standalone and fused) and softmax cross-entropy;
 * and for every registered layer type, a reference and a checked example
 * network, so that a new type cannot go without a gradient check. */
#include "gradcheck.h"

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(grad, .init = start, .fini = stop);

/* Dense layers see each sample as c = inputs channels of a 1 x 1 image. */
Test(grad, dense_softmax_xent_over_edge_tiles) {
  tsr_model_spec_t spec = SPEC({.kind = TSR_LAYER_DENSE, .units = 4});
  gradient_check(&spec, 7, 1, 1, 4, 5, 5, 2, 3);
  tsr_model_spec_fini(&spec);
}

Test(grad, standalone_relu_on_the_input) {
  tsr_model_spec_t spec =
      SPEC({.kind = TSR_LAYER_RELU, .units = 0}, {.kind = TSR_LAYER_DENSE, .units = 3});
  gradient_check(&spec, 6, 1, 1, 3, 4, 4, 3, 4);
  tsr_model_spec_fini(&spec);
}

Test(grad, mlp_with_fused_relu) {
  tsr_model_spec_t spec =
      SPEC({.kind = TSR_LAYER_DENSE, .units = 6}, {.kind = TSR_LAYER_RELU, .units = 0},
           {.kind = TSR_LAYER_DENSE, .units = 5}, {.kind = TSR_LAYER_RELU, .units = 0},
           {.kind = TSR_LAYER_DENSE, .units = 3});
  gradient_check(&spec, 5, 1, 1, 3, 7, 7, 3, 4);
  tsr_model_spec_fini(&spec);
}

Test(grad, short_batch_averages_over_valid_rows_only) {
  tsr_model_spec_t spec =
      SPEC({.kind = TSR_LAYER_DENSE, .units = 5}, {.kind = TSR_LAYER_RELU, .units = 0},
           {.kind = TSR_LAYER_DENSE, .units = 3});
  gradient_check(&spec, 4, 1, 1, 3, 8, 5, 3, 2);
  tsr_model_spec_fini(&spec);
}

/* Every type in the layer registry has a float64 reference in gradcheck.h
 * (and every reference names a registered type). */
Test(grad, every_registered_layer_type_has_a_reference) {
  for (int i = 0; i < tsr__layer_type_count(); i++) {
    const tsr_layer_type_t *t = tsr__layer_type_at(i);
    cr_assert_eq(tsr__layer_type(t->kind), t, "two registered types have kind %d", (int)t->kind);
    cr_assert_eq(tsr__layer_type_named(t->name), t, "two registered types are named '%s'", t->name);
    cr_expect(ref_type(t->name),
              "layer type '%s' is registered but has no float64 reference: add one to ref_types "
              "in tests/gradcheck.h",
              t->name);
  }
  for (size_t i = 0; i < sizeof ref_types / sizeof *ref_types; i++)
    cr_expect(tsr__layer_type_named(ref_types[i].type),
              "ref_types has '%s', which is not a registered layer type", ref_types[i].type);
}

/* Each registered type's example network (gradcheck.h), which uses it,
 * against finite differences: 5 samples with 4 valid, tiles of 2 x 3. */
Test(grad, every_registered_layer_type_passes_its_gradient_check) {
  for (int i = 0; i < tsr__layer_type_count(); i++) {
    const tsr_layer_type_t *t = tsr__layer_type_at(i);
    const ref_type_t *ref = ref_type(t->name);
    cr_assert(ref, "layer type '%s' has no float64 reference in tests/gradcheck.h", t->name);
    bool uses = false;
    for (int l = 0; l < ref->example.n_layers; l++)
      uses |= ref->example.layers[l].kind == t->kind;
    cr_assert(uses, "the example network of '%s' does not use it", t->name);
    cr_log_info("gradient check of %s", t->name);
    tsr_model_spec_t spec = ref_example(ref);
    gradient_check(&spec, ref->in[0], ref->in[1], ref->in[2], 3, 5, 4, 2, 3);
    tsr_model_spec_fini(&spec);
  }
}
