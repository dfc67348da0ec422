/* Augmentation of training batches (tessera/augment.h): the settings checked and kept by the
 * net, the key of an epoch's draws, and the input batch's gather, augmented in training. The
 * draws and the pixels are the kernel's (kernels/augment.h), one task per input tile
 * (codelets/augment.c); evaluation and the labels take the plain gather. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/net_impl.h"
#include "tessera/augment.h"
#include "try.h"

/* Pads are bounded so that offsets and padded sizes stay far from int overflow. */
#define MAX_PAD (1 << 15)

static bool augment_on(const tsr_augment_t *a) {
  return a->crop_h > 0 || a->crop_w > 0 || a->pad != 0 || a->flip;
}

int tsr_augment_check(const tsr_augment_t *a, int channels, int height, int width,
                      tsr_errbuf_t *err) {
  if (!augment_on(a)) return 0;
  if (height <= 1 || width <= 1) /* 1 x 1 x F (the net's) or 1 x F (a CSV dataset's) */
    return tsr_error_set(err, TSR_EINVAL,
                         "crop and flip need images, but the samples are rows of %lld features "
                         "without an image geometry (tabular data such as CSV)",
                         (long long)channels * height * width);
  if (a->pad < 0 || a->pad > MAX_PAD)
    return tsr_error_set(err, TSR_EINVAL, "the padding must be from 0 to %d pixels (got %d)",
                         MAX_PAD, a->pad);
  if (a->crop_h <= 0 && a->crop_w <= 0) {
    if (a->pad > 0)
      return tsr_error_set(err, TSR_EINVAL, "a padding of %d needs a crop size", a->pad);
    return 0;
  }
  int ph = height + 2 * a->pad, pw = width + 2 * a->pad;
  if (a->crop_h <= 0 || a->crop_w <= 0 || a->crop_h > ph || a->crop_w > pw)
    return tsr_error_set(err, TSR_EINVAL,
                         "a crop of %dx%d does not fit in the %dx%d image padded by %d on each "
                         "side (%dx%d)",
                         a->crop_h, a->crop_w, height, width, a->pad, ph, pw);
  if (a->crop_h != height || a->crop_w != width)
    return tsr_error_set(err, TSR_EINVAL,
                         "a crop of %dx%d from %dx%d images would change the net's input, which "
                         "evaluation feeds the images as they are; crop to the image's size, "
                         "%dx%d, and choose the shift with the padding",
                         a->crop_h, a->crop_w, height, width, height, width);
  return 0;
}

int tsr_augment_fill(float *fill, int channels, const tsr_standardization_t *s,
                     const tsr_dataset_t *like, tsr_errbuf_t *err) {
  int64_t f = like->features;
  if (channels <= 0 || f % channels != 0)
    return tsr_error_set(err, TSR_ESHAPE, "%d channels do not divide the %lld features", channels,
                         (long long)f);
  tsr_dataset_t black = {.n = 1,
                         .features = f,
                         .classes = like->classes,
                         .channels = like->channels,
                         .height = like->height,
                         .width = like->width,
                         .x = calloc((size_t)f, sizeof(float))};
  if (!black.x) return tsr_error_set(err, TSR_ENOMEM, "out of memory");
  int rc = tsr_standardization_apply(s, &black, "a black image", err);
  for (int ch = 0; rc == 0 && ch < channels; ch++)
    fill[ch] = black.x[ch];
  for (int64_t j = channels; rc == 0 && j < f; j++)
    if (memcmp(&black.x[j], &fill[j % channels], sizeof(float)) != 0)
      rc = tsr_error_set(err, TSR_EINVAL,
                         "the %s standardization gives black pixels of channel %d different "
                         "values at different places (%g at pixel 0, %g at pixel %lld), so a "
                         "padded pixel has no value; standardize over every pixel (scalar) "
                         "or per channel",
                         tsr_standardize_name(s->kind), (int)(j % channels),
                         (double)fill[j % channels], (double)black.x[j], (long long)(j / channels));
  free(black.x);
  return rc;
}

void tsr_augment_describe(const tsr_augment_t *a, char *buf, size_t size) {
  if (!augment_on(a)) {
    snprintf(buf, size, "none");
    return;
  }
  int n = 0;
  if (a->crop_h > 0) n = snprintf(buf, size, "crop %dx%d:%d", a->crop_h, a->crop_w, a->pad);
  if (a->flip) snprintf(buf + n, size > (size_t)n ? size - (size_t)n : 0, "%sflip", n ? " " : "");
}

int tsr_net_set_augment(tsr_net_t *net, const tsr_augment_t *a, tsr_errbuf_t *err) {
  const tsr_conv_geom_t *in = &net->layout.in_geom;
  TSR_TRY(tsr_augment_check(a, in->c, in->h, in->w, err));
  float *fill = NULL;
  if (augment_on(a)) {
    fill = calloc((size_t)in->c, sizeof *fill);
    if (!fill) return tsr_error_set(err, TSR_ENOMEM, "out of memory");
    if (a->fill) memcpy(fill, a->fill, sizeof *fill * (size_t)in->c);
  }
  free(net->augment_fill);
  net->augment = *a, net->augment.fill = net->augment_fill = fill;
  return 0;
}

void tsr_net_set_epoch(tsr_net_t *net, int epoch) {
  net->epoch = epoch;
}

uint64_t tsr__augment_key(uint64_t net_seed, int epoch) {
  tsr_rng_t r = {net_seed ^ 0x3c6ef372fe94f82bULL};
  return tsr__rng_next(&r) + 0x9e3779b97f4a7c15ULL * (uint64_t)epoch;
}

void tsr__net_augment_describe(const tsr_net_t *net, char *buf, size_t size) {
  tsr_augment_describe(&net->augment, buf, size);
}

int tsr__net_gather_input(tsr_net_t *net, const tsr_task_opts_t *o, const tsr_dataset_t *ds,
                          const int32_t *rows, int n, bool train) {
  const tsr_augment_t *a = &net->augment;
  if (!train || !augment_on(a)) return tsr__tiles_gather(o, net->x0, ds->x, ds->features, rows, n);
  const tsr_conv_geom_t *in = &net->layout.in_geom;
  tsr_augment_geom_t g = {.c = in->c,
                          .h = in->h,
                          .w = in->w,
                          .pad = a->pad,
                          .crop = a->crop_h > 0,
                          .flip = a->flip,
                          .key = tsr__augment_key(net->opts.seed, net->epoch)};
  return tsr__tiles_gather_augment(o, net->x0, ds->x, ds->features, rows, n, &g, net->augment_fill);
}
