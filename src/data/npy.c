/* NumPy's .npy files (np.save) and .npz archives (np.savez, np.savez_compressed) as datasets: an
 * images array and a labels array. The .npy header is read strictly: the magic "\x93NUMPY",
 * version 1.0, 2.0 or 3.0, then a Python dict literal of exactly 'descr', 'fortran_order' and
 * 'shape'. Images are uint8 ('|u1', scaled to [0, 1] as IDX pixels: p / 255) or float32 / float64
 * ('<f4', '<f8', kept as they are, every value finite); labels any little-endian integer type,
 * each 0 to 16777215, shaped (N) or (N, 1) (Keras' CIFAR labels are (N, 1)).
 *
 * Images are (N, H, W) (one channel), or rank 4: (N, C, H, W) when dim 1 is 1 or 3 and the last
 * dim is not (PyTorch's order), else (N, H, W, C) (TensorFlow's). A sample here is always
 * channels-last (H, W, C), so NCHW arrays are transposed. Fortran-ordered arrays are refused
 * (np.ascontiguousarray fixes them).
 *
 * An archive holds x_train.npy and y_train.npy, optionally x_test.npy and y_test.npy: the names
 * np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...) gives, which are also Keras'
 * (keras.datasets.cifar10.load_data). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/common.h"
#include "data/npy.h"
#include "data/zip.h"
#include "tessera/data.h"

#define NPY_MAX_RANK 8
#define NPY_MAX_COUNT 100000000u /* samples */
#define NPY_MAX_SIDE 4096u       /* height, width or channels */
#define NPY_MAX_FEATURES (1u << 28)
#define NPY_MAX_LABEL 16777215     /* labels travel as float: exact up to 2^24 */
#define NAME_BYTES (PATH_MAX + 32) /* "FILE, member x_train.npy" */

typedef struct {
  const char *descr;
  char kind; /* 'u', 'i' or 'f' */
  int size;
} npy_dtype_t;

static const npy_dtype_t dtypes[] = {
    {"|u1", 'u', 1}, {"|i1", 'i', 1}, {"<u2", 'u', 2}, {"<i2", 'i', 2}, {"<u4", 'u', 4},
    {"<i4", 'i', 4}, {"<u8", 'u', 8}, {"<i8", 'i', 8}, {"<f4", 'f', 4}, {"<f8", 'f', 8},
};

typedef struct {
  const char *name; /* borrowed, for messages */
  const npy_dtype_t *dtype;
  int rank;
  uint64_t shape[NPY_MAX_RANK];
  const unsigned char *data; /* borrowed: the elements, row-major */
  size_t header_bytes;
} npy_t;

/* ---- the header ---- */

typedef struct {
  const char *start, *s, *end;
  const char *name;
  tsr_errbuf_t *err;
} cursor_t;

static int header_error(const cursor_t *c, const char *what) {
  return tsr_error_set(c->err, TSR_EFORMAT,
                       "%s: malformed .npy header: %s (at byte %d of the dict); np.save writes "
                       "{'descr': ..., 'fortran_order': ..., 'shape': (...), }",
                       c->name, what, (int)(c->s - c->start));
}

static void skip_blanks(cursor_t *c) {
  while (c->s < c->end && *c->s == ' ')
    c->s++;
}

static bool take(cursor_t *c, char ch) {
  skip_blanks(c);
  if (c->s < c->end && *c->s == ch) {
    c->s++;
    return true;
  }
  return false;
}

/* A quoted string without escapes into out (size bytes at most, NUL included). */
static int quoted(cursor_t *c, char *out, size_t size) {
  skip_blanks(c);
  if (c->s >= c->end || (*c->s != '\'' && *c->s != '"'))
    return header_error(c, "expected a string");
  char q = *c->s++;
  size_t n = 0;
  while (c->s < c->end && *c->s != q) {
    if (*c->s == '\\' || n + 1 >= size) return header_error(c, "a string too long or escaped");
    out[n++] = *c->s++;
  }
  if (c->s >= c->end) return header_error(c, "an unterminated string");
  c->s++;
  out[n] = '\0';
  return 0;
}

static bool word(cursor_t *c, const char *w) {
  skip_blanks(c);
  size_t n = strlen(w);
  if ((size_t)(c->end - c->s) >= n && memcmp(c->s, w, n) == 0) {
    c->s += n;
    return true;
  }
  return false;
}

