/* Colour image loaders (src/data/cifar.c, npy.c, zip.c, IDX rank 4 in idx.c) and the per-channel
 * standardization: one set of images written in every format (a CIFAR-10 batch, .npy NHWC and
 * NCHW in uint8 and float32, .npz stored and deflated, IDX rank 4) loads to the same pixels and
 * labels, bit for bit; each malformed file is refused with a message naming it and the problem,
 * and a zeroed dataset; the per-channel statistics match a float64 computation. The bytes are
 * written here (no NumPy needed); tests/make_colour_data.py writes them with Python's zipfile
 * for the shell suite. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/cifar.h"
#include "data/npy.h"
#include "tessera/data.h"
#include "tmpfile.h"

static char tmp[64];
static void setup(void) {
  make_temp_dir(tmp, sizeof tmp, "tsr_test_images");
}
static void teardown(void) {
  remove_temp_dir(tmp);
}
TestSuite(images, .init = setup, .fini = teardown);

/* ---- bytes ---- */

typedef struct {
  unsigned char *b;
  size_t n, cap;
} buf_t;

static void put(buf_t *o, const void *p, size_t n) {
  if (o->n + n > o->cap) {
    o->cap = (o->n + n) * 2 + 64;
    o->b = realloc(o->b, o->cap);
    cr_assert_not_null(o->b);
  }
  if (n) memcpy(o->b + o->n, p, n);
  o->n += n;
}
static void put16(buf_t *o, unsigned v) {
  unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
  put(o, b, 2);
}
static void put32(buf_t *o, uint32_t v) {
  unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  put(o, b, 4);
}
static void put_be32(buf_t *o, uint32_t v) {
  unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                        (unsigned char)v};
  put(o, b, 4);
}

static const char *path_of(const char *name) {
  static char bufs[8][256];
  static int next;
  char *p = bufs[next++ % 8];
  snprintf(p, 256, "%s/%s", tmp, name);
  return p;
}

static const char *write_buf(const char *name, const buf_t *o) {
  const char *p = path_of(name);
  FILE *f = fopen(p, "wb");
  cr_assert_not_null(f);
  if (o->n) cr_assert_eq(fwrite(o->b, 1, o->n, f), o->n);
  fclose(f);
  return p;
}

/* ---- the images: N of 32x32x3, pixel (i, r, c, k) and label i % 10 ---- */

enum { N = 4, SIDE = 32, PLANE = SIDE * SIDE, PIX = 3 * PLANE };

static unsigned char pixel(int i, int r, int c, int k) {
  return (unsigned char)((i * 31 + r * 7 + c * 3 + k * 101 + r * c) % 256);
}
static int label(int i) {
  return (i * 3 + 1) % 10;
}

/* What every loader must give: x (N, 32, 32, 3) p / 255, y the labels. */
static void check_set(const tsr_dataset_t *ds, const char *what) {
  cr_assert(ds->n == N && ds->features == PIX && ds->channels == 3 && ds->height == SIDE &&
                ds->width == SIDE,
            "%s: %lld x %lld, %dx%dx%d", what, (long long)ds->n, (long long)ds->features,
            ds->height, ds->width, ds->channels);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(ds->y[i], (float)label(i), "%s: label %d", what, i);
    for (int r = 0; r < SIDE; r++)
      for (int c = 0; c < SIDE; c++)
        for (int k = 0; k < 3; k++) {
          float want = (float)pixel(i, r, c, k) / 255.0f;
          float got = ds->x[(size_t)i * PIX + (size_t)(r * SIDE + c) * 3 + (size_t)k];
          cr_assert(got == want, "%s: image %d (%d, %d) channel %d: %.9g, want %.9g", what, i, r, c,
                    k, (double)got, (double)want);
        }
  }
}

static void cifar_records(buf_t *o, int label_bytes) {
  for (int i = 0; i < N; i++) {
    unsigned char lb[2] = {(unsigned char)(i % 20), (unsigned char)label(i)};
    put(o, lb + 2 - label_bytes, (size_t)label_bytes);
    for (int k = 0; k < 3; k++)
      for (int r = 0; r < SIDE; r++)
        for (int c = 0; c < SIDE; c++) {
          unsigned char p = pixel(i, r, c, k);
          put(o, &p, 1);
        }
  }
}

/* A .npy of version major.0 with the given dict text (padded as np.save pads) and data. */
static void npy_raw(buf_t *o, int major, const char *dict, const buf_t *data) {
  char header[512];
  size_t start = major == 1 ? 10 : 12, len = strlen(dict);
  size_t pad = 64 - (start + len + 1) % 64;
  snprintf(header, sizeof header, "%s%*s\n", dict, (int)pad, "");
  put(o, "\x93NUMPY", 6);
  unsigned char v[2] = {(unsigned char)major, 0};
  put(o, v, 2);
  if (major == 1)
    put16(o, (unsigned)strlen(header));
  else
    put32(o, (uint32_t)strlen(header));
  put(o, header, strlen(header));
  if (data) put(o, data->b, data->n);
}

