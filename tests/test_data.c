/* Dataset loader tests: every malformed IDX or CSV file a user is likely to
 * meet (cut-short downloads, swapped or mismatched files, ragged or dirty
 * CSV) must be rejected with a non-zero code, a message naming the file, and
 * a zeroed dataset; valid files must round-trip exactly. Files are written
 * into a fresh folder under /tmp for each test. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <malloc.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data/csv.h"
#include "data/idx.h"
#include "tessera/data.h"

/* Under AddressSanitizer (-Dsanitize=true) malloc is the sanitizer's, which
 * glibc's statistics do not see: heap_in_use asks the sanitizer instead. */
#if defined(__SANITIZE_ADDRESS__)
#define TSR_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TSR_TEST_ASAN 1
#endif
#endif
#ifdef TSR_TEST_ASAN
/* From <sanitizer/allocator_interface.h>, which GCC does not install. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

static char tmp[64];

static void setup(void) {
  strcpy(tmp, "/tmp/tsr_test_data_XXXXXX");
  cr_assert_not_null(mkdtemp(tmp), "mkdtemp failed");
}

static void teardown(void) {
  DIR *d = opendir(tmp);
  if (!d) return;
  struct dirent *e;
  char p[512];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", tmp, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(tmp);
}

TestSuite(data, .init = setup, .fini = teardown);

/* Returns tmp/name in one of a few rotating buffers, so a test can hold
 * several paths at once. */
static const char *path_of(const char *name) {
  static char bufs[8][512];
  static int next;
  char *p = bufs[next++ % 8];
  snprintf(p, 512, "%s/%s", tmp, name);
  return p;
}

static const char *write_file(const char *name, const void *data, size_t len) {
  const char *p = path_of(name);
  FILE *f = fopen(p, "wb");
  cr_assert_not_null(f, "cannot create %s", p);
  if (len) cr_assert_eq(fwrite(data, 1, len, f), len);
  fclose(f);
  return p;
}

static const char *write_text(const char *name, const char *text) {
  return write_file(name, text, strlen(text));
}

static const char *write_gz(const char *name, const void *data, size_t len) {
  const char *p = path_of(name);
  gzFile g = gzopen(p, "wb");
  cr_assert_not_null(g, "cannot create %s", p);
  if (len) cr_assert_eq(gzwrite(g, data, (unsigned)len), (int)len);
  cr_assert_eq(gzclose(g), Z_OK);
  return p;
}

static void put_be32(unsigned char *b, uint32_t v) {
  b[0] = (unsigned char)(v >> 24);
  b[1] = (unsigned char)(v >> 16);
  b[2] = (unsigned char)(v >> 8);
  b[3] = (unsigned char)v;
}

/* Builds an IDX images file of count images of rows x cols with header dims
 * that may lie: data_bytes says how many pixel bytes actually follow. */
static unsigned char *idx_images(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols,
                                 size_t data_bytes, size_t *len) {
  *len = 16 + data_bytes;
  unsigned char *b = malloc(*len);
  cr_assert_not_null(b);
  put_be32(b, magic);
  put_be32(b + 4, count);
  put_be32(b + 8, rows);
  put_be32(b + 12, cols);
  for (size_t i = 0; i < data_bytes; i++)
    b[16 + i] = (unsigned char)(i * 37 + 11);
  return b;
}

static unsigned char *idx_labels(uint32_t magic, uint32_t count, size_t data_bytes, size_t *len) {
  *len = 8 + data_bytes;
  unsigned char *b = malloc(*len);
  cr_assert_not_null(b);
  put_be32(b, magic);
  put_be32(b + 4, count);
  for (size_t i = 0; i < data_bytes; i++)
    b[8 + i] = (unsigned char)((i * 3) % 7);
  return b;
}

/* The valid set used throughout: 3 images of 2x3, labels 0, 3, 6. */
enum { N = 3, ROWS = 2, COLS = 3 };

static const char *good_images(const char *name, int gz) {
  size_t len;
  unsigned char *b = idx_images(0x803, N, ROWS, COLS, N * ROWS * COLS, &len);
  const char *p = gz ? write_gz(name, b, len) : write_file(name, b, len);
  free(b);
  return p;
}

static const char *good_labels(const char *name, int gz) {
  size_t len;
  unsigned char *b = idx_labels(0x801, N, N, &len);
  const char *p = gz ? write_gz(name, b, len) : write_file(name, b, len);
  free(b);
  return p;
}

static void assert_zeroed(const tsr_dataset_t *ds) {
  cr_assert(ds->n == 0 && ds->features == 0 && ds->classes == 0 && ds->x == NULL && ds->y == NULL &&
                ds->channels == 0 && ds->height == 0 && ds->width == 0,
            "dataset not left zeroed after an error");
}

/* Asserts that the message names the file (by its base name, as a user
 * would search for it) and, when given, contains a word saying what is wrong. */
static void assert_msg(const tsr_errbuf_t *err, const char *file, const char *what) {
  const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
  cr_assert(strstr(err->msg, base), "message does not name %s: %s", base, err->msg);
  if (what) cr_assert(strstr(err->msg, what), "message lacks '%s': %s", what, err->msg);
}

static void expect_idx_fail(const char *images, const char *labels, const char *bad_file,
                            const char *what) {
  tsr_dataset_t ds;
  memset(&ds, 0xab, sizeof ds); /* garbage in: the loader must zero it */
  tsr_errbuf_t err = {{0}};
  int rc = tsr_dataset_load_idx(&ds, images, labels, &err);
  cr_assert_lt(rc, 0, "accepted a bad file (%s)", bad_file);
  assert_msg(&err, bad_file, what);
  assert_zeroed(&ds);
}