static int shape_tuple(cursor_t *c, npy_t *a) {
  if (!take(c, '(')) return header_error(c, "'shape' is not a tuple");
  a->rank = 0;
  for (;;) {
    if (take(c, ')')) return 0;
    skip_blanks(c);
    if (c->s >= c->end || *c->s < '0' || *c->s > '9')
      return header_error(c, "'shape' holds something other than integers");
    uint64_t v = 0;
    while (c->s < c->end && *c->s >= '0' && *c->s <= '9') {
      v = v * 10 + (uint64_t)(*c->s++ - '0');
      if (v > UINT32_MAX) return header_error(c, "a dimension above 4294967295");
    }
    if (a->rank == NPY_MAX_RANK) return header_error(c, "more than 8 dimensions");
    a->shape[a->rank++] = v;
    if (take(c, ')')) {
      /* (5) is the integer 5 in Python, not a tuple: NumPy writes (5,). */
      if (a->rank == 1) return header_error(c, "a one-dimensional shape without its comma");
      return 0;
    }
    if (!take(c, ',')) return header_error(c, "'shape' entries not separated by commas");
  }
}

/* Parses the dict of text (len bytes, ending in '\n') into a. */
static int header_dict(npy_t *a, const char *text, size_t len, tsr_errbuf_t *err) {
  cursor_t c = {.start = text, .s = text, .end = text + len, .name = a->name, .err = err};
  if (len == 0 || text[len - 1] != '\n') return header_error(&c, "it does not end in a newline");
  c.end--;
  if (!take(&c, '{')) return header_error(&c, "expected '{'");
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  char key[32], descr[32];
  while (!take(&c, '}')) {
    int rc = quoted(&c, key, sizeof key);
    if (rc) return rc;
    if (!take(&c, ':')) return header_error(&c, "expected ':' after a key");
    if (strcmp(key, "descr") == 0 && !have_descr) {
      skip_blanks(&c);
      if (c.s < c.end && *c.s == '[')
        return tsr_error_set(err, TSR_EFORMAT,
                             "%s: unsupported dtype: a structured array; save plain arrays of "
                             "images and labels",
                             a->name);
      if ((rc = quoted(&c, descr, sizeof descr))) return rc;
      have_descr = true;
    } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
      if (word(&c, "True"))
        fortran = true;
      else if (!word(&c, "False"))
        return header_error(&c, "'fortran_order' is neither True nor False");
      have_order = true;
    } else if (strcmp(key, "shape") == 0 && !have_shape) {
      if ((rc = shape_tuple(&c, a))) return rc;
      have_shape = true;
    } else {
      return header_error(&c, "a key other than 'descr', 'fortran_order' and 'shape', or one "
                              "given twice");
    }
    if (!take(&c, ',')) {
      if (!take(&c, '}')) return header_error(&c, "expected ',' or '}'");
      break;
    }
  }
  skip_blanks(&c);
  if (c.s != c.end) return header_error(&c, "something after the dict");
  if (!have_descr || !have_order || !have_shape)
    return header_error(&c, "'descr', 'fortran_order' or 'shape' is missing");
  if (fortran)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: the array is in Fortran order (fortran_order True); save "
                         "np.ascontiguousarray(a) instead",
                         a->name);
  for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++)
    if (strcmp(descr, dtypes[i].descr) == 0) a->dtype = &dtypes[i];
  if (!a->dtype)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: unsupported dtype '%s'; images are uint8 ('|u1'), float32 ('<f4') "
                         "or float64 ('<f8'), labels little-endian integers ('|u1', '<i4', "
                         "'<i8', ...): convert with a.astype(...)",
                         a->name, descr);
  return 0;
}

static void shape_text(const npy_t *a, char *out, size_t size) {
  size_t at = (size_t)snprintf(out, size, "(");
  for (int i = 0; i < a->rank && at < size; i++)
    at += (size_t)snprintf(out + at, size - at, "%s%llu", i ? ", " : "",
                           (unsigned long long)a->shape[i]);
  if (at < size) snprintf(out + at, size - at, a->rank == 1 ? ",)" : ")");
}

/* Reads the magic, version and header of b (len bytes) into a; the data is checked later, once
 * the shape is known to be an image set or labels. */
