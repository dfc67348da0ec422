/* The sequence layers (embedding, layernorm, gelu, lmhead): float64 gradient checks of tiny
 * language models whose head is tied to the embedding (the table's gradient sums both uses, the
 * loss is averaged over every position), over several batch-row tilings; the kernels against
 * their float64 formulas (layer norm's forward and backward, GELU's tanh approximation and its
 * derivative); the embedding's scattered gradient bit for bit the same for every tiling; the
 * optimizer updating the table with the summed gradient; each of several steps' gradients that
 * step's alone (none carried over, the position table's included); checkpoint names; the
 * model-file keys, descriptions and the refusals of shapes that cannot work. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "io/safetensors.h"
#include "kernels/sequence.h"
#include "runtime/task_opts.h"
#include "tile/ops.h"
#include "tmpfile.h"

static char dir[64];

static void start(void) {
  make_temp_dir(dir, sizeof dir, "tessera-seq");
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
  remove_temp_dir(dir);
}

TestSuite(seq, .init = start, .fini = stop, .timeout = 300);

/* embedding (vocab 4, D 6, a position table of 7 rows) -> layernorm -> conv kernel 1 -> gelu ->
 * lmhead tied to the embedding, over windows of 5 tokens. */
static tsr_model_spec_t tiny_lm(void) {
  return SPEC({.kind = TSR_LAYER_EMBEDDING, .vocab = 4, .units = 6, .context = 7},
              {.kind = TSR_LAYER_LAYERNORM}, {.kind = TSR_LAYER_CONV, .units = 6, .kernel_h = 1},
              {.kind = TSR_LAYER_GELU}, {.kind = TSR_LAYER_LMHEAD, .units = 4});
}

/* Every parameter's gradient (the tied table's: the head's use plus the embedding's) and the
 * input's against finite differences, per-position labels, 5 of 6 rows valid, with one, two and
 * six batch-row tiles (the head's table-gradient tree, the embedding's chain, none). */
Test(seq, tiny_language_model_gradients_over_tilings) {
  tsr_model_spec_t spec = tiny_lm();
  int tiles[] = {1, 4, 6};
  for (int k = 0; k < 3; k++) {
    cr_log_info("batch-row tiles of %d", tiles[k]);
    gradient_check(&spec, 1, 5, 1, 4, 6, 5, tiles[k], 0);
  }
  tsr_model_spec_fini(&spec);
}

/* GPT's stream: the embedding's output read by a layer norm and by the residual add, a final
 * layer norm before the tied head. */
Test(seq, residual_stream_language_model_gradients) {
  tsr_model_spec_t spec =
      SPEC({.kind = TSR_LAYER_EMBEDDING, .vocab = 5, .units = 4, .context = 3, .name = "embed"},
           {.kind = TSR_LAYER_LAYERNORM, .name = "ln"},
           {.kind = TSR_LAYER_CONV, .units = 4, .kernel_h = 1, .name = "fc"},
           {.kind = TSR_LAYER_GELU, .name = "g"},
           {.kind = TSR_LAYER_ADD, .n_inputs = 2, .inputs = {"embed", "g"}, .name = "res"},
           {.kind = TSR_LAYER_LAYERNORM, .name = "lnf"}, {.kind = TSR_LAYER_LMHEAD, .units = 5});
  gradient_check(&spec, 1, 3, 1, 5, 5, 4, 2, 0);
  tsr_model_spec_fini(&spec);
}

static double uniform(tsr_rng_t *rng, double lo, double hi) {
  return lo + (hi - lo) * tsr__rng_uniform(rng);
}

/* Layer norm per position against PyTorch's formulas in float64, on values far from 0 (the
 * variance of a shifted sample is where a one-pass formula loses digits): the output, the
 * statistics kept, the input gradient and the parameters' sums. */
