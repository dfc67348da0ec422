/* The model-file parser on text already in memory, for the fuzzer
 * (tests/fuzz/) and tests: the same code as tsr_model_load_ini, which feeds it
 * a file. */
#ifndef TSR_NN_MODEL_H
#define TSR_NN_MODEL_H

#include <stddef.h>

#include "tessera/net.h"

/* As tsr_model_load_ini, from len bytes of INI text (borrowed, need not end in
 * NUL) that messages call `name` (borrowed). */
int tsr__model_load_ini_mem(tsr_model_spec_t *spec, const void *text, size_t len, const char *name,
                            tsr_errbuf_t *err);

#endif
