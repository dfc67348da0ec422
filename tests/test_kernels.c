/* Kernels alone, without StarPU: the BLIS and oneDNN GEMMs against the naive double
 * reference in every transpose case and odd strides, the fused softmax
 * cross-entropy against finite differences in float64 and at logits of
 * +-1000, the optimizers over several steps against their formulas written
 * out in float64, and max pooling's backward pass on tied maxima. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
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

/* c = alpha op(a) op(b) + beta c by BLIS (dnnl false) or oneDNN's GEMM, which must serve every
 * call where this build has oneDNN and refuse every call (c untouched) where it has not. */
static void gemm_by(bool dnnl, bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
                    int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (!dnnl) {
    tsr__k_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  bool done = tsr__k_gemm_dnnl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  cr_assert_eq(done, tsr__k_dnnl_built(), "oneDNN's GEMM %s a %dx%dx%d product with oneDNN %s",
               done ? "computed" : "refused", m, n, k, tsr__k_dnnl_built() ? "built" : "not built");
  if (!done) tsr__k_gemm_ref(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Both implementations, each transpose case, odd strides: every element of c, the columns past
 * n included, as the naive reference leaves it. */
Test(kernels, gemm_matches_reference_in_every_transpose_case) {
  tsr_rng_t rng = {7};
  const int sizes[][3] = {{1, 1, 1}, {5, 7, 3}, {17, 9, 33}, {64, 48, 31}, {3, 129, 70}};
  for (int dnnl = 0; dnnl < 2; dnnl++)
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
          gemm_by(dnnl, ta, tb, m, n, k, 0.75f, a, lda, b, ldb, 0.5f, c, ldc);
          tsr__k_gemm_ref(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, 0.5f, r, ldc);
          for (int i = 0; i < m; i++)
            for (int j = 0; j < ldc; j++) {
              float got = c[i * ldc + j], want = r[i * ldc + j];
              cr_assert(fabsf(got - want) <= 1e-5f * (1.0f + (float)k),
                        "%s ta=%d tb=%d %dx%dx%d at (%d,%d): %g vs %g", dnnl ? "onednn" : "blis",
                        ta, tb, m, n, k, i, j, got, want);
            }
          free(a), free(b), free(c), free(r);
        }
}

/* tsr__k_gemm_by runs the implementation it is asked for (what --kernels forces into the tile
 * GEMM codelets): BLIS's digits without dnnl, oneDNN's with it, bit for bit. */
Test(kernels, gemm_by_runs_the_implementation_asked_for) {
  tsr_rng_t rng = {11};
  enum { M = 33, N = 47, K = 301 };
  float a[M * K], b[K * N], want[M * N], got[M * N];
  fill_random(a, M * K, &rng);
  fill_random(b, K * N, &rng);
  for (int dnnl = 0; dnnl < 2; dnnl++) {
    if (dnnl && !tsr__k_dnnl_built()) break;
    if (dnnl)
      cr_assert(tsr__k_gemm_dnnl(false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, want, N));
    else
      tsr__k_gemm(false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, want, N);
    tsr__k_gemm_by(dnnl, false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, got, N);
    cr_assert(memcmp(got, want, sizeof got) == 0, "tsr__k_gemm_by(%s) did not run %s's GEMM",
              dnnl ? "true" : "false", dnnl ? "oneDNN" : "BLIS");
  }
}

Test(kernels, gemm_with_beta_zero_ignores_garbage_in_c) {
  for (int dnnl = 0; dnnl < 2; dnnl++) {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {NAN, NAN, NAN, NAN};
    gemm_by(dnnl, false, false, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    for (int i = 0; i < 4; i++)
      cr_assert_float_eq(c[i], a[i], 1e-6, "%s: c[%d] = %g", dnnl ? "onednn" : "blis", i, c[i]);
  }
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
  tsr__k_softmax_xent(M, N, d, N, z, N, labels, M, 1.0f / M, 0.0f, stats);
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

/* PyTorch's nn.CrossEntropyLoss(label_smoothing=eps), written as its documentation does, in
 * float64: the mean over rows of sum_j -q_j log p_j with the target q = (1 - eps) onehot +
 * eps / n and p the softmax (log p_j = z_j - logsumexp(z), the max subtracted first). */
static double smoothed_xent_ref(const double *z, const float *labels, int m, int n, double eps) {
  double total = 0;
  for (int i = 0; i < m; i++) {
    double zmax = z[i * n], s = 0;
    for (int j = 1; j < n; j++)
      zmax = fmax(zmax, z[i * n + j]);
    for (int j = 0; j < n; j++)
      s += exp(z[i * n + j] - zmax);
    double lse = zmax + log(s);
    for (int j = 0; j < n; j++) {
      double q = (1 - eps) * (j == (int)labels[i]) + eps / n;
      total -= q * (z[i * n + j] - lse);
    }
  }
  return total / m;
}

/* --label-smoothing: the loss against the float64 reference of PyTorch's formula (0.1, the
 * usual value, and 0.6, and eps 0 against the one-hot reference), the gradient against its
 * float64 central differences, the accuracy count unchanged, and padding rows still 0. */
Test(kernels, softmax_xent_label_smoothing_matches_pytorch_formula_and_its_gradient) {
  enum { M = 6, N = 5 };
  const float epss[] = {0.0f, 0.1f, 0.6f};
  for (int e = 0; e < 3; e++) {
    tsr_rng_t rng = {11};
    float z[(M + 1) * N], d[(M + 1) * N], labels[M + 1];
    fill_random(z, (M + 1) * N, &rng);
    for (int i = 0; i < (M + 1) * N; i++)
      z[i] *= 4.0f, d[i] = 7.0f;
    for (int i = 0; i <= M; i++)
      labels[i] = (float)((i * 3) % N);
    float stats[2] = {0, 0}, plain[2] = {0, 0}, dp[(M + 1) * N];
    /* M valid rows and one padding row */
    tsr__k_softmax_xent(M + 1, N, d, N, z, N, labels, M, 1.0f / M, epss[e], stats);
    tsr__k_softmax_xent(M + 1, N, dp, N, z, N, labels, M, 1.0f / M, 0.0f, plain);
    double zd[M * N];
    for (int i = 0; i < M * N; i++)
      zd[i] = z[i];
    double want = smoothed_xent_ref(zd, labels, M, N, epss[e]);
    cr_assert(fabs(stats[0] / M - want) < 1e-5 * fmax(1, want), "eps %g: loss %.9g vs %.9g",
              (double)epss[e], stats[0] / M, want);
    if (e == 0) cr_assert(fabs(want - xent_ref(zd, labels, M, N)) < 1e-12);
    cr_assert_eq(stats[1], plain[1], "eps %g: correct %g vs %g", (double)epss[e], stats[1],
                 plain[1]);
    for (int j = 0; j < N; j++)
      cr_assert_eq(d[M * N + j], 0.0f, "eps %g: padding row's gradient", (double)epss[e]);
    const double h = 1e-6;
    for (int k = 0; k < M * N; k++) {
      double keep = zd[k];
      zd[k] = keep + h;
      double up = smoothed_xent_ref(zd, labels, M, N, epss[e]);
      zd[k] = keep - h;
      double down = smoothed_xent_ref(zd, labels, M, N, epss[e]);
      zd[k] = keep;
      double fd = (up - down) / (2 * h);
      cr_assert(fabs(d[k] - fd) < 1e-5, "eps %g: dlogits[%d] = %g, finite difference %g",
                (double)epss[e], k, d[k], fd);
    }
  }
}

Test(kernels, softmax_xent_ignores_padding_rows_and_counts_correct) {
  float z[3 * 2] = {2, 0, 0, 2, 5, -5}, labels[3] = {0, 0, 1}, d[6], stats[2] = {0, 0};
  tsr__k_softmax_xent(3, 2, d, 2, z, 2, labels, 2, 0.5f, 0.0f, stats);
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

/* A momentum buffer whose gradient stays 0 decays to 0 without passing
 * through subnormal floats (they take a slow path in every later operation):
 * 1e-37 halves to 5e-38, 2.5e-38, 1.25e-38 (all normal), then would be
 * 6.25e-39, subnormal, and is 0 instead. Adam's moments and the outer
 * momentum likewise. */
Test(kernels, momentum_buffers_never_become_subnormal) {
  float w = 1.0f, v = 1e-37f, g = 0.0f, m1 = 1e-37f, m2 = 1e-37f;
  float nv = 1e-37f, am1 = 1e-37f, am2 = 1e-37f; /* Nesterov's buffer, AdamW's moments */
  for (int step = 1; step <= 4; step++) {
    tsr__k_sgd(1, 1, &w, 1, &v, 1, &g, 1, 0.1f, 0.5f, 0.0f);
    tsr__k_adam(1, 1, &w, 1, &m1, 1, &m2, 1, &g, 1, 0.1f, 0.5f, 0.5f, 1e-8f, 0.0f, step);
    tsr__k_sgd_nesterov(1, 1, &w, 1, &nv, 1, &g, 1, 0.1f, 0.5f, 0.0f);
    tsr__k_adamw(1, 1, &w, 1, &am1, 1, &am2, 1, &g, 1, 0.1f, 0.5f, 0.5f, 1e-8f, 0.0f, step);
    cr_assert(fpclassify(v) != FP_SUBNORMAL && fpclassify(m1) != FP_SUBNORMAL &&
                  fpclassify(m2) != FP_SUBNORMAL && fpclassify(nv) != FP_SUBNORMAL &&
                  fpclassify(am1) != FP_SUBNORMAL && fpclassify(am2) != FP_SUBNORMAL,
              "step %d: v %g, m1 %g, m2 %g, nesterov v %g, adamw m1 %g, m2 %g", step, v, m1, m2, nv,
              am1, am2);
    cr_assert(step < 4 ? v > 0.0f && nv > 0.0f : v == 0.0f && nv == 0.0f,
              "step %d: v = %g, nesterov v = %g", step, v, nv);
  }
  float x = 1.0f, u = 1e-37f, a = 1.0f, b = 1.0f;
  for (int round = 1; round <= 4; round++)
    tsr__k_outer(1, 1, &x, 1, &u, 1, &a, 1, &b, 1, 1.0f, true, 0.7f, 0.5f, 0.0f);
  cr_assert(u == 0.0f && x == 1.0f, "outer momentum %g", u);
}

Test(kernels, adam_first_step_moves_each_weight_by_lr) {
  float w[3] = {1, 2, 3}, m1[3] = {0}, m2[3] = {0}, g[3] = {0.5f, -0.25f, 4.0f};
  tsr__k_adam(1, 3, w, 3, m1, 3, m2, 3, g, 3, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  /* At t = 1 the bias-corrected step is lr * g / |g|. */
  cr_assert_float_eq(w[0], 1 - 0.01f, 1e-5);
  cr_assert_float_eq(w[1], 2 + 0.01f, 1e-5);
  cr_assert_float_eq(w[2], 3 - 0.01f, 1e-5);
}

/* The outer optimizers' step (tessera/dist.h) over three rounds against
 * float64, with strides: d = scale (a - b);
 *   slowmo:   u = beta u + d / gamma;  x -= alpha gamma u
 *   nesterov: u = mu u + d;            x -= eta (d + mu u)
 * and slowmo at gamma 0: x -= d, u untouched. */
Test(kernels, outer_steps_follow_slowmo_and_nesterov_over_several_rounds) {
  enum { M = 2, N = 2, LD = 3 };
  const float a0[M * LD] = {1.0f, -2.0f, 9, 0.5f, 3.0f, 9};
  for (int nesterov = 0; nesterov < 2; nesterov++) {
    const float lr = nesterov ? 0.7f : 1.5f, mu = nesterov ? 0.9f : 0.5f, gamma = 0.1f;
    const float scale = 0.5f;
    float x[M * LD], u[M * LD] = {0}, b[M * LD];
    double rx[M * N], ru[M * N] = {0};
    memcpy(x, a0, sizeof x);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++)
        x[i * LD + j] = a0[i * LD + j], rx[i * N + j] = a0[i * LD + j];
    for (int round = 1; round <= 3; round++) {
      for (int i = 0; i < M * LD; i++)
        b[i] = 0.3f * (float)(i % 4) - 0.2f * (float)round;
      float a[M * LD];
      memcpy(a, x, sizeof a); /* a copy of x: d = scale (x - b) */
      tsr__k_outer(M, N, x, LD, u, LD, a, LD, b, LD, scale, nesterov, lr, mu, gamma);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double d = scale * (rx[i * N + j] - b[i * LD + j]), *ux = &ru[i * N + j];
          if (nesterov) {
            *ux = mu * *ux + d;
            rx[i * N + j] -= lr * (d + mu * *ux);
          } else {
            *ux = mu * *ux + d / gamma;
            rx[i * N + j] -= lr * gamma * *ux;
          }
          cr_assert(fabs(x[i * LD + j] - rx[i * N + j]) <= 1e-5 * (1 + fabs(rx[i * N + j])),
                    "%s round %d: x[%d][%d] = %.7g, want %.7g", nesterov ? "nesterov" : "slowmo",
                    round, i, j, x[i * LD + j], rx[i * N + j]);
          cr_assert(fabs(u[i * LD + j] - *ux) <= 1e-5 * (1 + fabs(*ux)), "%s round %d: u",
                    nesterov ? "nesterov" : "slowmo", round);
        }
      cr_assert_eq(x[2], 9.0f, "padding written");
    }
  }
  float x[2] = {1.0f, 2.0f}, u[2] = {5.0f, 5.0f}, b[2] = {0.0f, 4.0f}, a[2] = {1.0f, 2.0f};
  tsr__k_outer(1, 2, x, 2, u, 2, a, 2, b, 2, 1.0f, false, 1.0f, 0.5f, 0.0f);
  cr_assert(x[0] == 0.0f && x[1] == 4.0f && u[0] == 5.0f, "slowmo at gamma 0 steps to b");
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

/* Logits of +-1000: exp(1000) overflows even a double (exp overflows past
 * about 709) and exp(-1000) underflows to 0, so a row is only finite if its
 * maximum zmax is subtracted first. Per row, with that done in float64:
 *   loss = logsumexp(z) - z[label] = zmax + log(sum_j exp(z_j - zmax)) - z[label]
 *   dlogits_j = scale (exp(z_j - zmax) / sum_k exp(z_k - zmax) - [j == label])
 * The kernel accumulates the loss in double, so it must match to float
 * rounding: relative 1e-6 on the loss, 1e-7 on gradients of at most scale. */
Test(kernels, softmax_xent_is_finite_and_exact_for_logits_of_plus_minus_1000) {
  enum { M = 4, N = 4 };
  const float z[M * N] = {1000,  -1000, 0,     999,   /* label 3: the runner-up */
                          1000,  -1000, 0,     999,   /* label 1: loss about 2000 */
                          -1000, -999,  -1000, -1001, /* all tiny: sum underflows unshifted */
                          -1000, 1000,  500,   -500};
  const float labels[M] = {3, 1, 1, 2};
  const float scale = 0.25f;
  for (int i = 0; i < M; i++) {
    const float *zr = z + i * N;
    float d[N], stats[2] = {0, 0};
    tsr__k_softmax_xent(1, N, d, N, zr, N, labels + i, 1, scale, 0.0f, stats);
    int label = (int)labels[i], arg = 0;
    for (int j = 1; j < N; j++)
      if (zr[j] > zr[arg]) arg = j;
    double zmax = zr[arg], sum = 0;
    for (int j = 0; j < N; j++)
      sum += exp((double)zr[j] - zmax);
    double loss = zmax + log(sum) - zr[label];
    cr_assert(isfinite(stats[0]) && fabs(stats[0] - loss) <= 1e-6 * fmax(1, fabs(loss)),
              "row %d: loss %g, want %.9g", i, stats[0], loss);
    cr_assert_eq(stats[1], (float)(arg == label), "row %d: correct %g, argmax %d, label %d", i,
                 stats[1], arg, label);
    for (int j = 0; j < N; j++) {
      double want = scale * (exp((double)zr[j] - zmax) / sum - (j == label));
      cr_assert(isfinite(d[j]) && fabs(d[j] - want) <= 1e-7, "row %d: dlogits[%d] = %g, want %.9g",
                i, j, d[j], want);
    }
  }
}

/* Plain SGD (momentum 0) with L2 weight decay, a new gradient every step:
 *   w -= lr (g + wd w)
 * against the same recurrence in float64. The velocity is unused (NULL).
 * Tiles are strided (ld > n): the columns past n must stay untouched. One
 * step with the decay's sign flipped moves w by 2 lr wd |w| (0.04 |w| here),
 * far beyond the tolerance of 1e-6 (float rounding over 4 steps stays below
 * 2e-7, about one ulp of w). */
Test(kernels, sgd_without_momentum_decays_weights_over_several_steps) {
  enum { M = 2, N = 3, LDW = 4, LDG = 5, STEPS = 4 };
  const float lr = 0.1f, wd = 0.2f, w0[M * N] = {1.5f, -2.0f, 0.25f, -0.75f, 3.0f, -1.0f};
  tsr_rng_t rng = {11};
  float w[M * LDW], g[M * LDG];
  double ref[M * N];
  for (int i = 0; i < M * LDW; i++)
    w[i] = 77.0f;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++)
      w[i * LDW + j] = w0[i * N + j], ref[i * N + j] = w0[i * N + j];
  for (int t = 1; t <= STEPS; t++) {
    fill_random(g, M * LDG, &rng);
    tsr__k_sgd(M, N, w, LDW, NULL, 0, g, LDG, lr, 0.0f, wd);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double *r = ref + i * N + j;
        *r -= (double)lr * (g[i * LDG + j] + (double)wd * *r);
        float got = w[i * LDW + j];
        cr_assert(fabs(got - *r) <= 1e-6, "step %d: w[%d][%d] = %.7g, want %.7g", t, i, j, got, *r);
      }
    for (int i = 0; i < M; i++)
      cr_assert_eq(w[i * LDW + N], 77.0f, "step %d: padding of row %d written", t, i);
  }
}

/* SGD with momentum and weight decay over several steps, the velocity
 * carried from one to the next; PyTorch's torch.optim.SGD (dampening 0),
 * plain and with nesterov=True, whose buffer starts as the first g' (the same
 * as v = 0 here):
 *   g' = g + wd w;  v = momentum v + g';  w -= lr v   (Nesterov: w -= lr (g' + momentum v))
 * against float64 from step 1, checking w and v after every step. Float
 * rounding stays below 2.5e-7 (v reaches 2.4), hence a tolerance of 1e-6;
 * Nesterov without its look-ahead term moves the first step's w by
 * lr momentum |g'| less (up to 0.05 here). */
Test(kernels, sgd_momentum_and_nesterov_carry_velocity_over_several_steps) {
  enum { M = 2, N = 3, LDW = 3, LDV = 6, LDG = 4, STEPS = 5 };
  const float lr = 0.05f, mu = 0.9f, wd = 0.1f, w0[M * N] = {1.0f, -2.0f, 0.5f, 3.0f, -0.25f, 0};
  for (int nesterov = 0; nesterov < 2; nesterov++) {
    const char *what = nesterov ? "nesterov" : "momentum";
    tsr_rng_t rng = {(uint64_t)(12 + nesterov)};
    float w[M * LDW], v[M * LDV], g[M * LDG];
    double rw[M * N], rv[M * N];
    for (int i = 0; i < M * LDV; i++)
      v[i] = 0.0f;
    for (int i = 0; i < M * N; i++)
      w[i] = w0[i], rw[i] = w0[i], rv[i] = 0.0;
    for (int t = 1; t <= STEPS; t++) {
      fill_random(g, M * LDG, &rng);
      (nesterov ? tsr__k_sgd_nesterov : tsr__k_sgd)(M, N, w, LDW, v, LDV, g, LDG, lr, mu, wd);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          int k = i * N + j;
          double gp = g[i * LDG + j] + (double)wd * rw[k];
          rv[k] = t == 1 ? gp : (double)mu * rv[k] + gp; /* PyTorch's first step */
          rw[k] -= (double)lr * (nesterov ? gp + (double)mu * rv[k] : rv[k]);
          cr_assert(fabs(v[i * LDV + j] - rv[k]) <= 1e-6,
                    "%s, step %d: v[%d][%d] = %.7g, want %.7g", what, t, i, j, v[i * LDV + j],
                    rv[k]);
          cr_assert(fabs(w[i * LDW + j] - rw[k]) <= 1e-6,
                    "%s, step %d: w[%d][%d] = %.7g, want %.7g", what, t, i, j, w[i * LDW + j],
                    rw[k]);
        }
    }
  }
}

/* Adam with L2 weight decay and AdamW with decoupled decay, steps t = 1..5
 * with a different gradient each step, against PyTorch's torch.optim.Adam and
 * torch.optim.AdamW (amsgrad off) in float64, as their _single_tensor_adam(w)
 * compute them:
 *   Adam:  g' = g + wd w
 *   AdamW: w *= 1 - lr wd;  g' = g
 *   then m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
 *        w -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Bias correction with t + 1 instead of t shrinks the first step by a
 * quarter (w off by 2.6e-3 here, 4.8e-3 after 5 steps); AdamW decaying after
 * the step instead of before is off by lr^2 wd = 1e-5 a step (the decay is
 * large for that); float rounding stays below 1.5e-7 on w (one ulp of 2 is
 * 2.4e-7), 1e-8 on m and 3e-10 on v, so the tolerances are 1e-6 on w, 1e-7
 * on m and 1e-8 on v. */
Test(kernels, adam_and_adamw_several_steps_with_weight_decay_follow_pytorch) {
  enum { M = 2, N = 3, LDW = 5, LDM = 4, LDG = 3, STEPS = 5 };
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  const float w0[M * N] = {1.0f, -0.5f, 2.0f, -1.5f, 0.25f, 0.75f};
  for (int decoupled = 0; decoupled < 2; decoupled++) {
    const float wd = decoupled ? 0.1f : 0.05f;
    const char *what = decoupled ? "adamw" : "adam";
    tsr_rng_t rng = {(uint64_t)(13 + 2 * decoupled)};
    float w[M * LDW], m1[M * LDM] = {0}, m2[M * LDM] = {0}, g[M * LDG];
    double rw[M * N], rm[M * N] = {0}, rv[M * N] = {0};
    for (int i = 0; i < M * LDW; i++)
      w[i] = 77.0f;
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++)
        w[i * LDW + j] = w0[i * N + j], rw[i * N + j] = w0[i * N + j];
    for (int t = 1; t <= STEPS; t++) {
      fill_random(g, M * LDG, &rng);
      (decoupled ? tsr__k_adamw : tsr__k_adam)(M, N, w, LDW, m1, LDM, m2, LDM, g, LDG, lr, b1, b2,
                                               eps, wd, t);
      double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
      for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
          int k = i * N + j;
          if (decoupled) rw[k] *= 1 - (double)lr * wd;
          double gp = g[i * LDG + j] + (decoupled ? 0.0 : (double)wd * rw[k]);
          rm[k] = b1 * rm[k] + (1 - (double)b1) * gp;
          rv[k] = b2 * rv[k] + (1 - (double)b2) * gp * gp;
          rw[k] -= (lr / c1) * rm[k] / (sqrt(rv[k]) / sqrt(c2) + eps);
          cr_assert(fabs(m1[i * LDM + j] - rm[k]) <= 1e-7,
                    "%s, step %d: m[%d][%d] = %.7g, want %.7g", what, t, i, j, m1[i * LDM + j],
                    rm[k]);
          cr_assert(fabs(m2[i * LDM + j] - rv[k]) <= 1e-8,
                    "%s, step %d: v[%d][%d] = %.7g, want %.7g", what, t, i, j, m2[i * LDM + j],
                    rv[k]);
          cr_assert(fabs(w[i * LDW + j] - rw[k]) <= 1e-6,
                    "%s, step %d: w[%d][%d] = %.7g, want %.7g", what, t, i, j, w[i * LDW + j],
                    rw[k]);
        }
        cr_assert_eq(w[i * LDW + N], 77.0f, "%s, step %d: padding of row %d written", what, t, i);
      }
    }
  }
}

