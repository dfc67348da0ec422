/* libFuzzer harness for the safetensors reader (src/io/safetensors.c) and the
 * checkpoint reader above it (src/train/checkpoint.c): the input is the bytes
 * of a file. They always go through tsr__st_parse, from memory. A refused file
 * gives a negative code, a message and no file; an accepted one must hold
 * what the header promises: unique non-empty names, at most 8 sizes >= 0 per
 * shape, each tensor's data inside the buffer, 4-byte aligned and as long as
 * its shape says, the tensors covering the buffer in offset order without
 * holes or overlaps, every name and metadata key found again by its lookup.
 * An accepted file is then also written to an in-memory file (memfd) and read
 * as a checkpoint (tsr_checkpoint_read, tsr_checkpoint_list), which
 * interpret the metadata: a refusal there must come with a message too. */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "io/safetensors.h"
#include "tessera/checkpoint.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

static void check_file(const tsr_st_file_t *f) {
  int n = tsr__st_count(f);
  FUZZ_CHECK(n >= 0);
  const char *prev_end = NULL;
  for (int i = 0; i < n; i++) {
    tsr_st_tensor_t t;
    tsr__st_tensor(f, i, &t);
    FUZZ_CHECK(t.name && t.name[0] != '\0');
    FUZZ_CHECK(tsr__st_find(f, t.name) == i);
    FUZZ_CHECK(t.ndims >= 0 && t.ndims <= TSR_ST_MAX_DIMS);
    int64_t count = 1;
    for (int d = 0; d < t.ndims; d++) {
      FUZZ_CHECK(t.shape[d] >= 0);
      count *= t.shape[d];
    }
    FUZZ_CHECK(((uintptr_t)t.data & (sizeof(float) - 1)) == 0);
    FUZZ_CHECK(prev_end == NULL || (const char *)t.data == prev_end);
    /* Every float is read, so ASan sees any that lies outside the buffer. */
    volatile float sink = 0.0f;
    for (int64_t k = 0; k < count; k++)
      sink += t.data[k];
    (void)sink;
    prev_end = (const char *)(t.data + count);
  }
  for (int k = 0; k < tsr__st_nmeta(f); k++) {
    tsr_st_meta_t m = tsr__st_meta_at(f, k);
    FUZZ_CHECK(m.key && m.value);
    FUZZ_CHECK(tsr__st_meta(f, m.key) == m.value);
  }
}

/* Reads the accepted bytes back as a checkpoint, through a path. */
static void check_checkpoint(const uint8_t *data, size_t size) {
  int fd = memfd_create("checkpoint", MFD_CLOEXEC);
  if (fd < 0) return;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if (write(fd, data, size) == (ssize_t)size) {
    tsr_checkpoint_info_t info;
    tsr_model_spec_t spec;
    tsr_net_opts_t opts;
    int inputs, classes;
    tsr_errbuf_t err = {{0}};
    int rc = tsr_checkpoint_read(path, &info, &spec, &opts, &inputs, &classes, &err);
    FUZZ_CHECK(rc == 0 || (rc < 0 && err.msg[0] != '\0'));
    if (rc == 0) FUZZ_CHECK(spec.n_layers >= 1);
    if (rc == 0) tsr_model_spec_fini(&spec);
    tsr_errbuf_t perr = {{0}};
    tsr_checkpoint_listing_t l;
    int prc = tsr_checkpoint_list(&l, path, &perr);
    FUZZ_CHECK(prc == 0 || (prc < 0 && perr.msg[0] != '\0'));
    tsr_checkpoint_listing_fini(&l);
  }
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tsr_st_file_t *f = (tsr_st_file_t *)1;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__st_parse(&f, data, size, "fuzz.safetensors", &err);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && err.msg[0] != '\0' && f == NULL);
    return 0;
  }
  FUZZ_CHECK(f != NULL);
  check_file(f);
  tsr__st_close(&f);
  FUZZ_CHECK(f == NULL);
  check_checkpoint(data, size);
  return 0;
}
