/* The NumPy .npy and .npz parsers on bytes already in memory, for the fuzzers (tests/fuzz/) and
 * tests: the same code as tsr_dataset_load_npy and tsr_dataset_load_npz, which map the files. */
#ifndef TSR_DATA_NPY_H
#define TSR_DATA_NPY_H

#include <stddef.h>

#include "tessera/data.h"

/* As tsr_dataset_load_npy, from the bytes of an images .npy (ilen, called iname in messages) and
 * a labels .npy (llen, lname), both borrowed. */
int tsr__dataset_load_npy_mem(tsr_dataset_t *ds, const void *images, size_t ilen, const char *iname,
                              const void *labels, size_t llen, const char *lname,
                              tsr_errbuf_t *err);

/* As tsr_dataset_load_npz, from an archive's len bytes (borrowed) called name in messages. */
int tsr__dataset_load_npz_mem(tsr_dataset_t *train, tsr_dataset_t *test, const void *bytes,
                              size_t len, const char *name, tsr_errbuf_t *err);

#endif