static int npy_header(npy_t *a, const unsigned char *b, size_t len, const char *name,
                      tsr_errbuf_t *err) {
  *a = (npy_t){.name = name};
  if (len == 0)
    return tsr_error_set(err, TSR_EFORMAT, "%s: empty file: expected a .npy array", name);
  if (len < 6 || memcmp(b, "\x93NUMPY", 6) != 0)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: not a .npy file: wrong magic (a .npy file starts with \\x93NUMPY, "
                         "this one with %02x %02x %02x %02x)",
                         name, b[0], len > 1 ? b[1] : 0, len > 2 ? b[2] : 0, len > 3 ? b[3] : 0);
  if (len < 10)
    return tsr_error_set(err, TSR_EFORMAT, "%s: truncated: %zu bytes, less than a .npy header",
                         name, len);
  int major = b[6], minor = b[7];
  if ((major < 1 || major > 3) || minor != 0)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: .npy format version %d.%d; versions 1.0, 2.0 and 3.0 are read", name,
                         major, minor);
  size_t start = major == 1 ? 10 : 12;
  if (len < start)
    return tsr_error_set(err, TSR_EFORMAT, "%s: truncated: %zu bytes, less than a .npy header",
                         name, len);
  uint64_t hlen = major == 1 ? (uint64_t)(b[8] | b[9] << 8)
                             : (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 |
                                   (uint64_t)b[11] << 24;
  if (hlen > len - start)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: truncated: the .npy header says it is %llu bytes long but the file "
                         "holds %zu bytes",
                         name, (unsigned long long)hlen, len);
  int rc = header_dict(a, (const char *)b + start, (size_t)hlen, err);
  if (rc) return rc;
  a->header_bytes = start + (size_t)hlen;
  a->data = b + a->header_bytes;
  return 0;
}

/* Checks that exactly the shape's elements follow the header (len: the whole file's bytes). */
static int npy_data(const npy_t *a, size_t len, tsr_errbuf_t *err) {
  uint64_t count = 1;
  for (int i = 0; i < a->rank; i++)
    count *= a->shape[i]; /* bounded by the callers' checks: no overflow */
  uint64_t want = count * (uint64_t)a->dtype->size, have = len - a->header_bytes;
  if (want == have) return 0;
  char shape[160];
  shape_text(a, shape, sizeof shape);
  return tsr_error_set(err, TSR_EFORMAT,
                       "%s: %s: the header says shape %s of %s (%llu bytes) but %llu bytes follow "
                       "the %zu-byte header",
                       a->name, want > have ? "truncated" : "trailing data", shape, a->dtype->descr,
                       (unsigned long long)want, (unsigned long long)have, a->header_bytes);
}

/* Element i, little-endian, as a double (integers up to 2^53 exactly; labels are checked to be
 * far below). */
static double element(const npy_t *a, size_t i) {
  const unsigned char *p = a->data + i * (size_t)a->dtype->size;
  uint64_t raw = 0;
  for (int k = 0; k < a->dtype->size; k++)
    raw |= (uint64_t)p[k] << (8 * k);
  int bits = 8 * a->dtype->size;
  switch (a->dtype->kind) {
  case 'u': return (double)raw;
  case 'i':
    if (bits < 64 && (raw >> (bits - 1)) & 1) raw |= ~(uint64_t)0 << bits;
    return (double)(int64_t)raw;
  default:
    if (a->dtype->size == 4) {
      uint32_t r32 = (uint32_t)raw;
      float f;
      memcpy(&f, &r32, sizeof f);
      return f;
    } else {
      double d;
      memcpy(&d, &raw, sizeof d);
      return d;
    }
  }
}

/* ---- images and labels ---- */

/* The image geometry of a's shape (see the top of the file), or an error. */
static int image_geometry(const npy_t *a, int *c, int *h, int *w, bool *nchw, tsr_errbuf_t *err) {
  char shape[160];
  shape_text(a, shape, sizeof shape);
  if (a->dtype->kind != 'f' && a->dtype->size != 1)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: unsupported dtype '%s' for images; use uint8 ('|u1') or float32 "
                         "('<f4')",
                         a->name, a->dtype->descr);
  if (a->rank != 3 && a->rank != 4)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: shape %s is not a set of images: expected (N, H, W), (N, H, W, C) "
                         "or (N, C, H, W)",
                         a->name, shape);
  const uint64_t *s = a->shape;
  *nchw = a->rank == 4 && (s[1] == 1 || s[1] == 3) && s[3] != 1 && s[3] != 3;
  uint64_t cc = a->rank == 3 ? 1 : *nchw ? s[1] : s[3];
  uint64_t hh = *nchw ? s[2] : s[1], ww = *nchw ? s[3] : s[2];
  if (s[0] == 0 || s[0] > NPY_MAX_COUNT || cc == 0 || cc > NPY_MAX_SIDE || hh == 0 ||
      hh > NPY_MAX_SIDE || ww == 0 || ww > NPY_MAX_SIDE || cc * hh * ww > NPY_MAX_FEATURES)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: shape %s: expected 1 to %u images of 1 to %u pixels a side and "
                         "channels, at most %u values each",
                         a->name, shape, NPY_MAX_COUNT, NPY_MAX_SIDE, NPY_MAX_FEATURES);
  *c = (int)cc, *h = (int)hh, *w = (int)ww;
  return 0;
}

