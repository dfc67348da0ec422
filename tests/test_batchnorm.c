/* Batch normalization: the kernels' partials combined by Chan's formula against one pass over
 * the whole; float64 finite-difference gradient checks per feature (after a dense layer, with
 * its eps) and per channel (after a convolution, a ReLU fused), over edge tiles and a padded
 * batch; the running statistics against PyTorch's update in float64 over three steps, the last
 * one short (its padding rows, which hold the previous batch's samples, never enter them), and
 * evaluation normalizing with them; statistics passes (tsr_net_stats_step) making them the mean
 * of their batches' and changing nothing else; a per-feature batch of one sample (the running
 * statistics kept, the step not counted); training steps that do not depend on the tile size and
 * repeat bit for bit; a per-feature batchnorm refused at batch 1; evaluation's batchnorm folded
 * into the convolution before it, against float64; a convolution another layer also reads still
 * written in evaluation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/net_impl.h"
#include "rng.h"
#include "tessera/tessera.h"

#include "gradcheck.h"
#include "training.h"

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(batchnorm, .init = start, .fini = stop, .timeout = 300);

#define BN(...)                                                                                    \
  { .kind = TSR_LAYER_BATCHNORM, __VA_ARGS__ }
#define DENSE(u)                                                                                   \
  { .kind = TSR_LAYER_DENSE, .units = u }
#define RELU                                                                                       \
  { .kind = TSR_LAYER_RELU }

Test(batchnorm, partials_combined_by_chans_formula_equal_one_pass) {
  enum { M = 7, HW = 3, C = 4, LD = HW * C };
  float x[M * LD], whole[3 * C], a[3 * C], b[3 * C];
  double acc[2 * C];
  tsr_rng_t rng = {9};
  for (int k = 0; k < M * LD; k++)
    x[k] =
        (float)(3.0 + 2.0 * tsr__rng_uniform(&rng)); /* an offset: a naive sum of squares loses */
  tsr__k_bn_stats(M, HW, C, x, LD, whole, C, acc);
  tsr__k_bn_stats(3, HW, C, x, LD, a, C, acc);
  tsr__k_bn_stats(M - 3, HW, C, x + 3 * LD, LD, b, C, acc);
  tsr__k_bn_combine(C, a, C, b, C);
  float empty[3 * C];
  tsr__k_bn_stats(0, HW, C, x, LD, empty, C, acc);
  tsr__k_bn_combine(C, a, C, empty, C); /* a tile of padding only changes nothing */
  for (int ch = 0; ch < C; ch++) {
    double mean = 0, m2 = 0;
    for (int k = 0; k < M * HW; k++)
      mean += x[k * C + ch];
    mean /= M * HW;
    for (int k = 0; k < M * HW; k++)
      m2 += (x[k * C + ch] - mean) * (x[k * C + ch] - mean);
    cr_assert_eq(a[ch], (float)(M * HW));
    cr_assert_float_eq(whole[C + ch], mean, 1e-6, "mean of channel %d", ch);
    cr_assert_float_eq(a[C + ch], mean, 1e-6, "combined mean of channel %d", ch);
    cr_assert_float_eq(whole[2 * C + ch], m2, 1e-5 * m2, "M2 of channel %d", ch);
    cr_assert_float_eq(a[2 * C + ch], m2, 1e-5 * m2, "combined M2 of channel %d", ch);
  }
}

Test(batchnorm, per_feature_and_per_channel_gradients_match_finite_differences) {
  /* 5 samples of which 4 are real, tiles of 2 rows: a tile of padding and a half one */
  tsr_model_spec_t feat = SPEC(DENSE(6), BN(.eps = 0.01f), RELU, DENSE(3));
  gradient_check(&feat, 5, 1, 1, 3, 5, 4, 2, 3);
  tsr_model_spec_t chan =
      SPEC({.kind = TSR_LAYER_CONV, .units = 3, .kernel_h = 3, .pad_h = 1, .pad_w = 1}, BN(), RELU,
           DENSE(3));
  gradient_check(&chan, 2, 4, 3, 3, 5, 4, 2, 3);
  tsr_model_spec_fini(&feat), tsr_model_spec_fini(&chan);
}

/* A net of a batchnorm (momentum m, eps e) on 2 x 2 x 3 samples and a dense output, batch 5
 * in tiles of 2 rows. */
