/* Dataset-level operations that do not care where samples came from: finding
 * the train and test sets in a folder, cutting a set down for quick runs,
 * standardizing features, and freeing. A folder is searched for the IDX names
 * that MNIST and Fashion-MNIST ship under (Debian's dataset-fashion-mnist,
 * the original downloads), then CIFAR-10's and CIFAR-100's binary batches,
 * then NumPy's x_train.npy and y_train.npy (and x_test.npy, y_test.npy), then
 * train.csv and, optionally, test.csv; a file ending in .npz is an archive
 * of those arrays. */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/common.h"
#include "tessera/data.h"

#define DATASET_NAMES                                                                              \
  "train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz] and "   \
  "t10k-labels-idx1-ubyte[.gz] (IDX), data_batch_1.bin to data_batch_5.bin and test_batch.bin "    \
  "(CIFAR-10), train.bin and test.bin (CIFAR-100), x_train.npy and y_train.npy (NumPy), or "       \
  "train.csv and test.csv"

/* "x3" for a colour image's channels, "" for one channel (messages say 28x28, 32x32x3). */
static const char *channels_text(const tsr_dataset_t *ds, char *buf, size_t size) {
  if (ds->channels <= 1) return "";
  snprintf(buf, size, "x%d", ds->channels);
  return buf;
}

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
int tsr__dataset_check_pair(tsr_dataset_t *train, tsr_dataset_t *test, const char *train_path,
                            const char *test_path, tsr_errbuf_t *err) {
  if (test->features != train->features)
    return tsr_error_set(err, TSR_ESHAPE,
                         "%s has %lld features per sample but %s has %lld; the test set must "
                         "come from the same source as the training set",
                         test_path, (long long)test->features, train_path,
                         (long long)train->features);
  if (test->height != train->height || test->width != train->width ||
      test->channels != train->channels) {
    char a[16], b[16];
    return tsr_error_set(err, TSR_ESHAPE, "%s holds %dx%d%s images but %s holds %dx%d%s", test_path,
                         test->height, test->width, channels_text(test, a, sizeof a), train_path,
                         train->height, train->width, channels_text(train, b, sizeof b));
  }
  if (test->classes > train->classes)
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s has labels up to %d but %s only up to %d; a model trained on %s "
                         "cannot predict the extra classes",
                         test_path, test->classes - 1, train_path, train->classes - 1, train_path);
  test->classes = train->classes;
  return 0;
}

void tsr__dataset_empty_like(tsr_dataset_t *test, const tsr_dataset_t *train) {
  *test = (tsr_dataset_t){.features = train->features,
                          .classes = train->classes,
                          .channels = train->channels,
                          .height = train->height,
                          .width = train->width};
}

/* A part of a set found without the rest is a half-finished download or unpacking: say what is
 * missing rather than falling back to another format and reporting something unrelated. */
static int incomplete(const char *dir, const char *format, const char *const *names, int n,
                      int found, const char *suffix, tsr_errbuf_t *err) {
  char missing[512] = "";
  for (int i = 0; i < n; i++) {
    if (found & (1 << i)) continue;
    size_t used = strlen(missing);
    snprintf(missing + used, sizeof missing - used, "%s%s%s", used ? ", " : "", names[i], suffix);
  }
  return tsr_error_set(err, TSR_EIO, "%s: incomplete %s dataset: missing %s", dir, format, missing);
}

/* The IDX set of dir: 1 when loaded, 0 when dir holds none of its files, negative on error. A
 * colour set's images may be named idx4 (rank 4). */
