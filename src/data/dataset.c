/* Dataset-level operations that do not care where samples came from: finding
 * the train and test sets in a folder, cutting a set down for quick runs,
 * standardizing features, and freeing. A folder is searched for the IDX names
 * that MNIST and Fashion-MNIST ship under (Debian's dataset-fashion-mnist,
 * the original downloads), then for train.csv and, optionally, test.csv. */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tessera/data.h"

#define IDX_NAMES                                                                                  \
  "train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz] and "   \
  "t10k-labels-idx1-ubyte[.gz]"

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

static int join(char *out, size_t size, const char *dir, const char *name, const char *ext,
                tsr_errbuf_t *err) {
  int len = snprintf(out, size, "%s/%s%s", dir, name, ext);
  if (len < 0 || (size_t)len >= size)
    return tsr_error_set(err, TSR_EINVAL, "%s: folder path is too long", dir);
  return 0;
}

/* Finds dir/name or dir/name.gz. Returns 1 if found (path in out), 0 if
 * neither exists, negative on error. The plain file wins when both exist:
 * it is what a user who unpacked the archive means to use. */
static int find_idx(char *out, size_t size, const char *dir, const char *name, tsr_errbuf_t *err) {
  int rc;
  if ((rc = join(out, size, dir, name, "", err)) < 0) return rc;
  if (is_file(out)) return 1;
  if ((rc = join(out, size, dir, name, ".gz", err)) < 0) return rc;
  return is_file(out);
}

/* Test labels beyond the training classes could never be predicted, so they
 * are an error; a test set that merely lacks the largest class is normal
 * (small subsets) and takes the training class count, so both sets agree. */
static int check_pair(tsr_dataset_t *train, tsr_dataset_t *test, const char *train_path,
                      const char *test_path, tsr_errbuf_t *err) {
  if (test->features != train->features)
    return tsr_error_set(err, TSR_ESHAPE,
                         "%s has %lld features per sample but %s has %lld; the test set must "
                         "come from the same source as the training set",
                         test_path, (long long)test->features, train_path,
                         (long long)train->features);
  if (test->height != train->height || test->width != train->width)
    return tsr_error_set(err, TSR_ESHAPE, "%s holds %dx%d images but %s holds %dx%d", test_path,
                         test->height, test->width, train_path, train->height, train->width);
  if (test->classes > train->classes)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s has labels up to %d but %s only up to %d; a model trained on %s "
                         "cannot predict the extra classes",
                         test_path, test->classes - 1, train_path, train->classes - 1, train_path);
  test->classes = train->classes;
  return 0;
}

int tsr_dataset_load_dir(tsr_dataset_t *train, tsr_dataset_t *test, const char *dir,
                         tsr_errbuf_t *err) {
  if (!train || !test || !dir)
    return tsr_error_set(err, TSR_EINVAL,
                         "tsr_dataset_load_dir: datasets and folder must not be NULL");
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);

  struct stat st;
  if (stat(dir, &st) != 0)
    return tsr_error_set(err, TSR_EIO, "%s: cannot open the data folder: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return tsr_error_set(err, TSR_EINVAL,
                         "%s: is a file, not a folder; pass the folder that holds " IDX_NAMES
                         ", or train.csv and test.csv",
                         dir);

  static const char *const idx_names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  char idx[4][PATH_MAX];
  int found = 0, rc;
  for (int i = 0; i < 4; i++) {
    if ((rc = find_idx(idx[i], sizeof idx[i], dir, idx_names[i], err)) < 0) return rc;
    found |= rc << i;
  }

  if (found == 0xf) {
    if ((rc = tsr_dataset_load_idx(train, idx[0], idx[1], err)) < 0) goto fail;
    if ((rc = tsr_dataset_load_idx(test, idx[2], idx[3], err)) < 0) goto fail;
    if ((rc = check_pair(train, test, idx[0], idx[2], err)) < 0) goto fail;
    return 0;
  }
  if (found != 0) {
    /* Part of an IDX set is a half-finished download: say which part is missing
     * rather than falling back to CSV and reporting something unrelated. */
    char missing[256] = "";
    for (int i = 0; i < 4; i++) {
      if (found & (1 << i)) continue;
      size_t used = strlen(missing);
      snprintf(missing + used, sizeof missing - used, "%s%s[.gz]", used ? ", " : "", idx_names[i]);
    }
    return tsr_error_set(err, TSR_EIO, "%s: incomplete IDX dataset: missing %s", dir, missing);
  }

  char train_csv[PATH_MAX], test_csv[PATH_MAX];
  if ((rc = join(train_csv, sizeof train_csv, dir, "train.csv", "", err)) < 0) return rc;
  if ((rc = join(test_csv, sizeof test_csv, dir, "test.csv", "", err)) < 0) return rc;
  int have_train = is_file(train_csv), have_test = is_file(test_csv);
  if (have_train) {
    if ((rc = tsr_dataset_load_csv(train, train_csv, err)) < 0) goto fail;
    /* No test.csv: an empty test set of the training set's shape (nothing is evaluated). */
    if (!have_test) {
      *test = (tsr_dataset_t){.features = train->features,
                              .classes = train->classes,
                              .channels = train->channels,
                              .height = train->height,
                              .width = train->width};
      return 0;
    }
    if ((rc = tsr_dataset_load_csv(test, test_csv, err)) < 0) goto fail;
    if ((rc = check_pair(train, test, train_csv, test_csv, err)) < 0) goto fail;
    return 0;
  }
  if (have_test)
    return tsr_error_set(err, TSR_EIO,
                         "%s: found test.csv but not train.csv; a CSV dataset needs train.csv "
                         "(test.csv is optional)",
                         dir);
  return tsr_error_set(
      err, TSR_EIO,
      "%s: no dataset found: expected " IDX_NAMES ", or train.csv and test.csv "
      "(Fashion-MNIST is in Debian's dataset-fashion-mnist package, at " TSR_DEFAULT_DATA_DIR ")",
      dir);