static void expect_csv_fail(const char *path, const char *what) {
  tsr_dataset_t ds;
  memset(&ds, 0xab, sizeof ds);
  tsr_errbuf_t err = {{0}};
  int rc = tsr_dataset_load_csv(&ds, path, &err);
  cr_assert_lt(rc, 0, "accepted a bad file (%s)", path);
  assert_msg(&err, path, what);
  assert_zeroed(&ds);
}

/* ---- IDX: valid files ---- */

static void check_good_set(const tsr_dataset_t *ds) {
  cr_assert_eq(ds->n, N);
  cr_assert_eq(ds->features, ROWS * COLS);
  cr_assert_eq(ds->classes, 7); /* labels (i * 3) % 7: 0, 3, 6 */
  cr_assert_eq(ds->channels, 1);
  cr_assert_eq(ds->height, ROWS);
  cr_assert_eq(ds->width, COLS);
  for (int i = 0; i < N * ROWS * COLS; i++) {
    float want = (float)(unsigned char)(i * 37 + 11) / 255.0f;
    /* Same arithmetic as the loader, so the tolerance is only a guard. */
    cr_assert_float_eq(ds->x[i], want, 1e-7f, "pixel %d: %g, want %g", i, ds->x[i], want);
    cr_assert(ds->x[i] >= 0.0f && ds->x[i] <= 1.0f);
  }
  for (int i = 0; i < N; i++)
    cr_assert_eq(ds->y[i], (float)((i * 3) % 7), "label %d", i);
}

Test(data, idx_plain_round_trip) {
  const char *im = good_images("im", 0), *lb = good_labels("lb", 0);
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_idx(&ds, im, lb, &err), 0, "%s", err.msg);
  check_good_set(&ds);
  tsr_dataset_fini(&ds);
  assert_zeroed(&ds);
}

Test(data, idx_gzip_round_trip) {
  const char *im = good_images("im.gz", 1), *lb = good_labels("lb.gz", 1);
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_idx(&ds, im, lb, &err), 0, "%s", err.msg);
  check_good_set(&ds);
  tsr_dataset_fini(&ds);
}

Test(data, idx_label_255_gives_256_classes) {
  const char *im = good_images("im", 0);
  unsigned char lab[8 + N] = {0, 0, 8, 1, 0, 0, 0, N, 255, 0, 254};
  const char *lb = write_file("lb", lab, sizeof lab);
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_idx(&ds, im, lb, &err), 0, "%s", err.msg);
  cr_assert_eq(ds.classes, 256);
  cr_assert_eq(ds.y[0], 255.0f);
  tsr_dataset_fini(&ds);
}

/* A stray label makes classes that have no sample (255 above: 253 empty); counting says so, and
 * setting the classes refuses a label at or above them, naming the sample and the label. */
Test(data, class_counts_and_set_classes) {
  const char *im = good_images("im", 0);
  unsigned char lab[8 + N] = {0, 0, 8, 1, 0, 0, 0, N, 255, 0, 254};
  const char *lb = write_file("lb", lab, sizeof lab);
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_idx(&ds, im, lb, &err), 0, "%s", err.msg);
  int64_t counts[256];
  tsr_dataset_class_counts(&ds, counts);
  int empty = 0;
  for (int c = 0; c < 256; c++)
    empty += counts[c] == 0;
  cr_assert(counts[255] == 1 && counts[254] == 1 && counts[0] == N - 2 && empty == 253);
  cr_assert_eq(tsr_dataset_set_classes(&ds, 10, "the set", &err), TSR_EFORMAT);
  cr_assert_str_eq(err.msg, "the set: sample 1 has label 255, but there are 10 classes (labels 0 "
                            "to 9)");
  cr_assert_eq(ds.classes, 256, "a refused count leaves the classes as they were");
  cr_assert_eq(tsr_dataset_set_classes(&ds, 300, "the set", &err), 0);
  cr_assert_eq(ds.classes, 300);
  tsr_dataset_fini(&ds);
}

/* ---- IDX: bad files ---- */

Test(data, idx_truncated_images) {
  size_t len;
  unsigned char *b = idx_images(0x803, N, ROWS, COLS, N * ROWS * COLS - 5, &len);
  const char *im = write_file("train-images-idx3-ubyte", b, len);
  free(b);
  expect_idx_fail(im, good_labels("lb", 0), "train-images-idx3-ubyte", "truncated");
}

Test(data, idx_truncated_images_big_claim) {
  /* A header claiming 60000 28x28 images over 1000 bytes: rejected without
   * allocating 47 MB (valgrind shows it) and with both sizes in the message. */
  size_t len;
  unsigned char *b = idx_images(0x803, 60000, 28, 28, 1000, &len);
  const char *im = write_gz("train-images-idx3-ubyte.gz", b, len);
  free(b);
  size_t llen;
  unsigned char *l = idx_labels(0x801, 60000, 60000, &llen);
  const char *lb = write_file("lb", l, llen);
  free(l);
  expect_idx_fail(im, lb, "train-images-idx3-ubyte.gz", "47040000 bytes");
  tsr_errbuf_t err = {{0}};
  tsr_dataset_t ds;
  tsr_dataset_load_idx(&ds, im, lb, &err);
  cr_assert(strstr(err.msg, "1000 bytes"), "%s", err.msg);
}

