/* A data file's bytes, mapped read-only: the binary loaders (CIFAR, .npy, .npz) parse bytes in
 * memory, the same code their fuzzers drive, and a mapping lets a file of several gigabytes
 * (ImageNet as .npz) be read without a second copy before it is converted to float32. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/common.h"

int tsr__data_map(tsr__mapped_t *m, const char *path, const char *what, tsr_errbuf_t *err) {
  *m = (tsr__mapped_t){0};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return tsr_error_set(err, TSR_EIO, "%s: cannot open the %s file: %s", path, what,
                         strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode)) {
    int dir = S_ISDIR(st.st_mode);
    close(fd);
    return tsr_error_set(err, TSR_EIO, "%s: is %s, not a %s file", path,
                         dir ? "a folder" : "not a regular file", what);
  }
  if (st.st_size > 0) {
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      return tsr_error_set(err, e == ENOMEM ? TSR_ENOMEM : TSR_EIO,
                           "%s: cannot read the %s file: %s", path, what, strerror(e));
    }
    m->bytes = p;
    m->len = (size_t)st.st_size;
  }
  close(fd);
  return 0;
}

void tsr__data_unmap(tsr__mapped_t *m) {
  if (m->bytes) munmap((void *)m->bytes, m->len);
  *m = (tsr__mapped_t){0};
}