static tsr_net_t *bn_net(float m, float e, int c, int hw_side, int batch) {
  tsr_model_spec_t spec = SPEC(BN(.momentum = m, .eps = e), DENSE(3));
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = batch, o.tile_rows = 2, o.seed = 4, o.opt.lr = 0.1f;
  o.in_channels = c, o.in_height = hw_side, o.in_width = hw_side;
  tsr_net_t *net;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, &spec, c * hw_side * hw_side, 3, &o, &err), 0, "%s", err.msg);
  tsr_model_spec_fini(&spec);
  return net;
}

/* PyTorch's update of the running statistics (rm, rv of c channels) by the n samples at rows
 * of x (features c hw, channels-last), in float64. */
static void running_ref(double *rm, double *rv, const float *x, const int32_t *rows, int n, int c,
                        int hw, double momentum) {
  for (int ch = 0; ch < c; ch++) {
    double mean = 0, m2 = 0, count = (double)n * hw;
    for (int i = 0; i < n; i++)
      for (int q = 0; q < hw; q++)
        mean += x[(long)rows[i] * c * hw + q * c + ch];
    mean /= count;
    for (int i = 0; i < n; i++)
      for (int q = 0; q < hw; q++) {
        double d = x[(long)rows[i] * c * hw + q * c + ch] - mean;
        m2 += d * d;
      }
    rm[ch] = (1 - momentum) * rm[ch] + momentum * mean;
    rv[ch] = (1 - momentum) * rv[ch] + momentum * m2 / (count - 1);
  }
}

/* Layer l's running mean and variance (c channels) against rm and rv. */
static void assert_running(const tsr_layer_t *l, const double *rm, const double *rv, int c) {
  float mean[16], var[16];
  cr_assert(c <= 16);
  cr_assert_eq(tsr_tiles_read(l->buffers[0], mean), 0);
  cr_assert_eq(tsr_tiles_read(l->buffers[1], var), 0);
  for (int ch = 0; ch < c; ch++) {
    cr_assert_float_eq(mean[ch], rm[ch], 1e-5 + 1e-5 * fabs(rm[ch]), "running mean %d: %g vs %g",
                       ch, (double)mean[ch], rm[ch]);
    cr_assert_float_eq(var[ch], rv[ch], 1e-5 + 1e-5 * fabs(rv[ch]), "running var %d: %g vs %g", ch,
                       (double)var[ch], rv[ch]);
  }
}

/* n samples of f features uniform in [lo, lo + width), labels 0 (free: free(x), free(y)). */
static tsr_dataset_t uniform_set(int n, int f, uint64_t seed, double lo, double width) {
  tsr_dataset_t ds = {.n = n, .features = f, .classes = 3};
  ds.x = malloc(sizeof(float) * (size_t)(n * f)), ds.y = calloc((size_t)n, sizeof(float));
  cr_assert(ds.x && ds.y);
  tsr_rng_t rng = {seed};
  for (int k = 0; k < n * f; k++)
    ds.x[k] = (float)(lo + width * tsr__rng_uniform(&rng));
  return ds;
}

/* Every parameter of net, one after the other, into dst (room for max floats); the count. */
static size_t all_params(const tsr_net_t *net, float *dst, size_t max) {
  size_t at = 0;
  for (int i = 0; i < tsr_net_n_params(net); i++) {
    int64_t r, c;
    cr_assert_eq(tsr_net_param_info(net, i, &r, &c), 0);
    cr_assert(at + (size_t)(r * c) <= max);
    cr_assert_eq(tsr_net_param_get(net, i, dst + at), 0);
    at += (size_t)(r * c);
  }
  return at;
}