Test(data, idx_truncated_labels) {
  size_t len;
  unsigned char *b = idx_labels(0x801, N, N - 1, &len);
  const char *lb = write_file("train-labels-idx1-ubyte", b, len);
  free(b);
  expect_idx_fail(good_images("im", 0), lb, "train-labels-idx1-ubyte", "truncated");
}

Test(data, idx_truncated_header) {
  unsigned char b[10] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0};
  const char *im = write_file("short-images", b, sizeof b);
  expect_idx_fail(im, good_labels("lb", 0), "short-images", "truncated");
}

Test(data, idx_wrong_magic) {
  size_t len;
  unsigned char *b = idx_images(0x00000d03, N, ROWS, COLS, N * ROWS * COLS, &len);
  const char *im = write_file("float-images", b, len);
  free(b);
  expect_idx_fail(im, good_labels("lb", 0), "float-images", "magic");
  b = idx_images(0x12345678, N, ROWS, COLS, N * ROWS * COLS, &len);
  im = write_file("garbage-images", b, len);
  free(b);
  expect_idx_fail(im, good_labels("lb", 0), "garbage-images", "magic");
}

Test(data, idx_swapped_paths) {
  const char *im = good_images("im", 0), *lb = good_labels("labels-file", 0);
  expect_idx_fail(lb, im, "labels-file", "swapped");
}

Test(data, idx_count_mismatch) {
  size_t len;
  unsigned char *b = idx_labels(0x801, N + 1, N + 1, &len);
  const char *lb = write_file("more-labels", b, len);
  free(b);
  const char *im = good_images("the-images", 0);
  expect_idx_fail(im, lb, "more-labels", "labels");
  expect_idx_fail(im, lb, "the-images", NULL);
}

Test(data, idx_absurd_dimensions) {
  static const uint32_t dims[][3] = {{0, 28, 28},
                                     {10, 0, 28},
                                     {10, 28, 0},
                                     {10, 5000, 28},
                                     {10, 28, 4097},
                                     {200000000u, 1, 1},
                                     {0xffffffffu, 0xffffffffu, 0xffffffffu}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    size_t len;
    unsigned char *b = idx_images(0x803, dims[i][0], dims[i][1], dims[i][2], 64, &len);
    const char *im = write_file("absurd-images", b, len);
    free(b);
    expect_idx_fail(im, good_labels("lb", 0), "absurd-images", "dimensions");
  }
  size_t len;
  unsigned char *b = idx_labels(0x801, 0, 0, &len);
  const char *lb = write_file("zero-labels", b, len);
  free(b);
  expect_idx_fail(good_images("im", 0), lb, "zero-labels", NULL);
}

Test(data, idx_empty_file) {
  const char *im = write_file("empty-images", "", 0);
  expect_idx_fail(im, good_labels("lb", 0), "empty-images", "empty");
  const char *lb = write_file("empty-labels", "", 0);
  expect_idx_fail(good_images("im", 0), lb, "empty-labels", "empty");
  const char *gz = write_gz("empty-images.gz", "", 0);
  expect_idx_fail(gz, good_labels("lb", 0), "empty-images.gz", "empty");
}

Test(data, idx_missing_file) {
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  const char *missing = path_of("no-such-images-idx3-ubyte");
  cr_assert_eq(tsr_dataset_load_idx(&ds, missing, good_labels("lb", 0), &err), TSR_EIO);
  assert_msg(&err, missing, NULL);
  assert_zeroed(&ds);
  expect_idx_fail(good_images("im", 0), path_of("no-such-labels"), "no-such-labels", NULL);
  expect_idx_fail(tmp, good_labels("lb", 0), tmp, "folder");
}

Test(data, idx_gzip_of_truncated_file) {
  size_t len;
  unsigned char *b = idx_images(0x803, N, ROWS, COLS, 4, &len);
  const char *im = write_gz("cut-images.gz", b, len);
  free(b);
  expect_idx_fail(im, good_labels("lb", 0), "cut-images.gz", "truncated");
}

Test(data, idx_gzip_stream_cut_short) {
  /* Incompressible-looking data so the compressed stream is long enough to
   * cut in the middle of the deflate data, not only the trailer. */
  enum { C = 20, R = 28 };
  size_t len;
  unsigned char *b = idx_images(0x803, C, R, R, C * R * R, &len);
  for (size_t i = 16; i < len; i++)
    b[i] = (unsigned char)(rand() & 0xff);
  write_gz("whole.gz", b, len);
  free(b);
  FILE *f = fopen(path_of("whole.gz"), "rb");
  cr_assert_not_null(f);
  unsigned char gz[32768];
  size_t glen = fread(gz, 1, sizeof gz, f);
  fclose(f);
  cr_assert_gt(glen, 2000u);
  const char *im = write_file("cut-stream-images.gz", gz, glen / 2);
  size_t llen;
  unsigned char *l = idx_labels(0x801, C, C, &llen);
  const char *lb = write_file("lb", l, llen);
  free(l);
  expect_idx_fail(im, lb, "cut-stream-images.gz", NULL);
  /* Only the 8-byte gzip trailer missing: the data is complete but the
   * stream is not, which still means a damaged download. */
  im = write_file("no-trailer-images.gz", gz, glen - 8);
  expect_idx_fail(im, lb, "no-trailer-images.gz", NULL);
}