Test(seq, layernorm_kernels_match_the_float64_formulas) {
  enum { N = 3, P = 4, C = 7, W = P * C };
  tsr_rng_t rng = {11};
  float x[N * W], y[N * W], dy[N * W], dx[N * W], w[C], b[C], stats[N * 2 * P], dw[C], db[C];
  for (int i = 0; i < N * W; i++)
    x[i] = (float)uniform(&rng, 99, 101), dy[i] = (float)uniform(&rng, -1, 1);
  for (int k = 0; k < C; k++)
    w[k] = (float)uniform(&rng, 0.5, 1.5), b[k] = (float)uniform(&rng, -0.5, 0.5);
  float eps = 1e-5f;
  tsr__k_layernorm_fwd(N, P, C, y, W, stats, 2 * P, x, W, w, b, eps);
  tsr__k_layernorm_bwd(N, P, C, dx, W, dw, db, dy, W, x, W, w, stats, 2 * P);
  double wdw[C] = {0}, wdb[C] = {0};
  for (int q = 0; q < N * P; q++) {
    const float *in = x + q * C, *g = dy + q * C;
    double mean = 0, var = 0;
    for (int k = 0; k < C; k++)
      mean += in[k];
    mean /= C;
    for (int k = 0; k < C; k++)
      var += (in[k] - mean) * (in[k] - mean);
    var /= C;
    double rstd = 1 / sqrt(var + eps), xhat[C], sg = 0, sgx = 0;
    cr_assert_float_eq(stats[2 * q], mean, 1e-4, "mean of position %d", q);
    cr_assert_float_eq(stats[2 * q + 1], rstd, 1e-3 * rstd, "1 / std of position %d", q);
    for (int k = 0; k < C; k++) {
      xhat[k] = (in[k] - mean) * rstd;
      cr_assert_float_eq(y[q * C + k], xhat[k] * w[k] + b[k], 2e-3, "y[%d][%d]", q, k);
      sg += g[k] * w[k], sgx += g[k] * w[k] * xhat[k];
      wdw[k] += g[k] * xhat[k], wdb[k] += g[k];
    }
    for (int k = 0; k < C; k++) {
      double want = rstd * (g[k] * w[k] - sg / C - xhat[k] * sgx / C);
      cr_assert_float_eq(dx[q * C + k], want, 2e-3 * fabs(want) + 1e-4, "dx[%d][%d]", q, k);
    }
  }
  for (int k = 0; k < C; k++) {
    cr_assert_float_eq(dw[k], wdw[k], 2e-3 * fabs(wdw[k]) + 1e-3, "dw[%d]", k);
    cr_assert_float_eq(db[k], wdb[k], 1e-4, "db[%d]", k);
  }
}

/* GELU's tanh approximation and its derivative against the formula in float64 (and the
 * derivative against the formula's central differences), from -8 to 8. */
Test(seq, gelu_kernels_match_the_tanh_formula) {
  enum { N = 321 };
  float x[N], y[N], ones[N], d[N];
  for (int i = 0; i < N; i++)
    x[i] = -8.0f + 16.0f * (float)i / (N - 1), ones[i] = 1.0f;
  tsr__k_gelu_fwd(1, N, y, N, x, N);
  tsr__k_gelu_bwd(1, N, d, N, ones, N, x, N);
  for (int i = 0; i < N; i++) {
    double v = x[i], k = sqrt(2 / M_PI), h = 1e-5;
    double f = 0.5 * v * (1 + tanh(k * (v + 0.044715 * v * v * v)));
    double t = tanh(k * (v + 0.044715 * v * v * v));
    double df = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
    double vp = v + h, vm = v - h;
    double fd = (0.5 * vp * (1 + tanh(k * (vp + 0.044715 * vp * vp * vp))) -
                 0.5 * vm * (1 + tanh(k * (vm + 0.044715 * vm * vm * vm)))) /
                (2 * h);
    cr_assert_float_eq(y[i], f, 1e-6 + 1e-6 * fabs(f), "gelu(%g)", v);
    cr_assert_float_eq(d[i], df, 1e-6 + 1e-5 * fabs(df), "gelu'(%g)", v);
    cr_assert_float_eq(df, fd, 1e-6, "the formula's derivative at %g", v);
  }
}

