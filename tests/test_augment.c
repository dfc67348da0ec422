/* Augmentation inside batch assembly (tessera/augment.h): the kernel against a reference that
 * pads, crops and flips in three plain steps; the draws of known keys (pinned values, every crop
 * offset reached, flips about half, crops unchanged by the flip setting); a flip applied twice is
 * the identity; padded pixels hold the fill; the tiled gather writes the same bits for any row
 * and column tiling; a net augments its training batches, never its evaluation ones, the same for
 * any batch-row tiles; the settings' refusals; the fill of a standardization. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/augment.h"
#include "nn/net_impl.h"
#include "rng.h"
#include "tessera/tessera.h"
#include "tile/ops.h"

#include "training.h"

static uint64_t submitted;
static tsr_task_opts_t topts;

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
  topts = tsr__task_opts_default();
  topts.submitted = &submitted;
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(augment, .init = start, .fini = stop, .timeout = 300);

/* n rows of images with distinct values (no symmetry a flip could hide in). */
static float *images(int n, int64_t features, uint64_t seed) {
  tsr_rng_t rng = {seed};
  float *x = malloc(sizeof(float) * (size_t)(n * features));
  for (int64_t i = 0; i < n * features; i++)
    x[i] = (float)(tsr__rng_uniform(&rng) + 0.5);
  return x;
}

/* One image augmented in three steps, as torchvision's transforms would: padded with fill to
 * (h + 2 pad) x (w + 2 pad), the h x w window at (dy, dx) cut out, then mirrored. */
static void reference(const tsr_augment_geom_t *g, const float *fill, const float *img, int dy,
                      int dx, bool mirror, float *out) {
  int c = g->c, ph = g->h + 2 * g->pad, pw = g->w + 2 * g->pad;
  float *padded = malloc(sizeof(float) * (size_t)(ph * pw * c));
  float *cropped = malloc(sizeof(float) * (size_t)(g->h * g->w * c));
  for (int y = 0; y < ph; y++)
    for (int x = 0; x < pw; x++)
      for (int ch = 0; ch < c; ch++) {
        int sy = y - g->pad, sx = x - g->pad;
        bool in = sy >= 0 && sy < g->h && sx >= 0 && sx < g->w;
        padded[(y * pw + x) * c + ch] = in ? img[(sy * g->w + sx) * c + ch] : fill[ch];
      }
  for (int y = 0; y < g->h; y++)
    for (int x = 0; x < g->w; x++)
      for (int ch = 0; ch < c; ch++)
        cropped[(y * g->w + x) * c + ch] = padded[((y + dy) * pw + x + dx) * c + ch];
  for (int y = 0; y < g->h; y++)
    for (int x = 0; x < g->w; x++)
      for (int ch = 0; ch < c; ch++)
        out[(y * g->w + x) * c + ch] = cropped[(y * g->w + (mirror ? g->w - 1 - x : x)) * c + ch];
  free(padded), free(cropped);
}

Test(augment, kernel_matches_the_three_step_reference) {
  static const int shapes[][3] = {{1, 6, 6}, {3, 5, 7}, {2, 4, 3}};
  static const int pads[] = {0, 1, 3, 9};
  const float fill[3] = {-1.5f, -2.5f, -3.5f};
  const int n = 40;
  int32_t rows[40];
  for (int r = 0; r < n; r++)
    rows[r] = (int32_t)((r * 13 + 5) % 97);
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (size_t p = 0; p < sizeof pads / sizeof *pads; p++)
      for (int flags = 1; flags < 4; flags++) {
        tsr_augment_geom_t g = {shapes[s][0],
                                shapes[s][1],
                                shapes[s][2],
                                pads[p],
                                (flags & 1) != 0,
                                (flags & 2) != 0,
                                tsr__augment_key(7, (int)p + 1)};
        int f = g.c * g.h * g.w, lds = f + 3; /* rows of the source are longer than an image */
        float *src = images(97, lds, 3 + s), *got = malloc(sizeof(float) * (size_t)(n * f));
        float *want = malloc(sizeof(float) * (size_t)f);
        /* the whole rows at once, then in column pieces that cut pixels apart */
        tsr__k_augment_rows(&g, fill, n, f, got, f, src, lds, 0, rows, n);
        float *pieces = malloc(sizeof(float) * (size_t)(n * f));
        for (int col0 = 0; col0 < f; col0 += 5) {
          int w = f - col0 < 5 ? f - col0 : 5;
          tsr__k_augment_rows(&g, fill, n, w, pieces + col0, f, src, lds, col0, rows, n);
        }
        for (int r = 0; r < n; r++) {
          int dy, dx;
          bool mirror;
          tsr__k_augment_draw(&g, rows[r], &dy, &dx, &mirror);
          reference(&g, fill, src + (int64_t)rows[r] * lds, dy, dx, mirror, want);
          cr_assert(memcmp(got + r * f, want, sizeof(float) * (size_t)f) == 0,
                    "%dx%dx%d pad %d crop %d flip %d: row %d (sample %d, dy %d dx %d mirror %d) "
                    "differs from the reference",
                    g.h, g.w, g.c, g.pad, g.crop, g.flip, r, rows[r], dy, dx, mirror);
        }
        cr_assert(memcmp(got, pieces, sizeof(float) * (size_t)(n * f)) == 0,
                  "%dx%dx%d pad %d: column pieces of 5 differ from whole rows", g.h, g.w, g.c,
                  g.pad);
        free(src), free(got), free(want), free(pieces);
      }
}