Test(data, idx_gzip_corrupt) {
  const char *im = good_images("good.gz", 1);
  FILE *f = fopen(im, "rb");
  unsigned char gz[256];
  size_t glen = fread(gz, 1, sizeof gz, f);
  fclose(f);
  for (size_t i = 12; i < glen - 8; i++)
    gz[i] ^= 0x5a;
  im = write_file("corrupt-images.gz", gz, glen);
  expect_idx_fail(im, good_labels("lb", 0), "corrupt-images.gz", NULL);
}

Test(data, idx_trailing_bytes) {
  size_t len;
  unsigned char *b = idx_images(0x803, N, ROWS, COLS, N * ROWS * COLS + 3, &len);
  const char *im = write_file("long-images", b, len);
  const char *imz = write_gz("long-images.gz", b, len);
  free(b);
  expect_idx_fail(im, good_labels("lb", 0), "long-images", "trailing");
  expect_idx_fail(imz, good_labels("lb", 0), "long-images.gz", "3 more bytes");
  b = idx_labels(0x801, N, N + 1, &len);
  const char *lb = write_file("long-labels", b, len);
  free(b);
  expect_idx_fail(good_images("im", 0), lb, "long-labels", "trailing");
}

Test(data, idx_null_arguments) {
  tsr_errbuf_t err = {{0}};
  tsr_dataset_t ds;
  cr_assert_eq(tsr_dataset_load_idx(&ds, NULL, "x", &err), TSR_EINVAL);
  cr_assert_eq(tsr_dataset_load_idx(NULL, "x", "y", NULL), TSR_EINVAL);
}

/* ---- CSV ---- */

Test(data, csv_with_header_loads) {
  const char *p = write_text("train.csv", "label,a,b,c\n"
                                          "1,0.5,-2,3e2\r\n"
                                          "0, 7 ,8,9\n"
                                          "\n"
                                          "4,1,1,1\n");
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_csv(&ds, p, &err), 0, "%s", err.msg);
  cr_assert_eq(ds.n, 3);
  cr_assert_eq(ds.features, 3);
  cr_assert_eq(ds.classes, 5);
  cr_assert(ds.channels == 1 && ds.height == 1 && ds.width == 3);
  static const float x[] = {0.5f, -2, 300, 7, 8, 9, 1, 1, 1}, y[] = {1, 0, 4};
  /* Features are stored as read, not scaled. */
  for (int i = 0; i < 9; i++)
    cr_assert_float_eq(ds.x[i], x[i], 0.0f, "x[%d] = %g", i, ds.x[i]);
  for (int i = 0; i < 3; i++)
    cr_assert_eq(ds.y[i], y[i]);
  tsr_dataset_fini(&ds);
}

Test(data, csv_without_header_loads) {
  const char *p = write_text("plain.csv", "2,1.25\n0,-1");
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_csv(&ds, p, &err), 0, "%s", err.msg);
  cr_assert_eq(ds.n, 2);
  cr_assert_eq(ds.features, 1);
  cr_assert_eq(ds.classes, 3);
  cr_assert_float_eq(ds.x[1], -1.0f, 0.0f);
  tsr_dataset_fini(&ds);
}

Test(data, csv_ragged_rows) {
  const char *p = write_text("ragged.csv", "label,a,b\n1,2,3\n0,4\n");
  expect_csv_fail(p, "line 3");
  p = write_text("ragged2.csv", "1,2,3\n0,4,5,6\n");
  expect_csv_fail(p, "line 2");
}

Test(data, csv_non_numeric_feature) {
  const char *p = write_text("dirty.csv", "1,2,3\n0,4,abc\n");
  expect_csv_fail(p, "line 2, column 3");
  p = write_text("emptyfield.csv", "1,,3\n");
  expect_csv_fail(p, "column 2");
  p = write_text("nan.csv", "1,nan,3\n");
  expect_csv_fail(p, "finite");
  p = write_text("inf.csv", "1,2,-inf\n");
  expect_csv_fail(p, "finite");
  p = write_text("huge.csv", "1,1e300,1\n");
  expect_csv_fail(p, "float range");
  p = write_text("suffix.csv", "1,2.5x,1\n");
  expect_csv_fail(p, "2.5x");
}

Test(data, csv_bad_labels) {
  const char *p = write_text("negative.csv", "1,2,3\n-1,4,5\n");
  expect_csv_fail(p, "negative");
  p = write_text("fraction.csv", "1.5,2,3\n");
  expect_csv_fail(p, "integer");
  p = write_text("label-text.csv", "a,b\n1,2\nx,3\n");
  expect_csv_fail(p, "line 3, column 1");
}

Test(data, csv_empty) {
  expect_csv_fail(write_text("empty.csv", ""), "empty");
  expect_csv_fail(write_text("blank.csv", "\n  \n"), "empty");
  expect_csv_fail(write_text("header-only.csv", "label,a,b\n"), "header");
  expect_csv_fail(write_text("one-column.csv", "1\n2\n"), "column");
  expect_csv_fail(write_file("nul.csv",
                             "1,2\n3,\0"
                             "4\n",
                             8),
                  "NUL");
  expect_csv_fail(path_of("missing.csv"), NULL);
}

/* ---- from memory: the parsers the fuzzers drive (tests/fuzz/) are the file loaders' ---- */