/* The embedding's backward over batch-row tiles of 1, 2, 3 and all 7 rows: the same bits in the
 * token and position tables (the chain adds every row in sample order whatever the tiling),
 * and the token table added to (a tied head's gradient kept) or written. */
Test(seq, embedding_gradient_is_bitwise_the_same_for_every_tiling) {
  enum { B = 7, T = 5, D = 3, V = 4, CTX = 6 };
  tsr_rng_t rng = {3};
  float tok[B * T], dy[B * T * D], before[V * D];
  for (int i = 0; i < B * T; i++)
    tok[i] = (float)tsr__rng_below(&rng, V);
  for (int i = 0; i < B * T * D; i++)
    dy[i] = (float)uniform(&rng, -1, 1) * (i % 5 == 0 ? 1e3f : 1.0f);
  for (int i = 0; i < V * D; i++)
    before[i] = (float)uniform(&rng, -1, 1);
  float first[2][V * D], firstp[CTX * D];
  int tilings[] = {B, 1, 2, 3};
  for (int add = 0; add < 2; add++)
    for (int k = 0; k < 4; k++) {
      tsr_tiles_t *t, *g, *wte, *wpe;
      cr_assert_eq(tsr_tiles_create(&t, B, T, tilings[k], T), 0);
      cr_assert_eq(tsr_tiles_create(&g, B, T * D, tilings[k], T * D), 0);
      cr_assert_eq(tsr_tiles_create(&wte, V, D, V, D), 0);
      cr_assert_eq(tsr_tiles_create(&wpe, CTX, D, CTX, D), 0);
      cr_assert_eq(tsr_tiles_write(t, tok), 0);
      cr_assert_eq(tsr_tiles_write(g, dy), 0);
      cr_assert_eq(tsr_tiles_write(wte, before), 0);
      tsr_task_opts_t o = tsr__task_opts_default();
      cr_assert_eq(tsr__tiles_embed_bwd(&o, wte, wpe, t, g, add), 0);
      float got[V * D], gotp[CTX * D];
      cr_assert_eq(tsr_tiles_read(wte, got), 0);
      cr_assert_eq(tsr_tiles_read(wpe, gotp), 0);
      if (k == 0) {
        memcpy(first[add], got, sizeof got), memcpy(firstp, gotp, sizeof gotp);
        /* the one-tile result against the scatter in double */
        for (int v = 0; v < V; v++)
          for (int e = 0; e < D; e++) {
            double want = add ? before[v * D + e] : 0;
            for (int i = 0; i < B * T; i++)
              if ((int)tok[i] == v) want += dy[i * D + e];
            cr_assert_float_eq(got[v * D + e], want, 1e-2, "row %d", v);
          }
        for (int p = 0; p < CTX; p++)
          for (int e = 0; e < D; e++) {
            double want = 0;
            for (int s = 0; p < T && s < B; s++)
              want += dy[(s * T + p) * D + e];
            cr_assert_float_eq(gotp[p * D + e], want, 1e-2, "position %d", p);
          }
      } else {
        cr_assert(memcmp(got, first[add], sizeof got) == 0,
                  "token table gradient of tiles of %d rows differs from one tile's", tilings[k]);
        cr_assert(memcmp(gotp, firstp, sizeof gotp) == 0,
                  "position gradient of tiles of %d rows differs from one tile's", tilings[k]);
      }
      tsr_tiles_destroy(&t), tsr_tiles_destroy(&g), tsr_tiles_destroy(&wte);
      tsr_tiles_destroy(&wpe);
    }
}

/* A dataset of n windows of t token ids below vocab, the next token at each position. */
static tsr_dataset_t token_windows(int n, int t, int vocab, uint64_t seed) {
  tsr_rng_t rng = {seed};
  tsr_dataset_t ds = {.n = n,
                      .features = t,
                      .classes = vocab,
                      .channels = 1,
                      .height = t,
                      .width = 1,
                      .targets = t};
  ds.x = malloc(sizeof(float) * (size_t)n * (size_t)t);
  ds.y = malloc(sizeof(float) * (size_t)n * (size_t)t);
  for (int i = 0; i < n * t; i++)
    ds.x[i] = (float)tsr__rng_below(&rng, (uint64_t)vocab);
  for (int i = 0; i < n * t; i++)
    ds.y[i] = (i + 1) % t ? ds.x[i + 1] : (float)tsr__rng_below(&rng, (uint64_t)vocab);
  return ds;
}