Test(augment, rows_past_nvalid_are_zero) {
  tsr_augment_geom_t g = {1, 4, 4, 2, true, true, tsr__augment_key(1, 1)};
  float fill[1] = {-7.0f}, dst[5 * 16];
  float *src = images(3, 16, 1);
  int32_t rows[5] = {2, 0, 1, 2, 2};
  for (int i = 0; i < 5 * 16; i++)
    dst[i] = 42.0f;
  tsr__k_augment_rows(&g, fill, 5, 16, dst, 16, src, 16, 0, rows, 2);
  for (int i = 2 * 16; i < 5 * 16; i++)
    cr_assert_eq(dst[i], 0.0f, "padding row value %d is %g", i, (double)dst[i]);
  free(src);
}

/* The stream itself is pinned: a change would silently change every augmented run's digits and
 * break resuming a checkpoint written by an older tessera bit for bit. */
Test(augment, draws_of_known_keys) {
  tsr_augment_geom_t g = {1, 28, 28, 4, true, true, tsr__augment_key(1, 1)};
  static const int pinned[][3] = {{3, 4, 0}, {7, 4, 0}, {7, 1, 1}, {6, 2, 0},
                                  {3, 6, 0}, {3, 0, 0}, {7, 3, 0}, {3, 7, 1}};
  for (int s = 0; s < (int)(sizeof pinned / sizeof *pinned); s++) {
    int dy, dx;
    bool mirror;
    tsr__k_augment_draw(&g, s, &dy, &dx, &mirror);
    cr_assert(dy == pinned[s][0] && dx == pinned[s][1] && mirror == pinned[s][2],
              "seed 1 epoch 1 sample %d: drew (%d, %d, %d), pinned (%d, %d, %d)", s, dy, dx, mirror,
              pinned[s][0], pinned[s][1], pinned[s][2]);
  }
  const int n = 9000, span = 2 * g.pad + 1;
  int count_y[9] = {0}, count_x[9] = {0}, flips = 0, moved = 0;
  for (int s = 0; s < n; s++) {
    int dy, dx, dy2, dx2, dy3, dx3;
    bool mirror, m2, m3;
    tsr__k_augment_draw(&g, s, &dy, &dx, &mirror);
    cr_assert(dy >= 0 && dy < span && dx >= 0 && dx < span, "offsets (%d, %d)", dy, dx);
    count_y[dy]++, count_x[dx]++, flips += mirror;
    tsr_augment_geom_t no_flip = g, no_crop = g, next = g;
    no_flip.flip = false, no_crop.crop = false, next.key = tsr__augment_key(1, 2);
    tsr__k_augment_draw(&no_flip, s, &dy2, &dx2, &m2);
    cr_assert(dy2 == dy && dx2 == dx && !m2, "sample %d: the crop changed with flip off", s);
    tsr__k_augment_draw(&no_crop, s, &dy2, &dx2, &m2);
    cr_assert(dy2 == g.pad && dx2 == g.pad && m2 == mirror, "sample %d without crop", s);
    tsr__k_augment_draw(&next, s, &dy3, &dx3, &m3);
    moved += dy3 != dy || dx3 != dx || m3 != mirror;
  }
  for (int k = 0; k < span; k++) {
    cr_assert(abs(count_y[k] - n / span) < 0.15 * n / span, "dy %d drawn %d times of %d", k,
              count_y[k], n);
    cr_assert(abs(count_x[k] - n / span) < 0.15 * n / span, "dx %d drawn %d times of %d", k,
              count_x[k], n);
  }
  cr_assert(abs(flips - n / 2) < 0.03 * n, "%d flips of %d", flips, n);
  cr_assert(moved > 0.95 * n, "epoch 2 draws like epoch 1 for %d of %d samples", n - moved, n);
  cr_assert_neq(tsr__augment_key(1, 1), tsr__augment_key(2, 1), "the seed must change the key");
}

