/* IDX reader for the MNIST family (MNIST, Fashion-MNIST, KMNIST): an images
 * file of unsigned bytes (rank 3: n, h, w; or rank 4: n, h, w, c, colour images
 * channels-last as the dimensions read) and a labels file of unsigned bytes
 * (rank 1), each plain or gzip. These files come from downloads that can be cut short or
 * mixed up, so every header field and the exact data length are checked, and
 * no buffer is sized from a header alone: a lying header costs at most the
 * file's real size in memory before it is rejected as truncated.
 *
 * One parser reads files (through zlib, which passes plain files through) and
 * byte buffers (tsr__dataset_load_idx_mem, for the fuzzer in tests/fuzz/):
 * only where the bytes come from differs. */

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/idx.h"
#include "tessera/data.h"

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, rank 3 */
#define IDX_MAGIC_COLOUR 0x00000804u /* unsigned bytes, rank 4: n, h, w, c */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, rank 1 */
#define IDX_MAX_SIDE 4096u           /* rows, cols or channels; real sets are 28 or 32 */
#define IDX_MAX_COUNT 100000000u     /* images or labels */

/* zlib counts in unsigned int; reading in 1 GiB pieces keeps each call in range. */
#define IDX_READ_CHUNK ((size_t)1 << 30)
#define IDX_FIRST_ALLOC ((size_t)1 << 20)

typedef struct {
  const char *path; /* borrowed: the file, or the buffer's name in messages */
  const char *what; /* "images" or "labels", for messages */
  bool in_memory;   /* the bytes are mem's, else the file's through gz */
  gzFile gz;
  const unsigned char *mem; /* borrowed */
  size_t mem_len, mem_at;
  int rank;
  uint32_t dims[4];
  size_t header_bytes; /* 4 + 4 * rank */
} idx_file_t;

static uint32_t be32(const unsigned char *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* A gzip file is reported in decompressed bytes, so say so: otherwise
 * "holds 1000 bytes" would contradict what ls shows. */
static const char *idx_unit_note(const idx_file_t *f) {
  return !f->gz || gzdirect(f->gz) ? "" : " (after decompression)";
}

/* Reads up to n bytes, stopping early only at the end of the file. zlib hides
 * a gzip stream that ends mid-way as a short read, so the end is checked with
 * gzerror to tell a cut-short download from a short but well-formed file. */
static int idx_read(idx_file_t *f, void *buf, size_t n, size_t *got, tsr_errbuf_t *err) {
  unsigned char *p = buf;
  *got = 0;
  if (f->in_memory) {
    size_t left = f->mem_len - f->mem_at;
    *got = n < left ? n : left;
    if (*got > 0) memcpy(p, f->mem + f->mem_at, *got);
    f->mem_at += *got;
    return 0;
  }
  while (*got < n) {
    size_t want = n - *got < IDX_READ_CHUNK ? n - *got : IDX_READ_CHUNK;
    int r = gzread(f->gz, p + *got, (unsigned)want);
    int errnum = Z_OK;
    const char *zmsg = NULL;
    if (r <= 0) zmsg = gzerror(f->gz, &errnum);
    if (r < 0 || errnum != Z_OK) {
      if (errnum == Z_ERRNO)
        return tsr_error_set(err, TSR_EIO, "%s: cannot read the IDX %s file: %s", f->path, f->what,
                             strerror(errno));
      if (errnum == Z_BUF_ERROR)
        return tsr_error_set(err, TSR_EFORMAT,
                             "%s: the gzip stream is cut short after %zu decompressed bytes; "
                             "download the file again",
                             f->path, (size_t)gztell(f->gz));
      if (errnum == Z_MEM_ERROR)
        return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory while decompressing", f->path);
      /* zlib prefixes its message with "<fd:N>: ", which means nothing to a user. */
      const char *colon = zmsg ? strstr(zmsg, ": ") : NULL;
      if (colon) zmsg = colon + 2;
      return tsr_error_set(err, TSR_EFORMAT, "%s: corrupt gzip data: %s; download the file again",
                           f->path, zmsg ? zmsg : "unknown zlib error");
    }
    if (r == 0) break;
    *got += (size_t)r;
  }
  return 0;
}

/* Opens f->path for idx_read: zlib reads gzip and passes plain files through. */
static int idx_open_file(idx_file_t *f, tsr_errbuf_t *err) {
  const char *path = f->path, *what = f->what;
  /* open() first so errno is reliably the cause (gzopen may clobber it). */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return tsr_error_set(err, TSR_EIO, "%s: cannot open the IDX %s file: %s", path, what,
                         strerror(errno));
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    return tsr_error_set(err, TSR_EIO, "%s: is a folder, not an IDX %s file", path, what);
  }
  f->gz = gzdopen(fd, "rb");
  if (!f->gz) {
    close(fd);
    return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory opening the file", path);
  }
  gzbuffer(f->gz, 1u << 17); /* larger than the 8 KiB default: fewer syscalls on 47 MB */
  return 0;
}

