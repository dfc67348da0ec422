/* Text for language models: a byte-level tokenizer (the vocabulary is the 256 byte values, a
 * token is a byte, so any file is text and no vocabulary file is needed) and a dataset of token
 * windows. One or more files are read whole, concatenated in the order given, and cut into
 * windows of T tokens at stride T: window i's inputs are the tokens [iT, iT + T), its targets the
 * tokens one further, [iT + 1, iT + T + 1), the next byte at each position. The last fraction of
 * the windows, contiguous, is the test set: the end of the text, unseen in training (its first
 * input token is the last training window's last target, a one-byte overlap).
 *
 * Every refusal comes before anything is allocated for the windows and names the file and the
 * fix: a path that is not a regular file (a folder, a pipe, a device; stat()ed first, so that a
 * FIFO is never opened, which would block until a writer came), an empty or unreadable file, a
 * text shorter than T + 1 bytes, too few windows for the split. A file's length is known before
 * its bytes are read, so the sizes are checked once for all files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/text.h"
#include "tessera/data.h"

/* Windows at most: every count below fits an int64_t and a size_t of bytes 8 times over. */
#define TEXT_MAX_BYTES ((size_t)1 << 40)

/* The windows n of len bytes and, of those, the test set's: 0, or TSR_EFORMAT naming the text
 * when it is shorter than context + 1 bytes or makes too few windows for the split. */
static int count_windows(size_t len, const char *name, int context, double fraction, int64_t *n,
                         int64_t *n_test, tsr_errbuf_t *err) {
  if (len == 0)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: empty text file: nothing to train on; pass a file with text in it",
                         name);
  if (len < (size_t)context + 1)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: the context (%d tokens) is longer than the text (%zu bytes): a "
                         "window needs %d bytes and the byte after them; give a longer text or a "
                         "model of a shorter context (gpt:L,D,H,T with T < %zu)",
                         name, context, len, context, len);
  *n = (int64_t)((len - 1) / (size_t)context);
  *n_test = (int64_t)floor((double)*n * fraction + 1e-9);
  if (fraction > 0 && (*n_test < 1 || *n - *n_test < 1)) {
    /* The fewest windows that leave one on each side. */
    int64_t m = (int64_t)ceil(1.0 / fraction - 1e-9);
    if (m < 2) m = 2;
    while ((int64_t)floor((double)m * fraction + 1e-9) < 1 ||
           m - (int64_t)floor((double)m * fraction + 1e-9) < 1)
      m++;
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: %zu bytes make %lld windows of %d tokens, too few to hold the last "
                         "%g of them out for the test set and train on the rest: that needs %lld "
                         "windows (%lld bytes); give a longer text or a model of a shorter "
                         "context",
                         name, len, (long long)*n, context, fraction, (long long)m,
                         (long long)m * context + 1);
  }
  return 0;
}

/* Windows [first, first + n) of the tokens into ds: x (n, T) the tokens, y (n, T) the next ones. */
static int fill_windows(tsr_dataset_t *ds, const unsigned char *tok, int64_t first, int64_t n,
                        int context, const char *name, tsr_errbuf_t *err) {
  size_t count = (size_t)n * (size_t)context;
  *ds = (tsr_dataset_t){.features = context,
                        .classes = TSR_TEXT_VOCAB,
                        .channels = 1,
                        .height = context,
                        .width = 1,
                        .targets = context};
  if (n == 0) return 0;
  float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y);
  if (!x || !y) {
    free(x), free(y);
    return tsr_error_set(err, TSR_ENOMEM,
                         "%s: out of memory for %zu tokens (8 bytes each: the inputs and the "
                         "targets as float32)",
                         name, count);
  }
  const unsigned char *at = tok + (size_t)first * (size_t)context;
  for (size_t k = 0; k < count; k++)
    x[k] = (float)at[k], y[k] = (float)at[k + 1];
  ds->n = n, ds->x = x, ds->y = y;
  return 0;
}

int tsr__dataset_load_text_mem(tsr_dataset_t *train, tsr_dataset_t *test, const void *bytes,
                               size_t len, const char *name, int context, double test_fraction,
                               tsr_errbuf_t *err) {
  if (!train || !test || (!bytes && len) || !name || context < 1 ||
      !(test_fraction >= 0 && test_fraction < 1))
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr_dataset_load_text: datasets, bytes and name must not be NULL, the "
                         "context at least 1, the test fraction in [0, 1)");
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  if (len > TEXT_MAX_BYTES)
    return tsr_error_set(err, TSR_EFORMAT, "%s: %zu bytes, more than the %zu a text may hold", name,
                         len, TEXT_MAX_BYTES);
  int64_t n = 0, n_test = 0;
  int rc = count_windows(len, name, context, test_fraction, &n, &n_test, err);
  if (rc == 0) rc = fill_windows(train, bytes, 0, n - n_test, context, name, err);
  if (rc == 0) rc = fill_windows(test, bytes, n - n_test, n_test, context, name, err);
  if (rc) tsr_dataset_fini(train), tsr_dataset_fini(test);
  return rc;
}

/* path's length, once it is known to be a regular file that is not empty: stat(), not open(),
 * first, so that a FIFO is refused without blocking. */
