/* libFuzzer harness for the IDX reader (src/data/idx.c). An input is
 *
 *   byte 0      flags: bit 0 also loads the pair through the file loader
 *   bytes 1-2   n, little-endian: the images file is the next n bytes (at
 *               most what is left), the labels file the rest
 *
 * The pair always goes through the parser from memory; with bit 0 it is also
 * written to two in-memory files (memfd) and loaded by tsr_dataset_load_idx,
 * which reads gzip too: for plain files both ways must agree, result for
 * result. A loaded set must hold what the header said: n >= 1 images of
 * h x w (x c, rank 4) pixels in [0, 1], integer labels below `classes`. */
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/idx.h"
#include "fuzz.h"
#include "tessera/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

static void check_set(const tsr_dataset_t *ds) {
  FUZZ_CHECK(ds->n >= 1 && ds->x && ds->y);
  FUZZ_CHECK(ds->channels >= 1 && ds->height >= 1 && ds->width >= 1);
  FUZZ_CHECK(ds->features == (int64_t)ds->height * ds->width * ds->channels);
  FUZZ_CHECK(ds->classes >= 1 && ds->classes <= 256);
  for (int64_t i = 0; i < ds->n * ds->features; i++)
    FUZZ_CHECK(ds->x[i] >= 0.0f && ds->x[i] <= 1.0f);
  for (int64_t i = 0; i < ds->n; i++)
    FUZZ_CHECK(ds->y[i] >= 0.0f && ds->y[i] < (float)ds->classes && ds->y[i] == floorf(ds->y[i]));
}

/* An in-memory file holding data, as a path the loader can open; -1 on failure. */
static int memfile(const char *name, const uint8_t *data, size_t size, char *path, size_t cap) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (size > 0 && write(fd, data, size) != (ssize_t)size) {
    close(fd);
    return -1;
  }
  snprintf(path, cap, "/proc/self/fd/%d", fd);
  return fd;
}

static bool gzip_magic(const uint8_t *p, size_t n) {
  return n >= 2 && p[0] == 0x1f && p[1] == 0x8b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  bool via_file = data[0] & 1;
  size_t n = (size_t)data[1] | (size_t)data[2] << 8;
  data += 3, size -= 3;
  if (n > size) n = size;
  const uint8_t *images = data, *labels = data + n;
  size_t labels_len = size - n;

  tsr_dataset_t mem;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__dataset_load_idx_mem(&mem, images, n, labels, labels_len, &err);
  if (rc == 0)
    check_set(&mem);
  else
    FUZZ_CHECK(rc < 0 && err.msg[0] != '\0' && mem.x == NULL && mem.y == NULL);

  if (via_file) {
    char ipath[64], lpath[64];
    int ifd = memfile("images", images, n, ipath, sizeof ipath);
    int lfd = memfile("labels", labels, labels_len, lpath, sizeof lpath);
    if (ifd >= 0 && lfd >= 0) {
      tsr_dataset_t file;
      tsr_errbuf_t ferr = {{0}};
      int frc = tsr_dataset_load_idx(&file, ipath, lpath, &ferr);
      if (frc == 0)
        check_set(&file);
      else
        FUZZ_CHECK(frc < 0 && ferr.msg[0] != '\0' && file.x == NULL && file.y == NULL);
      if (!gzip_magic(images, n) && !gzip_magic(labels, labels_len)) {
        FUZZ_CHECK(frc == rc);
        if (rc == 0) {
          FUZZ_CHECK(file.n == mem.n && file.features == mem.features &&
                     file.classes == mem.classes && file.height == mem.height &&
                     file.width == mem.width);
          FUZZ_CHECK(memcmp(file.x, mem.x, (size_t)mem.n * (size_t)mem.features * sizeof(float)) ==
                     0);
          FUZZ_CHECK(memcmp(file.y, mem.y, (size_t)mem.n * sizeof(float)) == 0);
        }
      }
      tsr_dataset_fini(&file);
    }
    if (ifd >= 0) close(ifd);
    if (lfd >= 0) close(lfd);
  }
  tsr_dataset_fini(&mem);
  return 0;
}
