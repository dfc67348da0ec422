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
  float *y;                    /* (n, targets) labels as exact small integers in float, owned */
  /* labels per sample: 1 (0 is read as 1), or a text set's T, the next token at each of a
   * window's T positions (tsr_dataset_load_text) */
  int targets;
} tsr_dataset_t;

/* Samples of images are channels-last rows: pixel (r, c), channel k of sample i is
 * x[i * features + (r * width + c) * channels + k], features = height * width * channels. */

/* Reads an IDX images file (unsigned bytes, rank 3: n, h, w; or rank 4: n, h, w, c, channels-last
 * as the dimensions read, magic 0x00000804) and its IDX labels file (rank 1, unsigned bytes),
 * plain or gzip. Pixels are scaled to [0, 1].
 * On success ds is filled and owned by the caller (tsr_dataset_fini). */
TSR_API int tsr_dataset_load_idx(tsr_dataset_t *ds, const char *images_path,
                                 const char *labels_path, tsr_errbuf_t *err);

/* Reads a CSV file: one sample per line, label in the first column, then
 * features; an optional header line (first field not a number) is skipped. */
TSR_API int tsr_dataset_load_csv(tsr_dataset_t *ds, const char *path, tsr_errbuf_t *err);

/* Reads CIFAR binary files, paths[0..npaths) (borrowed) concatenated in that order: records of
 * label_bytes label bytes (1: CIFAR-10, labels 0-9; 2: CIFAR-100, coarse then fine label, the
 * fine one kept, 0-99) and 3,072 pixel bytes, channel-major (1,024 R, 1,024 G, 1,024 B, each 32x32
 * row-major), transposed to channels-last (32, 32, 3) and scaled to [0, 1]; classes is 10 or 100.
 * TSR_EFORMAT naming the file for an empty file, a length that is not a whole number of records,
 * or a label out of range; TSR_EIO for a file that cannot be read. */
TSR_API int tsr_dataset_load_cifar(tsr_dataset_t *ds, const char *const *paths, int npaths,
                                   int label_bytes, tsr_errbuf_t *err);

/* Reads a NumPy images .npy and its labels .npy (np.save, format 1.0, 2.0 or 3.0, C order).
 * Images: uint8 '|u1' (scaled to [0, 1]), float32 '<f4' or float64 '<f8' (kept, each finite);
 * shaped (N, H, W) (one channel), or (N, C, H, W) when dim 1 is 1 or 3 and the last is neither
 * (transposed to channels-last), else (N, H, W, C). Labels: little-endian integers ('|u1', '<i4',
 * '<i8', ...) 0 to 16777215, shaped (N,) or (N, 1). TSR_EFORMAT naming the file for a wrong
 * magic, version or header, an unsupported dtype, Fortran order, a shape that is not images or
 * labels, counts that differ, or a data length other than the header's. */
TSR_API int tsr_dataset_load_npy(tsr_dataset_t *ds, const char *images_path,
                                 const char *labels_path, tsr_errbuf_t *err);

/* Reads a .npz archive (np.savez, stored, or np.savez_compressed, deflated) holding x_train.npy
 * and y_train.npy, and optionally x_test.npy and y_test.npy, each as tsr_dataset_load_npy reads
 * them; without the test pair test is empty (n 0) of the training set's shape. */
TSR_API int tsr_dataset_load_npz(tsr_dataset_t *train, tsr_dataset_t *test, const char *path,
                                 tsr_errbuf_t *err);

/* Loads the train and test sets found in a folder, in this order: Fashion-MNIST/MNIST IDX
 * names (train-images-idx3-ubyte[.gz] or -idx4- for rank 4, ...), CIFAR-10's data_batch_1.bin to
 * data_batch_5.bin and test_batch.bin, CIFAR-100's train.bin and test.bin, NumPy's x_train.npy
 * and y_train.npy (x_test.npy and y_test.npy optional), or train.csv with an optional
 * test.csv; a part of a set without the rest is an error saying what is missing. dir may also be
 * a .npz file (tsr_dataset_load_npz). Without a test set, test is empty (n 0) with the training
 * set's features and classes. */
TSR_API int tsr_dataset_load_dir(tsr_dataset_t *train, tsr_dataset_t *test, const char *dir,
                                 tsr_errbuf_t *err);