static void assert_same_set(const tsr_dataset_t *a, const tsr_dataset_t *b) {
  cr_assert(a->n == b->n && a->features == b->features && a->classes == b->classes &&
            a->channels == b->channels && a->height == b->height && a->width == b->width);
  cr_assert_eq(memcmp(a->x, b->x, (size_t)a->n * (size_t)a->features * sizeof(float)), 0);
  cr_assert_eq(memcmp(a->y, b->y, (size_t)a->n * sizeof(float)), 0);
}

Test(data, idx_from_memory_as_from_files) {
  size_t ilen, llen;
  unsigned char *im = idx_images(0x803, N, ROWS, COLS, N * ROWS * COLS, &ilen);
  unsigned char *lb = idx_labels(0x801, N, N, &llen);
  const char *ip = write_file("mem-images", im, ilen), *lp = write_file("mem-labels", lb, llen);
  tsr_dataset_t f, m;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_idx(&f, ip, lp, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr__dataset_load_idx_mem(&m, im, ilen, lb, llen, &err), 0, "%s", err.msg);
  assert_same_set(&f, &m);
  tsr_dataset_fini(&f);
  tsr_dataset_fini(&m);

  /* Bad buffers get the file loader's messages, naming the buffer. */
  struct {
    size_t ilen, llen;
    bool swap;
    const char *name, *what;
  } bad[] = {{ilen, llen - 1, false, "<labels>", "truncated"},
             {ilen, llen, true, "<images>", "swapped"},
             {0, llen, false, "<images>", "empty"},
             {ilen, 0, false, "<labels>", "empty"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    memset(&m, 0xab, sizeof m);
    int rc = bad[i].swap ? tsr__dataset_load_idx_mem(&m, lb, llen, im, ilen, &err)
                         : tsr__dataset_load_idx_mem(&m, im, bad[i].ilen, lb, bad[i].llen, &err);
    cr_assert_eq(rc, TSR_EFORMAT, "case %zu: %s", i, err.msg);
    assert_msg(&err, bad[i].name, bad[i].what);
    assert_zeroed(&m);
  }
  free(im);
  free(lb);
}

Test(data, csv_from_memory_as_from_files) {
  /* No final newline: the text ends where the buffer does. */
  const char *text = "label,a,b\n0,1,2\r\n\n2, 0.5 ,-3e2";
  tsr_dataset_t f, m;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_csv(&f, write_text("mem.csv", text), &err), 0, "%s", err.msg);
  cr_assert_eq(tsr__dataset_load_csv_mem(&m, text, strlen(text), "text.csv", &err), 0, "%s",
               err.msg);
  assert_same_set(&f, &m);
  tsr_dataset_fini(&f);
  tsr_dataset_fini(&m);

  memset(&m, 0xab, sizeof m);
  cr_assert_eq(tsr__dataset_load_csv_mem(&m, "", 0, "text.csv", &err), TSR_EFORMAT);
  assert_msg(&err, "text.csv", "empty");
  assert_zeroed(&m);
  cr_assert_eq(tsr__dataset_load_csv_mem(&m, "0,1\n1,x", 7, "text.csv", &err), TSR_EFORMAT);
  assert_msg(&err, "text.csv", "line 2, column 2");
  cr_assert_eq(tsr__dataset_load_csv_mem(&m, "0,1\n1,\0", 7, "text.csv", &err), TSR_EFORMAT);
  assert_msg(&err, "text.csv", "NUL");
}

/* ---- folders ---- */

Test(data, dir_csv) {
  write_text("train.csv", "label,f1,f2\n0,1,2\n2,3,4\n1,5,6\n");
  write_text("test.csv", "label,f1,f2\n1,1,1\n");
  tsr_dataset_t tr, te;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0, "%s", err.msg);
  cr_assert_eq(tr.n, 3);
  cr_assert_eq(te.n, 1);
  /* The test set lacks label 2 but must agree with training on classes. */
  cr_assert_eq(te.classes, 3);
  tsr_dataset_fini(&tr);
  tsr_dataset_fini(&te);
}

Test(data, dir_idx_mixed_gzip) {
  good_images("train-images-idx3-ubyte.gz", 1);
  good_labels("train-labels-idx1-ubyte", 0);
  good_images("t10k-images-idx3-ubyte", 0);
  good_labels("t10k-labels-idx1-ubyte.gz", 1);
  tsr_dataset_t tr, te;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0, "%s", err.msg);
  check_good_set(&tr);
  check_good_set(&te);
  tsr_dataset_fini(&tr);
  tsr_dataset_fini(&te);
}

static void expect_dir_fail(const char *needle, const char *what) {
  tsr_dataset_t tr, te;
  memset(&tr, 0xab, sizeof tr);
  memset(&te, 0xab, sizeof te);
  tsr_errbuf_t err = {{0}};
  cr_assert_lt(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0);
  assert_msg(&err, needle, what);
  assert_zeroed(&tr);
  assert_zeroed(&te);
}

Test(data, dir_empty_folder) {
  expect_dir_fail(tmp, "train-images-idx3-ubyte");
  tsr_errbuf_t err = {{0}};
  tsr_dataset_t tr, te;
  tsr_dataset_load_dir(&tr, &te, tmp, &err);
  cr_assert(strstr(err.msg, "train.csv") && strstr(err.msg, "t10k-labels-idx1-ubyte"), "%s",
            err.msg);
}

Test(data, dir_missing_folder) {
  tsr_dataset_t tr, te;
  tsr_errbuf_t err = {{0}};
  cr_assert_lt(tsr_dataset_load_dir(&tr, &te, "/nonexistent/tsr-data", &err), 0);
  cr_assert(strstr(err.msg, "/nonexistent/tsr-data"), "%s", err.msg);
}

