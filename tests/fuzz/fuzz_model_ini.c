/* libFuzzer harness for model files (tsr_model_load_ini, src/nn/model.c): the
 * input is the text of an INI model file. An accepted file must describe 1 to
 * TSR_MAX_LAYERS layers of registered types, which tsr_model_describe can
 * print. Then the shapes are followed as tsr_net_create does before it builds
 * anything (each layer type's shape check, layer after layer) from the inputs
 * of Fashion-MNIST (28x28x1), of a CSV set (784 features) and of a colour
 * image (32x32x3): a shape a check accepts must be positive and its size
 * count fit the int that holds it. */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "tessera/net.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

/* Follows a sample of c x h x w through spec's shape checks, as the network
 * builder does (src/nn/net.c, create_layers). */
static void follow_shapes(const tsr_model_spec_t *spec, int c, int h, int w) {
  tsr_conv_geom_t g = {.c = c, .h = h, .w = w}, shown = g;
  tsr_errbuf_t err = {{0}};
  for (int i = 0; i < spec->n_layers; i++) {
    const tsr_layer_type_t *t = tsr__layer_type(spec->layers[i].kind);
    if (i == 0 || tsr__layer_type(spec->layers[i - 1].kind)->create) shown = g;
    tsr_layer_site_t at = {
        .index = i + 1, .last = i == spec->n_layers - 1, .shown = shown, .err = &err};
    tsr_conv_geom_t io = {.c = g.c, .h = g.h, .w = g.w};
    if (t->shape(&spec->layers[i], &io, &at) != 0) {
      FUZZ_CHECK(err.msg[0] != '\0');
      return;
    }
    FUZZ_CHECK(io.oc >= 1 && io.oh >= 1 && io.ow >= 1);
    FUZZ_CHECK((int64_t)io.oc * io.oh * io.ow <= INT32_MAX);
    g = (tsr_conv_geom_t){.c = io.oc, .h = io.oh, .w = io.ow};
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__model_load_ini_mem(&spec, data, size, "fuzz.ini", &err);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && err.msg[0] != '\0' && spec.n_layers == 0);
    return 0;
  }
  FUZZ_CHECK(spec.n_layers >= 1 && spec.n_layers <= TSR_MAX_LAYERS);
  for (int i = 0; i < spec.n_layers; i++)
    FUZZ_CHECK(tsr__layer_type(spec.layers[i].kind) != NULL);
  char text[4096];
  tsr_model_describe(&spec, 784, text, (int)sizeof text);
  FUZZ_CHECK(strlen(text) < sizeof text);
  follow_shapes(&spec, 1, 28, 28);
  follow_shapes(&spec, 784, 1, 1);
  follow_shapes(&spec, 3, 32, 32);
  return 0;
}
