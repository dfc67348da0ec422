/* The attention layer type: the kernel (src/kernels/attention.c, FlashAttention's tiling)
 * against a plain float64 softmax(q k^T / sqrt(dh) + causal mask) v and its float64 gradient,
 * at sequence lengths below, at and across the block (1, 7, 64, 65, 130) with several heads;
 * the layer in a network against float64 finite differences (tests/gradcheck.h) across a block
 * boundary; tile-size invariance of the tiled operations (bitwise) and of a network's gradients;
 * shape refusals, the model-file key, the description and the summary's flops. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "kernels/attention.h"
#include "tile/ops.h"

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(attention, .init = start, .fini = stop, .timeout = 300);

/* The sequence lengths and (width, heads) pairs every kernel test walks. */
static const int lengths[] = {1, 7, 64, 65, 130};
static const int shapes[][2] = {{8, 1}, {8, 4}, {12, 3}, {32, 2}};
enum { N = 2, PAD = 3 }; /* samples; extra floats at each row's end (leading dimensions) */

/* n rows of `cols` floats with a leading dimension cols + PAD, values in [-1, 1] (the padding
 * too), and their double copy (n, cols) without padding. */
static float *random_rows(int n, int cols, double *d, tsr_rng_t *rng) {
  float *v = malloc(sizeof *v * (size_t)n * (size_t)(cols + PAD));
  for (long i = 0; i < (long)n * (cols + PAD); i++)
    v[i] = (float)(2 * tsr__rng_uniform(rng) - 1);
  for (int r = 0; r < n && d; r++)
    for (int c = 0; c < cols; c++)
      d[(long)r * cols + c] = v[(long)r * (cols + PAD) + c];
  return v;
}

/* The log-sum-exp of row i's scaled causal scores in head h of sample r, in double. */
static double lse_ref(int t, int d, int heads, const double *x, int r, int h, int i) {
  int dh = d / heads;
  double m = -INFINITY, s[256];
  for (int j = 0; j <= i; j++) {
    double dot = 0;
    for (int c = 0; c < dh; c++)
      dot += x[(long)r * t * 3 * d + (long)i * 3 * d + h * dh + c] *
             x[(long)r * t * 3 * d + (long)j * 3 * d + d + h * dh + c];
    s[j] = dot / sqrt((double)dh);
    m = fmax(m, s[j]);
  }
  double sum = 0;
  for (int j = 0; j <= i; j++)
    sum += exp(s[j] - m);
  return m + log(sum);
}

Test(attention, kernel_equals_the_plain_reference_at_every_length) {
  tsr_rng_t rng = {3};
  for (size_t a = 0; a < sizeof lengths / sizeof *lengths; a++)
    for (size_t b = 0; b < sizeof shapes / sizeof *shapes; b++) {
      int t = lengths[a], d = shapes[b][0], heads = shapes[b][1];
      tsr_attn_geom_t g = {t, d, heads};
      int cx = 3 * t * d, cy = t * d, cl = heads * t;
      double *xd = malloc(sizeof *xd * (size_t)N * (size_t)cx);
      double *yd = malloc(sizeof *yd * (size_t)N * (size_t)cy);
      float *x = random_rows(N, cx, xd, &rng), *y = random_rows(N, cy, NULL, &rng);
      float *lse = random_rows(N, cl, NULL, &rng);
      float *work = malloc(sizeof *work * tsr__k_attention_work(&g));
      tsr__k_attention_fwd(&g, N, y, cy + PAD, lse, cl + PAD, x, cx + PAD, work);
      attention_ref(N, t, d, heads, yd, xd);
      for (int r = 0; r < N; r++) {
        for (int c = 0; c < cy; c++)
          cr_assert(fabs(y[(long)r * (cy + PAD) + c] - yd[(long)r * cy + c]) <= 1e-5,
                    "t %d, d %d, %d heads: y[%d][%d] = %.8g, reference %.8g", t, d, heads, r, c,
                    (double)y[(long)r * (cy + PAD) + c], yd[(long)r * cy + c]);
        for (int h = 0; h < heads; h++)
          for (int i = 0; i < t; i++) {
            double want = lse_ref(t, d, heads, xd, r, h, i);
            float got = lse[(long)r * (cl + PAD) + h * t + i];
            cr_assert(fabs(got - want) <= 1e-5 * (1 + fabs(want)),
                      "t %d, %d heads: lse of sample %d head %d position %d = %.8g, reference "
                      "%.8g",
                      t, heads, r, h, i, (double)got, want);
          }
      }
      free(xd), free(yd), free(x), free(y), free(lse), free(work);
    }
}

