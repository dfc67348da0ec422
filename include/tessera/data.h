/* Datasets: labelled samples held in memory as float32 rows.
 *
 * Loaders validate everything they read (magic, rank, dimensions, counts,
 * file length) and reject a bad file with a message naming the file and what
 * is wrong; they never crash on bad input. */
#ifndef TESSERA_DATA_H
#define TESSERA_DATA_H

#include <stdint.h>

#include "tessera/error.h"

TSR_EXTERN_C_BEGIN

typedef struct {
  int64_t n;                   /* number of samples */
  int64_t features;            /* columns per sample (784 for 28x28 images) */
  int classes;                 /* 1 + largest label, or as set by tsr_dataset_set_classes */
  int channels, height, width; /* image geometry where known (1, 28, 28), else (1, 1, features) */
  float *x;                    /* (n, features) row-major, owned */
  float *y;                    /* (n, 1) labels as exact small integers in float, owned */
} tsr_dataset_t;

/* Reads an IDX images file (rank 3, unsigned bytes) and its IDX labels file
 * (rank 1, unsigned bytes), plain or gzip. Pixels are scaled to [0, 1].
 * On success ds is filled and owned by the caller (tsr_dataset_fini). */
TSR_API int tsr_dataset_load_idx(tsr_dataset_t *ds, const char *images_path,
                                 const char *labels_path, tsr_errbuf_t *err);

/* Reads a CSV file: one sample per line, label in the first column, then
 * features; an optional header line (first field not a number) is skipped. */
TSR_API int tsr_dataset_load_csv(tsr_dataset_t *ds, const char *path, tsr_errbuf_t *err);

/* Loads the train and test sets found in a folder: Fashion-MNIST/MNIST IDX
 * names (train-images-idx3-ubyte[.gz], ...) or train.csv with an optional
 * test.csv; without test.csv, test is empty (n 0) with the training set's
 * features and classes. */
TSR_API int tsr_dataset_load_dir(tsr_dataset_t *train, tsr_dataset_t *test, const char *dir,
                                 tsr_errbuf_t *err);

/* Sets the number of classes to `classes` (>= 2), after checking that every
 * label is below it: a label that is not is an error naming ds (`what`, e.g.
 * "the training set"), the sample and the label. */
TSR_API int tsr_dataset_set_classes(tsr_dataset_t *ds, int classes, const char *what,
                                    tsr_errbuf_t *err);

/* Samples per class: counts[c] for c in 0 .. ds->classes - 1 (caller's array). */
TSR_API void tsr_dataset_class_counts(const tsr_dataset_t *ds, int64_t *counts);

/* Keeps the first n samples (n <= ds->n). */
TSR_API int tsr_dataset_truncate(tsr_dataset_t *ds, int64_t n);

/* Standardizes features in place with the given mean and std (same for all
 * features); tsr_dataset_stats computes them over a dataset. */
TSR_API void tsr_dataset_stats(const tsr_dataset_t *ds, float *mean, float *std);
TSR_API void tsr_dataset_normalize(tsr_dataset_t *ds, float mean, float std);

/* Standardizes a training set and its test set with one mean and std (scalar): the training
 * set's mean and std (tsr_dataset_stats), applied to the
 * training set and to test (tsr_dataset_normalize), so the test set is seen
 * through the statistics the net was trained with, never its own. train and
 * test are borrowed and changed in place; test may be NULL or empty. */
TSR_API void tsr_dataset_standardize(tsr_dataset_t *train, tsr_dataset_t *test);

/* How inputs are standardized (tessera train --standardize): one mean and std over every feature
 * (scalar: images, whose pixels share a scale), a mean and std per feature column (column:
 * tabular data, whose columns do not), or not at all (none). */
typedef enum {
  TSR_STANDARDIZE_AUTO,   /* column for tabular data (CSV: no image geometry), scalar for images */
  TSR_STANDARDIZE_SCALAR, /* tsr_dataset_stats, tsr_dataset_normalize */
  TSR_STANDARDIZE_COLUMN,
  TSR_STANDARDIZE_NONE,
} tsr_standardize_t;

/* A standardization fitted to a training set: x[i][j] becomes (x[i][j] - mean[j']) * (1 / std[j'])
 * in float32, j' = j for column and 0 for scalar; a std of 0 (a constant column) or not finite
 * removes only the mean. */
typedef struct {
  tsr_standardize_t kind; /* scalar, column or none, never auto once fitted */
  int64_t n;              /* entries of mean and std: 1 (scalar), the features (column), 0 (none) */
  float *mean, *std;      /* (n) owned; NULL when n is 0 */
} tsr_standardization_t;

/* "scalar", "column", "none" or "auto" into *kind; TSR_EINVAL for another name. */
TSR_API int tsr_standardize_parse(const char *name, tsr_standardize_t *kind);
/* The name of kind ("scalar", ...). */
TSR_API const char *tsr_standardize_name(tsr_standardize_t kind);

/* Fits s (the caller's to fini) to train (borrowed): kind's statistics over every training
 * sample, in double, rounded to float32; auto picks column or scalar by train's geometry.
 * TSR_ENOMEM. */
TSR_API int tsr_standardization_fit(tsr_standardization_t *s, tsr_standardize_t kind,
                                    const tsr_dataset_t *train, tsr_errbuf_t *err);
/* Applies s to ds in place (train and test alike, so the test set is seen through the training
 * statistics). TSR_ESHAPE, naming what (e.g. "the test set"), when a column standardization
 * has another number of features than ds. */
TSR_API int tsr_standardization_apply(const tsr_standardization_t *s, tsr_dataset_t *ds,
                                      const char *what, tsr_errbuf_t *err);
TSR_API void tsr_standardization_fini(tsr_standardization_t *s);

TSR_API void tsr_dataset_fini(tsr_dataset_t *ds);

/* A short text that tells datasets apart ("60000 x 784, 10 classes, checksum ..."): what a
 * checkpoint records of the data it was trained on. */
TSR_API void tsr_dataset_fingerprint(const tsr_dataset_t *ds, char *buf, size_t size);

/* Writes epoch `epoch`'s sample order into order[0..n): a permutation of
 * 0..n-1 that depends only on (seed, epoch), a different one for each epoch
 * (tsr_train visits epoch e, 1-based, in this order). Epoch 0 is 0..n-1. */
TSR_API void tsr_dataset_epoch_order(int32_t *order, int64_t n, uint64_t seed, int epoch);

/* Default location of Fashion-MNIST from Debian's dataset-fashion-mnist. */
#define TSR_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

TSR_EXTERN_C_END

#endif
