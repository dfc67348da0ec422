/* Augmentation of training images inside batch assembly: a random crop of the zero-padded image
 * and a horizontal flip, drawn per sample from a hash of (key, sample index in the dataset), so
 * that a sample's augmentation depends on neither the tiling, nor the window, nor the ranks.
 * Plain C on one tile (no StarPU): codelets/augment.c wraps it. */
#ifndef TSR_KERNELS_AUGMENT_H
#define TSR_KERNELS_AUGMENT_H

#include <stdbool.h>
#include <stdint.h>

/* What augments a batch: the image (channels-last, h w c columns a row), the padding, and which
 * draws apply. The output has the image's size: torchvision's RandomCrop(size = (h, w),
 * padding = pad) then RandomHorizontalFlip(0.5). */
typedef struct {
  int c, h, w;  /* the image: h w c columns */
  int pad;      /* padding on each side before the crop (crop offsets in [0, 2 pad]) */
  bool crop;    /* take the random crop (false: offsets pad, pad: the image as it is) */
  bool flip;    /* mirror left-right where the sample's draw says so (probability 1/2) */
  uint64_t key; /* the step's key: the net's seed and the epoch (tsr__augment_key) */
} tsr_augment_geom_t;

/* Sample `sample`'s draws under key: the crop's top-left corner (*dy, *dx) in the padded image
 * (pad + 2 pad wide each way), each uniform in [0, 2 pad], and whether it is mirrored (*mirror,
 * probability 1/2). The three come from separate hashes, so a crop does not change with flip on
 * or off. Without crop the corner is (pad, pad); without flip *mirror is false. */
void tsr__k_augment_draw(const tsr_augment_geom_t *g, int64_t sample, int *dy, int *dx,
                         bool *mirror);

/* dst (m, n) row r = dataset row rows[r] of src (each lds floats, h w c of them an image)
 * augmented as rows[r]'s draws say, columns [col0, col0 + n) of the augmented image: output
 * pixel (y, x) is the padded image's (y + dy, x' + dx), x' = w - 1 - x when mirrored (else x),
 * which is the image's pixel (y + dy - pad, x' + dx - pad), or fill[ch] where that lies
 * outside it. Rows from nvalid on are zero (padding of a short last batch). fill: (c). */
void tsr__k_augment_rows(const tsr_augment_geom_t *g, const float *fill, int m, int n, float *dst,
                         int ldd, const float *src, int lds, int col0, const int32_t *rows,
                         int nvalid);

#endif