Test(augment, flip_twice_is_the_identity) {
  tsr_augment_geom_t g = {3, 5, 6, 0, false, true, tsr__augment_key(9, 4)};
  const int n = 64, f = 3 * 5 * 6;
  float fill[3] = {0};
  float *src = images(n, f, 2), *once = malloc(sizeof(float) * (size_t)(n * f)),
        *twice = malloc(sizeof(float) * (size_t)(n * f));
  int32_t rows[64];
  for (int r = 0; r < n; r++)
    rows[r] = r;
  /* row r of `once` is sample r's augmented image, so the second pass draws the same flip */
  tsr__k_augment_rows(&g, fill, n, f, once, f, src, f, 0, rows, n);
  tsr__k_augment_rows(&g, fill, n, f, twice, f, once, f, 0, rows, n);
  int mirrored = 0;
  for (int r = 0; r < n; r++) {
    int dy, dx;
    bool mirror;
    tsr__k_augment_draw(&g, r, &dy, &dx, &mirror);
    bool same = memcmp(once + r * f, src + r * f, sizeof(float) * (size_t)f) == 0;
    cr_assert(same == !mirror, "row %d: mirrored %d but changed %d", r, mirror, !same);
    mirrored += mirror;
    cr_assert(memcmp(twice + r * f, src + r * f, sizeof(float) * (size_t)f) == 0,
              "row %d: two flips are not the identity", r);
  }
  cr_assert(mirrored > 10 && mirrored < n - 10, "%d of %d mirrored", mirrored, n);
  free(src), free(once), free(twice);
}

/* An image of ones padded with -1, -2, -3: the padded pixels are exactly the crop's part outside
 * the image, (h - |dy - pad|) (w - |dx - pad|) pixels from the image, the rest the fill. */
Test(augment, padded_pixels_hold_the_fill) {
  tsr_augment_geom_t g = {3, 6, 5, 4, true, true, tsr__augment_key(3, 2)};
  const int n = 200, f = 3 * 6 * 5;
  const float fill[3] = {-1.0f, -2.0f, -3.0f};
  float *src = malloc(sizeof(float) * (size_t)(n * f)),
        *dst = malloc(sizeof(float) * (size_t)(n * f));
  for (int i = 0; i < n * f; i++)
    src[i] = 1.0f;
  int32_t rows[200];
  for (int r = 0; r < n; r++)
    rows[r] = r;
  tsr__k_augment_rows(&g, fill, n, f, dst, f, src, f, 0, rows, n);
  int all_image = 0;
  for (int r = 0; r < n; r++) {
    int dy, dx;
    bool mirror;
    tsr__k_augment_draw(&g, r, &dy, &dx, &mirror);
    int inside = (g.h - abs(dy - g.pad)) * (g.w - abs(dx - g.pad)), ones = 0;
    for (int j = 0; j < f; j++) {
      float v = dst[r * f + j];
      cr_assert(v == 1.0f || v == fill[j % 3], "row %d column %d: %g", r, j, (double)v);
      ones += v == 1.0f;
    }
    cr_assert_eq(ones, inside * 3, "row %d (dy %d dx %d): %d image values, want %d", r, dy, dx,
                 ones, inside * 3);
    all_image += inside == g.h * g.w;
  }
  cr_assert(all_image < n / 10, "the crop must usually reach the padding (%d of %d did not)",
            all_image, n);
  free(src), free(dst);
}

