/* What the colour loaders' fuzz harnesses (fuzz_cifar.c, fuzz_npy.c, fuzz_npz.c) check of a
 * dataset: a loaded set holds n >= 1 samples of channels x height x width finite values (in
 * [0, 1] where the file held bytes) and integer labels below `classes`; a refused one is zeroed,
 * with a message. */
#ifndef TSR_FUZZ_IMAGES_H
#define TSR_FUZZ_IMAGES_H

#include <math.h>

#include "fuzz.h"
#include "tessera/data.h"

static inline void fuzz_check_images(const tsr_dataset_t *ds, int unit_range) {
  FUZZ_CHECK(ds->n >= 1 && ds->x && ds->y);
  FUZZ_CHECK(ds->channels >= 1 && ds->height >= 1 && ds->width >= 1);
  FUZZ_CHECK(ds->features == (int64_t)ds->channels * ds->height * ds->width);
  FUZZ_CHECK(ds->classes >= 1 && ds->classes <= 16777216);
  for (int64_t i = 0; i < ds->n * ds->features; i++) {
    FUZZ_CHECK(isfinite(ds->x[i]));
    if (unit_range) FUZZ_CHECK(ds->x[i] >= 0.0f && ds->x[i] <= 1.0f);
  }
  for (int64_t i = 0; i < ds->n; i++)
    FUZZ_CHECK(ds->y[i] >= 0.0f && ds->y[i] < (float)ds->classes && ds->y[i] == floorf(ds->y[i]));
}

static inline void fuzz_check_refused(int rc, const tsr_errbuf_t *err, const tsr_dataset_t *ds) {
  FUZZ_CHECK(rc < 0 && err->msg[0] != '\0' && ds->x == NULL && ds->y == NULL && ds->n == 0);
}

#endif
