/* Tiled matrices and tiled operations through StarPU tasks, on sizes that
 * are not multiples of the tile: GEMM in every transpose case against the
 * naive reference, and BLIS's or oneDNN's digits as --kernels forces; bias,
 * softmax cross-entropy, SGD and Adam against references written out in the
 * test. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "rng.h"
#include "tessera/tessera.h"
#include "tile/ops.h"

/* Options of the tasks these tests submit: the defaults, counted. */
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

TestSuite(tiles, .init = start, .fini = stop);

static float *random_matrix(int64_t n, tsr_rng_t *rng) {
  float *x = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)(2 * tsr__rng_uniform(rng) - 1);
  return x;
}

Test(tiles, edge_tiles_and_round_trip) {
  tsr_tiles_t *t;
  cr_assert_eq(tsr_tiles_create(&t, 10, 7, 4, 3), 0);
  cr_assert_eq(tsr_tiles_mt(t), 3);
  cr_assert_eq(tsr_tiles_nt(t), 3);
  cr_assert_eq(tsr_tiles_tile_rows(t, 2), 2);
  cr_assert_eq(tsr_tiles_tile_cols(t, 2), 1);
  cr_assert_eq(tsr_tiles_tag(t, 1, 2), -1, "a local matrix has no MPI tags");
  cr_assert_eq(tsr_tiles_rank_of(t, 2, 2), 0);
  cr_assert(tsr_tiles_is_local(t, 2, 2));
  cr_assert_eq(tsr_tiles_local_bytes(t), 10 * 7 * (int64_t)sizeof(float));
  cr_assert_eq(tsr_tiles_remote_handles(t), 0);
  tsr_rng_t rng = {1};
  float *x = random_matrix(70, &rng), y[70];
  cr_assert_eq(tsr_tiles_write(t, x), 0);
  cr_assert_eq(tsr__tiles_scale(&topts, t, 2.0f), 0);
  cr_assert_eq(tsr_tiles_read(t, y), 0);
  for (int i = 0; i < 70; i++)
    cr_assert_float_eq(y[i], 2 * x[i], 0);
  free(x);
  tsr_tiles_destroy(&t);
  cr_assert_null(t);
}

Test(tiles, rejects_bad_shapes) {
  tsr_tiles_t *t = NULL;
  cr_assert_eq(tsr_tiles_create(&t, 0, 7, 4, 3), TSR_EINVAL);
  cr_assert_eq(tsr_tiles_create(&t, 5, 7, 0, 3), TSR_EINVAL);
  cr_assert_null(t);
  tsr_tiles_t *a, *b, *c;
  cr_assert_eq(tsr_tiles_create(&a, 6, 5, 4, 4), 0);
  cr_assert_eq(tsr_tiles_create(&b, 5, 3, 3, 4), 0); /* K tiled 3, not 4 */
  cr_assert_eq(tsr_tiles_create(&c, 6, 3, 4, 4), 0);
  uint64_t before = submitted;
  cr_assert_eq(tsr__tiles_gemm(&topts, false, false, 1, a, b, 0, c), TSR_ESHAPE);
  cr_assert_eq(submitted, before, "nothing may be submitted on a mismatch");
  tsr_tiles_destroy(&a), tsr_tiles_destroy(&b), tsr_tiles_destroy(&c);
}