Test(data, dir_incomplete_idx) {
  good_images("train-images-idx3-ubyte", 0);
  good_labels("train-labels-idx1-ubyte", 0);
  good_images("t10k-images-idx3-ubyte", 0);
  expect_dir_fail("t10k-labels-idx1-ubyte", "missing");
}

/* test.csv is optional (issue 21): the test set is then empty, with the training set's shape;
 * a test.csv without a train.csv is still refused. */
Test(data, dir_only_train_csv) {
  write_text("train.csv", "0,1,2\n2,3,4\n");
  tsr_dataset_t tr, te;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0, "%s", err.msg);
  cr_expect_eq(tr.n, 2);
  cr_expect_eq(te.n, 0);
  cr_expect_eq(te.features, 2);
  cr_expect_eq(te.classes, 3);
  cr_expect_null(te.x);
  tsr_dataset_standardize(&tr, &te); /* an empty test set is fine there */
  tsr_dataset_fini(&tr), tsr_dataset_fini(&te);
}

Test(data, dir_only_test_csv) {
  write_text("test.csv", "0,1\n");
  expect_dir_fail("train.csv", "test.csv is optional");
}

Test(data, dir_feature_mismatch) {
  write_text("train.csv", "0,1,2\n1,3,4\n");
  write_text("test.csv", "0,1,2,3\n");
  expect_dir_fail("test.csv", "features");
}

Test(data, dir_test_has_more_classes) {
  write_text("train.csv", "0,1,2\n1,3,4\n");
  write_text("test.csv", "5,1,2\n");
  expect_dir_fail("test.csv", "labels up to 5");
}

/* Heap bytes in use: glibc's allocated arena chunks plus its mmapped blocks
 * (large allocations, such as a dataset's features, are often mmapped, and
 * uordblks alone would miss them), or what the sanitizer's allocator holds. */
static long long heap_in_use(void) {
#ifdef TSR_TEST_ASAN
  return (long long)__sanitizer_get_current_allocated_bytes();
#else
  struct mallinfo2 mi = mallinfo2();
  return (long long)mi.uordblks + (long long)mi.hblkhd;
#endif
}

Test(data, dir_bad_test_file_frees_train) {
  /* Train loads, test fails: train must be freed and zeroed. The training set
   * is 2000 rows of 1000 features, 8 MB of floats: the heap in use after the
   * failing load may exceed what it was before by much less than that (1/16
   * of it allows for what glibc or Criterion keep), while a leaked training
   * set would add all of it. */
  enum { TRAIN_ROWS = 2000, FEATURES = 1000 };
  const long long train_bytes = (long long)TRAIN_ROWS * FEATURES * (long long)sizeof(float);
  size_t line_len = 2 + 2 * FEATURES, len = (size_t)TRAIN_ROWS * line_len;
  char *text = malloc(len);
  cr_assert_not_null(text);
  for (int i = 0; i < TRAIN_ROWS; i++) {
    char *line = text + (size_t)i * line_len;
    line[0] = (char)('0' + i % 3);
    for (int j = 0; j < FEATURES; j++)
      line[1 + 2 * j] = ',', line[2 + 2 * j] = (char)('0' + (i + j) % 10);
    line[line_len - 1] = '\n';
  }
  const char *train = write_file("train.csv", text, len);
  free(text);
  write_text("test.csv", "0,1,x\n");

  /* The measurement sees a loaded training set (and the first load leaves
   * behind whatever glibc keeps for good, such as locale data). */
  tsr_dataset_t probe;
  tsr_errbuf_t err = {{0}};
  long long before = heap_in_use();
  cr_assert_eq(tsr_dataset_load_csv(&probe, train, &err), 0, "%s", err.msg);
  long long held = heap_in_use() - before;
  cr_assert_geq(held, train_bytes, "a loaded training set of %lld bytes shows as %lld", train_bytes,
                held);
  tsr_dataset_fini(&probe);

  before = heap_in_use();
  expect_dir_fail("test.csv", "line 1");
  long long grown = heap_in_use() - before;
  cr_assert_lt(grown, train_bytes / 16,
               "the heap grew by %lld bytes over a failed load whose training set (%lld bytes) "
               "should have been freed",
               grown, train_bytes);
}

/* ---- dataset operations ---- */

static void make_csv_set(tsr_dataset_t *ds) {
  const char *p = write_text("s.csv", "0,1,2\n1,3,4\n2,5,6\n1,7,8\n");
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_csv(ds, p, &err), 0, "%s", err.msg);
}

Test(data, truncate_keeps_prefix) {
  tsr_dataset_t ds;
  make_csv_set(&ds);
  cr_assert_eq(tsr_dataset_truncate(&ds, 5), TSR_EINVAL);
  cr_assert_eq(tsr_dataset_truncate(&ds, -1), TSR_EINVAL);
  cr_assert_eq(tsr_dataset_truncate(&ds, 2), 0);
  cr_assert_eq(ds.n, 2);
  cr_assert_eq(ds.classes, 3, "classes must not shrink with the subset");
  cr_assert_eq(ds.x[3], 4.0f);
  cr_assert_eq(ds.y[1], 1.0f);
  cr_assert_eq(tsr_dataset_truncate(&ds, 0), 0);
  tsr_dataset_fini(&ds);
}