/* a's images into x (n, h, w, c), channels-last. */
static int convert_images(const npy_t *a, bool nchw, int c, int h, int w, float *x,
                          tsr_errbuf_t *err) {
  size_t n = (size_t)a->shape[0], f = (size_t)c * h * w, plane = (size_t)h * w;
  bool bytes = a->dtype->kind != 'f';
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < f; j++) {
      /* j indexes the file's sample; its place here is channels-last. */
      size_t to = nchw ? (j % plane) * (size_t)c + j / plane : j;
      double v = element(a, i * f + j);
      if (bytes) {
        x[i * f + to] = (float)v / 255.0f;
        continue;
      }
      if (!isfinite(v) || fabs(v) > FLT_MAX)
        return tsr_error_set(err, TSR_EFORMAT, "%s: image %zu holds %g, not a finite float32",
                             a->name, i + 1, v);
      x[i * f + to] = (float)v;
    }
  return 0;
}

static int convert_labels(const npy_t *a, float *y, int *max_label, tsr_errbuf_t *err) {
  for (size_t i = 0; i < (size_t)a->shape[0]; i++) {
    double v = element(a, i);
    if (v < 0 || v > NPY_MAX_LABEL)
      return tsr_error_set(err, TSR_EFORMAT, "%s: label %zu is %.0f; labels are integers 0 to %d",
                           a->name, i + 1, v, NPY_MAX_LABEL);
    y[i] = (float)v;
    if ((int)v > *max_label) *max_label = (int)v;
  }
  return 0;
}

static int check_labels(const npy_t *l, const npy_t *im, tsr_errbuf_t *err) {
  char shape[160];
  shape_text(l, shape, sizeof shape);
  if (l->dtype->kind == 'f')
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: unsupported dtype '%s' for labels; labels are integers: save "
                         "y.astype('int64')",
                         l->name, l->dtype->descr);
  if (!(l->rank == 1 || (l->rank == 2 && l->shape[1] == 1)))
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: shape %s is not a list of labels: expected (N,) or (N, 1)", l->name,
                         shape);
  if (l->shape[0] != im->shape[0])
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s holds %llu images but %s holds %llu labels; each image needs one "
                         "label",
                         im->name, (unsigned long long)im->shape[0], l->name,
                         (unsigned long long)l->shape[0]);
  return 0;
}

int tsr__dataset_load_npy_mem(tsr_dataset_t *ds, const void *images, size_t ilen, const char *iname,
                              const void *labels, size_t llen, const char *lname,
                              tsr_errbuf_t *err) {
  if (!ds || (!images && ilen) || (!labels && llen) || !iname || !lname)
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr__dataset_load_npy_mem: dataset, buffers and names must not be NULL");
  memset(ds, 0, sizeof *ds);
  npy_t im, lb;
  int c = 0, h = 0, w = 0, max_label = 0;
  bool nchw = false;
  /* Both headers and lengths before any conversion: a mismatch is found at once. */
  int rc = npy_header(&im, images, ilen, iname, err);
  if (rc == 0) rc = image_geometry(&im, &c, &h, &w, &nchw, err);
  if (rc == 0) rc = npy_data(&im, ilen, err);
  if (rc == 0) rc = npy_header(&lb, labels, llen, lname, err);
  if (rc == 0) rc = check_labels(&lb, &im, err);
  if (rc == 0) rc = npy_data(&lb, llen, err);
  if (rc) return rc;
  size_t n = (size_t)im.shape[0], f = (size_t)c * h * w;
  float *x = malloc(n * f * sizeof *x), *y = malloc(n * sizeof *y);
  if (!x || !y)
    rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory for %zu images of %dx%dx%d", iname, n, h,
                       w, c);
  if (rc == 0) rc = convert_images(&im, nchw, c, h, w, x, err);
  if (rc == 0) rc = convert_labels(&lb, y, &max_label, err);
  if (rc) {
    free(x), free(y);
    return rc;
  }
  *ds = (tsr_dataset_t){.n = (int64_t)n,
                        .features = (int64_t)f,
                        .classes = 1 + max_label,
                        .channels = c,
                        .height = h,
                        .width = w,
                        .x = x,
                        .y = y};
  return 0;
}

