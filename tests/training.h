/* Whole-network fixtures shared by the dense (test_train.c) and
 * convolutional (test_conv.c) suites: the Fashion-MNIST subset they train
 * on, and the loss after a few SGD steps with given tiles, which tile-size
 * invariance and repeatability checks compare. */
#ifndef TSR_TEST_TRAINING_H
#define TSR_TEST_TRAINING_H

#include <criterion/criterion.h>
#include <stdlib.h>

#include "tessera/tessera.h"

static inline const char *data_dir(void) {
  const char *d = getenv("TSR_DATA_DIR");
  return d ? d : TSR_DEFAULT_DATA_DIR;
}

/* The first ntrain training images and the test set, standardized with the
 * training subset's statistics; skips the test without the dataset. */
static inline void load(tsr_dataset_t *train, tsr_dataset_t *test, int64_t ntrain) {
  tsr_errbuf_t err = {""};
  int rc = tsr_dataset_load_dir(train, test, data_dir(), &err);
  if (rc) cr_skip_test("Fashion-MNIST not found (%s); install dataset-fashion-mnist", err.msg);
  cr_assert_eq(tsr_dataset_truncate(train, ntrain), 0);
  tsr_dataset_standardize(train, test);
}

/* Loss on the first 256 samples of ds after `steps` SGD steps of batch 32
 * (fixed rows, seed 11) with tile_rows x tile_cols tiles. */
static inline double loss_after_steps(const tsr_dataset_t *ds, const tsr_model_spec_t *spec,
                                      int steps, int tile_rows, int tile_cols) {
  tsr_errbuf_t err = {""};
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 32, o.tile_rows = tile_rows, o.tile_cols = tile_cols, o.seed = 11;
  o.in_channels = ds->channels, o.in_height = ds->height, o.in_width = ds->width;
  o.opt.lr = 0.05f;
  tsr_net_t *net;
  cr_assert_eq(tsr_net_create(&net, spec, (int)ds->features, ds->classes, &o, &err), 0, "%s",
               err.msg);
  int32_t rows[32];
  for (int s = 0; s < steps; s++) {
    for (int i = 0; i < 32; i++)
      rows[i] = (int32_t)((s * 32 + i * 7) % ds->n);
    cr_assert_eq(tsr_net_train_step(net, ds, rows, 32, true), 0);
  }
  tsr_dataset_t head = *ds;
  head.n = 256;
  double loss, acc;
  cr_assert_eq(tsr_evaluate(net, &head, &loss, &acc), 0);
  tsr_net_destroy(&net);
  return loss;
}

#endif
