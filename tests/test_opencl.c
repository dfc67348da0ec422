/* Every codelet with an OpenCL function computes what its CPU function
 * computes: each case runs the same insert helper twice on identical data,
 * once forced onto the CPU worker and once onto the OpenCL worker
 * (tsr_task_opts_t.on_worker), and compares every float within a stated
 * tolerance (different reduction orders and exp/sqrt implementations).
 *
 * Operands are edge tiles of bigger matrices: the bottom-right block of a
 * (2r + 1, 2c + 1) matrix cut 2 x 2, whose host row stride is padded, and
 * which is made valid on the device before it is cut, so on the device the
 * tile is a buffer plus an offset with ld != cols, as StarPU hands out
 * sub-tiles. The whole matrices are compared afterwards: nothing outside the
 * tile may change. Labels and statistics are whole small handles.
 *
 * The PoCL device is a CPU, which StarPU only uses with
 * STARPU_OPENCL_ON_CPUS=1 (set below). Without OpenCL in the build or
 * without a device, the program says why and exits 77 (skipped). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "codelets.h"
#include "rng.h"
#include "tessera/tessera.h"

#ifdef TSR_HAVE_OPENCL
#include <CL/cl.h>
#endif

static int cpu_worker, cl_worker;
static unsigned cl_node;

static void start(void) {
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  ro.ncpus = 1;
  ro.opencl = 1;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(&ro, &err), 0, "%s", err.msg);
  int ids[4];
  cr_assert_eq(starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, ids, 4), 1);
  cpu_worker = ids[0];
  cr_assert_eq(starpu_worker_get_ids_by_type(STARPU_OPENCL_WORKER, ids, 4), 1);
  cl_worker = ids[0];
  cl_node = starpu_worker_get_memory_node((unsigned)cl_worker);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(opencl, .init = start, .fini = stop);

/* One operand on both sides: side 0 for the CPU run, side 1 for OpenCL. */
typedef struct {
  int r, c;       /* the tile's shape */
  bool whole;     /* a handle of its own rather than an edge tile */
  int pr, pc, ld; /* the matrix the tile is cut from, and its host row stride */
  float *host[2];
  starpu_data_handle_t parent[2], tile[2];
} operand_t;

/* Values uniform in [lo, hi); integers from 0 to hi - 1 when ints is set. */
static void operand_init(operand_t *o, int r, int c, bool whole, uint64_t seed, float lo, float hi,
                         bool ints) {
  *o = (operand_t){.r = r, .c = c, .whole = whole};
  o->pr = whole ? r : 2 * r + 1;
  o->pc = whole ? c : 2 * c + 1;
  o->ld = whole ? c : o->pc + 3;
  size_t n = (size_t)o->pr * (size_t)o->ld;
  tsr_rng_t rng = {seed};
  o->host[0] = malloc(n * sizeof(float));
  o->host[1] = malloc(n * sizeof(float));
  cr_assert(o->host[0] && o->host[1]);
  for (size_t k = 0; k < n; k++) {
    double u = tsr__rng_uniform(&rng);
    o->host[0][k] = ints ? (float)(int)(u * hi) : (float)(lo + (hi - lo) * u);
  }
  memcpy(o->host[1], o->host[0], n * sizeof(float));
  for (int s = 0; s < 2; s++) {
    starpu_matrix_data_register(&o->parent[s], STARPU_MAIN_RAM, (uintptr_t)o->host[s],
                                (uint32_t)o->ld, (uint32_t)o->pc, (uint32_t)o->pr, sizeof(float));
    if (whole) {
      o->tile[s] = o->parent[s];
      continue;
    }
    /* Valid on the device before the cut: the tile is then the device
     * buffer of the whole matrix at an offset. */
    if (s == 1) cr_assert_eq(starpu_data_fetch_on_node(o->parent[s], cl_node, 0), 0);
    struct starpu_data_filter fx = {.filter_func = starpu_matrix_filter_block, .nchildren = 2};
    struct starpu_data_filter fy = {.filter_func = starpu_matrix_filter_vertical_block,
                                    .nchildren = 2};
    starpu_data_map_filters(o->parent[s], 2, &fx, &fy);
    o->tile[s] = starpu_data_get_sub_data(o->parent[s], 2, 1, 1);
    cr_assert_eq(tsr__handle_rows(o->tile[s]), r);
    cr_assert_eq(tsr__handle_cols(o->tile[s]), c);
  }
}

