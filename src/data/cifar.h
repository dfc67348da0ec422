/* The CIFAR binary parser on bytes already in memory, for the fuzzer (tests/fuzz/) and tests: the
 * same code as tsr_dataset_load_cifar, which feeds it each file's bytes. */
#ifndef TSR_DATA_CIFAR_H
#define TSR_DATA_CIFAR_H

#include <stddef.h>

#include "tessera/data.h"

/* As tsr_dataset_load_cifar on one file: len bytes (borrowed) that messages call name, records of
 * label_bytes (1: CIFAR-10, 2: CIFAR-100) label bytes and 3,072 pixel bytes. */
int tsr__dataset_load_cifar_mem(tsr_dataset_t *ds, const void *bytes, size_t len, const char *name,
                                int label_bytes, tsr_errbuf_t *err);

#endif
