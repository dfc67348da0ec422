/* libFuzzer harness for the .npz reader (src/data/npy.c on archives, src/data/zip.c): an
 * input is the archive's bytes. A loaded pair holds whole images of finite values and integer
 * labels, the test set (when not empty) of the training set's geometry with labels below its
 * classes (tests/fuzz/images.h); a refused pair is zeroed with a message. */
#include "data/npy.h"
#include "images.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tsr_dataset_t train, test;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__dataset_load_npz_mem(&train, &test, data, size, "<npz>", &err);
  if (rc == 0) {
    fuzz_check_images(&train, 0);
    FUZZ_CHECK(test.features == train.features && test.channels == train.channels &&
               test.classes == train.classes);
    if (test.n > 0) fuzz_check_images(&test, 0);
  } else {
    fuzz_check_refused(rc, &err, &train);
    fuzz_check_refused(rc, &err, &test);
  }
  tsr_dataset_fini(&train);
  tsr_dataset_fini(&test);
  return 0;
}
