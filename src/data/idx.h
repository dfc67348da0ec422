/* The IDX parser on bytes already in memory, for the fuzzer (tests/fuzz/) and
 * tests: the same code as tsr_dataset_load_idx, which feeds it a file's bytes. */
#ifndef TSR_DATA_IDX_H
#define TSR_DATA_IDX_H

#include <stddef.h>

#include "tessera/data.h"

/* As tsr_dataset_load_idx, from the bytes of a plain (not gzip) IDX images
 * file and labels file, both borrowed; messages call them <images> and
 * <labels>. On success ds is filled and owned by the caller. */
int tsr__dataset_load_idx_mem(tsr_dataset_t *ds, const void *images, size_t images_len,
                              const void *labels, size_t labels_len, tsr_errbuf_t *err);

#endif
