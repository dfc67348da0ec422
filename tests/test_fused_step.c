/* The SGD step taken by a dense layer's weight gradient tasks (gemm_sgd) instead of tasks of
 * its own (sgd): the same digits, bit for bit, for plain SGD, without momentum and with Nesterov's
 * momentum and weight decay, with several batch-row tiles in each gradient's chain; one task
 * fewer per weight and bias tile, gemm_sgd tasks for the weight tiles, and no gemm_sgd where the
 * step cannot be fused (Adam, gradient clipping). The counts come from the net's count of the
 * tasks it submitted and from the runtime's statistics, which are read once, at the end of a
 * test (Criterion runs each test in its own process, with its own runtime). */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "nn/net_impl.h"
#include "tessera/tessera.h"

#include "training.h"

static void start(void) {
  tsr_errbuf_t err = {""};
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  ro.stats = true;
  cr_assert_eq(tsr_runtime_init(&ro, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(fused, .init = start, .fini = stop, .timeout = 300);

enum { BATCH = 32, TILE = 8, COLS = 16, STEPS = 5 };
static const char *const model = "mlp:40,24";

/* Tasks of the codelets whose statistics name starts with prefix ("gemm_sgd" counts
 * "gemm_sgd:onednn" and "gemm_sgd:blis"), every worker, since the runtime started. */
static int64_t tasks_of(const char *prefix) {
  tsr_run_stats_t st;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_stats(&st, &err), 0, "%s", err.msg);
  int64_t n = 0;
  size_t len = strlen(prefix);
  for (int c = 0; c < st.ncodelets; c++) {
    const char *name = st.codelets[c];
    if (strncmp(name, prefix, len) != 0 || (name[len] != '\0' && name[len] != ':')) continue;
    for (int w = 0; w < st.nworkers; w++)
      n += st.workers[w].codelet_tasks[c];
  }
  tsr_run_stats_fini(&st);
  return n;
}

typedef struct {
  float *params;
  int64_t n;
  uint64_t tasks; /* submitted by the net */
} run_t;

/* STEPS training steps of the model on ds with hp and clip, the steps fused or not: the
 * parameters after them and the tasks each kind of update ran. */
static run_t train(const tsr_dataset_t *ds, const tsr_optimizer_t *hp, float clip, bool unfused) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, model, ds->classes, &err), 0, "%s", err.msg);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = BATCH, o.tile_rows = TILE, o.tile_cols = COLS, o.seed = 5, o.opt = *hp;
  o.clip_grad = clip, o.unfused_steps = unfused;
  tsr_net_t *net;
  cr_assert_eq(tsr_net_create(&net, &spec, (int)ds->features, ds->classes, &o, &err), 0, "%s",
               err.msg);
  tsr_model_spec_fini(&spec);
  uint64_t before = net->submitted;
  int32_t rows[BATCH];
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < BATCH; i++)
      rows[i] = (int32_t)((s * BATCH + i * 5) % ds->n);
    cr_assert_eq(tsr_net_train_step(net, ds, rows, BATCH, true), 0);
  }
  cr_assert_eq(tsr_net_wait(net, 0), 0);
  run_t r = {malloc(sizeof(float) * (size_t)tsr_net_param_count(net)), 0, net->submitted - before};
  for (int p = 0; p < tsr_net_n_params(net); p++) {
    int64_t rr, cc;
    cr_assert_eq(tsr_net_param_info(net, p, &rr, &cc), 0);
    cr_assert_eq(tsr_net_param_get(net, p, r.params + r.n), 0);
    r.n += rr * cc;
  }
  tsr_net_destroy(&net);
  return r;
}

static int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

/* Weight and bias tiles of the model's three dense layers under COLS-wide tiles. */
static void tiles_of(const tsr_dataset_t *ds, int64_t *weights, int64_t *biases) {
  const int64_t sizes[] = {ds->features, 40, 24, ds->classes};
  *weights = *biases = 0;
  for (int l = 0; l < 3; l++) {
    *weights += ceil_div(sizes[l], COLS) * ceil_div(sizes[l + 1], COLS);
    *biases += ceil_div(sizes[l + 1], COLS);
  }
}

