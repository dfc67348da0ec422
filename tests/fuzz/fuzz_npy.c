/* libFuzzer harness for the .npy reader (src/data/npy.c). An input is
 *
 *   bytes 0-1   n, little-endian: the images .npy is the next n bytes (at most what is left),
 *               the labels .npy the rest
 *
 * A loaded set holds whole images of finite values and integer labels (tests/fuzz/images.h); a
 * refused one is zeroed with a message. */
#include "data/npy.h"
#include "images.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t n = (size_t)data[0] | (size_t)data[1] << 8;
  data += 2, size -= 2;
  if (n > size) n = size;
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  int rc =
      tsr__dataset_load_npy_mem(&ds, data, n, "<images>", data + n, size - n, "<labels>", &err);
  if (rc == 0)
    fuzz_check_images(&ds, 0);
  else
    fuzz_check_refused(rc, &err, &ds);
  tsr_dataset_fini(&ds);
  return 0;
}
