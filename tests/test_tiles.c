/* Tiled matrices and tiled GEMM through StarPU tasks: every transpose case,
 * sizes that are not multiples of the tile, against the naive reference. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "rng.h"
#include "tessera/tessera.h"
#include "tile/ops.h"

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
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
  cr_assert_eq(tsr_tiles_create(&t, 10, 7, 4, 3, NULL, NULL, 100), 0);
  cr_assert_eq(tsr_tiles_mt(t), 3);
  cr_assert_eq(tsr_tiles_nt(t), 3);
  cr_assert_eq(tsr_tiles_tile_rows(t, 2), 2);
  cr_assert_eq(tsr_tiles_tile_cols(t, 2), 1);
  cr_assert_eq(tsr_tiles_tag(t, 1, 2), 105);
  cr_assert_eq(tsr_tiles_rank_of(t, 2, 2), 0);
  tsr_rng_t rng = {1};
  float *x = random_matrix(70, &rng), y[70];
  cr_assert_eq(tsr_tiles_write(t, x), 0);
  cr_assert_eq(tsr__tiles_scale(t, 2.0f), 0);
  cr_assert_eq(tsr_tiles_read(t, y), 0);
  for (int i = 0; i < 70; i++)
    cr_assert_float_eq(y[i], 2 * x[i], 0);
  free(x);
  tsr_tiles_destroy(&t);
  cr_assert_null(t);
}

Test(tiles, rejects_bad_shapes) {
  tsr_tiles_t *t = NULL;
  cr_assert_eq(tsr_tiles_create(&t, 0, 7, 4, 3, NULL, NULL, 0), TSR_EINVAL);
  cr_assert_eq(tsr_tiles_create(&t, 5, 7, 0, 3, NULL, NULL, 0), TSR_EINVAL);
  cr_assert_null(t);
  tsr_tiles_t *a, *b, *c;
  cr_assert_eq(tsr_tiles_create(&a, 6, 5, 4, 4, NULL, NULL, 0), 0);
  cr_assert_eq(tsr_tiles_create(&b, 5, 3, 3, 4, NULL, NULL, 0), 0); /* K tiled 3, not 4 */
  cr_assert_eq(tsr_tiles_create(&c, 6, 3, 4, 4, NULL, NULL, 0), 0);
  uint64_t before = tsr__tiles_task_count();
  cr_assert_eq(tsr__tiles_gemm(false, false, 1, a, b, 0, c, 0), TSR_ESHAPE);
  cr_assert_eq(tsr__tiles_task_count(), before, "nothing may be submitted on a mismatch");
  tsr_tiles_destroy(&a), tsr_tiles_destroy(&b), tsr_tiles_destroy(&c);
}

/* c (m, n) = op(a) op(b) with k inner, every matrix tiled by (tm, tk, tn). */
static void check_gemm(bool ta, bool tb, int m, int n, int k, int tm, int tn, int tk) {
  tsr_rng_t rng = {(uint64_t)(m * 131 + n * 7 + k)};
  int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  tsr_tiles_t *a, *b, *c;
  cr_assert_eq(tsr_tiles_create(&a, ar, ac, ta ? tk : tm, ta ? tm : tk, NULL, NULL, 0), 0);
  cr_assert_eq(tsr_tiles_create(&b, br, bc, tb ? tn : tk, tb ? tk : tn, NULL, NULL, 0), 0);
  cr_assert_eq(tsr_tiles_create(&c, m, n, tm, tn, NULL, NULL, 0), 0);
  float *ha = random_matrix((int64_t)ar * ac, &rng), *hb = random_matrix((int64_t)br * bc, &rng);
  float *hc = random_matrix((int64_t)m * n, &rng), *ref = malloc(sizeof(float) * (size_t)m * n);
  for (int i = 0; i < m * n; i++)
    ref[i] = hc[i];
  cr_assert_eq(tsr_tiles_write(a, ha), 0);
  cr_assert_eq(tsr_tiles_write(b, hb), 0);
  cr_assert_eq(tsr_tiles_write(c, hc), 0);
  cr_assert_eq(tsr__tiles_gemm(ta, tb, 0.5f, a, b, -1.5f, c, 0), 0);
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

Test(tiles, bias_relu_softmax_and_optimizer_ops) {
  tsr_tiles_t *y, *b, *db;
  cr_assert_eq(tsr_tiles_create(&y, 5, 3, 2, 2, NULL, NULL, 0), 0);
  cr_assert_eq(tsr_tiles_create(&b, 1, 3, 1, 2, NULL, NULL, 0), 0);
  cr_assert_eq(tsr_tiles_create(&db, 1, 3, 1, 2, NULL, NULL, 0), 0);
  float hy[15], hb[3] = {1, -2, 0.5f}, out[15], dbs[3];
  for (int i = 0; i < 15; i++)
    hy[i] = (float)i - 7;
  cr_assert_eq(tsr_tiles_write(y, hy), 0);
  cr_assert_eq(tsr_tiles_write(b, hb), 0);
  cr_assert_eq(tsr__tiles_bias_add(y, b, true), 0);
  cr_assert_eq(tsr__tiles_bias_grad(db, y), 0);
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