Test(batchnorm, running_statistics_follow_pytorch_and_evaluation_normalizes_with_them) {
  enum { C = 3, SIDE = 2, HW = SIDE * SIDE, F = C * HW, N = 12 };
  tsr_dataset_t ds = uniform_set(N, F, 21, -0.5, 2.0);
  for (int k = 10 * F; k < N * F; k++) /* samples 10 and 11: far off, padding in the last step */
    ds.x[k] = 100.0f;
  const float momentum = 0.25f;
  tsr_net_t *net = bn_net(momentum, 0, C, SIDE, 5);
  const int32_t steps[3][5] = {{0, 1, 2, 3, 4}, {5, 6, 7, 10, 11}, {8, 9, 0, 0, 0}};
  const int ns[3] = {5, 5, 2}; /* the last step: 2 samples, 3 rows of padding */
  double rm[C] = {0}, rv[C] = {1, 1, 1};
  for (int s = 0; s < 3; s++) {
    cr_assert_eq(tsr_net_train_step(net, &ds, steps[s], ns[s], true), 0);
    running_ref(rm, rv, ds.x, steps[s], ns[s], C, HW, momentum);
  }
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  tsr_layer_t *l = &net->layers[0];
  assert_running(l, rm, rv, C);
  cr_assert_eq(l->batches_tracked, 3);
  /* Evaluation: (x - running mean) / sqrt(running var + eps) * scale + shift. */
  float scale[C], shift[C], y[5 * F];
  cr_assert_eq(tsr_net_param_get(net, 0, scale), 0);
  cr_assert_eq(tsr_net_param_get(net, 1, shift), 0);
  cr_assert(scale[0] != 1.0f || shift[0] != 0.0f, "three updates move scale or shift");
  const int32_t eval_rows[5] = {3, 8, 1, 6, 9};
  cr_assert_eq(tsr_net_eval_step(net, &ds, eval_rows, 5), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  cr_assert_eq(tsr_tiles_read(l->y, y), 0);
  for (int i = 0; i < 5; i++)
    for (int k = 0; k < F; k++) {
      int ch = k % C;
      double want =
          (ds.x[(long)eval_rows[i] * F + k] - rm[ch]) / sqrt(rv[ch] + 1e-5) * scale[ch] + shift[ch];
      cr_assert_float_eq(y[i * F + k], want, 1e-4 + 1e-4 * fabs(want), "y[%d][%d]: %g vs %g", i, k,
                         (double)y[i * F + k], want);
    }
  tsr_net_destroy(&net);
  free(ds.x), free(ds.y);
}

/* tsr_net_stats_step (--bn-recompute): three passes (the last of 2 samples) make the running
 * statistics the mean of their batches' statistics (PyTorch's update at momentum 1 / (k + 1)),
 * whatever they were; the parameters stay as they were, and the training steps after them
 * (dropout's masks included) equal those of a twin net that took no such pass, bit for bit. */
Test(batchnorm, stats_steps_make_the_running_statistics_their_batches_mean_and_nothing_else) {
  enum { C = 3, SIDE = 2, HW = SIDE * SIDE, F = C * HW, N = 12 };
  tsr_dataset_t ds = uniform_set(N, F, 33, -1.0, 3.0);
  for (int k = 0; k < N; k++)
    ds.y[k] = (float)(k % 3);
  tsr_model_spec_t spec =
      SPEC(BN(.momentum = 0.25f), {.kind = TSR_LAYER_DROPOUT, .rate = 0.5f}, DENSE(3));
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 5, o.tile_rows = 2, o.seed = 4, o.opt.lr = 0.1f;
  o.in_channels = C, o.in_height = SIDE, o.in_width = SIDE;
  tsr_net_t *net, *twin;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, &spec, F, 3, &o, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_net_create(&twin, &spec, F, 3, &o, &err), 0, "%s", err.msg);
  const int32_t train[2][5] = {{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}};
  const int32_t passes[3][5] = {{2, 4, 6, 8, 10}, {11, 9, 7, 5, 3}, {1, 0, 0, 0, 0}};
  const int ns[3] = {5, 5, 2};
  for (int s = 0; s < 2; s++) {
    cr_assert_eq(tsr_net_train_step(net, &ds, train[0], 5, true), 0);
    cr_assert_eq(tsr_net_train_step(twin, &ds, train[0], 5, true), 0);
  }
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  float before[64], after[64];
  size_t np = all_params(net, before, 64);
  double rm[C], rv[C];
  for (int ch = 0; ch < C; ch++)
    rm[ch] = 1e30, rv[ch] = 1e30; /* the first pass replaces them whatever they are */
  for (int k = 0; k < 3; k++) {
    cr_assert_eq(tsr_net_stats_step(net, &ds, passes[k], ns[k], k), 0);
    running_ref(rm, rv, ds.x, passes[k], ns[k], C, HW, 1.0 / (k + 1));
  }
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  tsr_layer_t *l = &net->layers[0];
  assert_running(l, rm, rv, C);
  cr_assert_eq(l->batches_tracked, 2 + 3);
  cr_assert_eq(all_params(net, after, 64), np);
  cr_assert(memcmp(before, after, sizeof(float) * np) == 0, "a stats pass moved a parameter");
  for (int s = 0; s < 2; s++) {
    cr_assert_eq(tsr_net_train_step(net, &ds, train[1], 5, true), 0);
    cr_assert_eq(tsr_net_train_step(twin, &ds, train[1], 5, true), 0);
  }
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  cr_assert_eq(tsr_net_wait(twin, 0), 0);
  cr_assert_eq(all_params(net, after, 64), np);
  cr_assert_eq(all_params(twin, before, 64), np);
  cr_assert(memcmp(before, after, sizeof(float) * np) == 0,
            "the training steps after a stats pass differ from the twin's");
  cr_assert_eq(tsr_net_stats_step(net, &ds, passes[0], 0, 0), TSR_EINVAL);
  tsr_net_destroy(&net), tsr_net_destroy(&twin);
  tsr_model_spec_fini(&spec);
  free(ds.x), free(ds.y);
}