/* The tiled gather: every row and column tiling gives the kernel's bits on the whole matrix. */
Test(augment, tiled_gather_is_tiling_invariant) {
  tsr_augment_geom_t g = {3, 5, 5, 2, true, true, tsr__augment_key(5, 3)};
  const int m = 20, f = 75, nvalid = 17, n = 50;
  const float fill[3] = {-0.5f, 0.25f, 2.0f};
  float *src = images(n, f, 4), *want = malloc(sizeof(float) * (size_t)(m * f)),
        *got = malloc(sizeof(float) * (size_t)(m * f));
  int32_t rows[20];
  for (int r = 0; r < m; r++)
    rows[r] = (int32_t)((r * 11 + 3) % n);
  tsr__k_augment_rows(&g, fill, m, f, want, f, src, f, 0, rows, nvalid);
  static const int tilings[][2] = {{20, 75}, {3, 75}, {7, 11}, {1, 1}, {6, 32}};
  for (size_t t = 0; t < sizeof tilings / sizeof *tilings; t++) {
    tsr_tiles_t *x;
    cr_assert_eq(tsr_tiles_create(&x, m, f, tilings[t][0], tilings[t][1]), 0);
    cr_assert_eq(tsr__tiles_gather_augment(&topts, x, src, f, rows, nvalid, &g, fill), 0);
    cr_assert_eq(tsr_tiles_read(x, got), 0);
    cr_assert(memcmp(got, want, sizeof(float) * (size_t)(m * f)) == 0,
              "tiles %dx%d: the gathered batch differs", tilings[t][0], tilings[t][1]);
    tsr_tiles_destroy(&x);
  }
  tsr_tiles_t *x;
  cr_assert_eq(tsr_tiles_create(&x, m, f + 1, 4, 4), 0);
  cr_assert_eq(tsr__tiles_gather_augment(&topts, x, src, f, rows, nvalid, &g, fill), TSR_ESHAPE,
               "a matrix wider than the images is refused");
  tsr_tiles_destroy(&x);
  free(src), free(want), free(got);
}

/* A small CNN on 28x28 images with batch-row tiles of `tile_rows`. */
static tsr_net_t *cnn(const tsr_dataset_t *ds, int tile_rows) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse_ini_text(&spec,
                                        "[c]\ntype = conv\nfilters = 4\nkernel = 3\n"
                                        "activation = relu\n[p]\ntype = maxpool\nkernel = 2\n"
                                        "[f]\ntype = flatten\n[out]\ntype = dense\nunits = 10\n",
                                        "cnn", &err),
               0, "%s", err.msg);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 32, o.tile_rows = tile_rows, o.seed = 5;
  o.in_channels = ds->channels, o.in_height = ds->height, o.in_width = ds->width;
  tsr_net_t *net;
  cr_assert_eq(tsr_net_create(&net, &spec, (int)ds->features, ds->classes, &o, &err), 0, "%s",
               err.msg);
  tsr_model_spec_fini(&spec);
  return net;
}

/* What the net's input batch holds after a training (or evaluation) step on rows. */
static float *input_after_step(tsr_net_t *net, const tsr_dataset_t *ds, const int32_t *rows,
                               bool train) {
  int64_t f = ds->features;
  float *x = malloc(sizeof(float) * (size_t)(32 * f));
  if (train)
    cr_assert_eq(tsr_net_train_step(net, ds, rows, 32, true), 0);
  else
    cr_assert_eq(tsr_net_eval_step(net, ds, rows, 32), 0);
  cr_assert_eq(tsr_tiles_read(net->x0, x), 0);
  return x;
}