static tsr_net_t *tiny_lm_net(int batch, float lr) {
  tsr_model_spec_t spec = tiny_lm();
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = batch, o.tile_rows = 2, o.seed = 9, o.init = TSR_INIT_GPT2;
  o.in_channels = 1, o.in_height = 5, o.in_width = 1;
  o.opt.lr = lr;
  tsr_net_t *net;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, &spec, 5, 4, &o, &err), 0, "%s", err.msg);
  tsr_model_spec_fini(&spec);
  return net;
}

/* The optimizer (plain SGD) updates the tied table with the summed gradient: after one step,
 * table = table before - lr (the head's gradient + the embedding's), the gradient the step left
 * in the table's gradient matrix; and that gradient is the sum (it differs from what a step
 * without the head's use would give, checked by the gradient tests). */
Test(seq, the_optimizer_updates_the_tied_table_with_the_summed_gradient) {
  tsr_dataset_t ds = token_windows(6, 5, 4, 21);
  int32_t rows[6] = {0, 1, 2, 3, 4, 5};
  float lr = 0.5f;
  tsr_net_t *net = tiny_lm_net(6, lr);
  cr_assert_eq(tsr_net_positions(net), 5);
  float w0[24], g[24], w1[24];
  cr_assert_eq(tsr_net_param_get(net, 0, w0), 0);
  cr_assert_eq(tsr_net_train_step(net, &ds, rows, 6, true), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  cr_assert_eq(tsr_net_grad_get(net, 0, g), 0);
  cr_assert_eq(tsr_net_param_get(net, 0, w1), 0);
  double norm = 0;
  for (int k = 0; k < 24; k++) {
    cr_assert_float_eq(w1[k], w0[k] - lr * g[k], 1e-6, "table[%d]", k);
    norm += (double)g[k] * g[k];
  }
  cr_assert_gt(norm, 0.0);
  tsr_net_destroy(&net);
  tsr_dataset_fini(&ds);
}

/* Over several steps each step's gradients are that step's alone: a net trained for 4 steps
 * is compared, after each, with a fresh net given the weights the step started from and taking
 * the same step once. Every parameter's gradient agrees (1e-5 of its largest), the position
 * table's included, which the embedding's backward writes (the tied token table's is added to
 * the head's use within the step, never across steps). A user sees a gradient that kept adding
 * up across steps (the position table's accumulated instead of written: the first step right,
 * then the sum of the steps so far) as a model whose position table runs away; the one-step
 * tests above cannot see it. */
Test(seq, every_step_s_gradients_are_that_step_s_alone) {
  enum { B = 6, STEPS = 4, MAXP = 1024 };
  tsr_dataset_t ds = token_windows(B * STEPS, 5, 4, 23);
  tsr_net_t *net = tiny_lm_net(B, 0.5f);
  int np = tsr_net_n_params(net);
  static float w[MAXP], g[MAXP], want[MAXP];
  cr_assert_leq(tsr_net_param_count(net), MAXP);
  for (int k = 0; k < STEPS; k++) {
    int32_t rows[B];
    for (int i = 0; i < B; i++)
      rows[i] = (int32_t)(k * B + i);
    tsr_net_t *fresh = tiny_lm_net(B, 0.5f);
    for (int i = 0; i < np; i++) {
      cr_assert_eq(tsr_net_param_get(net, i, w), 0);
      cr_assert_eq(tsr_net_param_set(fresh, i, w), 0);
    }
    cr_assert_eq(tsr_net_train_step(net, &ds, rows, B, true), 0);
    cr_assert_eq(tsr_net_train_step(fresh, &ds, rows, B, true), 0);
    cr_assert_eq(tsr_net_wait(net, 0), 0);
    cr_assert_eq(tsr_net_wait(fresh, 0), 0);
    for (int i = 0; i < np; i++) {
      memset(g, 0, sizeof g), memset(want, 0, sizeof want);
      cr_assert_eq(tsr_net_grad_get(net, i, g), 0);
      cr_assert_eq(tsr_net_grad_get(fresh, i, want), 0);
      double big = 0, off = 0;
      for (int e = 0; e < MAXP; e++)
        big = fmax(big, fabs(want[e])), off = fmax(off, fabs((double)g[e] - want[e]));
      cr_expect(big > 0 && off <= 1e-5 * big,
                "step %d: parameter %d's gradient %g off (its largest %g) the step's alone", k + 1,
                i, off, big);
    }
    tsr_net_destroy(&fresh);
  }
  tsr_net_destroy(&net);
  tsr_dataset_fini(&ds);
}

/* Learning: windows of a counting sequence (each token the previous one + 1, mod 8) from a random
 * start; with the next token at each position to predict, the tiny model with AdamW gets from
 * about log 8 = 2.08 nats per token to well under 0.5, and its evaluation (per token) agrees. */
Test(seq, a_tiny_language_model_learns_to_count) {
  enum { N = 64, T = 6, V = 8, B = 16 };
  tsr_rng_t rng = {17};
  tsr_dataset_t ds = {
      .n = N, .features = T, .classes = V, .channels = 1, .height = T, .width = 1, .targets = T};
  ds.x = malloc(sizeof(float) * N * T), ds.y = malloc(sizeof(float) * N * T);
  for (int i = 0; i < N; i++) {
    int s = (int)tsr__rng_below(&rng, V);
    for (int p = 0; p < T; p++)
      ds.x[i * T + p] = (float)((s + p) % V), ds.y[i * T + p] = (float)((s + p + 1) % V);
  }
  tsr_model_spec_t spec =
      SPEC({.kind = TSR_LAYER_EMBEDDING, .vocab = V, .units = 16, .context = T},
           {.kind = TSR_LAYER_LAYERNORM}, {.kind = TSR_LAYER_CONV, .units = 32, .kernel_h = 1},
           {.kind = TSR_LAYER_GELU}, {.kind = TSR_LAYER_CONV, .units = 16, .kernel_h = 1},
           {.kind = TSR_LAYER_LAYERNORM}, {.kind = TSR_LAYER_LMHEAD, .units = V});
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_optimizer_init(&o.opt, "adamw", &err), 0, "%s", err.msg);
  o.opt.lr = 0.01f;
  o.batch = B, o.tile_rows = 4, o.seed = 3, o.init = TSR_INIT_GPT2;
  o.in_channels = 1, o.in_height = T, o.in_width = 1;
  tsr_net_t *net;
  cr_assert_eq(tsr_net_create(&net, &spec, T, V, &o, &err), 0, "%s", err.msg);
  double before, acc;
  cr_assert_eq(tsr_evaluate(net, &ds, &before, &acc), 0);
  int32_t rows[B];
  for (int step = 0; step < 300; step++) {
    for (int i = 0; i < B; i++)
      rows[i] = (int32_t)tsr__rng_below(&rng, N);
    cr_assert_eq(tsr_net_train_step(net, &ds, rows, B, true), 0);
  }
  double after;
  cr_assert_eq(tsr_evaluate(net, &ds, &after, &acc), 0);
  cr_log_info("loss per token %.3f -> %.3f, accuracy %.3f", before, after, acc);
  cr_assert(before > 1.5 && before < 3.0, "untrained loss %g per token, not about log 8", before);
  cr_assert_lt(after, 0.5, "loss per token %g after 300 steps", after);
  cr_assert_gt(acc, 0.9, "accuracy %g", acc);
  tsr_net_destroy(&net);
  tsr_model_spec_fini(&spec);
  tsr_dataset_fini(&ds);
}