static void npy(buf_t *o, const char *descr, const char *shape, const buf_t *data) {
  char dict[256];
  snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
           shape);
  npy_raw(o, 1, dict, data);
}

/* The images' data: NHWC or NCHW, uint8 or float32 p / 255. */
static void image_data(buf_t *o, int nchw, int f4) {
  for (int i = 0; i < N; i++)
    for (int a = 0; a < PIX; a++) {
      int k = nchw ? a / PLANE : a % 3, rc = nchw ? a % PLANE : a / 3;
      unsigned char p = pixel(i, rc / SIDE, rc % SIDE, k);
      if (f4) {
        float v = (float)p / 255.0f;
        put(o, &v, 4); /* little-endian machine */
      } else {
        put(o, &p, 1);
      }
    }
}

static void label_data(buf_t *o, int size) {
  for (int i = 0; i < N; i++) {
    int64_t v = label(i);
    put(o, &v, (size_t)size);
  }
}

static void images_npy(buf_t *o, int nchw, int f4) {
  buf_t d = {0};
  image_data(&d, nchw, f4);
  npy(o, f4 ? "<f4" : "|u1", nchw ? "(4, 3, 32, 32)" : "(4, 32, 32, 3)", &d);
  free(d.b);
}

static void labels_npy(buf_t *o, const char *descr, int size, const char *shape) {
  buf_t d = {0};
  label_data(&d, size);
  npy(o, descr, shape, &d);
  free(d.b);
}

/* A zip archive of n members, stored or deflated, as np.savez / np.savez_compressed write. */
typedef struct {
  const char *name;
  const buf_t *data;
} member_t;