Test(augment, a_net_augments_training_batches_only_and_for_any_tiles) {
  tsr_dataset_t train, test;
  load(&train, &test, 500);
  int64_t f = train.features;
  int32_t rows[32];
  for (int i = 0; i < 32; i++)
    rows[i] = (int32_t)((i * 31 + 7) % train.n);
  const float fill[1] = {-0.75f};
  tsr_augment_t a = {.crop_h = 28, .crop_w = 28, .pad = 4, .flip = true, .fill = fill};
  float *plain = malloc(sizeof(float) * (size_t)(32 * f)),
        *want = malloc(sizeof(float) * (size_t)(32 * f));
  for (int r = 0; r < 32; r++)
    memcpy(plain + r * f, train.x + rows[r] * f, sizeof(float) * (size_t)f);
  tsr_augment_geom_t g = {1, 28, 28, 4, true, true, tsr__augment_key(5, 3)};
  tsr__k_augment_rows(&g, fill, 32, (int)f, want, (int)f, train.x, (int)f, 0, rows, 32);
  float *first = NULL;
  static const int tile_rows[] = {32, 8, 5};
  for (size_t t = 0; t < sizeof tile_rows / sizeof *tile_rows; t++) {
    tsr_net_t *net = cnn(&train, tile_rows[t]);
    tsr_errbuf_t err = {""};
    float *x = input_after_step(net, &train, rows, true);
    cr_assert(memcmp(x, plain, sizeof(float) * (size_t)(32 * f)) == 0, "no augmentation yet");
    free(x);
    cr_assert_eq(tsr_net_set_augment(net, &a, &err), 0, "%s", err.msg);
    tsr_net_set_epoch(net, 3);
    x = input_after_step(net, &train, rows, true);
    cr_assert(memcmp(x, want, sizeof(float) * (size_t)(32 * f)) == 0,
              "tiles of %d rows: the training batch is not the kernel's augmentation",
              tile_rows[t]);
    if (!first) first = x, x = NULL;
    free(x);
    x = input_after_step(net, &train, rows, false);
    cr_assert(memcmp(x, plain, sizeof(float) * (size_t)(32 * f)) == 0,
              "an evaluation batch must be the images as they are");
    free(x);
    tsr_net_set_epoch(net, 4);
    x = input_after_step(net, &train, rows, true);
    cr_assert(memcmp(x, first, sizeof(float) * (size_t)(32 * f)) != 0,
              "another epoch must draw other crops and flips");
    free(x);
    tsr_augment_t off = {0};
    cr_assert_eq(tsr_net_set_augment(net, &off, &err), 0, "%s", err.msg);
    x = input_after_step(net, &train, rows, true);
    cr_assert(memcmp(x, plain, sizeof(float) * (size_t)(32 * f)) == 0, "turned off again");
    free(x);
    tsr_net_destroy(&net);
  }
  cr_assert(memcmp(first, plain, sizeof(float) * (size_t)(32 * f)) != 0,
            "augmentation changed nothing");
  free(first), free(plain), free(want);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}

static void refused(const tsr_augment_t *a, int c, int h, int w, const char *words) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_augment_check(a, c, h, w, &err), TSR_EINVAL,
               "%dx%dx%d crop %dx%d:%d flip %d "
               "must be refused",
               h, w, c, a->crop_h, a->crop_w, a->pad, a->flip);
  cr_assert(strstr(err.msg, words), "message '%s' should say '%s'", err.msg, words);
}