static int load_idx_dir(tsr_dataset_t *train, tsr_dataset_t *test, const char *dir,
                        tsr_errbuf_t *err) {
  static const char *const idx_names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  static const char *const idx4_names[4] = {"train-images-idx4-ubyte", NULL,
                                            "t10k-images-idx4-ubyte", NULL};
  char idx[4][PATH_MAX];
  int found = 0, rc;
  for (int i = 0; i < 4; i++) {
    if ((rc = find_idx(idx[i], sizeof idx[i], dir, idx_names[i], err)) < 0) return rc;
    if (rc == 0 && idx4_names[i] &&
        (rc = find_idx(idx[i], sizeof idx[i], dir, idx4_names[i], err)) < 0)
      return rc;
    found |= rc << i;
  }
  if (found == 0) return 0;
  if (found != 0xf) return incomplete(dir, "IDX", idx_names, 4, found, "[.gz]", err);
  if ((rc = tsr_dataset_load_idx(train, idx[0], idx[1], err)) < 0) return rc;
  if ((rc = tsr_dataset_load_idx(test, idx[2], idx[3], err)) < 0) return rc;
  if ((rc = tsr__dataset_check_pair(train, test, idx[0], idx[2], err)) < 0) return rc;
  return 1;
}

/* Finds names[0..n) in dir into paths: the mask of those found. */
static int find_all(char (*paths)[PATH_MAX], const char *dir, const char *const *names, int n,
                    int *found, tsr_errbuf_t *err) {
  *found = 0;
  for (int i = 0; i < n; i++) {
    int rc = join(paths[i], PATH_MAX, dir, names[i], "", err);
    if (rc < 0) return rc;
    *found |= is_file(paths[i]) << i;
  }
  return 0;
}

/* CIFAR-10's or CIFAR-100's binary batches in dir: 1 when loaded, 0 when none is there. */
static int load_cifar_dir(tsr_dataset_t *train, tsr_dataset_t *test, const char *dir,
                          tsr_errbuf_t *err) {
  static const char *const ten[6] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                     "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
  static const char *const hundred[2] = {"train.bin", "test.bin"};
  char paths[6][PATH_MAX];
  const char *p[6];
  int found, rc;
  if ((rc = find_all(paths, dir, ten, 6, &found, err)) < 0) return rc;
  for (int i = 0; i < 6; i++)
    p[i] = paths[i];
  if (found == 0x3f) {
    if ((rc = tsr_dataset_load_cifar(train, p, 5, 1, err)) < 0) return rc;
    if ((rc = tsr_dataset_load_cifar(test, p + 5, 1, 1, err)) < 0) return rc;
    return 1;
  }
  if (found) return incomplete(dir, "CIFAR-10", ten, 6, found, "", err);
  if ((rc = find_all(paths, dir, hundred, 2, &found, err)) < 0) return rc;
  if (found == 0) return 0;
  if (found != 3) return incomplete(dir, "CIFAR-100", hundred, 2, found, "", err);
  if ((rc = tsr_dataset_load_cifar(train, p, 1, 2, err)) < 0) return rc;
  if ((rc = tsr_dataset_load_cifar(test, p + 1, 1, 2, err)) < 0) return rc;
  return 1;
}

/* x_train.npy and y_train.npy (optionally x_test.npy and y_test.npy) in dir, the arrays of a .npz
 * unpacked: 1 when loaded, 0 when none is there. */
static int load_npy_dir(tsr_dataset_t *train, tsr_dataset_t *test, const char *dir,
                        tsr_errbuf_t *err) {
  static const char *const names[4] = {"x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy"};
  char paths[4][PATH_MAX];
  int found, rc;
  if ((rc = find_all(paths, dir, names, 4, &found, err)) < 0) return rc;
  if (found == 0) return 0;
  if ((found & 3) != 3 || (found & 12) == 4 || (found & 12) == 8)
    return incomplete(dir, ".npy", names, 4, found | ((found & 12) ? 0 : 12), "", err);
  if ((rc = tsr_dataset_load_npy(train, paths[0], paths[1], err)) < 0) return rc;
  if (!(found & 4)) {
    tsr__dataset_empty_like(test, train);
    return 1;
  }
  if ((rc = tsr_dataset_load_npy(test, paths[2], paths[3], err)) < 0) return rc;
  if ((rc = tsr__dataset_check_pair(train, test, paths[0], paths[2], err)) < 0) return rc;
  return 1;
}