/* Opens the file f->path, unless f reads a buffer, and reads and checks its
 * header (magic and dimensions, not their values, which the caller judges).
 * An images file (rank 3) may also be rank 4 (magic IDX_MAGIC_COLOUR). */
static int idx_open(idx_file_t *f, const char *what, int rank, uint32_t magic, uint32_t other_magic,
                    const char *other_what, tsr_errbuf_t *err) {
  const char *path = f->path;
  f->what = what;
  f->rank = rank;
  f->header_bytes = 4 + 4 * (size_t)rank;
  if (!f->in_memory) {
    int rc = idx_open_file(f, err);
    if (rc < 0) return rc;
  }

  unsigned char hdr[20];
  size_t got;
  int rc = idx_read(f, hdr, 4, &got, err);
  if (rc < 0) return rc;
  if (got == 0)
    return tsr_error_set(err, TSR_EFORMAT, "%s: empty file: expected an IDX %s file", path, what);
  bool colour = got == 4 && magic == IDX_MAGIC_IMAGES && be32(hdr) == IDX_MAGIC_COLOUR;
  if (colour) f->rank = rank = 4, f->header_bytes = 20;
  if (got == 4) {
    size_t more;
    if ((rc = idx_read(f, hdr + 4, f->header_bytes - 4, &more, err)) < 0) return rc;
    got += more;
  }
  if (got >= 4) {
    uint32_t m = be32(hdr);
    if (m != magic && !colour) {
      if (m == other_magic)
        return tsr_error_set(err, TSR_EFORMAT,
                             "%s: wrong magic number 0x%08x: this is an IDX %s file, but an IDX %s "
                             "file (magic 0x%08x) was expected; are the paths swapped?",
                             path, m, other_what, what, magic);
      if (magic == IDX_MAGIC_IMAGES)
        return tsr_error_set(err, TSR_EFORMAT,
                             "%s: wrong magic number 0x%08x: an IDX %s file starts with 0x%08x "
                             "(unsigned bytes, rank 3: n, h, w) or 0x%08x (rank 4: n, h, w, c)",
                             path, m, what, magic, IDX_MAGIC_COLOUR);
      return tsr_error_set(err, TSR_EFORMAT,
                           "%s: wrong magic number 0x%08x: an IDX %s file starts with 0x%08x "
                           "(unsigned bytes, rank %d)",
                           path, m, what, magic, rank);
    }
  }
  if (got < f->header_bytes)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: truncated: the file holds %zu bytes%s, less than the %zu-byte IDX "
                         "%s header",
                         path, got, idx_unit_note(f), f->header_bytes, what);
  for (int i = 0; i < rank; i++)
    f->dims[i] = be32(hdr + 4 + 4 * i);
  return 0;
}

static void idx_close(idx_file_t *f) {
  if (f->gz) gzclose(f->gz);
  f->gz = NULL;
}

/* Reads exactly n data bytes after the header and checks nothing follows.
 * header_says describes the header's claim for messages, e.g.
 * "60000 images of 28x28". */
static int idx_read_data(idx_file_t *f, size_t n, const char *header_says, unsigned char **out,
                         tsr_errbuf_t *err) {
  *out = NULL;
  /* Grow as the data arrives instead of trusting n up front. */
  size_t cap = n < IDX_FIRST_ALLOC ? n : IDX_FIRST_ALLOC;
  unsigned char *buf = malloc(cap);
  if (!buf) return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", f->path);
  size_t have = 0;
  int rc;
  for (;;) {
    size_t got;
    if ((rc = idx_read(f, buf + have, cap - have, &got, err)) < 0) goto fail;
    have += got;
    if (have < cap || cap == n) break; /* end of file, or all the data is in */
    size_t next = cap > n / 2 ? n : cap * 2;
    unsigned char *grown = realloc(buf, next);
    if (!grown) {
      rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory reading %zu bytes", f->path, n);
      goto fail;
    }
    buf = grown;
    cap = next;
  }
  if (have < n) {
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: truncated: header says %s (%zu bytes) but the file holds %zu bytes%s "
                       "after the %zu-byte header; download the file again",
                       f->path, header_says, n, have, idx_unit_note(f), f->header_bytes);
    goto fail;
  }

  /* Trailing bytes mean the header and the data disagree (wrong file, or two
   * files concatenated); counting them makes the message actionable. */
  unsigned char scratch[4096];
  size_t extra = 0;
  for (;;) {
    size_t got;
    if ((rc = idx_read(f, scratch, sizeof scratch, &got, err)) < 0) goto fail;
    if (got == 0) break;
    extra += got;
  }
  if (extra > 0) {
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: trailing data: header says %s (%zu bytes) but %zu more bytes%s "
                       "follow them; the header does not describe this file",
                       f->path, header_says, n, extra, idx_unit_note(f));
    goto fail;
  }
  *out = buf;
  return 0;
fail:
  free(buf);
  return rc;
}

/* Loads the pair im (images) and lb (labels), files or buffers: both headers
 * first, so a count mismatch is found before 47 MB are read. */
