/* CIFAR-10 and CIFAR-100 in their binary versions (cifar-10-binary.tar.gz: data_batch_1.bin to
 * data_batch_5.bin and test_batch.bin; cifar-100-binary.tar.gz: train.bin and test.bin). A file is
 * records and nothing else: the label byte(s), then 3,072 pixel bytes, channel-major (1,024 red,
 * 1,024 green, 1,024 blue, each 32x32 row-major). A sample here is channels-last, (32, 32, 3), as
 * every image in tessera, so each record is transposed; pixels become p / 255 as IDX's do.
 * CIFAR-100 has a coarse then a fine label byte: the fine label (100 classes) is the one kept.
 *
 * The format has no header, so the only checks are the ones it allows, made before anything is
 * converted: a length that is a whole number of records (a truncated download, or another file,
 * is caught by its size), and every label below the class count. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/cifar.h"
#include "data/common.h"
#include "tessera/data.h"

enum { SIDE = 32, PLANE = SIDE * SIDE, PIXELS = 3 * PLANE };
#define CIFAR_MAX_RECORDS 100000000u

static const char *set_name(int label_bytes) {
  return label_bytes == 2 ? "CIFAR-100" : "CIFAR-10";
}

/* The number of records in len bytes, or an error naming the file when len is not a whole
 * number of them. */
static int count_records(size_t len, const char *name, int label_bytes, size_t *records,
                         tsr_errbuf_t *err) {
  size_t rec = (size_t)label_bytes + PIXELS;
  const char *set = set_name(label_bytes);
  const char *labels = label_bytes == 2 ? "2 label bytes" : "1 label byte";
  if (len == 0)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: empty file: a %s binary file holds records of %zu bytes (%s + "
                         "3,072 pixel bytes)",
                         name, set, rec, labels);
  if (len % rec != 0)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: %zu bytes is not a whole number of %zu-byte %s records (%s + 3,072 "
                         "pixel bytes): %zu records and %zu bytes over; the file is truncated or "
                         "not a %s binary batch",
                         name, len, rec, set, labels, len / rec, len % rec, set);
  if (len / rec > CIFAR_MAX_RECORDS)
    return tsr_error_set(err, TSR_EFORMAT, "%s: %zu records, more than the %u a set may hold", name,
                         len / rec, CIFAR_MAX_RECORDS);
  *records = len / rec;
  return 0;
}

/* Converts n records into x (n, 32, 32, 3) and y (n), after checking every label. */
static int convert(const unsigned char *b, size_t n, const char *name, int label_bytes, float *x,
                   float *y, tsr_errbuf_t *err) {
  size_t rec = (size_t)label_bytes + PIXELS;
  int classes = label_bytes == 2 ? 100 : 10;
  for (size_t i = 0; i < n; i++) {
    unsigned label = b[i * rec + (size_t)label_bytes - 1];
    if (label >= (unsigned)classes)
      return tsr_error_set(err, TSR_EFORMAT,
                           "%s: record %zu has label %u; %s labels are 0 to %d (%s)", name, i + 1,
                           label, set_name(label_bytes), classes - 1,
                           label_bytes == 1 ? "CIFAR-100's files are train.bin and test.bin"
                                            : "the second byte, the fine label");
    y[i] = (float)label;
  }
  for (size_t i = 0; i < n; i++) {
    const unsigned char *pix = b + i * rec + label_bytes;
    float *row = x + i * PIXELS;
    /* Division, not multiplication by 1/255, as IDX: each pixel the correctly rounded p/255. */
    for (int c = 0; c < 3; c++)
      for (int p = 0; p < PLANE; p++)
        row[p * 3 + c] = (float)pix[c * PLANE + p] / 255.0f;
  }
  return 0;
}

static void fill(tsr_dataset_t *ds, size_t n, int label_bytes, float *x, float *y) {
  *ds = (tsr_dataset_t){.n = (int64_t)n,
                        .features = PIXELS,
                        .classes = label_bytes == 2 ? 100 : 10,
                        .channels = 3,
                        .height = SIDE,
                        .width = SIDE,
                        .x = x,
                        .y = y};
}

static int alloc_set(size_t n, float **x, float **y, const char *name, tsr_errbuf_t *err) {
  *x = malloc(n * PIXELS * sizeof **x);
  *y = malloc(n * sizeof **y);
  if (*x && *y) return 0;
  free(*x), free(*y);
  *x = *y = NULL;
  return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory for %zu images of 32x32x3", name, n);
}

int tsr__dataset_load_cifar_mem(tsr_dataset_t *ds, const void *bytes, size_t len, const char *name,
                                int label_bytes, tsr_errbuf_t *err) {
  if (!ds || (!bytes && len) || !name || (label_bytes != 1 && label_bytes != 2))
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr__dataset_load_cifar_mem: dataset, bytes and name must not be NULL, "
                         "label_bytes 1 or 2");
  memset(ds, 0, sizeof *ds);
  size_t n;
  float *x, *y;
  int rc = count_records(len, name, label_bytes, &n, err);
  if (rc == 0) rc = alloc_set(n, &x, &y, name, err);
  if (rc) return rc;
  if ((rc = convert(bytes, n, name, label_bytes, x, y, err)) < 0) {
    free(x), free(y);
    return rc;
  }
  fill(ds, n, label_bytes, x, y);
  return 0;
}

int tsr_dataset_load_cifar(tsr_dataset_t *ds, const char *const *paths, int npaths, int label_bytes,
                           tsr_errbuf_t *err) {
  if (!ds || !paths || npaths < 1 || (label_bytes != 1 && label_bytes != 2))
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr_dataset_load_cifar: dataset and paths must not be NULL, npaths >= "
                         "1, label_bytes 1 or 2");
  memset(ds, 0, sizeof *ds);
  const char *what = label_bytes == 2 ? "CIFAR-100 binary" : "CIFAR-10 binary";
  tsr__mapped_t *files = calloc((size_t)npaths, sizeof *files);
  if (!files) return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", paths[0]);
  size_t total = 0, n;
  float *x = NULL, *y = NULL;
  int rc = 0;
  /* Every file's length first: a truncated last batch is found before 150 MB are converted. */
  for (int i = 0; rc == 0 && i < npaths; i++) {
    rc = tsr__data_map(&files[i], paths[i], what, err);
    if (rc == 0) rc = count_records(files[i].len, paths[i], label_bytes, &n, err);
    if (rc == 0 && (total += n) > CIFAR_MAX_RECORDS)
      rc = tsr_error_set(err, TSR_EFORMAT, "%s: more than %u records in all", paths[i],
                         CIFAR_MAX_RECORDS);
  }
  if (rc == 0) rc = alloc_set(total, &x, &y, paths[0], err);
  size_t at = 0;
  for (int i = 0; rc == 0 && i < npaths; i++) {
    n = files[i].len / ((size_t)label_bytes + PIXELS);
    rc = convert(files[i].bytes, n, paths[i], label_bytes, x + at * PIXELS, y + at, err);
    at += n;
  }
  for (int i = 0; i < npaths; i++)
    tsr__data_unmap(&files[i]);
  free(files);
  if (rc) {
    free(x), free(y);
    return rc;
  }
  fill(ds, total, label_bytes, x, y);
  return 0;
}