static int load_csv_dir(tsr_dataset_t *train, tsr_dataset_t *test, const char *dir,
                        tsr_errbuf_t *err) {
  char train_csv[PATH_MAX], test_csv[PATH_MAX];
  int rc;
  if ((rc = join(train_csv, sizeof train_csv, dir, "train.csv", "", err)) < 0) return rc;
  if ((rc = join(test_csv, sizeof test_csv, dir, "test.csv", "", err)) < 0) return rc;
  int have_train = is_file(train_csv), have_test = is_file(test_csv);
  if (have_train) {
    if ((rc = tsr_dataset_load_csv(train, train_csv, err)) < 0) return rc;
    /* No test.csv: an empty test set of the training set's shape (nothing is evaluated). */
    if (!have_test) {
      tsr__dataset_empty_like(test, train);
      return 1;
    }
    if ((rc = tsr_dataset_load_csv(test, test_csv, err)) < 0) return rc;
    if ((rc = tsr__dataset_check_pair(train, test, train_csv, test_csv, err)) < 0) return rc;
    return 1;
  }
  if (have_test)
    return tsr_error_set(err, TSR_EIO,
                         "%s: found test.csv but not train.csv; a CSV dataset needs train.csv "
                         "(test.csv is optional)",
                         dir);
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
  size_t len = strlen(dir);
  if (!S_ISDIR(st.st_mode) && len > 4 && strcmp(dir + len - 4, ".npz") == 0)
    return tsr_dataset_load_npz(train, test, dir, err);
  if (!S_ISDIR(st.st_mode))
    return tsr_error_set(err, TSR_EINVAL,
                         "%s: is a file, not a folder or a .npz archive; pass the folder that "
                         "holds " DATASET_NAMES,
                         dir);

  static int (*const loaders[])(tsr_dataset_t *, tsr_dataset_t *, const char *, tsr_errbuf_t *) = {
      load_idx_dir, load_cifar_dir, load_npy_dir, load_csv_dir};
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < sizeof loaders / sizeof *loaders; i++)
    rc = loaders[i](train, test, dir, err);
  if (rc > 0) return 0;
  if (rc == 0)
    rc = tsr_error_set(err, TSR_EIO,
                       "%s: no dataset found: expected " DATASET_NAMES
                       " (Fashion-MNIST is in Debian's dataset-fashion-mnist package, at "
                       "" TSR_DEFAULT_DATA_DIR ")",
                       dir);
  tsr_dataset_fini(train);
  tsr_dataset_fini(test);
  return rc;
}

/* Labels per sample (a text window's T targets; targets 0 is read as 1) and in all. */
static int64_t per_sample(const tsr_dataset_t *ds) {
  return ds->targets > 1 ? ds->targets : 1;
}

static int64_t labels_of(const tsr_dataset_t *ds) {
  return ds->n * per_sample(ds);
}

int tsr_dataset_set_classes(tsr_dataset_t *ds, int classes, const char *what, tsr_errbuf_t *err) {
  if (classes < 2) return tsr_error_set(err, TSR_EINVAL, "at least 2 classes (got %d)", classes);
  for (int64_t i = 0; i < labels_of(ds); i++)
    if (ds->y[i] >= (float)classes)
      return tsr_error_set(err, TSR_EFORMAT,
                           "%s: sample %lld has label %.0f, but there are %d classes (labels 0 to "
                           "%d)",
                           what, (long long)(i / per_sample(ds)) + 1, (double)ds->y[i], classes,
                           classes - 1);
  ds->classes = classes;
  return 0;
}

void tsr_dataset_class_counts(const tsr_dataset_t *ds, int64_t *counts) {
  memset(counts, 0, sizeof *counts * (size_t)ds->classes);
  for (int64_t i = 0; i < labels_of(ds); i++) {
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
  float *y = realloc(ds->y, (size_t)labels_of(ds) * sizeof *y);
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
  for (int64_t i = 0; i < labels_of(ds); i += 7)
    sum += ds->y[i];
  snprintf(buf, size, "%lld x %lld, %d classes, checksum %.9g", (long long)ds->n,
           (long long)ds->features, ds->classes, sum);
}
