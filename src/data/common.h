/* What the loaders of src/data/ share: a file's bytes mapped into memory (the binary formats,
 * CIFAR and NumPy, parse bytes in memory, as their fuzzers do), and the check that a test set
 * fits its training set (dataset.c). */
#ifndef TSR_DATA_COMMON_H
#define TSR_DATA_COMMON_H

#include <stddef.h>

#include "tessera/data.h"

/* A file's bytes, read-only: bytes (len) mapped, NULL for an empty file. */
typedef struct {
  const unsigned char *bytes;
  size_t len;
} tsr__mapped_t;

/* Maps path (what: "CIFAR-10 batch", ".npy" ..., for messages) into m, the caller's to unmap.
 * TSR_EIO naming the file when it cannot be opened or is a folder. */
int tsr__data_map(tsr__mapped_t *m, const char *path, const char *what, tsr_errbuf_t *err);
void tsr__data_unmap(tsr__mapped_t *m);

/* Checks that test (from test_path) has train's geometry and no label beyond train's classes,
 * and gives test train's classes; TSR_ESHAPE or TSR_EFORMAT naming both files otherwise. */
int tsr__dataset_check_pair(tsr_dataset_t *train, tsr_dataset_t *test, const char *train_path,
                            const char *test_path, tsr_errbuf_t *err);

/* An empty test set (n 0) of train's shape and classes: a dataset shipped without one. */
void tsr__dataset_empty_like(tsr_dataset_t *test, const tsr_dataset_t *train);

#endif