/* Checkpoint tensors: layers.<i>.embedding.weight and .position, layers.<i>.layernorm.weight and
 * .bias, the convolution's, and nothing for the gelu and the head (the tied table is stored
 * once). */
Test(seq, checkpoint_names_of_the_sequence_layers) {
  tsr_dataset_t ds = token_windows(4, 5, 4, 5);
  tsr_net_t *net = tiny_lm_net(4, 0.1f);
  tsr_checkpoint_info_t info = {.epoch = 1, .epochs = 1, .seed = 9};
  tsr_dataset_fingerprint(&ds, info.data, sizeof info.data);
  char path[128];
  snprintf(path, sizeof path, "%s/lm.safetensors", dir);
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_checkpoint_save(net, &info, path, &err), 0, "%s", err.msg);
  tsr_st_file_t *f;
  cr_assert_eq(tsr__st_open(&f, path, &err), 0, "%s", err.msg);
  const char *want[] = {"layers.0.embedding.weight", "layers.0.embedding.position",
                        "layers.1.layernorm.weight", "layers.1.layernorm.bias",
                        "layers.2.conv.weight",      "layers.2.conv.bias"};
  for (int k = 0; k < 6; k++)
    cr_expect(tsr__st_find(f, want[k]) >= 0, "no tensor %s in the checkpoint", want[k]);
  int params = 0;
  for (int i = 0; i < tsr__st_count(f); i++) {
    tsr_st_tensor_t t;
    tsr__st_tensor(f, i, &t);
    cr_expect(!strstr(t.name, "gelu") && !strstr(t.name, "lmhead"), "tensor %s", t.name);
    params += strncmp(t.name, "layers.", 7) == 0;
  }
  cr_expect_eq(params, 6, "%d tensors named layers.*", params);
  int w = tsr__st_find(f, "layers.0.embedding.position");
  tsr_st_tensor_t t;
  tsr__st_tensor(f, w, &t);
  cr_expect(t.ndims == 2 && t.shape[0] == 7 && t.shape[1] == 6, "position table %dd", t.ndims);
  tsr__st_close(&f);
  /* and it loads back into a fresh net */
  tsr_net_t *back = tiny_lm_net(4, 0.1f);
  cr_assert_eq(tsr_checkpoint_load(back, path, NULL, NULL, &err), 0, "%s", err.msg);
  tsr_net_destroy(&back);
  tsr_net_destroy(&net);
  tsr_dataset_fini(&ds);
}