/* Text for a language model, byte-level: a token is a byte (vocabulary TSR_TEXT_VOCAB = 256,
 * nothing to learn or ship). paths[0..npaths) (borrowed) are read whole and concatenated in that
 * order, then cut into windows of `context` (T) tokens at stride T: window i's x row is the
 * tokens [iT, iT + T) as floats, its y row the tokens [iT + 1, iT + T + 1) (the next byte at each
 * position), so n = floor((bytes - 1) / T) windows. The last floor(n test_fraction) windows
 * (test_fraction in [0, 1); 0: test is empty) go to test, contiguous, the end of the text; the
 * rest to train. Both sets: features T, channels 1, height T, width 1, targets T, classes 256.
 * Memory: 8 bytes per token (x and y in float32), 20 MB for a text of 2.5 MB.
 * Refused before anything is read, naming the file and the fix: a path that is not a regular
 * file (a folder, a pipe or FIFO, which is never opened, a device; TSR_EIO), a file that cannot
 * be read (TSR_EIO), an empty file, a text shorter than T + 1 bytes (the context longer than
 * the text), too few windows to put one on each side of the split (TSR_EFORMAT). On success
 * train and test are the caller's (tsr_dataset_fini); on an error both are zeroed. */
#define TSR_TEXT_VOCAB 256
TSR_API int tsr_dataset_load_text(tsr_dataset_t *train, tsr_dataset_t *test,
                                  const char *const *paths, int npaths, int context,
                                  double test_fraction, tsr_errbuf_t *err);

/* The default text (tessera train --text default): the plain files of Debian's fortunes
 * package, about 2.5 MB of English. */
#define TSR_DEFAULT_TEXT_DIR "/usr/share/games/fortunes"

/* The plain files of dir (names without a dot, regular and not empty: fortune's NAME.dat
 * indexes and NAME.u8 links are left out), sorted by name in byte order, as *npaths paths in
 * *paths (owned: tsr_dataset_text_files_free). TSR_EIO naming dir and the fortunes package
 * when dir cannot be read or holds none. */
TSR_API int tsr_dataset_text_files(char ***paths, int *npaths, const char *dir, tsr_errbuf_t *err);
TSR_API void tsr_dataset_text_files_free(char **paths, int npaths);

/* Sets the number of classes to `classes` (>= 2), after checking that every
 * label is below it: a label that is not is an error naming ds (`what`, e.g.
 * "the training set"), the sample and the label. */
TSR_API int tsr_dataset_set_classes(tsr_dataset_t *ds, int classes, const char *what,
                                    tsr_errbuf_t *err);

/* Labels per class: counts[c] for c in 0 .. ds->classes - 1 (caller's array); samples per
 * class where a sample has one label, tokens per class in a text set's targets. */
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
  TSR_STANDARDIZE_AUTO,   /* column for tabular data (CSV: no image geometry), scalar for images
                             of one channel, channel for colour images, none for text (token
                             ids: targets > 1) */
  TSR_STANDARDIZE_SCALAR, /* tsr_dataset_stats, tsr_dataset_normalize */
  TSR_STANDARDIZE_COLUMN,
  TSR_STANDARDIZE_NONE,
  TSR_STANDARDIZE_CHANNEL, /* a mean and std per channel, over every pixel of every sample */
} tsr_standardize_t;

/* A standardization fitted to a training set: x[i][j] becomes (x[i][j] - mean[j']) * (1 / std[j'])
 * in float32, j' = j for column, j % channels for channel (channels-last samples) and 0 for
 * scalar; a std of 0 (a constant column) or not finite removes only the mean. */
typedef struct {
  tsr_standardize_t kind; /* scalar, column, channel or none, never auto once fitted */
  int64_t n;         /* entries of mean and std: 1 (scalar), the features (column), the channels
                        (channel), 0 (none) */
  float *mean, *std; /* (n) owned; NULL when n is 0 */
} tsr_standardization_t;

/* "scalar", "column", "channel", "none" or "auto" into *kind; TSR_EINVAL for another name. */
TSR_API int tsr_standardize_parse(const char *name, tsr_standardize_t *kind);
/* The name of kind ("scalar", ...). */
TSR_API const char *tsr_standardize_name(tsr_standardize_t kind);

/* Fits s (the caller's to fini) to train (borrowed): kind's statistics over every training
 * sample, in double, rounded to float32; auto picks column (no image geometry), scalar (images
 * of one channel), channel (colour images) by train's geometry, or none for a text set (labels
 * at each position, targets > 1: token ids stay exact). TSR_ENOMEM; TSR_ESHAPE for a
 * channel standardization of a set whose features are not its channels x height x width. */
TSR_API int tsr_standardization_fit(tsr_standardization_t *s, tsr_standardize_t kind,
                                    const tsr_dataset_t *train, tsr_errbuf_t *err);
/* Applies s to ds in place (train and test alike, so the test set is seen through the training
 * statistics). TSR_ESHAPE, naming what (e.g. "the test set"), when a column standardization
 * has another number of features than ds, or a channel one another number of channels. */
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
