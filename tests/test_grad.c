/* Gradient checks: the engine's gradients (float32 tasks over edge tiles)
 * against central finite differences of a float64 reference forward pass,
 * for dense layers, ReLU (standalone and fused) and softmax cross-entropy. */
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
  tsr_model_spec_t spec = {1, {{.kind = TSR_LAYER_DENSE, .units = 4}}};
  gradient_check(&spec, 7, 1, 1, 4, 5, 5, 2, 3);
}

Test(grad, standalone_relu_on_the_input) {
  tsr_model_spec_t spec = {
      2, {{.kind = TSR_LAYER_RELU, .units = 0}, {.kind = TSR_LAYER_DENSE, .units = 3}}};
  gradient_check(&spec, 6, 1, 1, 3, 4, 4, 3, 4);
}

Test(grad, mlp_with_fused_relu) {
  tsr_model_spec_t spec = {5,
                           {{.kind = TSR_LAYER_DENSE, .units = 6},
                            {.kind = TSR_LAYER_RELU, .units = 0},
                            {.kind = TSR_LAYER_DENSE, .units = 5},
                            {.kind = TSR_LAYER_RELU, .units = 0},
                            {.kind = TSR_LAYER_DENSE, .units = 3}}};
  gradient_check(&spec, 5, 1, 1, 3, 7, 7, 3, 4);
}

Test(grad, short_batch_averages_over_valid_rows_only) {
  tsr_model_spec_t spec = {3,
                           {{.kind = TSR_LAYER_DENSE, .units = 5},
                            {.kind = TSR_LAYER_RELU, .units = 0},
                            {.kind = TSR_LAYER_DENSE, .units = 3}}};
  gradient_check(&spec, 4, 1, 1, 3, 8, 5, 3, 2);
}