/* The gradient of sum(dy * attention(x)) in double, from the whole (t, t) probabilities: dv =
 * P^T dy, dP = dy v^T, dS = P (dP - rowsum(P dP)), dq = dS k / sqrt(dh), dk = dS^T q / sqrt(dh).
 * dx (n, t 3d) in the [q | k | v] layout. */
static void attention_grad_ref(int n, int t, int d, int heads, double *dx, const double *x,
                               const double *dy) {
  int dh = d / heads;
  double sc = 1 / sqrt((double)dh);
  double *p = malloc(sizeof *p * (size_t)t * (size_t)t), *ds = malloc(sizeof *ds * (size_t)t);
  memset(dx, 0, sizeof *dx * (size_t)n * (size_t)t * 3 * (size_t)d);
#define Q(r, i, c) x[(long)(r)*t * 3 * d + (long)(i)*3 * d + h * dh + (c)]
#define K(r, i, c) x[(long)(r)*t * 3 * d + (long)(i)*3 * d + d + h * dh + (c)]
#define V(r, i, c) x[(long)(r)*t * 3 * d + (long)(i)*3 * d + 2 * d + h * dh + (c)]
#define DX(r, i, part, c) dx[(long)(r)*t * 3 * d + (long)(i)*3 * d + (part)*d + h * dh + (c)]
#define DY(r, i, c) dy[(long)(r)*t * d + (long)(i)*d + h * dh + (c)]
  for (int r = 0; r < n; r++)
    for (int h = 0; h < heads; h++) {
      for (int i = 0; i < t; i++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
          double dot = 0;
          for (int c = 0; c < dh; c++)
            dot += Q(r, i, c) * K(r, j, c);
          p[(long)i * t + j] = dot * sc;
          m = fmax(m, dot * sc);
        }
        for (int j = 0; j <= i; j++)
          sum += p[(long)i * t + j] = exp(p[(long)i * t + j] - m);
        for (int j = 0; j <= i; j++)
          p[(long)i * t + j] /= sum;
      }
      for (int i = 0; i < t; i++) {
        double rs = 0;
        for (int j = 0; j <= i; j++) {
          double dp = 0;
          for (int c = 0; c < dh; c++)
            dp += DY(r, i, c) * V(r, j, c);
          ds[j] = dp;
          rs += p[(long)i * t + j] * dp;
        }
        for (int j = 0; j <= i; j++) {
          double pij = p[(long)i * t + j], dsij = pij * (ds[j] - rs);
          for (int c = 0; c < dh; c++) {
            DX(r, i, 0, c) += sc * dsij * K(r, j, c);
            DX(r, j, 1, c) += sc * dsij * Q(r, i, c);
            DX(r, j, 2, c) += pij * DY(r, i, c);
          }
        }
      }
    }
#undef Q
#undef K
#undef V
#undef DX
#undef DY
  free(p), free(ds);
}