fail:
  tsr_dataset_fini(train);
  tsr_dataset_fini(test);
  return rc;
}

int tsr_dataset_set_classes(tsr_dataset_t *ds, int classes, const char *what, tsr_errbuf_t *err) {
  if (classes < 2) return tsr_error_set(err, TSR_EINVAL, "at least 2 classes (got %d)", classes);
  for (int64_t i = 0; i < ds->n; i++)
    if (ds->y[i] >= (float)classes)
      return tsr_error_set(err, TSR_EFORMAT,
                           "%s: sample %lld has label %.0f, but there are %d classes (labels 0 to "
                           "%d)",
                           what, (long long)i + 1, (double)ds->y[i], classes, classes - 1);
  ds->classes = classes;
  return 0;
}

void tsr_dataset_class_counts(const tsr_dataset_t *ds, int64_t *counts) {
  memset(counts, 0, sizeof *counts * (size_t)ds->classes);
  for (int64_t i = 0; i < ds->n; i++) {
    int c = (int)ds->y[i];
    if (c >= 0 && c < ds->classes) counts[c]++;
  }
}

int tsr_dataset_truncate(tsr_dataset_t *ds, int64_t n) {
  if (!ds || n < 0 || n > ds->n) return TSR_EINVAL;
  /* classes stays: a subset that lacks the largest label must still build
   * the same output layer as the full set. */
  ds->n = n;
  if (n == 0) return 0; /* keep the buffers; realloc to 0 bytes is implementation-defined */
  float *x = realloc(ds->x, (size_t)n * (size_t)ds->features * sizeof *x);
  if (x) ds->x = x;
  float *y = realloc(ds->y, (size_t)n * sizeof *y);
  if (y) ds->y = y;
  return 0;
}

void tsr_dataset_stats(const tsr_dataset_t *ds, float *mean, float *std) {
  double m = 0.0, var = 0.0;
  size_t count = ds && ds->x ? (size_t)ds->n * (size_t)ds->features : 0;
  if (count > 0) {
    /* Two passes in double: one-pass sums of squares cancel badly when the
     * mean is large against the spread (raw 0-255 pixels). */
    double sum = 0.0;
    for (size_t i = 0; i < count; i++)
      sum += ds->x[i];
    m = sum / (double)count;
    double sq = 0.0;
    for (size_t i = 0; i < count; i++) {
      double d = ds->x[i] - m;
      sq += d * d;
    }
    var = sq / (double)count;
  }
  if (mean) *mean = (float)m;
  if (std) *std = (float)sqrt(var);
}

void tsr_dataset_normalize(tsr_dataset_t *ds, float mean, float std) {
  if (!ds || !ds->x) return;
  /* A constant feature set has std 0; dividing would make every value inf
   * or NaN, so only the mean is removed then. */
  float scale = std > 0.0f && isfinite(std) ? 1.0f / std : 1.0f;
  size_t count = (size_t)ds->n * (size_t)ds->features;
  for (size_t i = 0; i < count; i++)
    ds->x[i] = (ds->x[i] - mean) * scale;
}

void tsr_dataset_standardize(tsr_dataset_t *train, tsr_dataset_t *test) {
  float mean, std;
  tsr_dataset_stats(train, &mean, &std);
  tsr_dataset_normalize(train, mean, std);
  if (test) tsr_dataset_normalize(test, mean, std);
}

void tsr_dataset_fini(tsr_dataset_t *ds) {
  if (!ds) return;
  free(ds->x);
  free(ds->y);
  memset(ds, 0, sizeof *ds);
}

void tsr_dataset_fingerprint(const tsr_dataset_t *ds, char *buf, size_t size) {
  /* Every 997th value and every 7th label: cheap, and any edit of the data a
   * user would make (another set, another subset, another standardization)
   * changes it. */
  double sum = 0;
  for (int64_t i = 0; i < ds->n * ds->features; i += 997)
    sum += ds->x[i];
  for (int64_t i = 0; i < ds->n; i += 7)
    sum += ds->y[i];
  snprintf(buf, size, "%lld x %lld, %d classes, checksum %.9g", (long long)ds->n,
           (long long)ds->features, ds->classes, sum);
}