/* c (m, n) = op(a) op(b) with k inner, every matrix tiled by (tm, tk, tn). */
static void check_gemm(bool ta, bool tb, int m, int n, int k, int tm, int tn, int tk) {
  tsr_rng_t rng = {(uint64_t)(m * 131 + n * 7 + k)};
  int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  tsr_tiles_t *a, *b, *c;
  cr_assert_eq(tsr_tiles_create(&a, ar, ac, ta ? tk : tm, ta ? tm : tk), 0);
  cr_assert_eq(tsr_tiles_create(&b, br, bc, tb ? tn : tk, tb ? tk : tn), 0);
  cr_assert_eq(tsr_tiles_create(&c, m, n, tm, tn), 0);
  float *ha = random_matrix((int64_t)ar * ac, &rng), *hb = random_matrix((int64_t)br * bc, &rng);
  float *hc = random_matrix((int64_t)m * n, &rng), *ref = malloc(sizeof(float) * (size_t)m * n);
  for (int i = 0; i < m * n; i++)
    ref[i] = hc[i];
  cr_assert_eq(tsr_tiles_write(a, ha), 0);
  cr_assert_eq(tsr_tiles_write(b, hb), 0);
  cr_assert_eq(tsr_tiles_write(c, hc), 0);
  cr_assert_eq(tsr__tiles_gemm(&topts, ta, tb, 0.5f, a, b, -1.5f, c), 0);
  cr_assert_eq(tsr_tiles_read(c, hc), 0);
  tsr__k_gemm_ref(ta, tb, m, n, k, 0.5f, ha, ac, hb, bc, -1.5f, ref, n);
  for (int i = 0; i < m * n; i++)
    cr_assert(fabsf(hc[i] - ref[i]) <= 1e-5f * (float)(1 + k),
              "ta=%d tb=%d %dx%dx%d tiles %d/%d/%d at %d: %g vs %g", ta, tb, m, n, k, tm, tn, tk, i,
              hc[i], ref[i]);
  free(ha), free(hb), free(hc), free(ref);
  tsr_tiles_destroy(&a), tsr_tiles_destroy(&b), tsr_tiles_destroy(&c);
}

Test(tiles, gemm_every_transpose_case_with_edge_tiles) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      check_gemm(ta, tb, 37, 29, 45, 8, 8, 8); /* no size a multiple of the tile */
      check_gemm(ta, tb, 33, 17, 70, 16, 5, 32);
      check_gemm(ta, tb, 5, 3, 2, 64, 64, 64); /* one tile, smaller than the tile size */
    }
}

/* The tile GEMM's task runs the implementation --kernels forces: BLIS's digits under blis,
 * oneDNN's under onednn, bit for bit (one tile, one task). */
Test(tiles, gemm_task_runs_the_kernels_forced) {
  enum { M = 24, N = 40, K = 300 };
  tsr_rng_t rng = {5};
  /* The host copies 64-byte aligned as the tiles are, so that nothing but the kernel differs. */
  float *ha = aligned_alloc(64, sizeof(float) * M * K),
        *hb = aligned_alloc(64, sizeof(float) * K * N);
  float *want = aligned_alloc(64, sizeof(float) * M * N), got[M * N];
  float *ra = random_matrix(M * K, &rng), *rb = random_matrix(K * N, &rng);
  memcpy(ha, ra, sizeof(float) * M * K), memcpy(hb, rb, sizeof(float) * K * N);
  free(ra), free(rb);
  tsr_tiles_t *a, *b, *c;
  cr_assert_eq(tsr_tiles_create(&a, M, K, M, K), 0);
  cr_assert_eq(tsr_tiles_create(&b, K, N, K, N), 0);
  cr_assert_eq(tsr_tiles_create(&c, M, N, M, N), 0);
  cr_assert_eq(tsr_tiles_write(a, ha), 0);
  cr_assert_eq(tsr_tiles_write(b, hb), 0);
  for (int dnnl = 0; dnnl < 2; dnnl++) {
    if (dnnl && !tsr__k_dnnl_built()) break;
    tsr_task_opts_t o = topts;
    o.kernels = dnnl ? TSR_KERNELS_ONEDNN : TSR_KERNELS_BLIS;
    cr_assert_eq(tsr__tiles_gemm(&o, false, false, 1.0f, a, b, 0.0f, c), 0);
    cr_assert_eq(tsr_tiles_read(c, got), 0);
    if (!dnnl || !tsr__k_gemm_dnnl(false, false, M, N, K, 1.0f, ha, K, hb, N, 0.0f, want, N))
      tsr__k_gemm(false, false, M, N, K, 1.0f, ha, K, hb, N, 0.0f, want, N);
    cr_assert(memcmp(got, want, sizeof got) == 0, "--kernels %s: not %s's digits",
              dnnl ? "onednn" : "blis", dnnl ? "oneDNN" : "BLIS");
  }
  free(ha), free(hb), free(want);
  tsr_tiles_destroy(&a), tsr_tiles_destroy(&b), tsr_tiles_destroy(&c);
}

