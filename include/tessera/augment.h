/* Augmentation of training images inside batch assembly: a random crop of the zero-padded image
 * and a horizontal flip, as torchvision's RandomCrop(size, padding) and RandomHorizontalFlip()
 * do, drawn per sample from a hash of (the net's seed, the epoch, the sample's index in the
 * training set). A run is so reproducible from its seed, and a sample's augmentation depends on
 * neither the tiles, nor the window, nor the number of ranks, nor where a resumed run started.
 * Only training batches are augmented: evaluation sees the images as they are. */
#ifndef TESSERA_AUGMENT_H
#define TESSERA_AUGMENT_H

#include <stdbool.h>
#include <stddef.h>

#include "tessera/data.h"
#include "tessera/error.h"
#include "tessera/net.h"

TSR_EXTERN_C_BEGIN

/* What augments a training batch. All zero: nothing (tsr_augment_t a = {0}). */
typedef struct {
  /* Random crop: the crop's height and width (0 and 0: no crop) after `pad` pixels of padding on
   * each side. The crop must have the image's size (the net's input, which evaluation feeds the
   * images as they are): a pad-and-crop, which shifts the image by up to pad pixels each way. */
  int crop_h, crop_w;
  int pad;
  bool flip; /* mirror left-right with probability 1/2 (after the crop, as torchvision's order) */
  /* The padded pixels' value per channel, (channels) floats, borrowed for tsr_net_set_augment
   * (which copies them); NULL: 0 in every channel. To pad with black pixels as PyTorch's
   * pipeline does (pad, then normalize), pass tsr_augment_fill's numbers. */
  const float *fill;
} tsr_augment_t;

/* Whether a augments images of channels x height x width: 0, or TSR_EINVAL with why for data
 * that is not images (a height or width of 1: tabular data), a negative pad, a pad without a crop,
 * a crop larger than the padded image, or one of another size than the image. */
TSR_API int tsr_augment_check(const tsr_augment_t *a, int channels, int height, int width,
                              tsr_errbuf_t *err);

/* fill[ch] (channels floats, the caller's) = the value standardization s gives a black pixel
 * (0 in the raw data) in channel ch of images shaped like `like` (its features and geometry; its
 * samples are not read): what a padded pixel is in PyTorch's pipeline, (0 - mean) / std.
 * TSR_EINVAL when s gives black pixels of one channel different values at different places (a
 * per-column standardization: a pixel outside the image has no column); TSR_ENOMEM. */
TSR_API int tsr_augment_fill(float *fill, int channels, const tsr_standardization_t *s,
                             const tsr_dataset_t *like, tsr_errbuf_t *err);

/* A short text for a ("crop 28x28:4 flip", "flip", "none"): the log's and the checkpoint's. */
TSR_API void tsr_augment_describe(const tsr_augment_t *a, char *buf, size_t size);

/* Augments every training batch of net from now on as a says (a copy of a and of its fill),
 * checked against the net's input geometry (tsr_augment_check); an all-zero a turns it off.
 * tsr_net_train_step augments, tsr_net_eval_step never does. On an error net is unchanged. */
TSR_API int tsr_net_set_augment(tsr_net_t *net, const tsr_augment_t *a, tsr_errbuf_t *err);
/* The epoch (1-based) whose draws the next training steps take (0 until set); tsr_train sets it
 * at the start of every epoch, so a program that calls tsr_net_train_step itself sets it. */
TSR_API void tsr_net_set_epoch(tsr_net_t *net, int epoch);

TSR_EXTERN_C_END

#endif
