/* Kernels alone, without StarPU: BLIS GEMM against the naive double
 * reference in every transpose case and odd strides, the fused softmax
 * cross-entropy against finite differences in float64, and the optimizers
 * against their formulas written out. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "rng.h"

static void fill_random(float *x, size_t n, tsr_rng_t *rng) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(2.0 * tsr__rng_uniform(rng) - 1.0);
}

static void init(void) {
  tsr__k_init();
}

TestSuite(kernels, .init = init);

Test(kernels, gemm_matches_reference_in_every_transpose_case) {
  tsr_rng_t rng = {7};
  const int sizes[][3] = {{1, 1, 1}, {5, 7, 3}, {17, 9, 33}, {64, 48, 31}, {3, 129, 70}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
        /* Leading dimensions larger than the rows, as for tiles inside a matrix. */
        int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
        float *a = malloc(sizeof(float) * (size_t)lda * (ta ? k : m));
        float *b = malloc(sizeof(float) * (size_t)ldb * (tb ? n : k));
        float *c = malloc(sizeof(float) * (size_t)ldc * m),
              *r = malloc(sizeof(float) * (size_t)ldc * m);
        fill_random(a, (size_t)lda * (ta ? k : m), &rng);
        fill_random(b, (size_t)ldb * (tb ? n : k), &rng);
        fill_random(c, (size_t)ldc * m, &rng);
        for (int i = 0; i < ldc * m; i++)
          r[i] = c[i];
        tsr__k_gemm(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, 0.5f, c, ldc);
        tsr__k_gemm_ref(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, 0.5f, r, ldc);
        for (int i = 0; i < m; i++)
          for (int j = 0; j < ldc; j++) {
            float got = c[i * ldc + j], want = r[i * ldc + j];
            cr_assert(fabsf(got - want) <= 1e-5f * (1.0f + (float)k),
                      "ta=%d tb=%d %dx%dx%d at (%d,%d): %g vs %g", ta, tb, m, n, k, i, j, got,
                      want);
          }
        free(a), free(b), free(c), free(r);
      }
}