static int text_size(const char *path, size_t *size, tsr_errbuf_t *err) {
  struct stat st;
  if (stat(path, &st) != 0)
    return tsr_error_set(err, TSR_EIO, "%s: cannot open the text file: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode))
    return tsr_error_set(err, TSR_EIO,
                         "%s: is a folder, not a text file; pass the files in it, separated by "
                         "commas (--text %s/a,%s/b)",
                         path, path, path);
  if (S_ISFIFO(st.st_mode))
    return tsr_error_set(err, TSR_EIO,
                         "%s: is a pipe (FIFO), not a regular file: a text is read whole, its "
                         "length first; save it to a file and pass that",
                         path);
  if (!S_ISREG(st.st_mode))
    return tsr_error_set(
        err, TSR_EIO, "%s: is not a regular file (a device or a socket); pass a text file", path);
  if (st.st_size == 0)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: empty text file: nothing to train on; pass a file with text in it",
                         path);
  if ((uint64_t)st.st_size > TEXT_MAX_BYTES)
    return tsr_error_set(err, TSR_EFORMAT, "%s: %lld bytes, more than the %zu a text may hold",
                         path, (long long)st.st_size, TEXT_MAX_BYTES);
  *size = (size_t)st.st_size;
  return 0;
}

/* size bytes of path into buf. O_NONBLOCK: a path that became a FIFO since it was stat()ed is
 * still not waited on (fstat refuses it). */
static int read_text(const char *path, unsigned char *buf, size_t size, tsr_errbuf_t *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return tsr_error_set(err, TSR_EIO, "%s: cannot read the text file: %s%s", path, strerror(errno),
                         errno == EACCES ? "; make it readable (chmod a+r) or pass another" : "");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != size) {
    close(fd);
    return tsr_error_set(err, TSR_EIO, "%s: the text file changed while it was read; read it again",
                         path);
  }
  size_t got = 0;
  while (got < size) {
    ssize_t r = read(fd, buf + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : 0;
      close(fd);
      return tsr_error_set(err, TSR_EIO, "%s: cannot read the text file: %s", path,
                           e ? strerror(e) : "shorter than its length (it changed while read)");
    }
    got += (size_t)r;
  }
  close(fd);
  return 0;
}

int tsr_dataset_load_text(tsr_dataset_t *train, tsr_dataset_t *test, const char *const *paths,
                          int npaths, int context, double test_fraction, tsr_errbuf_t *err) {
  if (!train || !test || !paths || npaths < 1)
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr_dataset_load_text: datasets and paths must not be NULL, npaths >= 1");
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  size_t total = 0, *sizes = calloc((size_t)npaths, sizeof *sizes);
  int rc = sizes ? 0 : tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", paths[0]);
  /* Every file's kind and length first: a folder or a pipe among them is found before a byte is
   * read. */
  for (int i = 0; rc == 0 && i < npaths; i++) {
    rc = paths[i] ? text_size(paths[i], &sizes[i], err)
                  : tsr_error_set(err, TSR_EINVAL, "tsr_dataset_load_text: paths[%d] is NULL", i);
    if (rc == 0 && (total += sizes[i]) > TEXT_MAX_BYTES)
      rc = tsr_error_set(err, TSR_EFORMAT, "%s: more than %zu bytes of text in all", paths[i],
                         TEXT_MAX_BYTES);
  }
  unsigned char *bytes = rc == 0 ? malloc(total) : NULL;
  if (rc == 0 && !bytes)
    rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory for %zu bytes of text", paths[0], total);
  for (size_t i = 0, at = 0; rc == 0 && i < (size_t)npaths; at += sizes[i++])
    rc = read_text(paths[i], bytes + at, sizes[i], err);
  free(sizes);
  char name[512];
  if (npaths == 1)
    snprintf(name, sizeof name, "%s", paths[0]);
  else
    snprintf(name, sizeof name, "%s and %d more text files", paths[0], npaths - 1);
  if (rc == 0)
    rc = tsr__dataset_load_text_mem(train, test, bytes, total, name, context, test_fraction, err);
  free(bytes);
  return rc;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

void tsr_dataset_text_files_free(char **paths, int npaths) {
  for (int i = 0; paths && i < npaths; i++)
    free(paths[i]);
  free(paths);
}

int tsr_dataset_text_files(char ***paths, int *npaths, const char *dir, tsr_errbuf_t *err) {
  if (!paths || !npaths || !dir)
    return tsr_error_set(err, TSR_EINVAL, "tsr_dataset_text_files: arguments must not be NULL");
  *paths = NULL, *npaths = 0;
  struct dirent **entries = NULL;
  int n = scandir(dir, &entries, NULL, by_name), scan_errno = errno;
  char **out = n > 0 ? calloc((size_t)n, sizeof *out) : NULL;
  int rc = 0, found = 0;
  if (n > 0 && !out) rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", dir);
  for (int i = 0; i < n; i++) {
    const char *e = entries[i]->d_name;
    char path[4096];
    struct stat st;
    /* The plain files: fortune's index files are NAME.dat, its UTF-8 links NAME.u8. */
    if (rc == 0 && !strchr(e, '.') &&
        snprintf(path, sizeof path, "%s/%s", dir, e) < (int)sizeof path && stat(path, &st) == 0 &&
        S_ISREG(st.st_mode) && st.st_size > 0) {
      if (!(out[found] = strdup(path)))
        rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", dir);
      else
        found++;
    }
    free(entries[i]);
  }
  free(entries);
  if (rc == 0 && found == 0)
    rc = tsr_error_set(err, TSR_EIO,
                       "%s: %s: the default text is Debian's fortunes package (apt-get install "
                       "fortunes, or scripts/setup.sh); install it or pass --text FILE[,FILE...]",
                       dir, n < 0 ? strerror(scan_errno) : "no plain text file in it");
  if (rc) {
    tsr_dataset_text_files_free(out, found);
    return rc;
  }
  *paths = out, *npaths = found;
  return 0;
}
