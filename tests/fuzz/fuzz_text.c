/* libFuzzer harness for the text windows (src/data/text.c). An input is
 *
 *   byte 0      the context T: 1 + byte % 64
 *   byte 1      the test fraction: (byte % 10) / 10, 0 to 0.9
 *   the rest    the text's bytes
 *
 * A loaded pair holds every window of T tokens the text makes, floor((len - 1) / T), the last
 * floor(n fraction) of them in test, each input the text's byte and each target the byte after
 * it; a refused one is zeroed with a message (tests/fuzz/images.h). */
#include <math.h>

#include "data/text.h"
#include "images.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

/* ds's windows are windows first .. first + ds->n of text. */
static void check_windows(const tsr_dataset_t *ds, const uint8_t *text, int64_t first, int t) {
  FUZZ_CHECK(ds->features == t && ds->targets == t && ds->height == t && ds->width == 1);
  FUZZ_CHECK(ds->channels == 1 && ds->classes == 256);
  for (int64_t k = 0; k < ds->n * t; k++) {
    FUZZ_CHECK(ds->x[k] == (float)text[first * t + k]);
    FUZZ_CHECK(ds->y[k] == (float)text[first * t + k + 1]);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int t = 1 + data[0] % 64;
  double fraction = (data[1] % 10) / 10.0;
  const uint8_t *text = data + 2;
  size_t len = size - 2;
  tsr_dataset_t train, test;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__dataset_load_text_mem(&train, &test, text, len, "<text>", t, fraction, &err);
  if (rc == 0) {
    int64_t n = (int64_t)((len - 1) / (size_t)t);
    FUZZ_CHECK(train.n + test.n == n && train.n >= 1);
    FUZZ_CHECK(test.n == (int64_t)floor((double)n * fraction + 1e-9));
    FUZZ_CHECK(fraction == 0 || test.n >= 1);
    check_windows(&train, text, 0, t);
    check_windows(&test, text, train.n, t);
  } else {
    fuzz_check_refused(rc, &err, &train);
    fuzz_check_refused(rc, &err, &test);
  }
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
  return 0;
}