static void zip(buf_t *o, const member_t *m, int n, int deflated) {
  buf_t dir = {0};
  for (int i = 0; i < n; i++) {
    uint32_t crc = (uint32_t)crc32(0, m[i].data->b, (uInt)m[i].data->n);
    buf_t c = {0};
    if (deflated) {
      z_stream s = {0};
      cr_assert_eq(deflateInit2(&s, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
      c.cap = deflateBound(&s, m[i].data->n);
      c.b = malloc(c.cap);
      s.next_in = m[i].data->b, s.avail_in = (uInt)m[i].data->n;
      s.next_out = c.b, s.avail_out = (uInt)c.cap;
      cr_assert_eq(deflate(&s, Z_FINISH), Z_STREAM_END);
      c.n = s.total_out;
      deflateEnd(&s);
    } else {
      put(&c, m[i].data->b, m[i].data->n);
    }
    uint32_t offset = (uint32_t)o->n;
    size_t nl = strlen(m[i].name);
    put32(o, 0x04034b50), put16(o, 20), put16(o, 0), put16(o, deflated ? 8 : 0);
    put16(o, 0), put16(o, 0x21), put32(o, crc), put32(o, (uint32_t)c.n);
    put32(o, (uint32_t)m[i].data->n), put16(o, (unsigned)nl), put16(o, 0);
    put(o, m[i].name, nl);
    put(o, c.b, c.n);
    put32(&dir, 0x02014b50), put16(&dir, 20), put16(&dir, 20), put16(&dir, 0);
    put16(&dir, deflated ? 8 : 0), put16(&dir, 0), put16(&dir, 0x21), put32(&dir, crc);
    put32(&dir, (uint32_t)c.n), put32(&dir, (uint32_t)m[i].data->n), put16(&dir, (unsigned)nl);
    put16(&dir, 0), put16(&dir, 0), put16(&dir, 0), put16(&dir, 0), put32(&dir, 0);
    put32(&dir, offset);
    put(&dir, m[i].name, nl);
    free(c.b);
  }
  uint32_t at = (uint32_t)o->n;
  put(o, dir.b, dir.n);
  put32(o, 0x06054b50), put16(o, 0), put16(o, 0), put16(o, (unsigned)n), put16(o, (unsigned)n);
  put32(o, (uint32_t)dir.n), put32(o, at), put16(o, 0);
  free(dir.b);
}

/* The archive of the set as train and test: x_train, y_train, x_test, y_test. */
static void set_npz(buf_t *o, int nchw, int f4, int deflated) {
  buf_t x = {0}, y = {0};
  images_npy(&x, nchw, f4);
  labels_npy(&y, "<i8", 8, "(4,)");
  member_t m[4] = {
      {"x_train.npy", &x}, {"y_train.npy", &y}, {"x_test.npy", &x}, {"y_test.npy", &y}};
  zip(o, m, 4, deflated);
  free(x.b), free(y.b);
}

/* ---- every format, the same pixels ---- */

Test(images, every_format_loads_the_same_pixels) {
  tsr_dataset_t ds, te;
  tsr_errbuf_t err = {{0}};
  buf_t b = {0};

  cifar_records(&b, 1);
  const char *p = write_buf("data_batch_1.bin", &b);
  cr_assert_eq(tsr_dataset_load_cifar(&ds, &p, 1, 1, &err), 0, "%s", err.msg);
  cr_assert_eq(ds.classes, 10);
  check_set(&ds, "CIFAR-10");
  tsr_dataset_fini(&ds);
  b.n = 0;
  cifar_records(&b, 2);
  p = write_buf("train.bin", &b);
  cr_assert_eq(tsr_dataset_load_cifar(&ds, &p, 1, 2, &err), 0, "%s", err.msg);
  cr_assert_eq(ds.classes, 100);
  check_set(&ds, "CIFAR-100 (fine label)");
  tsr_dataset_fini(&ds);

  static const struct {
    int nchw, f4;
    const char *descr, *shape;
    int size;
  } npys[] = {{0, 0, "|u1", "(4, 1)", 1},
              {1, 0, "<i4", "(4,)", 4},
              {1, 1, "<i8", "(4,)", 8},
              {0, 1, "|u1", "(4,)", 1}};
  for (size_t i = 0; i < sizeof npys / sizeof *npys; i++) {
    buf_t x = {0}, y = {0};
    images_npy(&x, npys[i].nchw, npys[i].f4);
    labels_npy(&y, npys[i].descr, npys[i].size, npys[i].shape);
    const char *xp = write_buf("x.npy", &x), *yp = write_buf("y.npy", &y);
    cr_assert_eq(tsr_dataset_load_npy(&ds, xp, yp, &err), 0, "%s", err.msg);
    char what[64];
    snprintf(what, sizeof what, ".npy %s %s", npys[i].nchw ? "NCHW" : "NHWC",
             npys[i].f4 ? "float32" : "uint8");
    check_set(&ds, what);
    tsr_dataset_fini(&ds);
    free(x.b), free(y.b);
  }

  for (int deflated = 0; deflated < 2; deflated++) {
    b.n = 0;
    set_npz(&b, deflated, deflated, deflated);
    p = write_buf("set.npz", &b);
    cr_assert_eq(tsr_dataset_load_npz(&ds, &te, p, &err), 0, "%s", err.msg);
    check_set(&ds, deflated ? ".npz deflated, NCHW float32" : ".npz stored, NHWC uint8");
    check_set(&te, "the .npz test set");
    cr_assert_eq(te.classes, ds.classes);
    tsr_dataset_fini(&ds), tsr_dataset_fini(&te);
    /* --data FILE.npz: the folder loader takes the archive. */
    cr_assert_eq(tsr_dataset_load_dir(&ds, &te, p, &err), 0, "%s", err.msg);
    check_set(&ds, "tsr_dataset_load_dir on a .npz");
    tsr_dataset_fini(&ds), tsr_dataset_fini(&te);
  }

  /* IDX rank 4: n, h, w, c, channels-last as the dimensions read. */
  buf_t im = {0}, lb = {0};
  put_be32(&im, 0x804), put_be32(&im, N), put_be32(&im, SIDE), put_be32(&im, SIDE);
  put_be32(&im, 3);
  image_data(&im, 0, 0);
  put_be32(&lb, 0x801), put_be32(&lb, N);
  for (int i = 0; i < N; i++) {
    unsigned char l = (unsigned char)label(i);
    put(&lb, &l, 1);
  }
  const char *ip = write_buf("images-idx4", &im), *lp = write_buf("labels-idx1", &lb);
  cr_assert_eq(tsr_dataset_load_idx(&ds, ip, lp, &err), 0, "%s", err.msg);
  check_set(&ds, "IDX rank 4");
  tsr_dataset_fini(&ds);
  free(im.b), free(lb.b), free(b.b);
}

/* A folder of CIFAR-10 batches, and of .npy files: found by their names. */
Test(images, folders_of_cifar_batches_and_npy_files) {
  static const char *const names[6] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                       "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
  buf_t b = {0};
  cifar_records(&b, 1);
  for (int i = 0; i < 6; i++)
    if (i != 2) write_buf(names[i], &b);
  tsr_dataset_t tr, te;
  tsr_errbuf_t err = {{0}};
  /* A batch missing: named. */
  cr_assert_lt(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0);
  cr_assert(strstr(err.msg, "incomplete CIFAR-10 dataset: missing data_batch_3.bin"), "%s",
            err.msg);
  write_buf(names[2], &b);
  cr_assert_eq(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0, "%s", err.msg);
  cr_assert(tr.n == 5 * N && te.n == N && tr.classes == 10 && tr.channels == 3);
  /* The batches in order: batch 2's first image is image 0 again. */
  cr_assert_eq(memcmp(tr.x + (size_t)N * PIX, te.x, sizeof(float) * N * PIX), 0);
  check_set(&te, "test_batch.bin");
  tsr_dataset_fini(&tr), tsr_dataset_fini(&te);
  free(b.b);
}

Test(images, a_folder_of_npy_files_with_or_without_a_test_set) {
  buf_t x = {0}, y = {0};
  images_npy(&x, 0, 0);
  labels_npy(&y, "|u1", 1, "(4,)");
  write_buf("x_train.npy", &x);
  tsr_dataset_t tr, te;
  tsr_errbuf_t err = {{0}};
  cr_assert_lt(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0);
  cr_assert(strstr(err.msg, "incomplete .npy dataset: missing y_train.npy"), "%s", err.msg);
  write_buf("y_train.npy", &y);
  cr_assert_eq(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0, "%s", err.msg);
  check_set(&tr, "x_train.npy");
  cr_assert(te.n == 0 && te.features == PIX && te.channels == 3 && te.classes == tr.classes);
  tsr_dataset_fini(&tr), tsr_dataset_fini(&te);
  write_buf("x_test.npy", &x);
  cr_assert_lt(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0);
  cr_assert(strstr(err.msg, "missing y_test.npy"), "%s", err.msg);
  write_buf("y_test.npy", &y);
  cr_assert_eq(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0, "%s", err.msg);
  check_set(&te, "x_test.npy");
  tsr_dataset_fini(&tr), tsr_dataset_fini(&te);
  free(x.b), free(y.b);
}

/* ---- refusals ---- */

static void assert_zeroed(const tsr_dataset_t *ds) {
  cr_assert(ds->n == 0 && ds->x == NULL && ds->y == NULL && ds->features == 0 && ds->channels == 0,
            "dataset not zeroed after an error");
}

static void expect_msg(const tsr_errbuf_t *err, const char *file, const char *what) {
  const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
  cr_assert(strstr(err->msg, base), "message does not name %s: %s", base, err->msg);
  cr_assert(strstr(err->msg, what), "message lacks '%s': %s", what, err->msg);
}

static void expect_cifar_fail(const buf_t *b, int label_bytes, const char *what) {
  const char *p = write_buf("bad_batch.bin", b);
  tsr_dataset_t ds;
  memset(&ds, 0xab, sizeof ds);
  tsr_errbuf_t err = {{0}};
  cr_assert_lt(tsr_dataset_load_cifar(&ds, &p, 1, label_bytes, &err), 0, "accepted: %s", what);
  expect_msg(&err, p, what);
  assert_zeroed(&ds);
}

Test(images, bad_cifar_files_are_refused) {
  buf_t b = {0};
  cifar_records(&b, 1);
  size_t whole = b.n;
  b.n = whole - 1; /* truncated last record */
  expect_cifar_fail(&b, 1, "12291 bytes is not a whole number of 3073-byte CIFAR-10 records");
  expect_cifar_fail(&b, 1, "3 records and 3072 bytes over");
  b.n = whole;
  put(&b, "12345", 5); /* an oversized file: 5 bytes over */
  expect_cifar_fail(&b, 1, "4 records and 5 bytes over");
  b.n = whole;
  b.b[3073] = 10; /* record 2's label */
  expect_cifar_fail(&b, 1, "record 2 has label 10; CIFAR-10 labels are 0 to 9");
  b.n = 0;
  expect_cifar_fail(&b, 1, "empty file");
  cifar_records(&b, 2);
  b.b[1] = 100; /* the fine label */
  expect_cifar_fail(&b, 2, "record 1 has label 100; CIFAR-100 labels are 0 to 99");
  /* A CIFAR-100 file read as CIFAR-10: 3074-byte records are not whole 3073-byte ones. */
  expect_cifar_fail(&b, 1, "not a whole number of 3073-byte CIFAR-10 records");
  free(b.b);
}

static void expect_npy_fail(const buf_t *x, const buf_t *y, const char *bad, const char *what) {
  const char *xp = write_buf("x_bad.npy", x), *yp = write_buf("y_bad.npy", y);
  tsr_dataset_t ds;
  memset(&ds, 0xab, sizeof ds);
  tsr_errbuf_t err = {{0}};
  cr_assert_lt(tsr_dataset_load_npy(&ds, xp, yp, &err), 0, "accepted: %s", what);
  expect_msg(&err, bad[0] == 'x' ? xp : yp, what);
  assert_zeroed(&ds);
}

/* An images .npy whose dict is `dict`, with the set's uint8 NHWC data. */
static void images_with_dict(buf_t *o, int major, const char *dict) {
  buf_t d = {0};
  image_data(&d, 0, 0);
  o->n = 0;
  npy_raw(o, major, dict, &d);
  free(d.b);
}

Test(images, bad_npy_headers_are_refused) {
  buf_t x = {0}, y = {0};
  labels_npy(&y, "|u1", 1, "(4,)");
  static const struct {
    const char *dict, *what;
  } bad[] = {
      {"{'descr': '|u1', 'fortran_order': False}",
       "'descr', 'fortran_order' or 'shape' is missing"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (4, 32, 32, 3), 'x': 1}",
       "a key other than"},
      {"{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (4, 32, 32, 3)}",
       "given twice"},
      {"{'descr': '|u1', 'fortran_order': True, 'shape': (4, 32, 32, 3), }", "Fortran order"},
      {"{'descr': '|u1', 'fortran_order': 0, 'shape': (4, 32, 32, 3), }", "neither True"},
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (4, 32, 32, 3), }",
       "unsupported dtype '>f4'"},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (4, 32, 32, 3), }",
       "unsupported dtype '<c8'"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", "structured"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (4, 32, 32, x), }",
       "other than integers (at byte 62 of the dict)"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (4, 3072), }", "is not a set of images"},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (4, 32, 32, 3), }",
       "unsupported dtype '<i4' for images"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (4, 32, 32, 3), } x", "after the dict"},
      {"['descr', '|u1']", "expected '{' (at byte 0 of the dict)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    images_with_dict(&x, 1, bad[i].dict);
    expect_npy_fail(&x, &y, "x", bad[i].what);
  }
  /* Versions 2.0 and 3.0 read (a 4-byte header length); 4.0 does not. */
  const char *good = "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 32, 32, 3), }";
  images_with_dict(&x, 3, good);
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  const char *xp = write_buf("x3.npy", &x), *yp = write_buf("y3.npy", &y);
  cr_assert_eq(tsr_dataset_load_npy(&ds, xp, yp, &err), 0, "%s", err.msg);
  check_set(&ds, ".npy version 3.0");
  tsr_dataset_fini(&ds);
  x.b[6] = 4;
  expect_npy_fail(&x, &y, "x", "version 4.0");
  x.b[0] = 'P';
  expect_npy_fail(&x, &y, "x", "wrong magic");
  x.n = 0;
  expect_npy_fail(&x, &y, "x", "empty file");
  /* The header length runs past the file. */
  images_with_dict(&x, 1, good);
  x.n = 40;
  expect_npy_fail(&x, &y, "x", "truncated: the .npy header says it is");
  free(x.b), free(y.b);
}