int tsr_dataset_load_npy(tsr_dataset_t *ds, const char *images_path, const char *labels_path,
                         tsr_errbuf_t *err) {
  if (!ds || !images_path || !labels_path)
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr_dataset_load_npy: dataset and paths must not be NULL");
  memset(ds, 0, sizeof *ds);
  tsr__mapped_t im, lb = {0};
  int rc = tsr__data_map(&im, images_path, ".npy images", err);
  if (rc == 0) rc = tsr__data_map(&lb, labels_path, ".npy labels", err);
  if (rc == 0)
    rc = tsr__dataset_load_npy_mem(ds, im.bytes, im.len, images_path, lb.bytes, lb.len, labels_path,
                                   err);
  tsr__data_unmap(&im);
  tsr__data_unmap(&lb);
  return rc;
}

/* ---- .npz ---- */

/* Loads the pair x_<set>.npy, y_<set>.npy of the archive into ds: 1 when loaded, 0 when the
 * archive has neither, negative on error (one without the other is an error). */
static int npz_pair(tsr_dataset_t *ds, const unsigned char *z, size_t len, const char *name,
                    const char *set, tsr_errbuf_t *err) {
  char xn[32], yn[32], members[256];
  snprintf(xn, sizeof xn, "x_%s.npy", set);
  snprintf(yn, sizeof yn, "y_%s.npy", set);
  tsr__zip_entry_t xe, ye = {0};
  int fx = tsr__zip_find(&xe, z, len, name, xn, members, sizeof members, err);
  int fy = fx < 0 ? 0 : tsr__zip_find(&ye, z, len, name, yn, NULL, 0, err);
  int rc = fx < 0 ? fx : fy < 0 ? fy : 0;
  if (rc == 0 && fx != fy)
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: holds %s but not %s; the images and the labels go together "
                       "(np.savez(path, x_%s=images, y_%s=labels))",
                       name, fx ? xn : yn, fx ? yn : xn, set, set);
  if (rc == 0 && !fx && strcmp(set, "train") == 0)
    rc = tsr_error_set(err, TSR_EFORMAT,
                       "%s: no x_train.npy and y_train.npy in the archive (it holds: %s); save "
                       "np.savez(path, x_train=images, y_train=labels[, x_test=..., y_test=...])",
                       name, members[0] ? members : "nothing");
  if (rc == 0 && fx) {
    char iname[NAME_BYTES], lname[NAME_BYTES];
    snprintf(iname, sizeof iname, "%s, member %s", name, xn);
    snprintf(lname, sizeof lname, "%s, member %s", name, yn);
    rc = tsr__dataset_load_npy_mem(ds, xe.data, xe.len, iname, ye.data, ye.len, lname, err);
    if (rc == 0) rc = 1;
  }
  tsr__zip_entry_fini(&xe);
  tsr__zip_entry_fini(&ye);
  return rc;
}

int tsr__dataset_load_npz_mem(tsr_dataset_t *train, tsr_dataset_t *test, const void *bytes,
                              size_t len, const char *name, tsr_errbuf_t *err) {
  if (!train || !test || (!bytes && len) || !name)
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr__dataset_load_npz_mem: datasets, bytes and name must not be NULL");
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  if (len == 0)
    return tsr_error_set(err, TSR_EFORMAT, "%s: empty file: expected a .npz archive (np.savez)",
                         name);
  int rc = npz_pair(train, bytes, len, name, "train", err);
  if (rc < 0) return rc;
  rc = npz_pair(test, bytes, len, name, "test", err);
  if (rc == 0) tsr__dataset_empty_like(test, train);
  if (rc == 1) {
    char tr[NAME_BYTES], te[NAME_BYTES];
    snprintf(tr, sizeof tr, "%s, member x_train.npy", name);
    snprintf(te, sizeof te, "%s, member x_test.npy", name);
    rc = tsr__dataset_check_pair(train, test, tr, te, err);
  }
  if (rc < 0) {
    tsr_dataset_fini(train);
    tsr_dataset_fini(test);
    return rc;
  }
  return 0;
}

int tsr_dataset_load_npz(tsr_dataset_t *train, tsr_dataset_t *test, const char *path,
                         tsr_errbuf_t *err) {
  if (!train || !test || !path)
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr_dataset_load_npz: datasets and path must not be NULL");
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  tsr__mapped_t z;
  int rc = tsr__data_map(&z, path, ".npz", err);
  if (rc == 0) rc = tsr__dataset_load_npz_mem(train, test, z.bytes, z.len, path, err);
  tsr__data_unmap(&z);
  return rc;
}