/* y = max(y + b, 0) per row; db = column sums of that y. */
Test(tiles, bias_add_relu_and_bias_grad_over_edge_tiles) {
  tsr_tiles_t *y, *b, *db;
  cr_assert_eq(tsr_tiles_create(&y, 5, 3, 2, 2), 0);
  cr_assert_eq(tsr_tiles_create(&b, 1, 3, 1, 2), 0);
  cr_assert_eq(tsr_tiles_create(&db, 1, 3, 1, 2), 0);
  float hy[15], hb[3] = {1, -2, 0.5f}, out[15], dbs[3];
  for (int i = 0; i < 15; i++)
    hy[i] = (float)i - 7;
  cr_assert_eq(tsr_tiles_write(y, hy), 0);
  cr_assert_eq(tsr_tiles_write(b, hb), 0);
  cr_assert_eq(tsr__tiles_bias_add(&topts, y, b, true), 0);
  cr_assert_eq(tsr__tiles_bias_grad(&topts, db, y), 0);
  cr_assert_eq(tsr_tiles_read(y, out), 0);
  cr_assert_eq(tsr_tiles_read(db, dbs), 0);
  float sums[3] = {0, 0, 0};
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 3; j++) {
      float want = fmaxf(hy[i * 3 + j] + hb[j], 0);
      cr_assert_float_eq(out[i * 3 + j], want, 0);
      sums[j] += want;
    }
  for (int j = 0; j < 3; j++)
    cr_assert_float_eq(dbs[j], sums[j], 1e-6);
  tsr_tiles_destroy(&y), tsr_tiles_destroy(&b), tsr_tiles_destroy(&db);
}

/* Softmax cross-entropy of logits (11, 5) in row tiles of 4 (the last one 3
 * rows) with only the first 9 rows valid: the last tile holds 1 valid row and
 * 2 padding rows. Per valid row, in float64 with the maximum subtracted:
 *   loss = logsumexp(z) - z[label],  dlogits = scale (softmax(z) - onehot(label))
 * and dlogits = 0 on padding rows (filled with garbage before). stats (3, 2)
 * holds one [loss sum, correct argmax count] row per row tile and
 * accumulates: after two runs, twice the sums. Tolerances: 1e-7 on the
 * gradients (at most scale = 1/9 in size), 1e-5 relative on the losses. */
Test(tiles, softmax_xent_over_edge_tiles_with_padding_rows) {
  enum { M = 11, C = 5, MB = 4, MT = 3, NVALID = 9 };
  const float scale = 1.0f / NVALID;
  tsr_rng_t rng = {21};
  float *z = random_matrix(M * C, &rng), labels[M], d[M * C], stats[MT * 2];
  for (int i = 0; i < M * C; i++)
    z[i] *= 3.0f, d[i] = 99.0f;
  for (int i = 0; i < M; i++)
    labels[i] = (float)(i * 2 % C);
  tsr_tiles_t *tz, *tl, *td, *ts;
  cr_assert_eq(tsr_tiles_create(&tz, M, C, MB, C), 0);
  cr_assert_eq(tsr_tiles_create(&tl, M, 1, MB, 1), 0);
  cr_assert_eq(tsr_tiles_create(&td, M, C, MB, C), 0);
  cr_assert_eq(tsr_tiles_create(&ts, MT, 2, 1, 2), 0); /* created zeroed */
  cr_assert_eq(tsr_tiles_mt(tz), MT);
  cr_assert_eq(tsr_tiles_write(tz, z), 0);
  cr_assert_eq(tsr_tiles_write(tl, labels), 0);
  cr_assert_eq(tsr_tiles_write(td, d), 0);
  for (int run = 0; run < 2; run++)
    cr_assert_eq(tsr__tiles_softmax_xent(&topts, td, ts, tz, tl, NVALID, scale, 0.0f), 0);
  cr_assert_eq(tsr_tiles_read(td, d), 0);
  cr_assert_eq(tsr_tiles_read(ts, stats), 0);

  double loss[MT] = {0}, correct[MT] = {0};
  for (int i = 0; i < M; i++) {
    const float *zr = z + i * C, *dr = d + i * C;
    if (i >= NVALID) {
      for (int j = 0; j < C; j++)
        cr_assert_eq(dr[j], 0.0f, "padding row %d: dlogits[%d] = %g", i, j, dr[j]);
      continue;
    }
    int label = (int)labels[i], arg = 0;
    for (int j = 1; j < C; j++)
      if (zr[j] > zr[arg]) arg = j;
    double sum = 0;
    for (int j = 0; j < C; j++)
      sum += exp((double)zr[j] - zr[arg]);
    loss[i / MB] += zr[arg] + log(sum) - zr[label];
    correct[i / MB] += arg == label;
    for (int j = 0; j < C; j++) {
      double want = scale * (exp((double)zr[j] - zr[arg]) / sum - (j == label));
      cr_assert(fabs(dr[j] - want) <= 1e-7, "row %d: dlogits[%d] = %g, want %.9g", i, j, dr[j],
                want);
    }
  }
  for (int t = 0; t < MT; t++) {
    cr_assert(fabs(stats[2 * t] - 2 * loss[t]) <= 1e-5 * (1 + 2 * loss[t]),
              "row tile %d: loss sum %g after two runs, want %.9g", t, stats[2 * t], 2 * loss[t]);
    cr_assert_eq(stats[2 * t + 1], (float)(2 * correct[t]),
                 "row tile %d: correct count %g after two runs, want %g", t, stats[2 * t + 1],
                 2 * correct[t]);
  }
  free(z);
  tsr_tiles_destroy(&tz), tsr_tiles_destroy(&tl), tsr_tiles_destroy(&td), tsr_tiles_destroy(&ts);
}