Test(augment, settings_that_cannot_work_are_refused) {
  tsr_errbuf_t err = {""};
  tsr_augment_t none = {0}, flip = {.flip = true}, crop = {.crop_h = 28, .crop_w = 28, .pad = 4};
  cr_assert_eq(tsr_augment_check(&none, 7, 1, 1, &err), 0, "nothing asked: fine on tabular data");
  cr_assert_eq(tsr_augment_check(&crop, 1, 28, 28, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_augment_check(&flip, 3, 32, 32, &err), 0, "%s", err.msg);
  refused(&flip, 784, 1, 1, "need images");
  refused(&crop, 20, 1, 1, "rows of 20 features");
  refused(&flip, 1, 1, 16, "rows of 16 features"); /* a CSV dataset's geometry */
  refused(&(tsr_augment_t){.crop_h = 28, .crop_w = 28, .pad = -1}, 1, 28, 28, "padding");
  refused(&(tsr_augment_t){.crop_h = 40, .crop_w = 40, .pad = 4}, 1, 28, 28, "does not fit");
  refused(&(tsr_augment_t){.crop_h = 24, .crop_w = 24, .pad = 4}, 1, 28, 28, "image's size");
  refused(&(tsr_augment_t){.pad = 4}, 1, 28, 28, "needs a crop size");
  refused(&(tsr_augment_t){.crop_h = 28, .crop_w = 0, .pad = 0}, 1, 28, 28, "does not fit");
  /* the net refuses what does not fit its input, and stays as it was */
  tsr_dataset_t train, test;
  load(&train, &test, 100);
  tsr_net_t *net = cnn(&train, 0);
  cr_assert_eq(
      tsr_net_set_augment(net, &(tsr_augment_t){.crop_h = 32, .crop_w = 32, .pad = 2}, &err),
      TSR_EINVAL);
  cr_assert(!net->augment.flip && net->augment.crop_h == 0 && !net->augment_fill);
  tsr_net_destroy(&net);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
  char text[64];
  tsr_augment_describe(&(tsr_augment_t){.crop_h = 32, .crop_w = 32, .pad = 4, .flip = true}, text,
                       sizeof text);
  cr_assert_str_eq(text, "crop 32x32:4 flip");
  tsr_augment_describe(&flip, text, sizeof text);
  cr_assert_str_eq(text, "flip");
  tsr_augment_describe(&none, text, sizeof text);
  cr_assert_str_eq(text, "none");
}

/* A black pixel standardized as the images are: (0 - mean) / std per channel, the very float the
 * data's own black pixels became; a per-column standardization has no such value. */
Test(augment, fill_is_a_standardized_black_pixel) {
  tsr_dataset_t train, test;
  load(&train, &test, 300); /* load standardizes; fit again on a raw copy below */
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_dataset_load_dir(&train, &test, data_dir(), &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_dataset_truncate(&train, 300), 0);
  int64_t black = -1;
  for (int64_t i = 0; i < train.features && black < 0; i++)
    if (train.x[i] == 0.0f) black = i;
  cr_assert(black >= 0, "the first image has a black pixel");
  tsr_standardization_t s;
  cr_assert_eq(tsr_standardization_fit(&s, TSR_STANDARDIZE_SCALAR, &train, &err), 0);
  float fill[1];
  cr_assert_eq(tsr_augment_fill(fill, 1, &s, &train, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_standardization_apply(&s, &train, "train", &err), 0);
  cr_assert(memcmp(&fill[0], &train.x[black], sizeof(float)) == 0,
            "fill %.9g, a standardized black pixel %.9g", (double)fill[0], (double)train.x[black]);
  cr_assert(fill[0] < 0.0f && fabsf(fill[0] + s.mean[0] / s.std[0]) < 1e-5f, "(0 - %g) / %g",
            (double)s.mean[0], (double)s.std[0]);
  tsr_standardization_fini(&s);
  cr_assert_eq(tsr_standardization_fit(&s, TSR_STANDARDIZE_NONE, &train, &err), 0);
  cr_assert_eq(tsr_augment_fill(fill, 1, &s, &train, &err), 0, "%s", err.msg);
  cr_assert_eq(fill[0], 0.0f);
  tsr_standardization_fini(&s);
  cr_assert_eq(tsr_standardization_fit(&s, TSR_STANDARDIZE_COLUMN, &train, &err), 0);
  cr_assert_eq(tsr_augment_fill(fill, 1, &s, &train, &err), TSR_EINVAL);
  cr_assert(strstr(err.msg, "column standardization"), "%s", err.msg);
  tsr_standardization_fini(&s);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}

/* tsr_train keys each epoch's draws with that epoch: the net's epoch is the one on_epoch reports
 * (a resumed run's first epoch included). */
static int epoch_seen(const tsr_epoch_stats_t *s, void *ctx) {
  tsr_net_t *net = ctx;
  cr_assert_eq(net->epoch, s->epoch, "epoch %d was drawn with epoch %d's key", s->epoch,
               net->epoch);
  return 0;
}

Test(augment, tsr_train_sets_the_epoch) {
  tsr_dataset_t train, test;
  load(&train, &test, 200);
  tsr_net_t *net = cnn(&train, 0);
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_set_augment(net, &(tsr_augment_t){.flip = true}, &err), 0, "%s", err.msg);
  tsr_train_opts_t o;
  tsr_train_opts_init(&o);
  o.epochs = 3, o.start_epoch = 2, o.on_epoch = epoch_seen, o.ctx = net;
  cr_assert_eq(tsr_train(net, &train, NULL, &o, &err), 0, "%s", err.msg);
  cr_assert_eq(net->epoch, 3);
  tsr_net_destroy(&net);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}