Test(kernels, gemm_with_beta_zero_ignores_garbage_in_c) {
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {NAN, NAN, NAN, NAN};
  tsr__k_gemm(false, false, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  for (int i = 0; i < 4; i++)
    cr_assert_float_eq(c[i], a[i], 1e-6);
}

/* Mean cross-entropy of softmax(z) in double, over rows (m, n). */
static double xent_ref(const double *z, const float *labels, int m, int n) {
  double total = 0;
  for (int i = 0; i < m; i++) {
    double zmax = z[i * n];
    for (int j = 1; j < n; j++)
      zmax = fmax(zmax, z[i * n + j]);
    double s = 0;
    for (int j = 0; j < n; j++)
      s += exp(z[i * n + j] - zmax);
    total += log(s) + zmax - z[i * n + (int)labels[i]];
  }
  return total / m;
}

Test(kernels, softmax_xent_gradient_matches_float64_finite_differences) {
  enum { M = 6, N = 5 };
  tsr_rng_t rng = {3};
  float z[M * N], d[M * N], labels[M];
  fill_random(z, M * N, &rng);
  for (int i = 0; i < M * N; i++)
    z[i] *= 4.0f;
  for (int i = 0; i < M; i++)
    labels[i] = (float)(i % N);
  float stats[2] = {0, 0};
  tsr__k_softmax_xent(M, N, d, N, z, N, labels, M, 1.0f / M, stats);
  double zd[M * N];
  for (int i = 0; i < M * N; i++)
    zd[i] = z[i];
  cr_assert(fabs(stats[0] / M - xent_ref(zd, labels, M, N)) < 1e-5, "loss %g vs %g", stats[0] / M,
            xent_ref(zd, labels, M, N));
  const double h = 1e-6;
  for (int k = 0; k < M * N; k++) {
    double keep = zd[k];
    zd[k] = keep + h;
    double up = xent_ref(zd, labels, M, N);
    zd[k] = keep - h;
    double down = xent_ref(zd, labels, M, N);
    zd[k] = keep;
    double fd = (up - down) / (2 * h);
    cr_assert(fabs(d[k] - fd) < 1e-5, "dlogits[%d] = %g, finite difference %g", k, d[k], fd);
  }
}

Test(kernels, softmax_xent_ignores_padding_rows_and_counts_correct) {
  float z[3 * 2] = {2, 0, 0, 2, 5, -5}, labels[3] = {0, 0, 1}, d[6], stats[2] = {0, 0};
  tsr__k_softmax_xent(3, 2, d, 2, z, 2, labels, 2, 0.5f, stats);
  cr_assert_float_eq(stats[1], 1.0f, 0); /* row 0 right, row 1 wrong, row 2 padding */
  cr_assert_float_eq(d[4], 0.0f, 0);
  cr_assert_float_eq(d[5], 0.0f, 0);
  double expect = log(1 + exp(-2.0)) + log(1 + exp(2.0));
  cr_assert(fabs(stats[0] - expect) < 1e-5);
}

Test(kernels, sgd_momentum_and_weight_decay_follow_pytorch) {
  float w[2] = {1.0f, -2.0f}, v[2] = {0.5f, 0.0f}, g[2] = {0.1f, 0.2f};
  tsr__k_sgd(1, 2, w, 2, v, 2, g, 2, 0.1f, 0.9f, 0.01f);
  /* v = 0.9 v + g + 0.01 w; w -= 0.1 v */
  float v0 = 0.9f * 0.5f + 0.1f + 0.01f * 1.0f, v1 = 0.2f + 0.01f * -2.0f;
  cr_assert_float_eq(v[0], v0, 1e-6);
  cr_assert_float_eq(v[1], v1, 1e-6);
  cr_assert_float_eq(w[0], 1.0f - 0.1f * v0, 1e-6);
  cr_assert_float_eq(w[1], -2.0f - 0.1f * v1, 1e-6);
}

Test(kernels, adam_first_step_moves_each_weight_by_lr) {
  float w[3] = {1, 2, 3}, m1[3] = {0}, m2[3] = {0}, g[3] = {0.5f, -0.25f, 4.0f};
  tsr__k_adam(1, 3, w, 3, m1, 3, m2, 3, g, 3, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  /* At t = 1 the bias-corrected step is lr * g / |g|. */
  cr_assert_float_eq(w[0], 1 - 0.01f, 1e-5);
  cr_assert_float_eq(w[1], 2 + 0.01f, 1e-5);
  cr_assert_float_eq(w[2], 3 - 0.01f, 1e-5);
}

Test(kernels, gather_copies_chosen_rows_and_zeroes_padding) {
  float src[4 * 3] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, dst[3 * 2];
  int32_t rows[3] = {3, 1, 2};
  tsr__k_gather_rows(3, 2, dst, 2, src, 3, 1, rows, 2);
  float want[6] = {31, 32, 11, 12, 0, 0};
  for (int i = 0; i < 6; i++)
    cr_assert_float_eq(dst[i], want[i], 0);
}

Test(kernels, bias_relu_and_bias_grad) {
  float y[2 * 3] = {-1, 0, 1, 2, -3, 0.5f}, b[3] = {0.5f, 0.5f, -1};
  tsr__k_bias_add(2, 3, y, 3, b, true);
  float want[6] = {0, 0.5f, 0, 2.5f, 0, 0};
  for (int i = 0; i < 6; i++)
    cr_assert_float_eq(y[i], want[i], 0);
  float db[3] = {9, 9, 9};
  tsr__k_bias_grad(2, 3, db, y, 3, 0.0f);
  cr_assert_float_eq(db[0], 2.5f, 0);
  cr_assert_float_eq(db[1], 0.5f, 0);
  tsr__k_bias_grad(2, 3, db, y, 3, 1.0f);
  cr_assert_float_eq(db[0], 5.0f, 0);
}