Test(images, bad_npy_data_is_refused) {
  buf_t x = {0}, y = {0};
  images_npy(&x, 0, 0);
  /* Counts that differ. */
  labels_npy(&y, "|u1", 1, "(4,)");
  y.b[y.n - 1] = 0;
  buf_t y3 = {0}, d = {0};
  put(&d, "\1\2\3", 3);
  npy(&y3, "|u1", "(3,)", &d);
  expect_npy_fail(&x, &y3, "x", "holds 4 images but");
  expect_npy_fail(&x, &y3, "y", "holds 3 labels");
  /* Truncated and trailing data. */
  x.n -= 1;
  expect_npy_fail(&x, &y, "x", "truncated: the header says shape (4, 32, 32, 3) of |u1");
  x.n += 1;
  put(&x, "zz", 2);
  expect_npy_fail(&x, &y, "x", "trailing data");
  x.n -= 2;
  /* Labels: floats, negative, a shape that is not a list. */
  buf_t yf = {0};
  d.n = 0;
  for (int i = 0; i < N; i++) {
    float v = 1;
    put(&d, &v, 4);
  }
  npy(&yf, "<f4", "(4,)", &d);
  expect_npy_fail(&x, &yf, "y", "unsupported dtype '<f4' for labels");
  yf.n = 0;
  d.n = 0;
  put(&d, "\1\377\1\1", 4);
  npy(&yf, "|i1", "(4,)", &d);
  expect_npy_fail(&x, &yf, "y", "label 2 is -1");
  yf.n = 0;
  npy(&yf, "|u1", "(2, 2)", &d);
  expect_npy_fail(&x, &yf, "y", "shape (2, 2) is not a list of labels");
  /* A float image that is not finite. */
  buf_t xf = {0};
  images_npy(&xf, 0, 1);
  float nan = NAN;
  memcpy(xf.b + xf.n - 4, &nan, 4);
  expect_npy_fail(&xf, &y, "x", "image 4 holds nan");
  free(x.b), free(y.b), free(y3.b), free(d.b), free(yf.b), free(xf.b);
}

