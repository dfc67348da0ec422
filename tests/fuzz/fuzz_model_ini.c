/* libFuzzer harness for model files (tsr_model_load_ini, src/nn/model.c): the
 * input is the text of an INI model file. An accepted file must describe at least one layer of
 * a registered type, which tsr_model_describe can print, and tsr_model_to_ini must write it
 * back as a file that reads to the same layers. Then the network's layout is computed as
 * tsr_net_create does before it builds anything (the graph of named inputs, each layer type's
 * shape check, the tiling: src/nn/layout.c) from the inputs of Fashion-MNIST (28x28x1), of a
 * CSV set (784 features) and of a colour image (32x32x3), under a grid of 1 and 2 rows: a
 * refusal must say why, an accepted layout must have positive shapes whose sizes fit the int
 * that holds them, and every input must come from a layer that runs before. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "nn/layers.h"
#include "nn/layout.h"
#include "nn/model.h"
#include "tessera/net.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

/* The layout of spec on a sample of c x h x w, as the network builder computes it. */
static void follow_layout(const tsr_model_spec_t *spec, int c, int h, int w, int grid_rows) {
  const tsr_layer_spec_t *last = &spec->layers[spec->n_layers - 1];
  int classes = last->units >= 2 ? last->units : 10;
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.in_channels = c, o.in_height = h, o.in_width = w, o.grid_rows = grid_rows;
  tsr_net_layout_t lay;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__net_layout_build(&lay, spec, c * h * w, classes, &o, 2, 1, &err);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && err.msg[0] != '\0' && lay.n_layers == 0 && !lay.layers);
    return;
  }
  FUZZ_CHECK(lay.n_layers >= 1);
  FUZZ_CHECK(lay.grid_rc == 0 || lay.grid_err.msg[0] != '\0');
  for (int j = 0; j < lay.n_layers; j++) {
    const tsr_layout_layer_t *l = &lay.layers[j];
    const tsr_conv_geom_t *g = &l->geom;
    FUZZ_CHECK(g->oc >= 1 && g->oh >= 1 && g->ow >= 1);
    FUZZ_CHECK((int64_t)g->oc * g->oh * g->ow <= INT32_MAX);
    FUZZ_CHECK(l->fout >= 1 && l->out_nb >= 1 && l->in_nb >= 1);
    FUZZ_CHECK(l->n_inputs >= 1 && l->n_inputs <= TSR_MAX_INPUTS);
    for (int k = 0; k < l->n_inputs; k++)
      FUZZ_CHECK(l->in[k].from >= -1 && l->in[k].from < j);
  }
  FUZZ_CHECK(lay.memory.total >= 0);
  tsr__net_layout_fini(&lay);
}

/* tsr_model_to_ini's text reads back to the same layers. */
static void round_trip(const tsr_model_spec_t *spec) {
  size_t size = 1024;
  char *text = NULL;
  for (;;) {
    char *more = realloc(text, size);
    FUZZ_CHECK(more);
    text = more;
    if (tsr_model_to_ini(spec, text, size) == 0) break;
    size *= 2;
  }
  tsr_model_spec_t back;
  tsr_errbuf_t err = {{0}};
  FUZZ_CHECK(tsr_model_parse_ini_text(&back, text, "round trip", &err) == 0);
  FUZZ_CHECK(back.n_layers == spec->n_layers);
  FUZZ_CHECK(memcmp(back.layers, spec->layers, sizeof *spec->layers * (size_t)spec->n_layers) == 0);
  tsr_model_spec_fini(&back);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__model_load_ini_mem(&spec, data, size, "fuzz.ini", &err);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && err.msg[0] != '\0' && spec.n_layers == 0 && !spec.layers);
    return 0;
  }
  FUZZ_CHECK(spec.n_layers >= 1);
  for (int i = 0; i < spec.n_layers; i++)
    FUZZ_CHECK(tsr__layer_type(spec.layers[i].kind) != NULL);
  char text[4096];
  tsr_model_describe(&spec, 784, text, (int)sizeof text);
  FUZZ_CHECK(strlen(text) < sizeof text);
  round_trip(&spec);
  follow_layout(&spec, 1, 28, 28, 1);
  follow_layout(&spec, 784, 1, 1, 1);
  follow_layout(&spec, 3, 32, 32, 1);
  follow_layout(&spec, 1, 28, 28, 2);
  tsr_model_spec_fini(&spec);
  return 0;
}