Test(attention, kernel_backward_equals_the_float64_gradient_at_every_length) {
  tsr_rng_t rng = {4};
  for (size_t a = 0; a < sizeof lengths / sizeof *lengths; a++)
    for (size_t b = 0; b < sizeof shapes / sizeof *shapes; b++) {
      int t = lengths[a], d = shapes[b][0], heads = shapes[b][1];
      tsr_attn_geom_t g = {t, d, heads};
      int cx = 3 * t * d, cy = t * d, cl = heads * t;
      double *xd = malloc(sizeof *xd * (size_t)N * (size_t)cx);
      double *dyd = malloc(sizeof *dyd * (size_t)N * (size_t)cy);
      double *dxd = malloc(sizeof *dxd * (size_t)N * (size_t)cx);
      float *x = random_rows(N, cx, xd, &rng), *dy = random_rows(N, cy, dyd, &rng);
      float *y = random_rows(N, cy, NULL, &rng), *lse = random_rows(N, cl, NULL, &rng);
      float *dx = random_rows(N, cx, NULL, &rng);
      float *work = malloc(sizeof *work * tsr__k_attention_work(&g));
      tsr__k_attention_fwd(&g, N, y, cy + PAD, lse, cl + PAD, x, cx + PAD, work);
      tsr__k_attention_bwd(&g, N, dx, cx + PAD, dy, cy + PAD, x, cx + PAD, y, cy + PAD, lse,
                           cl + PAD, work);
      attention_grad_ref(N, t, d, heads, dxd, xd, dyd);
      for (int r = 0; r < N; r++)
        for (int c = 0; c < cx; c++) {
          double got = dx[(long)r * (cx + PAD) + c], want = dxd[(long)r * cx + c];
          cr_assert(fabs(got - want) <= 1e-5 * (1 + fabs(want)),
                    "t %d, d %d, %d heads: d%c of sample %d, position %d, column %d = %.8g, "
                    "reference %.8g",
                    t, d, heads, "qkv"[c % (3 * d) / d], r, c / (3 * d), c % d, got, want);
        }
      free(xd), free(dyd), free(dxd), free(x), free(dy), free(y), free(lse), free(dx), free(work);
    }
}

/* input T x 1 x 2 -> conv kernel 1 to 3 D = 12 -> attention of 2 heads -> dense 3 (the loss is
 * per sample): T = 67 crosses the 64-position block, so the backward pass meets a key block
 * below the diagonal and a partial diagonal block. 5 samples, 4 valid, batch-row tiles of 2. */
Test(attention, network_gradient_check_across_a_block) {
  tsr_model_spec_t spec =
      SPEC({.kind = TSR_LAYER_CONV, .units = 12, .kernel_h = 1},
           {.kind = TSR_LAYER_ATTENTION, .heads = 2}, {.kind = TSR_LAYER_DENSE, .units = 3});
  gradient_check(&spec, 2, 67, 1, 3, 5, 4, 2, 3);
  tsr_model_spec_fini(&spec);
}

/* The tiled operations on (7, t 3d) sequences cut in batch-row tiles of 1, 3 and 7: the same
 * y, lse and dqkv bit for bit (each sample's arithmetic is its own). */