/* Brings both sides home and compares every float of the whole matrices. */
static void operand_check(operand_t *o, const char *what, float rel, float abs_tol) {
  for (int s = 0; s < 2; s++) {
    if (!o->whole) starpu_data_unpartition(o->parent[s], STARPU_MAIN_RAM);
    starpu_data_unregister(o->parent[s]);
  }
  int bad = 0;
  for (int i = 0; i < o->pr; i++)
    for (int j = 0; j < o->pc; j++) {
      float a = o->host[0][(long)i * o->ld + j], b = o->host[1][(long)i * o->ld + j];
      if (!(fabsf(a - b) <= abs_tol + rel * fabsf(a)) && bad++ < 3)
        cr_log_error("%s (%d, %d) of (%d, %d): CPU %.8g, OpenCL %.8g", what, i, j, o->pr, o->pc,
                     (double)a, (double)b);
    }
  cr_expect_eq(bad, 0, "%s: %d of %d floats differ beyond %g + %g |x|", what, bad, o->pr * o->pc,
               (double)abs_tol, (double)rel);
  free(o->host[0]), free(o->host[1]);
}

static tsr_task_opts_t on(int side) {
  tsr_task_opts_t o = tsr__task_opts_default();
  o.on_worker = 1 + (side == 0 ? cpu_worker : cl_worker);
  return o;
}