/* Max pooling on tied maxima. The contract (kernels.h): the forward pass
 * takes each window's maximum; the backward pass routes that window's dy to
 * exactly one input, the first one in the window's row-major scan (ky, then
 * kx) equal to the maximum, which is the one the forward pass kept (it only
 * replaces on a strictly greater value); with relu, to none when that
 * maximum is not positive. Inputs under no window get 0, and where windows
 * overlap dx is the sum of what each routes there. */
typedef struct {
  int h, w, c, kh, kw, sh, sw;
} pool_case_t;

enum { POOL_N = 3 };

/* Where window (oy, ox) of channel q routes its gradient, as an offset in a
 * sample of x, or -1 when relu stops it; *max is the window's maximum. */
static long pool_route(const tsr_conv_geom_t *g, bool relu, const float *xs, int oy, int ox, int q,
                       float *max) {
  long first = -1;
  for (int ky = 0; ky < g->kh; ky++)
    for (int kx = 0; kx < g->kw; kx++) {
      long at = ((long)(oy * g->sh + ky) * g->w + ox * g->sw + kx) * g->c + q;
      if (first < 0 || xs[at] > xs[first]) first = at;
    }
  *max = xs[first];
  return relu && !(*max > 0.0f) ? -1 : first;
}

static void check_pool_ties(pool_case_t pc, bool relu) {
  tsr_conv_geom_t g = {.c = pc.c, .oc = pc.c, .h = pc.h, .w = pc.w};
  g.kh = pc.kh, g.kw = pc.kw, g.sh = pc.sh, g.sw = pc.sw;
  g.oh = (g.h - g.kh) / g.sh + 1, g.ow = (g.w - g.kw) / g.sw + 1;
  const int in = g.h * g.w * g.c, out = g.oh * g.ow * g.c, ldx = in + 3, ldy = out + 2;
  float *x = malloc(sizeof(float) * POOL_N * ldx), *y = malloc(sizeof(float) * POOL_N * ldy);
  float *dy = calloc((size_t)POOL_N * ldy, sizeof(float));
  float *dx = malloc(sizeof(float) * POOL_N * ldx),
        *want = calloc((size_t)POOL_N * in, sizeof *want);
  /* Sample 0: values from {-1, 0, 1, 2}, so windows often tie; sample 1: all
   * 1, every window one tie of all its inputs; sample 2: all 0, ties at a
   * maximum that relu stops. */
  tsr_rng_t rng = {(uint64_t)(pc.h * 1000 + pc.w * 100 + pc.c * 10 + pc.kh + pc.sh)};
  for (int i = 0; i < ldx; i++) {
    x[i] = (float)tsr__rng_below(&rng, 4) - 1.0f;
    x[ldx + i] = 1.0f;
    x[2 * ldx + i] = 0.0f;
  }
  tsr__k_pool_fwd(&g, true, POOL_N, y, ldy, x, ldx);
  /* The routes, checked against the forward output, and the expected dx for
   * dy = small integers (every sum exact, so compared exactly). */
  long *route = malloc(sizeof(long) * POOL_N * out);
  int tied = 0;
  for (int s = 0; s < POOL_N; s++)
    for (int oy = 0; oy < g.oh; oy++)
      for (int ox = 0; ox < g.ow; ox++)
        for (int q = 0; q < g.c; q++) {
          int o = (oy * g.ow + ox) * g.c + q;
          float max;
          long r = pool_route(&g, relu, x + (long)s * ldx, oy, ox, q, &max);
          cr_assert_eq(y[(long)s * ldy + o], max, "forward: sample %d output %d", s, o);
          int equal = 0;
          for (int ky = 0; ky < g.kh; ky++)
            for (int kx = 0; kx < g.kw; kx++)
              equal +=
                  x[(long)s * ldx + ((oy * g.sh + ky) * g.w + ox * g.sw + kx) * g.c + q] == max;
          tied += s == 0 && equal > 1;
          route[s * out + o] = r;
          dy[(long)s * ldy + o] = (float)(1 + (s * out + o) % 7);
          if (r >= 0) want[(long)s * in + r] += dy[(long)s * ldy + o];
        }
  cr_assert_gt(tied, 0, "the random sample has no tied window: the test checks nothing there");
  char what[160];
  snprintf(what, sizeof what, "%dx%dx%d, window %dx%d, stride %dx%d, relu %d", g.h, g.w, g.c, g.kh,
           g.kw, g.sh, g.sw, relu);

  /* All windows at once: dx is NaN-filled first, so an input left unwritten
   * shows; the columns past a sample (ld > h w c) must stay untouched. */
  for (int i = 0; i < POOL_N * ldx; i++)
    dx[i] = NAN;
  for (int s = 0; s < POOL_N; s++)
    for (int i = in; i < ldx; i++)
      dx[(long)s * ldx + i] = 55.0f;
  tsr__k_pool_bwd(&g, true, relu, POOL_N, dx, ldx, dy, ldy, x, ldx, y, ldy);
  for (int s = 0; s < POOL_N; s++) {
    for (int i = 0; i < in; i++)
      cr_assert_eq(dx[(long)s * ldx + i], want[(long)s * in + i],
                   "%s: sample %d, dx[%d] = %g, want %g", what, s, i, dx[(long)s * ldx + i],
                   want[(long)s * in + i]);
    for (int i = in; i < ldx; i++)
      cr_assert_eq(dx[(long)s * ldx + i], 55.0f, "%s: sample %d, padding written", what, s);
  }

  /* One window at a time (dy 1 there, 0 elsewhere): exactly one input gets
   * exactly 1, the one chosen above, or none where relu stops it. */
  for (int i = 0; i < POOL_N * ldy; i++)
    dy[i] = 0.0f;
  for (int s = 0; s < POOL_N; s++)
    for (int o = 0; o < out; o++) {
      dy[(long)s * ldy + o] = 1.0f;
      tsr__k_pool_bwd(&g, true, relu, POOL_N, dx, ldx, dy, ldy, x, ldx, y, ldy);
      dy[(long)s * ldy + o] = 0.0f;
      long r = route[s * out + o], at = -1;
      int hits = 0;
      double total = 0;
      for (int t = 0; t < POOL_N; t++)
        for (int i = 0; i < in; i++)
          if (dx[(long)t * ldx + i] != 0.0f)
            hits++, total += dx[(long)t * ldx + i], at = (long)t * in + i;
      cr_assert(hits == (r >= 0) && total == (r >= 0) && (r < 0 || at == (long)s * in + r),
                "%s: the gradient of sample %d output %d (pixel %d, channel %d) went to %d "
                "inputs (total %g, last at %ld); want %s %ld",
                what, s, o, o / g.c, o % g.c, hits, total, at, r >= 0 ? "1, at" : "none,",
                r >= 0 ? (long)s * in + r : -1L);
    }
  free(x), free(y), free(dy), free(dx), free(want), free(route);
}

Test(kernels, max_pool_backward_routes_ties_to_the_forward_choice_without_overlap) {
  /* stride == window: the kernel's "tiled" branch; rows and columns past the
   * last window, and more than 64 channels (it works in blocks of 32: two and a tail). */
  const pool_case_t cases[] = {
      {5, 7, 3, 2, 2, 2, 2}, {7, 5, 2, 3, 2, 3, 2}, {4, 5, 67, 2, 2, 2, 2}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int relu = 0; relu < 2; relu++)
      check_pool_ties(cases[i], relu);
}

Test(kernels, max_pool_backward_routes_ties_to_the_forward_choice_with_overlap) {
  /* stride < window (overlapping windows; one with a stride past the window
   * in the other direction) and stride > window (gaps). */
  const pool_case_t cases[] = {{6, 5, 3, 3, 3, 2, 1},
                               {5, 5, 2, 2, 2, 1, 1},
                               {4, 4, 67, 2, 2, 1, 1},
                               {6, 7, 2, 3, 2, 1, 3},
                               {8, 5, 2, 2, 2, 3, 2}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int relu = 0; relu < 2; relu++)
      check_pool_ties(cases[i], relu);
}