/* (N, 3, H, W) is NCHW when the last dim is not 1 or 3; (N, H, W, 3) and ambiguous shapes NHWC;
 * (N, H, W) one channel. */
Test(images, npy_layouts_by_shape) {
  static const struct {
    const char *shape;
    int c, h, w;
  } cases[] = {{"(2, 3, 4, 5)", 3, 4, 5},
               {"(2, 4, 5, 3)", 3, 4, 5},
               {"(2, 1, 4, 5)", 1, 4, 5},
               {"(2, 3, 4, 3)", 3, 3, 4},
               {"(2, 4, 5)", 1, 4, 5}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    buf_t x = {0}, y = {0}, d = {0};
    for (int j = 0; j < 2 * cases[i].c * cases[i].h * cases[i].w; j++) {
      unsigned char p = (unsigned char)j;
      put(&d, &p, 1);
    }
    npy(&x, "|u1", cases[i].shape, &d);
    d.n = 0;
    put(&d, "\0\1", 2);
    npy(&y, "|u1", "(2,)", &d);
    tsr_dataset_t ds;
    tsr_errbuf_t err = {{0}};
    cr_assert_eq(tsr__dataset_load_npy_mem(&ds, x.b, x.n, "x", y.b, y.n, "y", &err), 0, "%s",
                 err.msg);
    cr_assert(ds.channels == cases[i].c && ds.height == cases[i].h && ds.width == cases[i].w,
              "%s: %dx%dx%d", cases[i].shape, ds.channels, ds.height, ds.width);
    if (i == 0) /* NCHW transposed: pixel (0, 1) channel 2 was element 2*20 + 1 */
      cr_assert_eq(ds.x[(0 * 5 + 1) * 3 + 2], 41.0f / 255.0f);
    tsr_dataset_fini(&ds);
    free(x.b), free(y.b), free(d.b);
  }
}