Test(batchnorm, a_per_feature_step_of_one_sample_keeps_the_running_statistics) {
  enum { F = 4, N = 6 };
  tsr_dataset_t ds = {.n = N, .features = F, .classes = 3};
  ds.x = malloc(sizeof(float) * N * F), ds.y = calloc(N, sizeof(float));
  tsr_rng_t rng = {5};
  for (int k = 0; k < N * F; k++)
    ds.x[k] = (float)tsr__rng_uniform(&rng);
  tsr_net_t *net = bn_net(0, 0, F, 1, 4);
  const int32_t rows[4] = {0, 1, 2, 3}, last[4] = {4, 0, 0, 0};
  cr_assert_eq(tsr_net_train_step(net, &ds, rows, 4, true), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  tsr_layer_t *l = &net->layers[0];
  float before[2][F], after[2][F], dx[4 * F];
  for (int b = 0; b < 2; b++)
    cr_assert_eq(tsr_tiles_read(l->buffers[b], before[b]), 0);
  cr_assert_eq(tsr_net_keep_input_grad(net), 0);
  cr_assert_eq(tsr_net_train_step(net, &ds, last, 1, true), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  for (int b = 0; b < 2; b++)
    cr_assert_eq(tsr_tiles_read(l->buffers[b], after[b]), 0);
  cr_assert(memcmp(before, after, sizeof before) == 0, "one sample moved the running statistics");
  cr_assert_eq(l->batches_tracked, 1);
  cr_assert_eq(tsr_net_input_grad_get(net, dx), 0);
  for (int k = 0; k < 4 * F; k++) /* its features normalize to 0: no gradient reaches it */
    cr_assert(dx[k] == 0.0f, "dx[%d] = %g", k, (double)dx[k]);
  tsr_net_destroy(&net);
  free(ds.x), free(ds.y);
}

Test(batchnorm, training_steps_do_not_depend_on_the_tile_size) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 1000);
  tsr_model_spec_t spec = SPEC({.kind = TSR_LAYER_CONV, .units = 6, .kernel_h = 3}, BN(), RELU,
                               {.kind = TSR_LAYER_MAXPOOL, .kernel_h = 2},
                               {.kind = TSR_LAYER_FLATTEN}, DENSE(20), BN(), RELU, DENSE(10));
  double one = loss_after_steps(&train, &spec, 5, 32, 1 << 20);
  double t8 = loss_after_steps(&train, &spec, 5, 8, 8);
  double t5 = loss_after_steps(&train, &spec, 5, 5, 7);
  double start = loss_after_steps(&train, &spec, 0, 32, 32);
  cr_assert(one < start * 0.98, "5 steps must lower the loss (%g -> %g)", start, one);
  cr_assert(fabs(t8 - one) <= 1e-5 * one, "tile 8: %.9g vs one tile %.9g", t8, one);
  cr_assert(fabs(t5 - one) <= 1e-5 * one, "tile 5x7: %.9g vs one tile %.9g", t5, one);
  double again = loss_after_steps(&train, &spec, 5, 8, 8);
  cr_assert(again == t8, "same seed, same tiles: %.17g vs %.17g", again, t8);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
  tsr_model_spec_fini(&spec);
}

