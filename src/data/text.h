/* The text windows on bytes already in memory, for the fuzzer (tests/fuzz/) and tests: the same
 * code as tsr_dataset_load_text, which feeds it the files' bytes concatenated. */
#ifndef TSR_DATA_TEXT_H
#define TSR_DATA_TEXT_H

#include <stddef.h>

#include "tessera/data.h"

/* As tsr_dataset_load_text on len bytes (borrowed) that messages call name: windows of context
 * tokens, the last test_fraction of them into test. */
int tsr__dataset_load_text_mem(tsr_dataset_t *train, tsr_dataset_t *test, const void *bytes,
                               size_t len, const char *name, int context, double test_fraction,
                               tsr_errbuf_t *err);

#endif