/* Optimizer tests: weights (7, 5) in tiles of (3, 2), so the last tile row
 * has 1 row and the last tile column 1 column. */
enum { OPT_M = 7, OPT_N = 5, OPT_MB = 3, OPT_NB = 2, OPT_SIZE = OPT_M * OPT_N };

/* Three SGD steps with weight decay and a new gradient each step, without
 * momentum (no velocity: v is NULL), with it, and with Nesterov's; PyTorch's
 * formulation:
 *   g' = g + wd w;  v = momentum v + g' (v starts at 0);  w -= lr v
 *   (momentum 0: w -= lr g'; Nesterov: w -= lr (g' + momentum v))
 * against float64, tolerance 1e-6. */
Test(tiles, sgd_plain_momentum_and_nesterov_over_edge_tiles) {
  const float lr = 0.1f, wd = 0.2f;
  for (int kind = 0; kind < 3; kind++) {
    const bool with_momentum = kind > 0, nesterov = kind == 2;
    const float mu = with_momentum ? 0.9f : 0.0f;
    const char *what = nesterov ? "nesterov" : with_momentum ? "momentum" : "plain";
    tsr_rng_t rng = {(uint64_t)(31 + kind)};
    float *w = random_matrix(OPT_SIZE, &rng), v[OPT_SIZE];
    double rw[OPT_SIZE], rv[OPT_SIZE] = {0};
    for (int i = 0; i < OPT_SIZE; i++)
      rw[i] = w[i];
    tsr_tiles_t *tw, *tv = NULL, *tg;
    cr_assert_eq(tsr_tiles_create(&tw, OPT_M, OPT_N, OPT_MB, OPT_NB), 0);
    cr_assert_eq(tsr_tiles_create(&tg, OPT_M, OPT_N, OPT_MB, OPT_NB), 0);
    if (with_momentum) cr_assert_eq(tsr_tiles_create(&tv, OPT_M, OPT_N, OPT_MB, OPT_NB), 0);
    cr_assert_eq(tsr_tiles_write(tw, w), 0);
    for (int t = 1; t <= 3; t++) {
      float *g = random_matrix(OPT_SIZE, &rng);
      cr_assert_eq(tsr_tiles_write(tg, g), 0);
      cr_assert_eq(tsr__tiles_sgd(&topts, tw, tv, tg, lr, mu, wd, nesterov), 0);
      cr_assert_eq(tsr_tiles_read(tw, w), 0);
      if (tv) cr_assert_eq(tsr_tiles_read(tv, v), 0);
      for (int i = 0; i < OPT_SIZE; i++) {
        double gp = g[i] + (double)wd * rw[i];
        rv[i] = (double)mu * rv[i] + gp;
        rw[i] -= (double)lr * (nesterov ? gp + (double)mu * rv[i] : rv[i]);
        cr_assert(fabs(w[i] - rw[i]) <= 1e-6, "%s, step %d: w[%d][%d] = %.7g, want %.7g", what, t,
                  i / OPT_N, i % OPT_N, w[i], rw[i]);
        if (tv)
          cr_assert(fabs(v[i] - rv[i]) <= 1e-6, "%s, step %d: v[%d][%d] = %.7g, want %.7g", what, t,
                    i / OPT_N, i % OPT_N, v[i], rv[i]);
      }
      free(g);
    }
    free(w);
    tsr_tiles_destroy(&tw), tsr_tiles_destroy(&tg);
    if (tv) tsr_tiles_destroy(&tv);
  }
}

