/* libFuzzer harness for the CSV reader (src/data/csv.c): the input is the
 * text of a CSV file. A loaded set must be what the format promises: n >= 1
 * rows of `features` >= 1 finite float values, integer labels in
 * [0, classes), classes - 1 the largest label. */
#include <math.h>

#include "data/csv.h"
#include "fuzz.h"
#include "tessera/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__dataset_load_csv_mem(&ds, data, size, "fuzz.csv", &err);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && err.msg[0] != '\0' && ds.x == NULL && ds.y == NULL);
    return 0;
  }
  FUZZ_CHECK(ds.n >= 1 && ds.features >= 1 && ds.x && ds.y);
  FUZZ_CHECK(ds.channels == 1 && ds.height == 1 && ds.width == ds.features);
  FUZZ_CHECK(ds.classes >= 1);
  float top = 0.0f;
  for (int64_t i = 0; i < ds.n; i++) {
    FUZZ_CHECK(ds.y[i] >= 0.0f && ds.y[i] == floorf(ds.y[i]) && ds.y[i] < (float)ds.classes);
    if (ds.y[i] > top) top = ds.y[i];
  }
  FUZZ_CHECK((int)top == ds.classes - 1);
  for (int64_t i = 0; i < ds.n * ds.features; i++)
    FUZZ_CHECK(isfinite(ds.x[i]));
  tsr_dataset_fini(&ds);
  return 0;
}
