/* The CSV parser on text already in memory, for the fuzzer (tests/fuzz/) and
 * tests: the same code as tsr_dataset_load_csv, which feeds it a file. */
#ifndef TSR_DATA_CSV_H
#define TSR_DATA_CSV_H

#include <stddef.h>

#include "tessera/data.h"

/* As tsr_dataset_load_csv, from len bytes of CSV text (borrowed, need not end
 * in NUL) that messages call `name`. On success ds is filled and owned by the
 * caller. */
int tsr__dataset_load_csv_mem(tsr_dataset_t *ds, const void *text, size_t len, const char *name,
                              tsr_errbuf_t *err);

#endif