/* name: the optimizer; update: its update's codelet. */
static void fused_equals_unfused(const char *name, const char *update, float momentum,
                                 float decay) {
  tsr_dataset_t ds = {0}, test = {0};
  load(&ds, &test, 1000);
  tsr_optimizer_t hp;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_optimizer_init(&hp, name, &err), 0, "%s", err.msg);
  hp.lr = 0.05f, hp.momentum = momentum, hp.weight_decay = decay;
  run_t fused = train(&ds, &hp, 0.0f, false), apart = train(&ds, &hp, 0.0f, true);
  int64_t weights, biases;
  tiles_of(&ds, &weights, &biases);
  /* Each step: the same GEMMs, the last of each weight tile's chain a gemm_sgd, and no sgd. */
  cr_assert_eq(apart.tasks - fused.tasks, (uint64_t)(STEPS * (weights + biases)),
               "%s: %llu tasks fused, %llu apart; want %lld fewer", name,
               (unsigned long long)fused.tasks, (unsigned long long)apart.tasks,
               (long long)(STEPS * (weights + biases)));
  int64_t gemm_sgd = tasks_of("gemm_sgd"), sgd = tasks_of(update);
  cr_assert_eq(gemm_sgd, STEPS * weights, "%s: %lld gemm_sgd tasks, want %lld", name,
               (long long)gemm_sgd, (long long)(STEPS * weights));
  cr_assert_eq(sgd, STEPS * (weights + biases), "%s: %lld %s tasks, want %lld (the run apart's)",
               name, (long long)sgd, update, (long long)(STEPS * (weights + biases)));
  cr_assert_eq(fused.n, apart.n);
  int64_t differ = 0;
  for (int64_t k = 0; k < fused.n; k++)
    differ += memcmp(&fused.params[k], &apart.params[k], sizeof(float)) != 0;
  cr_assert_eq(differ, 0, "%s: %lld of %lld parameters differ after %d steps", name,
               (long long)differ, (long long)fused.n, STEPS);
  free(fused.params), free(apart.params);
  tsr_dataset_fini(&ds), tsr_dataset_fini(&test);
}

Test(fused, sgd_with_momentum_is_bit_for_bit_the_steps_as_tasks) {
  fused_equals_unfused("sgd", "sgd", 0.9f, 0.0f);
}

Test(fused, sgd_without_momentum_and_with_decay_is_bit_for_bit_the_steps_as_tasks) {
  fused_equals_unfused("sgd", "sgd", 0.0f, 5e-3f);
}

Test(fused, nesterov_with_decay_is_bit_for_bit_the_steps_as_tasks) {
  fused_equals_unfused("sgd-nesterov", "sgd_nesterov", 0.9f, 5e-3f);
}

/* Where something else reads the gradient before the step (the norm of --clip-grad) or the
 * optimizer is not an SGD, every update is a task of its own. */
Test(fused, adam_and_clipping_keep_their_own_update_tasks) {
  tsr_dataset_t ds = {0}, test = {0};
  load(&ds, &test, 1000);
  tsr_optimizer_t hp;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_optimizer_init(&hp, "sgd", &err), 0, "%s", err.msg);
  run_t clipped = train(&ds, &hp, 1.0f, false);
  int64_t weights, biases;
  tiles_of(&ds, &weights, &biases);
  cr_assert_eq(tsr_optimizer_init(&hp, "adam", &err), 0, "%s", err.msg);
  run_t adam = train(&ds, &hp, 0.0f, false);
  int64_t gemm_sgd = tasks_of("gemm_sgd"), sgd = tasks_of("sgd"), adam_tasks = tasks_of("adam");
  cr_assert_eq(gemm_sgd, 0, "%lld fused steps under --clip-grad or Adam", (long long)gemm_sgd);
  cr_assert_eq(sgd, STEPS * (weights + biases), "--clip-grad: %lld sgd tasks, want %lld",
               (long long)sgd, (long long)(STEPS * (weights + biases)));
  cr_assert_eq(adam_tasks, STEPS * (weights + biases), "adam: %lld tasks, want %lld",
               (long long)adam_tasks, (long long)(STEPS * (weights + biases)));
  free(clipped.params), free(adam.params);
  tsr_dataset_fini(&ds), tsr_dataset_fini(&test);
}