/* Fails the test when a submission fails, then waits for both sides. */
#define BOTH(call)                                                                                 \
  do {                                                                                             \
    for (int s = 0; s < 2; s++) {                                                                  \
      tsr_task_opts_t o = on(s);                                                                   \
      cr_assert_eq((call), 0, "%s on side %d", #call, s);                                          \
    }                                                                                              \
    cr_assert_eq(starpu_task_wait_for_all(), 0);                                                   \
  } while (0)

static const float REL = 2e-5f, ABS = 2e-6f;

/* An operand a task only writes (W access: beta 0, or a pure output) may hold anything before,
 * NaN included, and must not be read (NaN x 0 is NaN): it is filled with NaN on both sides
 * first, so a kernel that reads it leaves NaN, which operand_check counts as a difference. */
#define POISON(operand) BOTH(tsr__insert_fill(&o, (operand).tile[s], NAN))

static void gemm_case(bool ta, bool tb, float beta) {
  int m = 13, n = 9, k = 7;
  operand_t a, b, c;
  operand_init(&a, ta ? k : m, ta ? m : k, false, 1, -1, 1, false);
  operand_init(&b, tb ? n : k, tb ? k : n, false, 2, -1, 1, false);
  operand_init(&c, m, n, false, 3, -1, 1, false);
  if (beta == 0.0f) POISON(c);
  BOTH(tsr__insert_gemm(&o, ta, tb, 0.75f, a.tile[s], b.tile[s], beta, c.tile[s]));
  operand_check(&a, "gemm a", 0, 0);
  operand_check(&b, "gemm b", 0, 0);
  operand_check(&c, "gemm c", 1e-5f, 1e-5f);
}

Test(opencl, gemm_every_transpose_and_beta) {
  for (int t = 0; t < 4; t++) {
    gemm_case(t & 1, t & 2, 0.0f);
    gemm_case(t & 1, t & 2, 0.5f);
  }
}

/* The GEMM with an epilogue (codelets/gemm_ep.c): the bias and a ReLU (x w + b), the ReLU gate
 * (dy w^T, 0 where the gate is not positive), the bias gradient (x^T dy, and dy's column sums
 * into db: written with beta 0, added to with beta 1). */
static void gemm_ep_case(int ep, float beta) {
  int m = 9, n = 7, k = 5;
  bool ta = ep == TSR_EP_DBIAS, tb = ep == TSR_EP_GATE;
  operand_t a, b, c, e;
  operand_init(&a, ta ? k : m, ta ? m : k, false, 60, -1, 1, false);
  operand_init(&b, tb ? n : k, tb ? k : n, false, 61, -1, 1, false);
  operand_init(&c, m, n, false, 62, -1, 1, false);
  operand_init(&e, ep == TSR_EP_GATE ? m : 1, n, false, 63, -1, 1, false);
  if (beta == 0.0f) POISON(c);
  if (beta == 0.0f && ep == TSR_EP_DBIAS) POISON(e);
  BOTH(tsr__insert_gemm_ep(&o, ta, tb, 1.0f, a.tile[s], b.tile[s], beta, c.tile[s], ep, e.tile[s],
                           ep == TSR_EP_BIAS));
  operand_check(&c, "gemm_ep c", 1e-5f, 1e-5f);
  operand_check(&e, "gemm_ep e", 1e-5f, 1e-5f);
  operand_check(&a, "gemm_ep a", 0, 0), operand_check(&b, "gemm_ep b", 0, 0);
}

Test(opencl, gemm_with_each_epilogue) {
  for (int ep = TSR_EP_BIAS; ep <= TSR_EP_DBIAS; ep++) {
    gemm_ep_case(ep, 0.0f);
    gemm_ep_case(ep, 1.0f);
  }
}

/* The weight gradient's last GEMM with the SGD step (gemm_sgd): x^T dy into g (beta 0 or 1),
 * then w (and v) take the step from g; on the first row of tiles (with e) the bias gradient into
 * e and the bias's step too. Plain, momentum and Nesterov. */
static void gemm_sgd_case(int kind, bool first_row, float beta) {
  int m = 9, n = 7, k = 5;
  bool mom = kind > 0;
  tsr_sgd_args_t step = {0.1f, mom ? 0.9f : 0.0f, 1e-3f, 0, kind == 2};
  tsr_sgd_args_t bias = {0.1f, mom ? 0.9f : 0.0f, 0.0f, 0, kind == 2};
  operand_t a, b, c, e, w, v, bw, bv;
  operand_init(&a, k, m, false, 70, -1, 1, false);
  operand_init(&b, k, n, false, 71, -1, 1, false);
  operand_init(&c, m, n, false, 72, -1, 1, false);
  operand_init(&e, 1, n, false, 73, -1, 1, false);
  operand_init(&w, m, n, false, 74, -1, 1, false);
  operand_init(&v, m, n, false, 75, -1, 1, false);
  operand_init(&bw, 1, n, false, 76, -1, 1, false);
  operand_init(&bv, 1, n, false, 77, -1, 1, false);
  if (beta == 0.0f) POISON(c);
  if (beta == 0.0f && first_row) POISON(e);
  BOTH(tsr__insert_gemm_sgd(&o, true, false, 1.0f, a.tile[s], b.tile[s], beta, c.tile[s],
                            first_row ? e.tile[s] : NULL, w.tile[s], mom ? v.tile[s] : NULL, &step,
                            first_row ? bw.tile[s] : NULL, first_row && mom ? bv.tile[s] : NULL,
                            first_row ? &bias : NULL));
  operand_check(&c, "gemm_sgd g", 1e-5f, 1e-5f);
  operand_check(&w, "gemm_sgd w", REL, ABS), operand_check(&v, "gemm_sgd v", REL, ABS);
  operand_check(&e, "gemm_sgd db", 1e-5f, 1e-5f);
  operand_check(&bw, "gemm_sgd bias", REL, ABS), operand_check(&bv, "gemm_sgd bias v", REL, ABS);
  operand_check(&a, "gemm_sgd x", 0, 0), operand_check(&b, "gemm_sgd dy", 0, 0);
}

Test(opencl, gemm_with_the_sgd_step) {
  for (int kind = 0; kind < 3; kind++)
    for (int first = 0; first < 2; first++) {
      gemm_sgd_case(kind, first, 0.0f);
      gemm_sgd_case(kind, first, 1.0f);
    }
}

Test(opencl, bias_add_and_relu) {
  for (int relu = 0; relu < 2; relu++) {
    operand_t y, b;
    operand_init(&y, 11, 6, false, 4, -1, 1, false);
    operand_init(&b, 1, 6, false, 5, -1, 1, false);
    BOTH(tsr__insert_bias_add(&o, y.tile[s], b.tile[s], relu));
    operand_check(&y, "bias_add y", REL, ABS);
    operand_check(&b, "bias_add b", 0, 0);
  }
}

Test(opencl, bias_grad) {
  const float betas[] = {0.0f, 1.0f, 0.7f};
  for (int i = 0; i < 3; i++) {
    operand_t db, dy;
    operand_init(&db, 1, 7, false, 6, -1, 1, false);
    operand_init(&dy, 10, 7, false, 7, -1, 1, false);
    if (betas[i] == 0.0f) POISON(db);
    BOTH(tsr__insert_bias_grad(&o, db.tile[s], dy.tile[s], betas[i]));
    operand_check(&db, "bias_grad db", REL, ABS);
    operand_check(&dy, "bias_grad dy", 0, 0);
  }
}

Test(opencl, relu_forward_and_backward) {
  operand_t y, x;
  operand_init(&y, 9, 5, false, 8, -1, 1, false);
  operand_init(&x, 9, 5, false, 9, -1, 1, false);
  POISON(y);
  BOTH(tsr__insert_relu_fwd(&o, y.tile[s], x.tile[s]));
  operand_check(&y, "relu_fwd y", 0, 0);
  operand_check(&x, "relu_fwd x", 0, 0);

  operand_t dx, dy, yy;
  operand_init(&dx, 9, 5, false, 10, -1, 1, false);
  operand_init(&dy, 9, 5, false, 11, -1, 1, false);
  operand_init(&yy, 9, 5, false, 12, -1, 1, false);
  POISON(dx);
  BOTH(tsr__insert_relu_bwd(&o, dx.tile[s], dy.tile[s], yy.tile[s]));
  operand_check(&dx, "relu_bwd dx", 0, 0);
  BOTH(tsr__insert_relu_bwd(&o, dy.tile[s], dy.tile[s], yy.tile[s])); /* in place */
  operand_check(&dy, "relu_bwd in place", 0, 0);
  operand_check(&yy, "relu_bwd y", 0, 0);
}

/* One-hot, and smoothed by 0.1 (--label-smoothing). */
Test(opencl, softmax_cross_entropy_with_padding_rows) {
  for (int run = 0; run < 4; run++) {
    int grad = run % 2, m = 12, n = 10, nvalid = 9;
    float eps = run < 2 ? 0.0f : 0.1f;
    operand_t d, st, z, lab;
    operand_init(&d, m, n, false, 13, -1, 1, false);
    operand_init(&st, 1, 2, true, 14, 0, 5, false);
    operand_init(&z, m, n, false, 15, -4, 4, false);
    operand_init(&lab, m, 1, true, 16, 0, (float)n, true);
    BOTH(tsr__insert_softmax_xent(&o, grad ? d.tile[s] : NULL, st.tile[s], z.tile[s], lab.tile[s],
                                  nvalid, 1.0f / 9, eps));
    operand_check(&d, "softmax_xent dlogits", 1e-5f, 1e-6f);
    operand_check(&st, "softmax_xent stats", 1e-5f, 1e-5f);
    operand_check(&z, "softmax_xent logits", 0, 0);
    operand_check(&lab, "softmax_xent labels", 0, 0);
  }
}

Test(opencl, sgd_plain_momentum_nesterov_and_band) {
  for (int kind = 0; kind < 3; kind++)
    for (int band = 0; band < 2; band++) {
      bool mom = kind > 0, nesterov = kind == 2;
      int m = 9, n = 6, r0 = band ? 3 : 0, gm = band ? 4 : m;
      operand_t w, v, g;
      operand_init(&w, m, n, false, 17, -1, 1, false);
      operand_init(&v, m, n, false, 18, -1, 1, false);
      operand_init(&g, gm, n, false, 19, -1, 1, false);
      BOTH(tsr__insert_sgd(&o, w.tile[s], mom ? v.tile[s] : NULL, g.tile[s], r0, 0.1f,
                           mom ? 0.9f : 0.0f, 1e-3f, nesterov));
      operand_check(&w, nesterov ? "sgd nesterov w" : "sgd w", REL, ABS);
      operand_check(&v, nesterov ? "sgd nesterov v" : "sgd v", REL, ABS);
      operand_check(&g, "sgd g", 0, 0);
    }
}

/* The velocity is a handle of its own, so its row stride need not be the weights': here a whole
 * 9 x 6 handle (ld 6) next to an edge tile of the weights (ld 16), whole and on a band, plain
 * momentum and Nesterov. Each is read and written with its own stride. */
Test(opencl, sgd_momentum_with_another_row_stride_than_the_weights) {
  for (int nesterov = 0; nesterov < 2; nesterov++)
    for (int band = 0; band < 2; band++) {
      int m = 9, n = 6, r0 = band ? 3 : 0, gm = band ? 4 : m;
      operand_t w, v, g;
      operand_init(&w, m, n, false, 24, -1, 1, false);
      operand_init(&v, m, n, true, 25, -1, 1, false);
      operand_init(&g, gm, n, false, 26, -1, 1, false);
      cr_assert_neq(w.ld, v.ld);
      BOTH(tsr__insert_sgd(&o, w.tile[s], v.tile[s], g.tile[s], r0, 0.1f, 0.9f, 1e-3f, nesterov));
      operand_check(&w, nesterov ? "sgd nesterov w (v ld 6)" : "sgd w (v ld 6)", REL, ABS);
      operand_check(&v, nesterov ? "sgd nesterov v (ld 6)" : "sgd v (ld 6)", REL, ABS);
      operand_check(&g, "sgd g", 0, 0);
    }
}

/* Adam and AdamW; AdamW with a decay large enough (lr wd = 1e-3) that the decoupled decay
 * moves w far beyond the tolerance. */
Test(opencl, adam_adamw_whole_and_band) {
  for (int decoupled = 0; decoupled < 2; decoupled++)
    for (int band = 0; band < 2; band++) {
      int m = 8, n = 7, r0 = band ? 2 : 0, gm = band ? 5 : m;
      operand_t w, m1, m2, g;
      operand_init(&w, m, n, false, 20, -1, 1, false);
      operand_init(&m1, m, n, false, 21, -0.1f, 0.1f, false);
      operand_init(&m2, m, n, false, 22, 0, 0.01f, false);
      operand_init(&g, gm, n, false, 23, -1, 1, false);
      BOTH(tsr__insert_adam(&o, w.tile[s], m1.tile[s], m2.tile[s], g.tile[s], r0, 1e-3f, 0.9f,
                            0.999f, 1e-8f, decoupled ? 1.0f : 1e-4f, 3, decoupled));
      operand_check(&w, decoupled ? "adamw w" : "adam w", 1e-5f, 1e-6f);
      operand_check(&m1, decoupled ? "adamw m1" : "adam m1", REL, ABS);
      operand_check(&m2, decoupled ? "adamw m2" : "adam m2", REL, ABS);
      operand_check(&g, "adam g", 0, 0);
    }
}

Test(opencl, fill_copy_scale_axpby) {
  operand_t x, y;
  operand_init(&x, 7, 5, false, 24, -1, 1, false);
  operand_init(&y, 7, 5, false, 25, -1, 1, false);
  BOTH(tsr__insert_fill(&o, x.tile[s], 0.25f));
  BOTH(tsr__insert_scale(&o, x.tile[s], 3.0f));
  BOTH(tsr__insert_axpby(&o, 2.0f, x.tile[s], 0.5f, y.tile[s]));
  BOTH(tsr__insert_axpby_mode(&o, -1.0f, x.tile[s], 1.0f, y.tile[s], true));
  POISON(x);
  BOTH(tsr__insert_copy(&o, x.tile[s], y.tile[s]));
  POISON(x);
  BOTH(tsr__insert_axpby(&o, 1.5f, y.tile[s], 0.0f, x.tile[s]));
  operand_check(&x, "fill/scale/copy/axpby x", REL, ABS);
  operand_check(&y, "axpby y", REL, ABS);
}

Test(opencl, add_and_channels_copy) {
  operand_t y, yr, a, b;
  operand_init(&y, 7, 5, false, 40, -1, 1, false);
  operand_init(&yr, 7, 5, false, 43, -1, 1, false);
  operand_init(&a, 7, 5, false, 41, -1, 1, false);
  operand_init(&b, 7, 5, false, 42, -1, 1, false);
  BOTH(tsr__insert_add(&o, y.tile[s], a.tile[s], b.tile[s], false));
  BOTH(tsr__insert_add(&o, yr.tile[s], a.tile[s], b.tile[s], true)); /* a fused ReLU */
  operand_check(&y, "add y", 0, 0);
  operand_check(&yr, "add y with its ReLU", 0, 0);
  operand_check(&a, "add a", 0, 0), operand_check(&b, "add b", 0, 0);
  /* a concat's block: 3 pixels of 2 channels of 12 at offset 5, and back; features: 4 columns
   * at offset 1 of the source into offset 3 of the destination */
  operand_t dst, src;
  operand_init(&dst, 6, 12 * 3, false, 43, -1, 1, false);
  operand_init(&src, 6, 2 * 3, false, 44, -1, 1, false);
  BOTH(tsr__insert_channels_copy(&o, dst.tile[s], 12, 5, src.tile[s], 2, 0, 3, 2));
  BOTH(tsr__insert_channels_copy(&o, src.tile[s], 2, 0, dst.tile[s], 12, 9, 3, 2));
  BOTH(tsr__insert_channels_copy(&o, dst.tile[s], 0, 3, src.tile[s], 0, 1, 1, 4));
  operand_check(&dst, "channels_copy dst", 0, 0);
  operand_check(&src, "channels_copy src", 0, 0);
}

/* Brings both sides home and compares every float of the whole matrices with want (the whole
 * matrix as the host holds it, ld o->ld), exactly: what each side should hold, not only what the
 * other holds. */
static void operand_expect(operand_t *o, const float *want, const char *what) {
  for (int s = 0; s < 2; s++) {
    if (!o->whole) starpu_data_unpartition(o->parent[s], STARPU_MAIN_RAM);
    starpu_data_unregister(o->parent[s]);
  }
  static const char *const side[2] = {"CPU", "OpenCL"};
  for (int s = 0; s < 2; s++) {
    int bad = 0;
    for (int i = 0; i < o->pr; i++)
      for (int j = 0; j < o->pc; j++) {
        float got = o->host[s][(long)i * o->ld + j], w = want[(long)i * o->ld + j];
        if (memcmp(&got, &w, sizeof got) != 0 && bad++ < 3)
          cr_log_error("%s (%d, %d) of (%d, %d): %s %.8g, expected %.8g", what, i, j, o->pr, o->pc,
                       side[s], (double)got, (double)w);
      }
    cr_expect_eq(bad, 0, "%s: %d of %d floats on the %s side differ from the expected", what, bad,
                 o->pr * o->pc, side[s]);
  }
  free(o->host[0]), free(o->host[1]);
}

/* The channel copy overwrites its destination's block when asked to copy and adds into it only
 * when asked to add: a concat's backward pass writes each input's gradient (which may hold the
 * previous step's values, or other layers' sums after it), and a domain-split layer's halo
 * gradients are added into the neighbour band's while its own band rows are copied. A copy that
 * added would carry a gradient over from step to step; an add that overwrote would lose a
 * neighbour's halo contribution. Checked against the values computed here, on both workers, in
 * an edge tile at a device offset: a concat's block (3 pixels, 2 channels of 12, at channel 5),
 * then 4 columns added at column 20 and 4 copied at column 30 (tsr__insert_columns). */
Test(opencl, channel_copy_overwrites_or_adds_as_asked) {
  enum { M = 5, DC = 12 * 3, SC = 2 * 3 };
  operand_t dst, src;
  operand_init(&dst, M, DC, false, 45, -1, 1, false);
  operand_init(&src, M, SC, false, 46, -1, 1, false);
  size_t nd = (size_t)dst.pr * (size_t)dst.ld, ns = (size_t)src.pr * (size_t)src.ld;
  float *want = malloc(nd * sizeof(float)), *from = malloc(ns * sizeof(float));
  cr_assert(want && from);
  memcpy(want, dst.host[0], nd * sizeof(float)), memcpy(from, src.host[0], ns * sizeof(float));
  BOTH(tsr__insert_channels_copy(&o, dst.tile[s], 12, 5, src.tile[s], 2, 0, 3, 2));
  BOTH(tsr__insert_columns(&o, dst.tile[s], 20, src.tile[s], 1, 4, true));
  BOTH(tsr__insert_columns(&o, dst.tile[s], 30, src.tile[s], 2, 4, false));
  /* the tiles are the bottom-right blocks */
  int dr = dst.pr - M, dc = dst.pc - DC, sr = src.pr - M, sc = src.pc - SC;
  for (int i = 0; i < M; i++) {
    float *d = want + (long)(dr + i) * dst.ld + dc;
    const float *x = from + (long)(sr + i) * src.ld + sc;
    for (int p = 0; p < 3; p++)
      for (int c = 0; c < 2; c++)
        d[p * 12 + 5 + c] = x[p * 2 + c];
    for (int c = 0; c < 4; c++)
      d[20 + c] = d[20 + c] + x[1 + c];
    for (int c = 0; c < 4; c++)
      d[30 + c] = x[2 + c];
  }
  operand_expect(&dst, want, "channels_copy and columns dst");
  operand_expect(&src, from, "channels_copy and columns src");
  free(want), free(from);
}

Test(opencl, band_get_and_put) {
  operand_t t, b;
  operand_init(&t, 9, 6, false, 26, -1, 1, false);
  operand_init(&b, 4, 6, false, 27, -1, 1, false);
  POISON(b);
  BOTH(tsr__insert_band_get(&o, b.tile[s], t.tile[s], 2));
  BOTH(tsr__insert_scale(&o, b.tile[s], -2.0f));
  BOTH(tsr__insert_band_put(&o, t.tile[s], 5, b.tile[s]));
  operand_check(&t, "band tile", REL, ABS);
  operand_check(&b, "band", REL, ABS);
}

Test(opencl, bucket_pack_and_unpack) {
  operand_t t, b;
  operand_init(&t, 9, 6, false, 40, -1, 1, false);
  operand_init(&b, 1, 60, false, 41, -1, 1, false);
  BOTH(tsr__insert_bucket_pack(&o, b.tile[s], 7, t.tile[s], 2, 4));
  BOTH(tsr__insert_scale(&o, b.tile[s], -2.0f));
  BOTH(tsr__insert_bucket_unpack(&o, t.tile[s], 5, 4, b.tile[s], 7));
  operand_check(&t, "bucket tile", REL, ABS);
  operand_check(&b, "bucket", REL, ABS);
}

Test(opencl, dropout_same_mask) {
  operand_t y, x;
  operand_init(&y, 10, 9, false, 28, -1, 1, false);
  operand_init(&x, 10, 9, false, 29, -1, 1, false);
  POISON(y);
  BOTH(tsr__insert_dropout(&o, y.tile[s], x.tile[s], 0x1234abcdULL, 70, 33, 0.3f));
  BOTH(tsr__insert_dropout(&o, x.tile[s], x.tile[s], 99, 0, 5, 0.5f)); /* in place */
  operand_check(&y, "dropout y", REL, 0);
  operand_check(&x, "dropout in place", REL, 0);
}

Test(opencl, fold_and_outer_optimizers) {
  for (int commute = 0; commute < 2; commute++) {
    operand_t g, snap, w;
    operand_init(&g, 6, 7, false, 50, -1, 1, false);
    operand_init(&snap, 6, 7, false, 51, -1, 1, false);
    operand_init(&w, 6, 7, false, 52, -1, 1, false);
    BOTH(tsr__insert_fold(&o, g.tile[s], snap.tile[s], w.tile[s], commute));
    operand_check(&g, "fold global", REL, ABS);
    operand_check(&snap, "fold snapshot", REL, ABS);
    operand_check(&w, "fold w", 0, 0);
  }
  /* slowmo (gamma > 0), plain averaging (gamma 0), nesterov */
  const struct {
    bool nesterov;
    float gamma;
  } kinds[] = {{false, 0.5f}, {false, 0.0f}, {true, 0.0f}};
  for (int k = 0; k < 3; k++) {
    operand_t x, u, mean, snap, w;
    operand_init(&x, 5, 6, false, 53, -1, 1, false);
    operand_init(&u, 5, 6, false, 54, -1, 1, false);
    operand_init(&mean, 5, 6, false, 55, -1, 1, false);
    operand_init(&snap, 5, 6, false, 56, -1, 1, false);
    operand_init(&w, 5, 6, false, 57, -1, 1, false);
    BOTH(tsr__insert_outer(&o, x.tile[s], u.tile[s], mean.tile[s], kinds[k].nesterov, 0.7f, 0.9f,
                           kinds[k].gamma));
    BOTH(tsr__insert_outer_fold(&o, x.tile[s], u.tile[s], snap.tile[s], w.tile[s], 0.5f,
                                kinds[k].nesterov, 0.7f, 0.9f, kinds[k].gamma, k == 1));
    operand_check(&x, "outer x", REL, ABS);
    operand_check(&u, "outer u", REL, ABS);
    operand_check(&snap, "outer_fold snapshot", REL, ABS);
    operand_check(&mean, "outer mean", 0, 0);
    operand_check(&w, "outer_fold w", 0, 0);
  }
}

static tsr_conv_geom_t geom(int c, int h, int w, int oc, int kh, int kw, int sh, int sw, int ph,
                            int pw) {
  return (tsr_conv_geom_t){.c = c,
                           .h = h,
                           .w = w,
                           .oc = oc,
                           .oh = (h + 2 * ph - kh) / sh + 1,
                           .ow = (w + 2 * pw - kw) / sw + 1,
                           .kh = kh,
                           .kw = kw,
                           .sh = sh,
                           .sw = sw,
                           .ph = ph,
                           .pw = pw};
}

static const float CONV_REL = 1e-4f, CONV_ABS = 1e-5f;

/* Edge tiles (rows not contiguous: the packed paths) and whole handles (one
 * GEMM straight into the output), strided and padded windows. */
Test(opencl, convolution_forward_and_backward) {
  const tsr_conv_geom_t cases[] = {geom(3, 7, 5, 6, 3, 2, 2, 1, 1, 0),
                                   geom(2, 6, 6, 4, 3, 3, 1, 1, 1, 1),
                                   geom(4, 5, 4, 3, 1, 1, 1, 1, 0, 0)};
  for (int t = 0; t < 3; t++)
    for (int whole = 0; whole < 2; whole++) {
      const tsr_conv_geom_t *g = &cases[t];
      int n = 5, in = g->h * g->w * g->c, out = g->oh * g->ow * g->oc, k = g->kh * g->kw * g->c;
      operand_t y, x, w, b, dx, dw, db;
      operand_init(&y, n, out, whole, 30, -1, 1, false);
      operand_init(&x, n, in, whole, 31, -1, 1, false);
      operand_init(&w, k, g->oc, whole, 32, -1, 1, false);
      operand_init(&b, 1, g->oc, whole, 33, -1, 1, false);
      operand_init(&dx, n, in, whole, 34, -1, 1, false);
      operand_init(&dw, k, g->oc, whole, 35, -1, 1, false);
      operand_init(&db, 1, g->oc, whole, 36, -1, 1, false);
      POISON(y);
      BOTH(tsr__insert_conv_fwd(&o, y.tile[s], x.tile[s], w.tile[s], b.tile[s], g, t == 1));
      POISON(dx);
      BOTH(tsr__insert_conv_bwd_data(&o, dx.tile[s], y.tile[s], w.tile[s], g));
      if (whole) {
        POISON(dw);
        POISON(db);
      }
      BOTH(tsr__insert_conv_bwd_filter(&o, dw.tile[s], db.tile[s], x.tile[s], y.tile[s], g,
                                       whole ? 0.0f : 1.0f));
      operand_check(&y, "conv_fwd y", CONV_REL, CONV_ABS);
      operand_check(&dx, "conv_bwd_data dx", CONV_REL, CONV_ABS);
      operand_check(&dw, "conv_bwd_filter dw", CONV_REL, CONV_ABS);
      operand_check(&db, "conv_bwd_filter db", CONV_REL, CONV_ABS);
      operand_check(&x, "conv x", 0, 0);
      operand_check(&w, "conv w", 0, 0);
      operand_check(&b, "conv b", 0, 0);
    }
}

Test(opencl, pooling_max_mean_and_fused_relu) {
  /* tiled, overlapping, ResNet's padded stem (3x3 stride 2 padding 1), padded stride 1 */
  const tsr_conv_geom_t cases[] = {
      geom(3, 6, 7, 3, 2, 2, 2, 2, 0, 0), geom(2, 7, 6, 2, 3, 3, 2, 1, 0, 0),
      geom(3, 7, 8, 3, 3, 3, 2, 2, 1, 1), geom(2, 5, 6, 2, 3, 2, 1, 1, 1, 1)};
  for (int t = 0; t < 4; t++)
    for (int mode = 0; mode < 3; mode++) { /* max, max with relu, mean */
      const tsr_conv_geom_t *g = &cases[t];
      bool max = mode < 2, relu = mode == 1;
      int n = 4, in = g->h * g->w * g->c, out = g->oh * g->ow * g->c;
      operand_t y, x, dx, dy;
      operand_init(&y, n, out, false, 40, -1, 1, false);
      operand_init(&x, n, in, false, 41, -1, 1, false);
      operand_init(&dx, n, in, false, 42, -1, 1, false);
      operand_init(&dy, n, out, false, 43, -1, 1, false);
      POISON(y);
      BOTH(tsr__insert_pool_fwd(&o, y.tile[s], x.tile[s], g, max));
      POISON(dx);
      BOTH(tsr__insert_pool_bwd(&o, dx.tile[s], dy.tile[s], max ? x.tile[s] : NULL,
                                max ? y.tile[s] : NULL, g, max, relu));
      operand_check(&y, "pool_fwd y", max ? 0 : REL, max ? 0 : ABS);
      operand_check(&dx, "pool_bwd dx", REL, ABS);
      operand_check(&x, "pool x", 0, 0);
      operand_check(&dy, "pool dy", 0, 0);
    }
}

/* Skips the whole program (exit 77) where there is nothing to test, saying why. */
static const char *why_skip(void) {
#ifndef TSR_HAVE_OPENCL
  return "this build has no OpenCL codelets (meson -Dopencl: needs ocl-icd-opencl-dev, "
         "libclblast-dev and a StarPU with OpenCL)";
#else
  cl_platform_id platforms[8];
  cl_uint np = 0, total = 0;
  if (clGetPlatformIDs(8, platforms, &np) != CL_SUCCESS) np = 0;
  for (cl_uint p = 0; p < np; p++) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS) total += nd;
  }
  if (total == 0)
    return "no OpenCL device (install pocl-opencl-icd for one on the CPU; `clinfo -l` lists "
           "devices)";
  return NULL;
#endif
}

/* Visible: Criterion's workers find main by its symbol (the project hides symbols by default). */
__attribute__((visibility("default"))) int main(int argc, char *argv[]) {
  /* StarPU only drives OpenCL devices that are CPUs (PoCL) when told to; the suite's
   * STARPU_NOPENCL=0 (CPU workers only) is for the other tests. */
  setenv("STARPU_OPENCL_ON_CPUS", "1", 0);
  unsetenv("STARPU_NOPENCL");
  /* In a test worker this runs the test and does not return. */
  struct criterion_test_set *tests = criterion_initialize();
  const char *why = why_skip();
  int rc = 77;
  if (why)
    printf("SKIP: %s\n", why);
  else if (criterion_handle_args(argc, argv, true))
    rc = !criterion_run_all_tests(tests);
  else
    rc = 0;
  criterion_finalize(tests);
  return rc;
}
