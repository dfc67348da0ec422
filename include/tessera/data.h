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

/* Standardizes a training set and its test set the way tsr_train's callers
 * should: the training set's mean and std (tsr_dataset_stats), applied to the
 * training set and to test (tsr_dataset_normalize), so the test set is seen
 * through the statistics the net was trained with, never its own. train and
 * test are borrowed and changed in place; test may be NULL or empty. */
TSR_API void tsr_dataset_standardize(tsr_dataset_t *train, tsr_dataset_t *test);

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