static int idx_load(tsr_dataset_t *ds, idx_file_t *im, idx_file_t *lb, tsr_errbuf_t *err) {
  memset(ds, 0, sizeof *ds);
  const char *images_path = im->path, *labels_path = lb->path;
  unsigned char *pix = NULL, *lab = NULL;
  float *x = NULL, *y = NULL;
  char says[96];
  int rc;

  rc = idx_open(im, "images", 3, IDX_MAGIC_IMAGES, IDX_MAGIC_LABELS, "labels", err);
  if (rc < 0) goto out;
  uint32_t count = im->dims[0], rows = im->dims[1], cols = im->dims[2];
  uint32_t channels = im->rank == 4 ? im->dims[3] : 1;
  /* "28x28", or "32x32x3" for a rank-4 file, in messages. */
  char geom[40];
  snprintf(geom, sizeof geom, im->rank == 4 ? "%ux%ux%u" : "%ux%u", rows, cols, channels);
  if (count == 0 || count > IDX_MAX_COUNT || rows == 0 || rows > IDX_MAX_SIDE || cols == 0 ||
      cols > IDX_MAX_SIDE || channels == 0 || channels > IDX_MAX_SIDE) {
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: absurd dimensions: header says %u images of %s; expected 1 to %u "
                       "images of 1 to %u pixels a side%s (corrupt file, or not an IDX images "
                       "file)",
                       images_path, count, geom, IDX_MAX_COUNT, IDX_MAX_SIDE,
                       im->rank == 4 ? " and channels" : "");
    goto out;
  }
  /* Within the limits above the product fits in 64 bits; it must also fit
   * in memory as floats on this machine, and a sample's features in an int. */
  uint64_t features = (uint64_t)rows * cols * channels;
  uint64_t total = (uint64_t)count * features;
  if (total > SIZE_MAX / sizeof(float) || features > INT32_MAX) {
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: header says %u images of %s, too large to hold in memory here",
                       images_path, count, geom);
    goto out;
  }

  rc = idx_open(lb, "labels", 1, IDX_MAGIC_LABELS, IDX_MAGIC_IMAGES, "images", err);
  if (rc < 0) goto out;
  uint32_t nlabels = lb->dims[0];
  if (nlabels == 0 || nlabels > IDX_MAX_COUNT) {
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: absurd dimensions: header says %u labels; expected 1 to %u",
                       labels_path, nlabels, IDX_MAX_COUNT);
    goto out;
  }
  if (nlabels != count) {
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s holds %u images but %s holds %u labels; each image needs one label "
                       "(are they from the same set, train or t10k?)",
                       images_path, count, labels_path, nlabels);
    goto out;
  }

  snprintf(says, sizeof says, "%u images of %s", count, geom);
  if ((rc = idx_read_data(im, (size_t)total, says, &pix, err)) < 0) goto out;
  snprintf(says, sizeof says, "%u labels", nlabels);
  if ((rc = idx_read_data(lb, nlabels, says, &lab, err)) < 0) goto out;

  x = malloc((size_t)total * sizeof *x);
  y = malloc((size_t)count * sizeof *y);
  if (!x || !y) {
    rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory for %u images of %s", images_path, count,
                       geom);
    goto out;
  }
  /* Division rather than multiplication by 1/255 so that every pixel is the
   * correctly rounded p/255, which tests and other tools can reproduce. */
  for (size_t i = 0; i < (size_t)total; i++)
    x[i] = (float)pix[i] / 255.0f;
  int max_label = 0;
  for (size_t i = 0; i < count; i++) {
    y[i] = (float)lab[i];
    if (lab[i] > max_label) max_label = lab[i];
  }

  ds->n = count;
  ds->features = (int64_t)features;
  ds->classes = 1 + max_label;
  ds->channels = (int)channels;
  ds->height = (int)rows;
  ds->width = (int)cols;
  ds->x = x;
  ds->y = y;
  x = y = NULL;
  rc = 0;
out:
  idx_close(im);
  idx_close(lb);
  free(pix);
  free(lab);
  free(x);
  free(y);
  return rc;
}

int tsr_dataset_load_idx(tsr_dataset_t *ds, const char *images_path, const char *labels_path,
                         tsr_errbuf_t *err) {
  if (!ds || !images_path || !labels_path)
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr_dataset_load_idx: dataset and paths must not be NULL");
  idx_file_t im = {.path = images_path}, lb = {.path = labels_path};
  return idx_load(ds, &im, &lb, err);
}

int tsr__dataset_load_idx_mem(tsr_dataset_t *ds, const void *images, size_t images_len,
                              const void *labels, size_t labels_len, tsr_errbuf_t *err) {
  if (!ds || (!images && images_len) || (!labels && labels_len))
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr__dataset_load_idx_mem: dataset and buffers must not be NULL");
  idx_file_t im = {.path = "<images>", .in_memory = true, .mem = images, .mem_len = images_len},
             lb = {.path = "<labels>", .in_memory = true, .mem = labels, .mem_len = labels_len};
  return idx_load(ds, &im, &lb, err);
}
