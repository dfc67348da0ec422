/* Model specs inside the library: the model-file parser on text already in memory, for the
 * fuzzer (tests/fuzz/) and tests (the same code as tsr_model_load_ini, which feeds it a file),
 * and the names layers go by (src/nn/layout.c resolves inputs with them). */
#ifndef TSR_NN_MODEL_H
#define TSR_NN_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "tessera/net.h"

/* As tsr_model_load_ini, from len bytes of INI text (borrowed, need not end in
 * NUL) that messages call `name` (borrowed). */
int tsr__model_load_ini_mem(tsr_model_spec_t *spec, const void *text, size_t len, const char *name,
                            tsr_errbuf_t *err);

/* The name spec layer i goes by: its own, or "layer<i + 1>" when it has none. */
void tsr__layer_name(const tsr_model_spec_t *spec, int i, char *buf, size_t size);
/* Whether spec layer i goes by `name`. */
bool tsr__layer_is(const tsr_model_spec_t *spec, int i, const char *name);

#endif