Test(data, stats_and_normalize) {
  tsr_dataset_t ds;
  make_csv_set(&ds);
  float mean, std;
  tsr_dataset_stats(&ds, &mean, &std);
  /* Features 1..8: mean 4.5, population variance (64 - 1) / 12 = 5.25. */
  cr_assert_float_eq(mean, 4.5f, 1e-6f);
  cr_assert_float_eq(std, sqrtf(5.25f), 1e-6f);
  tsr_dataset_normalize(&ds, mean, std);
  float m2, s2;
  tsr_dataset_stats(&ds, &m2, &s2);
  cr_assert_float_eq(m2, 0.0f, 1e-6f);
  cr_assert_float_eq(s2, 1.0f, 1e-6f);
  cr_assert_float_eq(ds.x[0], (1.0f - 4.5f) / sqrtf(5.25f), 1e-6f);
  tsr_dataset_fini(&ds);
}

/* The test set goes through the training set's statistics, not its own (the
 * test set here has mean 20, the training set 4.5); test may be NULL or empty. */
Test(data, standardize_uses_the_training_statistics) {
  tsr_dataset_t tr, te, want;
  make_csv_set(&tr);
  const char *p = write_text("t.csv", "0,10,20\n1,30,20\n");
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_csv(&te, p, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_dataset_load_csv(&want, p, &err), 0, "%s", err.msg);
  float mean, std;
  tsr_dataset_stats(&tr, &mean, &std);
  tsr_dataset_normalize(&want, mean, std);
  tsr_dataset_standardize(&tr, &te);
  float m2, s2;
  tsr_dataset_stats(&tr, &m2, &s2);
  cr_assert_float_eq(m2, 0.0f, 1e-6f);
  cr_assert_float_eq(s2, 1.0f, 1e-6f);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(te.x[i], want.x[i], "test feature %d: %g, want %g", i, te.x[i], want.x[i]);
  cr_assert_float_eq(te.x[0], (10.0f - 4.5f) / sqrtf(5.25f), 1e-5f);
  tsr_dataset_fini(&tr);
  make_csv_set(&tr);
  tsr_dataset_standardize(&tr, NULL);
  cr_assert_float_eq(tr.x[0], (1.0f - 4.5f) / sqrtf(5.25f), 1e-6f);
  tsr_dataset_fini(&tr);
  make_csv_set(&tr);
  cr_assert_eq(tsr_dataset_truncate(&te, 0), 0);
  tsr_dataset_standardize(&tr, &te);
  cr_assert_float_eq(tr.x[0], (1.0f - 4.5f) / sqrtf(5.25f), 1e-6f);
  tsr_dataset_fini(&tr), tsr_dataset_fini(&te), tsr_dataset_fini(&want);
}

Test(data, normalize_constant_features_stays_finite) {
  const char *p = write_text("const.csv", "0,3,3\n1,3,3\n");
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_csv(&ds, p, &err), 0, "%s", err.msg);
  float mean, std;
  tsr_dataset_stats(&ds, &mean, &std);
  cr_assert_eq(std, 0.0f);
  tsr_dataset_normalize(&ds, mean, std);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(ds.x[i], 0.0f);
  tsr_dataset_fini(&ds);
}

/* Per-column standardization (--standardize column): each column by its own mean and std, a
 * constant column only centred, the test set through the training columns' statistics; auto is
 * column for CSV; a test set of other columns is refused by name. */