Test(attention, tiled_operations_are_tile_size_invariant_bitwise) {
  tsr_attn_geom_t g = {70, 8, 2};
  int rows = 7, cx = 3 * g.t * g.d, cy = g.t * g.d, cl = g.heads * g.t;
  tsr_rng_t rng = {6};
  float *x = malloc(sizeof *x * (size_t)rows * (size_t)cx);
  float *dy = malloc(sizeof *dy * (size_t)rows * (size_t)cy);
  fill(x, NULL, (long)rows * cx, &rng);
  fill(dy, NULL, (long)rows * cy, &rng);
  float *out[3][3];
  const int tiles[] = {1, 3, 7};
  tsr_task_opts_t o = tsr__task_opts_default();
  for (int k = 0; k < 3; k++) {
    tsr_tiles_t *tx, *ty, *tl, *tdy, *tdx;
    cr_assert_eq(tsr_tiles_create(&tx, rows, cx, tiles[k], cx), 0);
    cr_assert_eq(tsr_tiles_create(&tdx, rows, cx, tiles[k], cx), 0);
    cr_assert_eq(tsr_tiles_create(&ty, rows, cy, tiles[k], cy), 0);
    cr_assert_eq(tsr_tiles_create(&tdy, rows, cy, tiles[k], cy), 0);
    cr_assert_eq(tsr_tiles_create(&tl, rows, cl, tiles[k], cl), 0);
    cr_assert_eq(tsr_tiles_write(tx, x), 0);
    cr_assert_eq(tsr_tiles_write(tdy, dy), 0);
    cr_assert_eq(tsr__tiles_attention_fwd(&o, ty, tl, tx, &g), 0);
    cr_assert_eq(tsr__tiles_attention_bwd(&o, tdx, tdy, tx, ty, tl, &g), 0);
    out[k][0] = malloc(sizeof(float) * (size_t)rows * (size_t)cy);
    out[k][1] = malloc(sizeof(float) * (size_t)rows * (size_t)cl);
    out[k][2] = malloc(sizeof(float) * (size_t)rows * (size_t)cx);
    cr_assert_eq(tsr_tiles_read(ty, out[k][0]), 0);
    cr_assert_eq(tsr_tiles_read(tl, out[k][1]), 0);
    cr_assert_eq(tsr_tiles_read(tdx, out[k][2]), 0);
    /* a tiling that disagrees is refused before any task */
    cr_assert_eq(tsr__tiles_attention_fwd(&o, tdy, tl, tx, &(tsr_attn_geom_t){70, 8, 4}),
                 TSR_ESHAPE);
    tsr_tiles_destroy(&tx), tsr_tiles_destroy(&tdx), tsr_tiles_destroy(&ty);
    tsr_tiles_destroy(&tdy), tsr_tiles_destroy(&tl);
  }
  const int64_t sizes[3] = {(int64_t)rows * cy, (int64_t)rows * cl, (int64_t)rows * cx};
  const char *names[3] = {"y", "lse", "dqkv"};
  for (int k = 1; k < 3; k++)
    for (int w = 0; w < 3; w++)
      cr_assert_eq(memcmp(out[k][w], out[0][w], sizeof(float) * (size_t)sizes[w]), 0,
                   "%s with batch-row tiles of %d differs from tiles of 1", names[w], tiles[k]);
  for (int k = 0; k < 3; k++)
    for (int w = 0; w < 3; w++)
      free(out[k][w]);
  free(x), free(dy);
}

/* One training step (no update) of conv -> attention -> conv -> dense on 6 sequences of 20
 * positions with batch-row tiles of 1, 2 and 6: every parameter gradient and the input gradient
 * within 1e-6 (the conv's weight gradients are summed over the tiles by a tree, whose order
 * depends on the tiles). */
Test(attention, network_gradients_are_tile_size_invariant) {
  tsr_model_spec_t spec = SPEC({.kind = TSR_LAYER_CONV, .units = 24, .kernel_h = 1},
                               {.kind = TSR_LAYER_ATTENTION, .heads = 4},
                               {.kind = TSR_LAYER_CONV, .units = 5, .kernel_h = 1},
                               {.kind = TSR_LAYER_DENSE, .units = 3});
  int t = 20, c = 3, batch = 6, inputs = t * c;
  tsr_rng_t rng = {8};
  tsr_dataset_t ds = {.n = batch, .features = inputs, .classes = 3};
  ds.x = malloc(sizeof(float) * (size_t)batch * (size_t)inputs);
  ds.y = malloc(sizeof(float) * (size_t)batch);
  fill(ds.x, NULL, (long)batch * inputs, &rng);
  int32_t order[6];
  for (int i = 0; i < batch; i++)
    ds.y[i] = (float)(i % 3), order[i] = i;
  const int tiles[] = {1, 2, 6};
  float *got[3][8] = {{0}};
  int64_t sizes[8] = {0};
  int np = 0;
  for (int k = 0; k < 3; k++) {
    tsr_net_opts_t o;
    tsr_net_opts_init(&o);
    o.batch = batch, o.tile_rows = tiles[k], o.seed = 9;
    o.in_channels = c, o.in_height = t, o.in_width = 1;
    tsr_net_t *net;
    tsr_errbuf_t err = {""};
    cr_assert_eq(tsr_net_create(&net, &spec, inputs, 3, &o, &err), 0, "%s", err.msg);
    cr_assert_eq(tsr_net_keep_input_grad(net), 0);
    cr_assert_eq(tsr_net_train_step(net, &ds, order, batch, false), 0);
    cr_assert_eq(tsr_net_wait(net, 0), 0);
    np = tsr_net_n_params(net);
    cr_assert_lt(np, 8);
    for (int p = 0; p <= np; p++) {
      int64_t pr = batch, pc = inputs;
      if (p < np) cr_assert_eq(tsr_net_param_info(net, p, &pr, &pc), 0);
      sizes[p] = pr * pc;
      got[k][p] = malloc(sizeof(float) * (size_t)sizes[p]);
      cr_assert_eq(
          p < np ? tsr_net_grad_get(net, p, got[k][p]) : tsr_net_input_grad_get(net, got[k][p]), 0);
    }
    tsr_net_destroy(&net);
  }
  for (int k = 1; k < 3; k++)
    for (int p = 0; p <= np; p++)
      for (int64_t e = 0; e < sizes[p]; e++)
        cr_assert(fabsf(got[k][p][e] - got[0][p][e]) <= 1e-6f * (1 + fabsf(got[0][p][e])),
                  "%s %d [%ld]: %.9g with batch-row tiles of %d, %.9g with tiles of 1",
                  p < np ? "parameter" : "input gradient", p, (long)e, (double)got[k][p][e],
                  tiles[k], (double)got[0][p][e]);
  for (int k = 0; k < 3; k++)
    for (int p = 0; p <= np; p++)
      free(got[k][p]);
  free(ds.x), free(ds.y);
  tsr_model_spec_fini(&spec);
}