/* Three Adam steps (t = 1, 2, 3) with weight decay and a new gradient each
 * step, as Adam (L2) and as AdamW (decoupled); PyTorch's in float64:
 *   Adam:  g' = g + wd w
 *   AdamW: w *= 1 - lr wd;  g' = g
 *   then m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
 *        w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * Tolerances: 1e-6 on w, 1e-7 on m, 1e-8 on v (float rounding is a few
 * times smaller; a step off in t moves w by about 1e-3, AdamW's decay after
 * the step instead of before by lr^2 wd = 5e-6 a step). */
Test(tiles, adam_and_adamw_over_edge_tiles) {
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.05f;
  for (int decoupled = 0; decoupled < 2; decoupled++) {
    const char *what = decoupled ? "adamw" : "adam";
    tsr_rng_t rng = {(uint64_t)(41 + decoupled)};
    float *w = random_matrix(OPT_SIZE, &rng), m[OPT_SIZE], v[OPT_SIZE];
    double rw[OPT_SIZE], rm[OPT_SIZE] = {0}, rv[OPT_SIZE] = {0};
    for (int i = 0; i < OPT_SIZE; i++)
      rw[i] = w[i];
    tsr_tiles_t *tw, *tm, *tv, *tg;
    cr_assert_eq(tsr_tiles_create(&tw, OPT_M, OPT_N, OPT_MB, OPT_NB), 0);
    cr_assert_eq(tsr_tiles_create(&tm, OPT_M, OPT_N, OPT_MB, OPT_NB), 0);
    cr_assert_eq(tsr_tiles_create(&tv, OPT_M, OPT_N, OPT_MB, OPT_NB), 0);
    cr_assert_eq(tsr_tiles_create(&tg, OPT_M, OPT_N, OPT_MB, OPT_NB), 0);
    cr_assert_eq(tsr_tiles_write(tw, w), 0);
    for (int t = 1; t <= 3; t++) {
      float *g = random_matrix(OPT_SIZE, &rng);
      cr_assert_eq(tsr_tiles_write(tg, g), 0);
      cr_assert_eq(tsr__tiles_adam(&topts, tw, tm, tv, tg, lr, b1, b2, eps, wd, t, decoupled), 0);
      cr_assert_eq(tsr_tiles_read(tw, w), 0);
      cr_assert_eq(tsr_tiles_read(tm, m), 0);
      cr_assert_eq(tsr_tiles_read(tv, v), 0);
      double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
      for (int i = 0; i < OPT_SIZE; i++) {
        if (decoupled) rw[i] *= 1 - (double)lr * wd;
        double gp = g[i] + (decoupled ? 0.0 : (double)wd * rw[i]);
        rm[i] = b1 * rm[i] + (1 - (double)b1) * gp;
        rv[i] = b2 * rv[i] + (1 - (double)b2) * gp * gp;
        rw[i] -= lr * (rm[i] / c1) / (sqrt(rv[i] / c2) + eps);
        int r = i / OPT_N, c = i % OPT_N;
        cr_assert(fabs(m[i] - rm[i]) <= 1e-7, "%s, step %d: m[%d][%d] = %.7g, want %.7g", what, t,
                  r, c, m[i], rm[i]);
        cr_assert(fabs(v[i] - rv[i]) <= 1e-8, "%s, step %d: v[%d][%d] = %.7g, want %.7g", what, t,
                  r, c, v[i], rv[i]);
        cr_assert(fabs(w[i] - rw[i]) <= 1e-6, "%s, step %d: w[%d][%d] = %.7g, want %.7g", what, t,
                  r, c, w[i], rw[i]);
      }
      free(g);
    }
    free(w);
    tsr_tiles_destroy(&tw), tsr_tiles_destroy(&tm), tsr_tiles_destroy(&tv), tsr_tiles_destroy(&tg);
  }
}