static void expect_npz_fail(const buf_t *z, const char *what) {
  const char *p = write_buf("bad.npz", z);
  tsr_dataset_t tr, te;
  memset(&tr, 0xab, sizeof tr);
  memset(&te, 0xab, sizeof te);
  tsr_errbuf_t err = {{0}};
  cr_assert_lt(tsr_dataset_load_npz(&tr, &te, p, &err), 0, "accepted: %s", what);
  expect_msg(&err, p, what);
  assert_zeroed(&tr);
  assert_zeroed(&te);
}

Test(images, bad_npz_archives_are_refused) {
  buf_t z = {0}, x = {0}, y = {0};
  images_npy(&x, 0, 0);
  labels_npy(&y, "|u1", 1, "(4,)");
  member_t only_x[] = {{"x_train.npy", &x}, {"y_train.npy", &y}, {"x_test.npy", &x}};
  zip(&z, only_x, 3, 1);
  expect_npz_fail(&z, "holds x_test.npy but not y_test.npy");
  z.n = 0;
  member_t other[] = {{"images.npy", &x}, {"labels.npy", &y}};
  zip(&z, other, 2, 0);
  expect_npz_fail(&z, "no x_train.npy and y_train.npy in the archive (it holds: images.npy, "
                      "labels.npy)");
  z.n = 0;
  set_npz(&z, 0, 0, 1);
  size_t whole = z.n;
  z.n = whole - 30; /* cut short: the end record is gone */
  expect_npz_fail(&z, "no end of central directory record");
  z.n = whole;
  z.b[200] ^= 0x55; /* inside x_train's deflated bytes */
  expect_npz_fail(&z, "x_train.npy");
  z.b[200] ^= 0x55;
  z.n = 0;
  set_npz(&z, 0, 0, 0);
  z.b[30 + 11 + 1000] ^= 1; /* a stored pixel of x_train: the CRC catches it */
  expect_npz_fail(&z, "x_train.npy fails its CRC-32 check");
  z.b[30 + 11 + 1000] ^= 1;
  z.b[8] = 12; /* bzip2, in the local header and ... */
  z.n = 0;
  set_npz(&z, 0, 0, 0);
  /* ... the central directory's method field (bytes 10-11 of the first entry) */
  size_t cd = z.n - 22 - 4 * 46 - 11 * 2 - 10 * 2;
  cr_assert_eq(z.b[cd], 0x50);
  z.b[cd + 10] = 12;
  expect_npz_fail(&z, "compression method 12");
  z.b[cd + 10] = 0;
  /* A stored member's sizes that lie: uncompressed 1 GiB. */
  z.b[cd + 24 + 3] = 0x40;
  expect_npz_fail(&z, "sizes disagree");
  z.n = 0;
  expect_npz_fail(&z, "empty file");
  put(&z, "PK\3\4 not really a zip archive at all, but long enough", 52);
  expect_npz_fail(&z, "not a valid .npz (zip) file");
  /* A member that is not a good .npy: its name in the message. */
  z.n = 0;
  buf_t bad = {0};
  put(&bad, "\x93NUMPY\1\0", 8);
  member_t badm[] = {{"x_train.npy", &bad}, {"y_train.npy", &y}};
  zip(&z, badm, 2, 1);
  expect_npz_fail(&z, "member x_train.npy: truncated");
  free(z.b), free(x.b), free(y.b), free(bad.b);
}