/* A net refused at creation with a message holding `want`. */
static void refused(const tsr_model_spec_t *spec, int c, int h, const char *want) {
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 2, o.in_channels = c, o.in_height = h, o.in_width = 1;
  tsr_net_t *net = NULL;
  tsr_errbuf_t err = {""};
  cr_assert_neq(tsr_net_create(&net, spec, c * h, 3, &o, &err), 0, "accepted");
  cr_assert(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
}

Test(attention, shapes_it_cannot_take_are_refused_with_the_fix) {
  tsr_model_spec_t spec =
      SPEC({.kind = TSR_LAYER_ATTENTION, .heads = 2}, {.kind = TSR_LAYER_DENSE, .units = 3});
  refused(&spec, 4, 5, "not a multiple of 3; make the layer before it a conv with filters = 3 D");
  refused(&spec, 9, 5, "D = 3 (its input's 9 channels are 3 D) is not divisible by heads = 2");
  spec.layers[0].heads = 0;
  refused(&spec, 6, 5, "layer 1 (attention): needs heads >= 1");
  tsr_model_spec_fini(&spec);
}

Test(attention, model_file_key_description_and_summary) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  const char *text = "[qkv]\ntype = conv\nfilters = 96\nkernel = 1\n[attn]\ntype = attention\n"
                     "heads = 4\n[out]\ntype = dense\nunits = 3\n";
  cr_assert_eq(tsr_model_parse_ini_text(&spec, text, "a.ini", &err), 0, "%s", err.msg);
  cr_assert_eq(spec.layers[1].kind, TSR_LAYER_ATTENTION);
  cr_assert_eq(spec.layers[1].heads, 4);
  char desc[256];
  tsr_model_describe(&spec, 16 * 8, desc, sizeof desc);
  cr_assert(strstr(desc, "attention/h4"), "%s", desc);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.in_channels = 8, o.in_height = 16, o.in_width = 1;
  tsr_model_summary_t s;
  cr_assert_eq(tsr_model_summarize(&s, &spec, 16 * 8, 3, &o, &err), 0, "%s", err.msg);
  cr_assert_str_eq(s.layers[1].type, "attention");
  cr_assert_eq(s.layers[1].params, 0);
  /* 4 heads of 8, 136 causal scores: 4 136 (4 8 + 5) */
  cr_assert_float_eq(s.layers[1].flops, 4.0 * 136 * 37, 1e-9);
  cr_assert_eq(s.layers[1].c, 32);
  tsr_model_summary_fini(&s);
  tsr_model_spec_fini(&spec);
  cr_assert_neq(tsr_model_parse_ini_text(&spec, "[attn]\ntype = attention\n", "b.ini", &err), 0);
  cr_assert(strstr(err.msg, "is an attention layer without 'heads'; add heads = H"), "%s", err.msg);
}