/* The model-file keys (units = classes binds the head), the text written back, and the
 * descriptions. */
Test(seq, model_file_keys_and_descriptions) {
  const char *text = "[embed]\ntype = embedding\nvocab = 256\nunits = 8\ncontext = 128\n"
                     "[ln]\ntype = layernorm\neps = 0.001\n[act]\ntype = gelu\n"
                     "[lnf]\ntype = layernorm\n[head]\ntype = lmhead\nunits = classes\n";
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse_ini_text(&spec, text, "lm.ini", &err), 0, "%s", err.msg);
  tsr_model_bind_classes(&spec, 256);
  cr_assert_eq(spec.n_layers, 5);
  const tsr_layer_spec_t *e = &spec.layers[0];
  cr_assert(e->kind == TSR_LAYER_EMBEDDING && e->vocab == 256 && e->units == 8 &&
            e->context == 128);
  cr_assert(spec.layers[1].kind == TSR_LAYER_LAYERNORM && spec.layers[1].eps == 0.001f);
  cr_assert(spec.layers[4].kind == TSR_LAYER_LMHEAD && spec.layers[4].units == 256);
  char buf[512];
  tsr_model_describe(&spec, 128, buf, sizeof buf);
  cr_assert(strstr(buf, "embedding/v256/t128") && strstr(buf, "layernorm/eps0.001") &&
                strstr(buf, "gelu") && strstr(buf, "layernorm-lmhead/v256"),
            "%s", buf);
  cr_assert_eq(tsr_model_to_ini(&spec, buf, sizeof buf), 0);
  tsr_model_spec_t again;
  cr_assert_eq(tsr_model_parse_ini_text(&again, buf, "again.ini", &err), 0, "%s", err.msg);
  cr_assert(again.layers[0].vocab == 256 && again.layers[0].context == 128 &&
            again.layers[0].units == 8 && again.layers[4].units == 256);
  tsr_model_spec_fini(&again);
  tsr_model_spec_fini(&spec);
  /* No position table without context; a section without vocab is told what to add. */
  tsr_model_spec_t nopos = SPEC({.kind = TSR_LAYER_EMBEDDING, .vocab = 7, .units = 2});
  tsr_model_describe(&nopos, 3, buf, sizeof buf);
  cr_assert(strstr(buf, "embedding/v7") && !strstr(buf, "/t"), "%s", buf);
  tsr_model_spec_fini(&nopos);
  cr_assert_neq(
      tsr_model_parse_ini_text(&spec, "[e]\ntype = embedding\nunits = 4\n", "e.ini", &err), 0);
  cr_assert(strstr(err.msg, "e.ini") && strstr(err.msg, "add vocab = V"), "%s", err.msg);
}