Test(images, deflated_members_claiming_more_than_deflate_can_make_are_refused) {
  buf_t z = {0};
  set_npz(&z, 0, 0, 1);
  /* The first central entry's uncompressed size: 4 GiB - 2, from a few kilobytes. */
  size_t cd = 0;
  for (size_t i = z.n - 22; i > 0; i--)
    if (z.b[i] == 0x50 && z.b[i + 1] == 0x4b && z.b[i + 2] == 1 && z.b[i + 3] == 2) cd = i;
  cr_assert_neq(cd, 0);
  memset(z.b + cd + 24, 0xff, 3);
  z.b[cd + 27] = 0xf0;
  expect_npz_fail(&z, "more than deflate can produce");
  free(z.b);
}

/* ---- per-channel standardization ---- */

Test(images, channel_standardization_against_float64) {
  enum { n = 7, h = 4, w = 5, c = 3, f = h * w * c };
  tsr_dataset_t ds = {.n = n, .features = f, .classes = 2, .channels = c, .height = h, .width = w};
  ds.x = malloc(sizeof(float) * n * f);
  ds.y = calloc(n, sizeof(float));
  /* Channels on their own scales: channel k around 10^k. */
  for (int i = 0; i < n * f; i++)
    ds.x[i] = (float)(pow(10, i % c) * (1 + 0.37 * sin(i * 1.7)));
  double mean[c] = {0}, var[c] = {0};
  for (int i = 0; i < n * f; i++)
    mean[i % c] += ds.x[i];
  for (int k = 0; k < c; k++)
    mean[k] /= n * h * w;
  for (int i = 0; i < n * f; i++)
    var[i % c] += (ds.x[i] - mean[i % c]) * (ds.x[i] - mean[i % c]);
  tsr_standardization_t s;
  tsr_errbuf_t err = {{0}};
  /* auto: channel for colour images. */
  cr_assert_eq(tsr_standardization_fit(&s, TSR_STANDARDIZE_AUTO, &ds, &err), 0, "%s", err.msg);
  cr_assert_eq(s.kind, TSR_STANDARDIZE_CHANNEL);
  cr_assert_eq(s.n, c);
  for (int k = 0; k < c; k++) {
    double sd = sqrt(var[k] / (n * h * w));
    cr_assert(fabs(s.mean[k] - mean[k]) <= 1e-6 * fabs(mean[k]), "mean %d: %g vs %g", k,
              (double)s.mean[k], mean[k]);
    cr_assert(fabs(s.std[k] - sd) <= 1e-6 * sd, "std %d: %g vs %g", k, (double)s.std[k], sd);
  }
  float *raw = malloc(sizeof(float) * n * f);
  memcpy(raw, ds.x, sizeof(float) * n * f);
  cr_assert_eq(tsr_standardization_apply(&s, &ds, "the training set", &err), 0);
  for (int i = 0; i < n * f; i++) {
    double want = (raw[i] - mean[i % c]) / sqrt(var[i % c] / (n * h * w));
    cr_assert(fabs(ds.x[i] - want) <= 1e-5 * (1 + fabs(want)), "x[%d] %g vs %g", i, (double)ds.x[i],
              want);
  }
  /* Another channel count is refused, naming the set. */
  tsr_dataset_t other = ds;
  other.channels = 1;
  cr_assert_eq(tsr_standardization_apply(&s, &other, "the test set", &err), TSR_ESHAPE);
  cr_assert(strstr(err.msg, "the test set has images of 1 channels"), "%s", err.msg);
  tsr_standardization_fini(&s);
  /* auto stays scalar for one channel (today's digits), column for tabular data. */
  ds.channels = 1, ds.width = w * c;
  cr_assert_eq(tsr_standardization_fit(&s, TSR_STANDARDIZE_AUTO, &ds, &err), 0);
  cr_assert_eq(s.kind, TSR_STANDARDIZE_SCALAR);
  tsr_standardization_fini(&s);
  ds.height = 1, ds.width = f;
  cr_assert_eq(tsr_standardization_fit(&s, TSR_STANDARDIZE_AUTO, &ds, &err), 0);
  cr_assert_eq(s.kind, TSR_STANDARDIZE_COLUMN);
  tsr_standardization_fini(&s);
  /* channel on features that are not channels x height x width. */
  ds.features = f - 1;
  cr_assert_eq(tsr_standardization_fit(&s, TSR_STANDARDIZE_CHANNEL, &ds, &err), TSR_ESHAPE);
  cr_assert(strstr(err.msg, "not images of"), "%s", err.msg);
  tsr_standardize_t k;
  cr_assert_eq(tsr_standardize_parse("channel", &k), 0);
  cr_assert_eq(k, TSR_STANDARDIZE_CHANNEL);
  cr_assert_str_eq(tsr_standardize_name(TSR_STANDARDIZE_CHANNEL), "channel");
  free(raw), free(ds.x), free(ds.y);
}