Test(batchnorm, a_per_feature_batchnorm_refuses_a_batch_of_one_sample) {
  tsr_model_spec_t feat = SPEC(DENSE(8), BN(), DENSE(3)), chan = SPEC(BN(), DENSE(3));
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 1;
  tsr_net_t *net = NULL;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, &feat, 16, 3, &o, &err), TSR_EINVAL);
  cr_assert(strstr(err.msg, "layer 2 (batchnorm over 8 features)") &&
                strstr(err.msg, "batch of 1 sample"),
            "%s", err.msg);
  cr_assert_null(net);
  /* per channel of a 4 x 4 image, one sample has 16 values per channel */
  cr_assert_eq(tsr_net_create(&net, &chan, 16, 3, &o, &err), 0, "%s", err.msg);
  tsr_net_destroy(&net);
  tsr_model_spec_fini(&feat), tsr_model_spec_fini(&chan);
}

/* A net of spec on c x side x side images, 3 classes, a batch of 5 in tiles of 2 rows (the
 * evaluation tests below). */
static tsr_net_t *small_image_net(const tsr_model_spec_t *spec, int c, int side) {
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 5, o.tile_rows = 2, o.seed = 6, o.opt.lr = 0.1f;
  o.in_channels = c, o.in_height = side, o.in_width = side;
  tsr_net_t *net;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, spec, c * side * side, 3, &o, &err), 0, "%s", err.msg);
  return net;
}

/* Evaluation folds a batchnorm into the convolution it alone reads (src/nn/layout.c): one task
 * per tile computes relu(batchnorm(conv(x, W) + b)) with the running statistics, leaving the
 * convolution's own output unwritten (NaN stays NaN), and the result is the two layers' in
 * float64. A convolution with a ReLU of its own before the batchnorm is not folded. */