/* tsr_net_create of spec over samples c x h x w with `classes`: refused with a message holding
 * every one of the texts (NULL-ended). */
static void refused(tsr_model_spec_t spec, int c, int h, int w, int classes, const char **texts) {
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 4, o.in_channels = c, o.in_height = h, o.in_width = w;
  tsr_net_t *net = NULL;
  tsr_errbuf_t err = {""};
  cr_assert_neq(tsr_net_create(&net, &spec, c * h * w, classes, &o, &err), 0);
  for (const char **t = texts; *t; t++)
    cr_expect(strstr(err.msg, *t), "'%s' lacks '%s'", err.msg, *t);
  tsr_model_spec_fini(&spec);
}

Test(seq, shapes_that_cannot_work_are_refused_with_the_fix) {
  /* the embedding over 2 x 2 x 1 samples, not a sequence of ids */
  refused(SPEC({.kind = TSR_LAYER_EMBEDDING, .vocab = 4, .units = 3},
               {.kind = TSR_LAYER_DENSE, .units = 4}),
          1, 2, 2, 4, (const char *[]){"layer 1 (embedding)", "T x 1 x 1", "2x2x1", NULL});
  /* a context shorter than the windows */
  refused(SPEC({.kind = TSR_LAYER_EMBEDDING, .vocab = 4, .units = 3, .context = 3},
               {.kind = TSR_LAYER_LMHEAD, .units = 4}),
          1, 5, 1, 4, (const char *[]){"layer 1 (embedding)", "context = 3", ">= 5", NULL});
  /* a head without an embedding to tie to */
  refused(SPEC({.kind = TSR_LAYER_CONV, .units = 3, .kernel_h = 1},
               {.kind = TSR_LAYER_LMHEAD, .units = 4}),
          1, 5, 1, 4, (const char *[]){"layer 2 (lmhead)", "has 0", "type = embedding", NULL});
  /* a head whose units are not the embedding's vocabulary */
  refused(SPEC({.kind = TSR_LAYER_EMBEDDING, .vocab = 6, .units = 3},
               {.kind = TSR_LAYER_LMHEAD, .units = 4}),
          1, 5, 1, 4, (const char *[]){"layer 2 (lmhead)", "vocab 6", "set units = 6", NULL});
  /* two embeddings */
  refused(SPEC({.kind = TSR_LAYER_EMBEDDING, .vocab = 4, .units = 3, .name = "a"},
               {.kind = TSR_LAYER_EMBEDDING,
                .vocab = 4,
                .units = 3,
                .name = "b",
                .n_inputs = 1,
                .inputs = {"input"}},
               {.kind = TSR_LAYER_ADD, .n_inputs = 2, .inputs = {"a", "b"}},
               {.kind = TSR_LAYER_LMHEAD, .units = 4}),
          1, 5, 1, 4, (const char *[]){"layer 4 (lmhead)", "has 2", NULL});
  /* a layer norm's eps out of range */
  refused(SPEC({.kind = TSR_LAYER_LAYERNORM, .eps = 2.0f}, {.kind = TSR_LAYER_DENSE, .units = 4}),
          3, 1, 1, 4, (const char *[]){"layer 1 (layernorm)", "eps", NULL});
}