/* The in-memory CIFAR parser the fuzzer drives is the file loader's. */
Test(images, cifar_from_memory_is_the_file_loader) {
  buf_t b = {0};
  cifar_records(&b, 1);
  tsr_dataset_t ds;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr__dataset_load_cifar_mem(&ds, b.b, b.n, "<cifar>", 1, &err), 0, "%s", err.msg);
  check_set(&ds, "CIFAR-10 from memory");
  tsr_dataset_fini(&ds);
  cr_assert_lt(tsr__dataset_load_cifar_mem(&ds, b.b, b.n - 7, "<cifar>", 1, &err), 0);
  cr_assert(strstr(err.msg, "<cifar>"), "%s", err.msg);
  free(b.b);
}

/* IDX rank 4 in a folder (the -idx4- names), and its header checked as rank 3's is. */
Test(images, idx_rank_4_in_a_folder_and_its_bad_headers) {
  buf_t im = {0}, lb = {0};
  put_be32(&im, 0x804), put_be32(&im, N), put_be32(&im, SIDE), put_be32(&im, SIDE);
  put_be32(&im, 3);
  image_data(&im, 0, 0);
  put_be32(&lb, 0x801), put_be32(&lb, N);
  for (int i = 0; i < N; i++) {
    unsigned char l = (unsigned char)label(i);
    put(&lb, &l, 1);
  }
  write_buf("train-images-idx4-ubyte", &im), write_buf("t10k-images-idx4-ubyte", &im);
  write_buf("train-labels-idx1-ubyte", &lb), write_buf("t10k-labels-idx1-ubyte", &lb);
  tsr_dataset_t tr, te;
  tsr_errbuf_t err = {{0}};
  cr_assert_eq(tsr_dataset_load_dir(&tr, &te, tmp, &err), 0, "%s", err.msg);
  check_set(&tr, "train-images-idx4-ubyte");
  check_set(&te, "t10k-images-idx4-ubyte");
  tsr_dataset_fini(&tr), tsr_dataset_fini(&te);

  const char *lp = path_of("train-labels-idx1-ubyte");
  im.b[19] = 0; /* 0 channels */
  const char *ip = write_buf("bad-idx4", &im);
  memset(&tr, 0xab, sizeof tr);
  cr_assert_lt(tsr_dataset_load_idx(&tr, ip, lp, &err), 0);
  expect_msg(&err, ip, "header says 4 images of 32x32x0");
  assert_zeroed(&tr);
  im.b[19] = 3;
  im.n -= 5;
  ip = write_buf("bad-idx4", &im);
  cr_assert_lt(tsr_dataset_load_idx(&tr, ip, lp, &err), 0);
  expect_msg(&err, ip, "truncated: header says 4 images of 32x32x3 (12288 bytes)");
  im.n = 18; /* the rank-4 header cut short */
  ip = write_buf("bad-idx4", &im);
  cr_assert_lt(tsr_dataset_load_idx(&tr, ip, lp, &err), 0);
  expect_msg(&err, ip, "less than the 20-byte IDX images header");
  im.b[3] = 5; /* rank 5: not an images file */
  im.n = 40;
  ip = write_buf("bad-idx4", &im);
  cr_assert_lt(tsr_dataset_load_idx(&tr, ip, lp, &err), 0);
  expect_msg(&err, ip, "0x00000804 (rank 4: n, h, w, c)");
  free(im.b), free(lb.b);
}
