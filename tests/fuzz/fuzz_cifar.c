/* libFuzzer harness for the CIFAR binary reader (src/data/cifar.c). An input is
 *
 *   byte 0      bit 0: CIFAR-100 (2 label bytes a record), else CIFAR-10
 *   the rest    the file's bytes
 *
 * A loaded set is whole 32x32x3 records, pixels in [0, 1], labels below 10 (100); a refused one
 * is zeroed with a message (tests/fuzz/images.h). */
#include "data/cifar.h"
#include "images.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int label_bytes = data[0] & 1 ? 2 : 1;
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__dataset_load_cifar_mem(&ds, data + 1, size - 1, "<cifar>", label_bytes, &err);
  if (rc == 0) {
    fuzz_check_images(&ds, 1);
    FUZZ_CHECK(ds.channels == 3 && ds.height == 32 && ds.width == 32);
    FUZZ_CHECK(ds.classes == (label_bytes == 2 ? 100 : 10));
    FUZZ_CHECK((size_t)ds.n * (size_t)(label_bytes + 3072) == size - 1);
  } else {
    fuzz_check_refused(rc, &err, &ds);
  }
  tsr_dataset_fini(&ds);
  return 0;
}