Test(data, standardize_per_column) {
  const char *p = write_text("cols.csv", "0,1,1000,5\n1,3,3000,5\n0,5,8000,5\n");
  const char *q = write_text("cols_test.csv", "1,3,1000,6\n");
  tsr_dataset_t tr, te;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_csv(&tr, p, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_dataset_load_csv(&te, q, &err), 0, "%s", err.msg);
  tsr_standardization_t z;
  cr_assert_eq(tsr_standardization_fit(&z, TSR_STANDARDIZE_AUTO, &tr, &err), 0, "%s", err.msg);
  cr_assert_eq(z.kind, TSR_STANDARDIZE_COLUMN);
  cr_assert_eq(z.n, 3);
  /* Column 0: 1, 3, 5 (mean 3, variance 8/3); column 1: mean 4000, variance 26e6/3; column 2. */
  cr_assert_float_eq(z.mean[0], 3.0f, 1e-6f);
  cr_assert_float_eq(z.std[0], sqrtf(8.0f / 3.0f), 1e-6f);
  cr_assert_float_eq(z.mean[1], 4000.0f, 1e-3f);
  cr_assert_float_eq(z.std[1], (float)sqrt(26e6 / 3.0), 1e-2f);
  cr_assert_eq(z.mean[2], 5.0f);
  cr_assert_eq(z.std[2], 0.0f);
  cr_assert_eq(tsr_standardization_apply(&z, &tr, "the training set", &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_standardization_apply(&z, &te, "the test set", &err), 0, "%s", err.msg);
  for (int j = 0; j < 2; j++) { /* each column now has mean 0 and std 1 */
    double m = 0, v = 0;
    for (int i = 0; i < 3; i++)
      m += tr.x[i * 3 + j] / 3.0;
    for (int i = 0; i < 3; i++)
      v += (tr.x[i * 3 + j] - m) * (tr.x[i * 3 + j] - m) / 3.0;
    cr_assert(fabs(m) < 1e-6 && fabs(v - 1) < 1e-5, "column %d: mean %g, variance %g", j, m, v);
  }
  cr_assert_eq(tr.x[2], 0.0f);
  cr_assert_float_eq(te.x[0], 0.0f, 1e-6f);
  cr_assert_float_eq(te.x[1], -3000.0f / (float)sqrt(26e6 / 3.0), 1e-5f);
  cr_assert_eq(te.x[2], 1.0f);
  tsr_dataset_t other = {.n = 1, .features = 2, .x = (float[]){1, 2}};
  cr_assert_eq(tsr_standardization_apply(&z, &other, "the test set", &err), TSR_ESHAPE);
  cr_assert(strstr(err.msg, "the test set has 2 features, but the standardization was fitted to 3"),
            "%s", err.msg);
  tsr_standardization_fini(&z);
  /* scalar is tsr_dataset_stats; none changes nothing. */
  tsr_dataset_fini(&tr);
  cr_assert_eq(tsr_dataset_load_csv(&tr, p, &err), 0, "%s", err.msg);
  float mean, std;
  tsr_dataset_stats(&tr, &mean, &std);
  cr_assert_eq(tsr_standardization_fit(&z, TSR_STANDARDIZE_SCALAR, &tr, &err), 0);
  cr_assert(z.n == 1 && z.mean[0] == mean && z.std[0] == std);
  tsr_standardization_fini(&z);
  cr_assert_eq(tsr_standardization_fit(&z, TSR_STANDARDIZE_NONE, &tr, &err), 0);
  cr_assert_eq(tsr_standardization_apply(&z, &tr, "the training set", &err), 0);
  cr_assert(z.n == 0 && tr.x[1] == 1000.0f);
  tsr_standardization_fini(&z);
  tsr_standardize_t k;
  cr_assert_eq(tsr_standardize_parse("column", &k), 0);
  cr_assert_eq(k, TSR_STANDARDIZE_COLUMN);
  cr_assert_eq(tsr_standardize_parse("mean", &k), TSR_EINVAL);
  tsr_dataset_fini(&tr), tsr_dataset_fini(&te);
}

Test(data, fini_is_safe_on_zeroed_and_twice) {
  tsr_dataset_t ds = {0};
  tsr_dataset_fini(&ds);
  tsr_dataset_fini(&ds);
  tsr_dataset_fini(NULL);
  float mean = -1, std = -1;
  tsr_dataset_stats(&ds, &mean, &std);
  cr_assert(mean == 0.0f && std == 0.0f);
}

/* ---- the real thing ---- */

Test(data, fashion_mnist, .timeout = 120) {
  if (access(TSR_DEFAULT_DATA_DIR, R_OK) != 0)
    cr_skip_test("%s not installed (Debian package dataset-fashion-mnist)", TSR_DEFAULT_DATA_DIR);
  tsr_dataset_t tr, te;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_dir(&tr, &te, TSR_DEFAULT_DATA_DIR, &err), 0, "%s", err.msg);
  cr_assert_eq(tr.n, 60000);
  cr_assert_eq(te.n, 10000);
  cr_assert_eq(tr.features, 784);
  cr_assert_eq(te.features, 784);
  cr_assert_eq(tr.classes, 10);
  cr_assert_eq(te.classes, 10);
  cr_assert(tr.channels == 1 && tr.height == 28 && tr.width == 28);
  /* Fashion-MNIST is balanced: 6000 training images per class. */
  int64_t per_class[10] = {0};
  for (int64_t i = 0; i < tr.n; i++)
    per_class[(int)tr.y[i]]++;
  for (int c = 0; c < 10; c++)
    cr_assert_eq(per_class[c], 6000, "class %d", c);
  float mean, std;
  tsr_dataset_stats(&tr, &mean, &std);
  /* Published Fashion-MNIST pixel statistics: mean 0.2860, std 0.3530. */
  cr_assert_float_eq(mean, 0.2860f, 1e-3f, "mean %g", mean);
  cr_assert_float_eq(std, 0.3530f, 1e-3f, "std %g", std);
  tsr_dataset_fini(&tr);
  tsr_dataset_fini(&te);
}

/* An epoch's order is a uniform permutation (src/data/order.c, Fisher-Yates): each sample stays
 * in place with probability 1/n, so over 10 epochs of 1,000 samples some epoch keeps some
 * sample in place (none does with probability about e^-10; a cyclic shuffle, Sattolo's, never
 * does). And over 4,000 seeds each of 4 samples lands in each of 4 positions about 1,000 times
 * (standard deviation 27; 800 to 1,200 is over 7 of them). */
Test(data, epoch_orders_are_uniform_permutations) {
  enum { N = 1000, EPOCHS = 10, SMALL = 4, SEEDS = 4000 };
  int32_t order[N];
  int fixed = 0;
  for (int e = 1; e <= EPOCHS; e++) {
    tsr_dataset_epoch_order(order, N, 9, e);
    for (int i = 0; i < N; i++)
      fixed += order[i] == i;
  }
  cr_expect(fixed > 0, "no sample stayed in place in %d epochs of %d samples", EPOCHS, N);
  int count[SMALL][SMALL] = {{0}};
  for (int s = 1; s <= SEEDS; s++) {
    tsr_dataset_epoch_order(order, SMALL, (uint64_t)s, 1);
    for (int i = 0; i < SMALL; i++)
      count[i][order[i]]++;
  }
  for (int i = 0; i < SMALL; i++)
    for (int k = 0; k < SMALL; k++)
      cr_expect(count[i][k] >= 800 && count[i][k] <= 1200,
                "position %d held sample %d in %d of %d orders of %d samples, expected about %d", i,
                k, count[i][k], SEEDS, SMALL, SEEDS / SMALL);
}