Test(batchnorm, evaluation_folds_the_batchnorm_into_its_convolution) {
  enum { C = 2, SIDE = 3, OC = 4, F = C * SIDE * SIDE, OUT = OC * SIDE * SIDE, N = 10, K = 3 };
  tsr_model_spec_t spec =
      SPEC({.kind = TSR_LAYER_CONV, .units = OC, .kernel_h = K, .pad_h = 1, .pad_w = 1},
           BN(.eps = 0.01f, .momentum = 0.5f), RELU, DENSE(3));
  tsr_net_t *net = small_image_net(&spec, C, SIDE);
  cr_assert_eq(net->layers[0].lay->folds_bn, 2);
  cr_assert(net->layers[1].lay->folded);
  tsr_dataset_t ds = {.n = N, .features = F, .classes = 3};
  ds.x = malloc(sizeof(float) * N * F), ds.y = calloc(N, sizeof(float));
  tsr_rng_t rng = {5};
  for (int k = 0; k < N * F; k++)
    ds.x[k] = (float)(3.0 * tsr__rng_uniform(&rng) - 1.0);
  for (int i = 0; i < N; i++)
    ds.y[i] = (float)(i % 3);
  const int32_t steps[2][5] = {{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}};
  for (int s = 0; s < 2; s++)
    cr_assert_eq(tsr_net_train_step(net, &ds, steps[s], 5, true), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  float *nan = malloc(sizeof(float) * 5 * OUT), *y = malloc(sizeof(float) * 5 * OUT);
  for (int k = 0; k < 5 * OUT; k++)
    nan[k] = NAN;
  cr_assert_eq(tsr_tiles_write(net->layers[0].y, nan), 0);
  float w[K * K * C * OC], b[OC], scale[OC], shift[OC], mean[OC], var[OC];
  cr_assert_eq(tsr_net_param_get(net, 0, w), 0);
  cr_assert_eq(tsr_net_param_get(net, 1, b), 0);
  cr_assert_eq(tsr_net_param_get(net, 2, scale), 0);
  cr_assert_eq(tsr_net_param_get(net, 3, shift), 0);
  cr_assert_eq(tsr_tiles_read(net->layers[1].buffers[0], mean), 0);
  cr_assert_eq(tsr_tiles_read(net->layers[1].buffers[1], var), 0);
  const int32_t rows[5] = {7, 2, 9, 0, 4};
  cr_assert_eq(tsr_net_eval_step(net, &ds, rows, 5), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  cr_assert_eq(tsr_tiles_read(net->layers[1].y, y), 0);
  int positive = 0;
  for (int i = 0; i < 5; i++) {
    const float *x = ds.x + (long)rows[i] * F;
    for (int oy = 0; oy < SIDE; oy++)
      for (int ox = 0; ox < SIDE; ox++)
        for (int oc = 0; oc < OC; oc++) {
          double v = b[oc];
          for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
              int iy = oy + ky - 1, ix = ox + kx - 1;
              if (iy < 0 || iy >= SIDE || ix < 0 || ix >= SIDE) continue;
              for (int ci = 0; ci < C; ci++)
                v += (double)x[(iy * SIDE + ix) * C + ci] * w[((ky * K + kx) * C + ci) * OC + oc];
            }
          double want = (v - mean[oc]) / sqrt((double)var[oc] + 0.01) * scale[oc] + shift[oc];
          want = want > 0 ? want : 0;
          positive += want > 0;
          float got = y[(long)i * OUT + (oy * SIDE + ox) * OC + oc];
          cr_assert_float_eq(got, want, 1e-4 + 1e-4 * fabs(want), "y[%d][%d,%d,%d]: %g vs %g", i,
                             oy, ox, oc, (double)got, want);
        }
  }
  cr_assert_gt(positive, 5 * OUT / 4, "the ReLU left too few values to compare");
  cr_assert_eq(tsr_tiles_read(net->layers[0].y, y), 0);
  for (int k = 0; k < 5 * OUT; k++)
    cr_assert(isnan(y[k]), "the convolution's output was written in evaluation ([%d] = %g)", k,
              (double)y[k]);
  tsr_net_destroy(&net);
  tsr_model_spec_fini(&spec);
  free(ds.x), free(ds.y), free(nan), free(y);

  tsr_model_spec_t relu_first =
      SPEC({.kind = TSR_LAYER_CONV, .units = OC, .kernel_h = K, .pad_h = 1, .pad_w = 1}, RELU, BN(),
           DENSE(3));
  net = small_image_net(&relu_first, C, SIDE);
  cr_assert_eq(net->layers[0].lay->folds_bn, 0);
  tsr_net_destroy(&net);
  tsr_model_spec_fini(&relu_first);
}

/* A convolution that another layer reads besides its batchnorm (a residual add of both) keeps
 * writing its output in evaluation: the add reads it. Evaluating the same rows again after the
 * convolution's output was overwritten with NaN gives the same bits, none of them NaN. */
Test(batchnorm, evaluation_writes_a_convolution_that_another_layer_also_reads) {
  enum { C = 2, SIDE = 3, OC = 4, F = C * SIDE * SIDE, OUT = OC * SIDE * SIDE, N = 10, K = 3 };
  tsr_model_spec_t spec = SPEC(
      {.kind = TSR_LAYER_CONV, .units = OC, .kernel_h = K, .pad_h = 1, .pad_w = 1, .name = "c"},
      BN(.name = "bn"), {.kind = TSR_LAYER_ADD, .n_inputs = 2, .inputs = {"c", "bn"}}, DENSE(3));
  tsr_net_t *net = small_image_net(&spec, C, SIDE);
  tsr_dataset_t ds = {.n = N, .features = F, .classes = 3};
  ds.x = malloc(sizeof(float) * N * F), ds.y = calloc(N, sizeof(float));
  tsr_rng_t rng = {8};
  for (int k = 0; k < N * F; k++)
    ds.x[k] = (float)(3.0 * tsr__rng_uniform(&rng) - 1.0);
  for (int i = 0; i < N; i++)
    ds.y[i] = (float)(i % 3);
  const int32_t steps[2][5] = {{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}}, rows[5] = {7, 2, 9, 0, 4};
  for (int s = 0; s < 2; s++)
    cr_assert_eq(tsr_net_train_step(net, &ds, steps[s], 5, true), 0);
  float *first = malloc(sizeof(float) * 5 * OUT), *again = malloc(sizeof(float) * 5 * OUT);
  cr_assert_eq(tsr_net_eval_step(net, &ds, rows, 5), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  cr_assert_eq(tsr_tiles_read(net->layers[2].y, first), 0);
  for (int k = 0; k < 5 * OUT; k++)
    again[k] = NAN;
  cr_assert_eq(tsr_tiles_write(net->layers[0].y, again), 0);
  cr_assert_eq(tsr_net_eval_step(net, &ds, rows, 5), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  cr_assert_eq(tsr_tiles_read(net->layers[2].y, again), 0);
  for (int k = 0; k < 5 * OUT; k++)
    cr_assert(!isnan(again[k]) && memcmp(&again[k], &first[k], sizeof(float)) == 0,
              "the add's output [%d]: %g, then %g once the convolution's output was NaN", k,
              (double)first[k], (double)again[k]);
  tsr_net_destroy(&net);
  tsr_model_spec_fini(&spec);
  free(ds.x), free(ds.y), free(first), free(again);
}
