/* Weight averaging under mpirun, checks of mpirun -np P test_mpi_weights CHECK:
 *   epoch          epoch averaging equals the mean of separately trained replicas
 *   every          every=K averages exactly at steps K, 2K (the mean of the replicas), and not
 *                  before (each rank still has its own replica at K - 1)
 *   weighted       --weighting samples: ranks that take different batches are averaged with
 *                  weights samples_q / samples
 *   deterministic  two runs with a seed give the same bits, and the average is the float32 sum
 *                  in rank order w_0 x_0 + w_1 x_1 + ... (the contract)
 *   uneven         shards of unequal size (3 ranks): batch sync equals one process on the
 *                  concatenated global batches, epoch averaging the mean of replicas; every=K
 *                  and async-epoch end equal and learn
 *   outer          outer optimizers (2 ranks): slowmo and nesterov on a hand-computed case;
 *                  every=K with each equals its formula on the mean of replicas trained alone;
 *                  async-epoch's folds as outer steps in rank order
 *   hier           hier:2,4,2 on 3 ranks: ranks 0 and 1 average at step 2, rank 2 keeps its own
 *                  replica, all three average at step 4
 *   hiersamples    hier with --weighting samples: a group average weighs the samples since the
 *                  last average of all ranks (not since the group's own last average)
 *   postlocal      post-local:1,3: gradients averaged in epoch 1, then every=3 counted from the
 *                  switch
 *   postlocalstate at post-local's switch every rank holds the whole optimizer state of one
 *                  process with the global batch
 *   fednova        --weighting steps (FedNova) equals its formula from the anchor
 *   epochn         epoch=2 over 3 epochs averages after epochs 2 and 3, not 1
 *   bnevery        weight averages average batchnorm's running statistics too
 *   grow           grow=K averages after steps K, 3K, 7K ... only, and at the end
 * (common.h: the command, its output.) */
#include "mpi/common.h"

/* One epoch with epoch averaging == the mean of replicas trained alone on the same shards. */
static void test_epoch(int64_t samples) {
  load(samples);
  tsr_net_t *avg = make_net(32, 0.9f), *alone = make_net(32, 0.9f);
  train(avg, "epoch", 1, false);
  train(alone, "none", 1, false);
  int64_t n;
  float *w = params(avg, &n), *mine = params(alone, &n), *mean = weighted_mean(mine, n, NULL);
  CHECK(replicas_equal(w, n), "replicas differ after epoch averaging");
  double d = max_rel_diff(w, mean, n);
  CHECK(d <= 1e-5, "epoch-averaged weights vs mean of separate replicas: %g", d);
  double spread = max_rel_diff(mine, mean, n);
  CHECK(spread > 1e-3, "the separate replicas should differ (spread %g), else the test is vacuous",
        spread);
  if (rank == 0) printf("epoch: max relative difference to the mean of replicas: %.2e\n", d);
  free(w), free(mine), free(mean);
  tsr_net_destroy(&avg), tsr_net_destroy(&alone);
}

/* every=K: the weights are the mean of the separately trained replicas right after steps K and
 * 2K, and each rank's own replica at steps K - 1 and 2K - 1. The separate replicas go on from
 * each average with their own momentum (--sync-state off), as the synchronized ones do. */
static void test_every(void) {
  enum { B = 16, K = 3 };
  load(B * size * 2 * K);
  tsr_net_t *net = make_net(B, 0.9f), *alone = make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas(net, "every=3", false);
  int32_t *rows = batch_rows(B, 2 * K);
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  for (int k = 1; k <= 2 * K; k++) {
    step_pair(rep, net, alone, rows, B, k, counts);
    if (k % K != 0 && k % K != K - 1) continue;
    int64_t n;
    float *w = params(net, &n), *own = params(alone, &n);
    if (k % K == 0) {
      float *mean = weighted_mean(own, n, NULL);
      double d = max_rel_diff(w, mean, n);
      CHECK(d <= 1e-5, "every=%d, step %d: weights vs the mean of the replicas: %g", K, k, d);
      CHECK(replicas_equal(w, n), "every=%d, step %d: replicas differ after averaging", K, k);
      set_params(alone, w); /* the average as the engine rounded it, so steps K+1.. compare */
      free(mean);
    } else {
      double d = max_rel_diff(w, own, n);
      CHECK(d <= 1e-6, "every=%d, step %d: weights must still be this rank's own (%g off)", K, k,
            d);
      CHECK(!replicas_equal(w, n), "every=%d, step %d: replicas agree before the average", K, k);
    }
    free(w), free(own);
  }
  tsr__replicas_destroy(&rep);
  free(rows);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
  /* A run whose last step averages needs no second average at its end: with K steps in the
   * run, every=K moves exactly the bytes of one epoch average. */
  uint64_t bytes[2] = {0, 0};
  const char *policies[2] = {"every=3", "epoch"};
  for (int p = 0; p < 2; p++) {
    tsr_net_t *one = make_net(2 * B, 0.9f); /* 2 B K P samples: K steps of 2 B per rank */
    tsr_epoch_stats_t st = {0};
    train_with(one, policies[p],
               (run_t){.epochs = 1, .shuffle = true, .on_epoch = keep_stats, .ctx = &st});
    bytes[p] = st.bytes_sent + st.bytes_received;
    tsr_net_destroy(&one);
  }
  if (rank == 0)
    CHECK(bytes[0] == bytes[1] && bytes[0] > 0,
          "every=%d over %d steps moved %llu bytes, one epoch average %llu", K, K,
          (unsigned long long)bytes[0], (unsigned long long)bytes[1]);
}

/* --weighting samples: rank q takes B / (q + 1) samples a step, and every=2 averages with
 * weights samples_q / samples, here far from uniform (checked). */
static void test_weighted(void) {
  enum { B = 24, K = 2 };
  load(B * size * K);
  tsr_net_t *net = make_net(B, 0.9f), *alone = make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas(net, "every=2", true);
  int32_t *rows = batch_rows(B, K);
  int counts[MPI_TEST_MAX_RANKS];
  double weight[MPI_TEST_MAX_RANKS], total = 0;
  for (int q = 0; q < size; q++)
    counts[q] = B / (q + 1), total += K * counts[q];
  for (int q = 0; q < size; q++)
    weight[q] = K * counts[q] / total;
  for (int k = 1; k <= K; k++) {
    const int32_t *mine = rows + ((k - 1) * size + rank) * B;
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, mine, counts[rank], true) == 0, "step %d", k);
    CHECK(tsr__replicas_after_step(rep, k) == 0, "after step %d", k);
    tsr_net_train_step(alone, &train_set, mine, counts[rank], true);
  }
  int64_t n;
  float *w = params(net, &n), *own = params(alone, &n);
  float *want = weighted_mean(own, n, weight), *uniform = weighted_mean(own, n, NULL);
  double d = max_rel_diff(w, want, n), apart = max_rel_diff(uniform, want, n);
  CHECK(d <= 1e-5, "--weighting samples: weights vs the sample-weighted mean: %g", d);
  CHECK(apart > 1e-3, "weighted and uniform means must differ (%g) for the check to mean much",
        apart);
  if (rank == 0) printf("weighted: max relative difference to the weighted mean: %.2e\n", d);
  tsr__replicas_destroy(&rep);
  free(w), free(own), free(want), free(uniform), free(rows);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
}

static void test_deterministic(void) {
  load(1000);
  static const struct {
    const char *policy, *outer;
  } runs[] = {{"batch", NULL},          {"every=3", NULL},        {"async-epoch", NULL},
              {"post-local:1,3", NULL}, {"hier:2,3,2", NULL},     {"every=3", "slowmo"},
              {"epoch", "nesterov"},    {"async-epoch", "slowmo"}};
  for (size_t p = 0; p < sizeof runs / sizeof *runs; p++) {
    tsr_net_t *a = make_net(32, 0.9f), *b = make_net(32, 0.9f);
    run_t run = {.epochs = 2, .deterministic = true, .shuffle = true, .outer = runs[p].outer};
    train_with(a, runs[p].policy, run);
    train_with(b, runs[p].policy, run);
    int64_t n;
    float *wa = params(a, &n), *wb = params(b, &n);
    CHECK(memcmp(wa, wb, sizeof(float) * (size_t)n) == 0,
          "%s --outer %s --deterministic: runs differ", runs[p].policy,
          runs[p].outer ? runs[p].outer : "none");
    free(wa), free(wb);
    tsr_net_destroy(&a), tsr_net_destroy(&b);
  }
  /* The contract: acc = w_0 x_0, then acc = w_q x_q + acc for q = 1 .. P-1, in float32, with
   * whole tiles as chunks and with bands of whole-matrix tiles. */
  for (int t = 0; t < 2; t++) {
    tile_rows = tile_cols = t == 0 ? 16 : WHOLE;
    tsr_net_t *avg = make_net(32, 0.9f), *alone = make_net(32, 0.9f);
    train(avg, "epoch", 1, true);
    train(alone, "none", 1, true);
    int64_t n;
    float *w = params(avg, &n), *own = params(alone, &n), *all = gather_all(own, n);
    float *want = malloc(sizeof(float) * (size_t)n), *rev = malloc(sizeof(float) * (size_t)n);
    ordered_mean(all, n, false, want);
    ordered_mean(all, n, true, rev);
    int64_t off = 0;
    for (int64_t i = 0; i < n; i++)
      off += memcmp(&w[i], &want[i], sizeof(float)) != 0;
    CHECK(off == 0,
          "--deterministic epoch average, %s tiles: %lld of %lld weights differ from the float32 "
          "sum in rank order",
          t == 0 ? "16x16" : "whole-matrix", (long long)off, (long long)n);
    if (size >= 3)
      CHECK(memcmp(want, rev, sizeof(float) * (size_t)n) != 0,
            "the rank order must change some bits for the check to mean much");
    free(w), free(own), free(all), free(want), free(rev);
    tsr_net_destroy(&avg), tsr_net_destroy(&alone);
  }
  tile_rows = tile_cols = 16;
}

/* 1001 samples on 3 ranks: shards of 333, 334 and 334. */
static void test_uneven(void) {
  enum { B = 32 };
  const int64_t samples = 1001;
  test_epoch(samples); /* loads the data */
  /* batch: step k of the run is one process's step on the concatenation, over ranks, of each
   * rank's rows of that step in the epoch's order; each rank's gradient counts by its samples. */
  tsr_net_t *net = make_net(B, 0.9f);
  /* The rate of the one process below: no linear scaling by the ranks. */
  train_with(net, "batch",
             (run_t){.epochs = 1, .shuffle = true, .lr_scaling = TSR_LR_SCALING_NONE});
  int64_t n;
  float *w = params(net, &n);
  CHECK(replicas_equal(w, n), "batch: replicas differ at the end");
  if (rank == 0) {
    tsr_net_t *one = make_net(B * size, 0.9f);
    int32_t order[1001], rows[B * MPI_TEST_MAX_RANKS];
    tsr_dataset_epoch_order(order, samples, 5, 1);
    int64_t largest = 0;
    for (int q = 0; q < size; q++)
      if (samples * (q + 1) / size - samples * q / size > largest)
        largest = samples * (q + 1) / size - samples * q / size;
    for (int64_t k = 0; k * B < largest; k++) {
      int taken = 0;
      for (int q = 0; q < size; q++)
        for (int64_t i = samples * q / size + k * B;
             i < samples * (q + 1) / size && i < samples * q / size + (k + 1) * B; i++)
          rows[taken++] = order[i];
      tsr_net_train_step(one, &train_set, rows, taken, true);
    }
    float *ref = params(one, &n);
    double d = max_rel_diff(w, ref, n);
    CHECK(d <= 1e-4, "batch on uneven shards vs one process on the global batches: %g", d);
    printf("uneven: batch vs one process: max relative difference %.2e\n", d);
    free(ref);
    tsr_net_destroy(&one);
  }
  free(w);
  tsr_net_destroy(&net);
  const char *policies[] = {"every=4", "async-epoch"};
  for (int p = 0; p < 2; p++) {
    net = make_net(B, 0.9f);
    train(net, policies[p], 2, false);
    w = params(net, &n);
    CHECK(replicas_equal(w, n), "%s: replicas differ at the end", policies[p]);
    if (rank == 0) {
      double loss, acc;
      CHECK(tsr_evaluate(net, &test_set, &loss, &acc) == 0, "evaluate");
      /* Measured: every=4 0.603, async-epoch 0.627-0.653 (its folds commute); chance is 0.1. */
      CHECK(acc > 0.5 && isfinite(loss), "%s: test accuracy %.4f loss %g after 2 epochs",
            policies[p], acc, loss);
      printf("uneven: %s test accuracy %.4f\n", policies[p], acc);
    }
    free(w);
    tsr_net_destroy(&net);
  }
}

/* Every weight of net set to v. */
static void fill_params(tsr_net_t *net, float v) {
  int64_t n = tsr_net_param_count(net);
  float *all = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++)
    all[i] = v;
  set_params(net, all);
  free(all);
}

/* The outer step on a hand-computed case, 2 ranks, base rate gamma 0.1: every weight of both
 * replicas is 1 when the replicas are created (the anchor); rank 0 then holds 0.6 and rank 1
 * 1.0 (mean 0.8, delta 0.2); after that average they hold 0.6 and 0.8 (mean 0.7).
 *   slowmo, alpha 1, beta 0.5:  u = 0.2 / 0.1 = 2,  x = 1 - 0.1 * 2 = 0.8;
 *                               delta 0.1, u = 1 + 1 = 2,  x = 0.8 - 0.1 * 2 = 0.6
 *   nesterov, eta 0.7, mu 0.9:  u = 0.2,  x = 1 - 0.7 (0.2 + 0.18) = 0.734;
 *                               delta 0.034, u = 0.214,  x = 0.734 - 0.7 (0.034 + 0.1926) =
 *                               0.57538 */
static void outer_by_hand(const char *outer, const double want[2]) {
  tsr_net_t *net = make_net(16, 0);
  tsr_net_set_lr(net, 0.1f);
  fill_params(net, 1.0f);
  tsr_replicas_t *rep = replicas_with(net, "every=1", false, outer);
  static const float mine[2][2] = {{0.6f, 1.0f}, {0.6f, 0.8f}}, mean[2] = {0.8f, 0.7f};
  int counts[MPI_TEST_MAX_RANKS] = {16, 16};
  for (int round = 0; round < 2; round++) {
    fill_params(net, mine[round][rank]);
    tsr__replicas_count(rep, counts);
    CHECK(tsr__replicas_after_step(rep, round + 1) == 0, "--outer %s: average %d", outer,
          round + 1);
    int64_t n;
    float *w = params(net, &n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
      worst = fmax(worst, fabs(w[i] - want[round]) / want[round]);
    CHECK(worst <= 2e-6, "--outer %s, average %d: weight %.7g, want %.7g (the plain mean: %g)",
          outer, round + 1, (double)w[0], want[round], (double)mean[round]);
    free(w);
  }
  tsr__replicas_destroy(&rep);
  tsr_net_destroy(&net);
}

/* every=K with an outer optimizer through real training steps: at steps K and 2K the weights
 * are the anchor stepped by the formula of tessera/dist.h (in double here) towards the mean of
 * replicas trained alone, the momentum carried from K to 2K, the base rate the net's rate; at
 * K - 1 each rank still has its own replica. */
static void outer_training(const char *name) {
  enum { B = 16, K = 3 };
  load(B * size * 2 * K);
  tsr_net_t *net = make_net(B, 0.9f), *alone = make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas_with(net, "every=3", false, name);
  tsr_outer_t hp;
  tsr_outer_init(&hp, name, NULL);
  double gamma = tsr_net_lr(net);
  int64_t n;
  float *start = params(net, &n);
  double *x = malloc(sizeof(double) * (size_t)n), *u = calloc((size_t)n, sizeof(double));
  for (int64_t i = 0; i < n; i++)
    x[i] = start[i];
  int32_t *rows = batch_rows(B, 2 * K);
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  for (int k = 1; k <= 2 * K; k++) {
    step_pair(rep, net, alone, rows, B, k, counts);
    if (k % K != 0 && k % K != K - 1) continue;
    float *w = params(net, &n), *own = params(alone, &n);
    if (k % K == 0) {
      float *mean = weighted_mean(own, n, NULL), *want = malloc(sizeof(float) * (size_t)n);
      for (int64_t i = 0; i < n; i++) {
        double d = x[i] - mean[i];
        if (hp.kind == TSR_OUTER_NESTEROV) {
          u[i] = hp.momentum * u[i] + d;
          x[i] -= hp.lr * (d + hp.momentum * u[i]);
        } else {
          u[i] = hp.momentum * u[i] + d / gamma;
          x[i] -= hp.lr * gamma * u[i];
        }
        want[i] = (float)x[i];
      }
      double dist = max_rel_diff(w, want, n), apart = max_rel_diff(mean, want, n);
      CHECK(dist <= 1e-5, "--outer %s, step %d: weights vs the outer step's formula: %g", name, k,
            dist);
      /* SlowMo's first step with alpha 1 lands on the mean (u was 0); later ones do not. */
      if (k == 2 * K || hp.kind == TSR_OUTER_NESTEROV)
        CHECK(apart > 1e-3, "--outer %s, step %d: the outer step must differ from the mean (%g)",
              name, k, apart);
      CHECK(replicas_equal(w, n), "--outer %s, step %d: replicas differ after averaging", name, k);
      if (rank == 0)
        printf("outer %s, step %d: max relative difference to the formula %.2e\n", name, k, dist);
      set_params(alone, w); /* every replica restarts from the new anchor */
      free(mean), free(want);
    } else {
      CHECK(max_rel_diff(w, own, n) <= 1e-6, "--outer %s, step %d: not this rank's own replica",
            name, k);
    }
    free(w), free(own);
  }
  tsr__replicas_destroy(&rep);
  free(rows), free(start), free(x), free(u);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
}

/* async-epoch with slowmo, deterministic, unshuffled: at each epoch end, for q = 0, 1, ...:
 * d = (s_q - w_q) / P, u = beta u + d / gamma, global -= alpha gamma u, and rank q goes on from
 * global (s_q, where its next epoch starts); s_q and global start as the initial weights; at the
 * end, the uniform average of the folds' results in rank order (float32, as test_async). */
static void outer_async(void) {
  enum { B = 32, STEPS = 3, EPOCHS = 2 };
  load(B * STEPS * size);
  tsr_net_t *net = make_net(B, 0.9f);
  train_with(net, "async-epoch",
             (run_t){.epochs = EPOCHS, .deterministic = true, .outer = "slowmo"});
  tsr_net_t *alone = make_net(B, 0.9f);
  tsr_outer_t hp;
  tsr_outer_init(&hp, "slowmo", NULL);
  double gamma = tsr_net_lr(alone);
  int64_t n;
  float *start = params(alone, &n), *snaps = malloc(sizeof(float) * (size_t)(n * size));
  double *global = malloc(sizeof(double) * (size_t)n), *u = calloc((size_t)n, sizeof(double));
  for (int64_t i = 0; i < n; i++)
    global[i] = start[i];
  for (int q = 0; q < size; q++)
    memcpy(snaps + q * n, start, sizeof(float) * (size_t)n);
  for (int e = 1; e <= EPOCHS; e++) {
    shard_epoch(alone, B, STEPS);
    float *own = params(alone, &n), *all = gather_all(own, n);
    for (int q = 0; q < size; q++)
      for (int64_t i = 0; i < n; i++) {
        double d = ((double)snaps[q * n + i] - all[q * n + i]) / size;
        u[i] = hp.momentum * u[i] + d / gamma;
        global[i] -= hp.lr * gamma * u[i];
        snaps[q * n + i] = (float)global[i];
      }
    set_params(alone, snaps + rank * n);
    free(own), free(all);
  }
  float *want = malloc(sizeof(float) * (size_t)n), uniform = (float)(1.0 / size);
  for (int64_t i = 0; i < n; i++) {
    want[i] = uniform * snaps[i];
    for (int q = 1; q < size; q++)
      want[i] = uniform * snaps[q * n + i] + want[i];
  }
  float *w = params(net, &n);
  tsr_net_t *plain = make_net(B, 0.9f);
  train_with(plain, "async-epoch", (run_t){.epochs = EPOCHS, .deterministic = true});
  float *folded = params(plain, &n);
  double d = max_rel_diff(w, want, n), apart = max_rel_diff(folded, want, n);
  CHECK(d <= 1e-5, "async-epoch --outer slowmo vs its folds in rank order: %g", d);
  CHECK(apart > 1e-3, "the outer folds must differ from plain folds (%g)", apart);
  if (rank == 0) printf("outer async: max relative difference to the folds %.2e\n", d);
  free(start), free(snaps), free(global), free(u), free(want), free(w), free(folded);
  tsr_net_destroy(&net), tsr_net_destroy(&alone), tsr_net_destroy(&plain);
}

static void test_outer(void) {
  CHECK(size == 2, "the hand-computed case is for 2 ranks (mpirun -np 2), not %d", size);
  if (size != 2) return;
  load(64);
  outer_by_hand("slowmo", (const double[]){0.8, 0.6});
  outer_by_hand("nesterov", (const double[]){0.734, 0.57538});
  outer_training("slowmo");
  outer_training("nesterov");
  outer_async();
}

/* hier:2,4,2 on 3 ranks: groups {0, 1} and {2}. Step 2 averages inside the groups (rank 2's
 * group has only itself), step 4 over all ranks; steps 1 and 3 nothing. */
static void test_hier(void) {
  CHECK(size == 3, "the groups here are for 3 ranks (mpirun -np 3), not %d", size);
  if (size != 3) return;
  enum { B = 16, STEPS = 4 };
  load(B * size * STEPS);
  tsr_net_t *net = make_net(B, 0.9f), *alone = make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas(net, "hier:2,4,2", false);
  int32_t *rows = batch_rows(B, STEPS);
  int counts[MPI_TEST_MAX_RANKS] = {B, B, B};
  static const double pair[MPI_TEST_MAX_RANKS] = {0.5, 0.5, 0.0};
  for (int k = 1; k <= STEPS; k++) {
    step_pair(rep, net, alone, rows, B, k, counts);
    int64_t n;
    float *w = params(net, &n), *own = params(alone, &n);
    float *group = weighted_mean(own, n, pair), *all = weighted_mean(own, n, NULL);
    const float *want = k == 4 ? all : k == 2 && rank < 2 ? group : own;
    double d = max_rel_diff(w, want, n);
    CHECK(d <= 1e-5, "hier:2,4,2, step %d, rank %d: %g off the %s", k, rank, d,
          want == all     ? "mean of all"
          : want == group ? "mean of ranks 0 and 1"
                          : "own replica");
    CHECK(replicas_equal(w, n) == (k == 4), "hier:2,4,2, step %d: replicas %s", k,
          k == 4 ? "differ after the average over all ranks" : "agree before it");
    set_params(alone, w);
    free(w), free(own), free(group), free(all);
  }
  tsr__replicas_destroy(&rep);
  free(rows);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
}

/* post-local:1,3, plain SGD (no optimizer state to carry): in epoch 1 (2 steps) gradients are
 * averaged, so replicas agree after every step without a weight average; from epoch 2 each rank
 * steps alone and every=3 counts from the switch: averages at steps 5 and 8, not at 3 or 6. */
static void test_postlocal(void) {
  enum { B = 16, STEPS = 8 };
  load(B * size * STEPS);
  tsr_net_t *net = make_net(B, 0), *alone = make_net(B, 0);
  tsr_replicas_t *rep = replicas(net, "post-local:1,3", false);
  int32_t *rows = batch_rows(B, STEPS);
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  CHECK(tsr__replicas_epoch_begin(rep, 1, 0) == 0, "epoch 1 begins");
  for (int k = 1; k <= STEPS; k++) {
    if (k == 3) {
      CHECK(tsr__replicas_epoch_begin(rep, 2, 2) == 0, "epoch 2 begins");
      int64_t n;
      float *w = params(net, &n);
      set_params(alone, w);
      free(w);
    }
    const int32_t *mine = rows + ((k - 1) * size + rank) * B;
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, mine, B, true) == 0, "step %d", k);
    CHECK(tsr__replicas_after_step(rep, k) == 0, "after step %d", k);
    int64_t n;
    float *w = params(net, &n);
    if (k <= 2) {
      CHECK(replicas_equal(w, n), "post-local:1,3, step %d: batch phase, replicas differ", k);
      free(w);
      continue;
    }
    tsr_net_train_step(alone, &train_set, mine, B, true);
    float *own = params(alone, &n), *mean = weighted_mean(own, n, NULL);
    bool averaged = (k - 2) % 3 == 0;
    double d = max_rel_diff(w, averaged ? mean : own, n);
    CHECK(d <= 1e-5, "post-local:1,3, step %d: %g off the %s", k, d,
          averaged ? "mean of the replicas" : "own replica");
    CHECK(replicas_equal(w, n) == averaged, "post-local:1,3, step %d: replicas %s", k,
          averaged ? "differ after an average" : "agree without one");
    set_params(alone, w);
    free(w), free(own), free(mean);
  }
  tsr__replicas_destroy(&rep);
  free(rows);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
}

/* --weighting steps without --outer (FedNova) over two averaging rounds of every=2 on 2 ranks
 * with uneven local steps: rank 1 takes no samples at step 2 (round 1: 2 and 1 steps), rank 0
 * none at step 3 (round 2: 1 and 2 steps). Each average is
 *   x' = x - tau_eff sum_q p_q (x - x_q) / tau_q,  tau_eff = sum_q p_q tau_q
 * from the anchor x, the weights every rank started the round from (the initial weights, then
 * the first average), p_q the round's samples share, x_q the replica trained alone through the
 * round; computed here in float64. An anchor left at the initial weights is far off in round 2
 * (checked). */
static void test_fednova(void) {
  CHECK(size == 2, "the steps here are for 2 ranks (mpirun -np 2), not %d", size);
  if (size != 2) return;
  enum { B = 16, K = 2, STEPS = 4 };
  load(B * size * STEPS);
  tsr_net_t *net = make_net(B, 0.9f), *alone = make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas_weighted(net, "every=2", false, true, NULL);
  int32_t *rows = batch_rows(B, STEPS);
  int64_t n;
  float *x0 = params(net, &n), *anchor = params(net, &n);
  for (int k = 1; k <= STEPS; k++) {
    int counts[MPI_TEST_MAX_RANKS] = {k == 3 ? 0 : B, k == 2 ? 0 : B};
    const int32_t *mine = rows + ((k - 1) * size + rank) * B;
    tsr__replicas_count(rep, counts);
    if (counts[rank] > 0) {
      CHECK(tsr_net_train_step(net, &train_set, mine, B, true) == 0, "step %d", k);
      CHECK(tsr_net_train_step(alone, &train_set, mine, B, true) == 0, "separate step %d", k);
    }
    CHECK(tsr__replicas_after_step(rep, k) == 0, "after step %d", k);
    if (k % K != 0) continue;
    const double tau[2] = {k == 2 ? 2 : 1, k == 2 ? 1 : 2}, p[2] = {tau[0] / 3, tau[1] / 3};
    double tau_eff = p[0] * tau[0] + p[1] * tau[1];
    float *w = params(net, &n), *own = params(alone, &n), *all = gather_all(own, n);
    float *want = malloc(sizeof(float) * (size_t)n), *stale = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      double s = 0;
      for (int q = 0; q < 2; q++)
        s += p[q] * ((double)anchor[i] - all[q * n + i]) / tau[q];
      want[i] = (float)(anchor[i] - tau_eff * s);
      /* an anchor left at x0: x0 + lambda (mean - x0) with the round's mean */
      double mean = 0, S = p[0] / tau[0] + p[1] / tau[1];
      for (int q = 0; q < 2; q++)
        mean += p[q] / tau[q] / S * all[q * n + i];
      stale[i] = (float)(x0[i] + tau_eff * S * (mean - x0[i]));
    }
    double d = max_rel_diff(w, want, n);
    CHECK(d <= 1e-4, "FedNova, average %d (step %d): weights vs the formula from the anchor: %g",
          k / K, k, d);
    CHECK(replicas_equal(w, n), "FedNova, step %d: replicas differ after the average", k);
    if (k > K) {
      double apart = max_rel_diff(stale, want, n);
      CHECK(apart > 1e-3, "FedNova, step %d: an anchor left at the start must be off (%g)", k,
            apart);
    }
    if (rank == 0)
      printf("fednova: average %d (taus %g, %g) vs the formula: max relative difference %.2e\n",
             k / K, tau[0], tau[1], d);
    memcpy(anchor, w, sizeof(float) * (size_t)n);
    set_params(alone, w);
    free(w), free(own), free(all), free(want), free(stale);
  }
  tsr__replicas_destroy(&rep);
  free(rows), free(x0), free(anchor);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
}

/* hier:2,6,2 with --weighting samples on 3 ranks (groups {0, 1} and {2}): a group average
 * weighs the samples its members took since the last average of all ranks, not since their
 * group last averaged, and an average of all ranks counts them from zero. Ranks 0 and 1 take
 * B, B/4 samples a step in steps 1-2 and 5-6, and B/4, B in steps 3-4 and 7-8; rank 2 takes B.
 * Group averages at steps 2, 4 and 8, one of all ranks at step 6:
 *   step 2: ranks 0 and 1 by 32 and 8 samples, 0.8 and 0.2;
 *   step 4: by 40 and 40 (steps 1-4), 0.5 and 0.5; counted since the group's average at step
 *           2 (steps 3-4, 8 and 32) they would be 0.2 and 0.8;
 *   step 6: every rank by steps 1-6: 72, 48 and 96 samples of 216;
 *   step 8: by steps 7-8 only, 0.2 and 0.8; counted across the average of all ranks they would
 *           be 0.5 and 0.5.
 * A user sees the difference as a group's model pulled towards the rank that trained least
 * since the last global average. */
static void test_hier_samples(void) {
  CHECK(size == 3, "the groups here are for 3 ranks (mpirun -np 3), not %d", size);
  if (size != 3) return;
  enum { B = 16, STEPS = 8 };
  load(B * size * STEPS);
  tsr_net_t *net = make_net(B, 0.9f), *alone = make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas(net, "hier:2,6,2", true);
  int32_t *rows = batch_rows(B, STEPS);
  static const double w2[MPI_TEST_MAX_RANKS] = {0.8, 0.2, 0},
                      w4[MPI_TEST_MAX_RANKS] = {0.5, 0.5, 0},
                      w6[MPI_TEST_MAX_RANKS] = {72.0 / 216, 48.0 / 216, 96.0 / 216},
                      w8[MPI_TEST_MAX_RANKS] = {0.2, 0.8, 0};
  for (int k = 1; k <= STEPS; k++) {
    bool first = (k - 1) % 4 < 2; /* steps 1-2 and 5-6 */
    int counts[MPI_TEST_MAX_RANKS] = {first ? B : B / 4, first ? B / 4 : B, B};
    const int32_t *mine = rows + ((k - 1) * size + rank) * B;
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, mine, counts[rank], true) == 0, "step %d", k);
    CHECK(tsr__replicas_after_step(rep, k) == 0, "after step %d", k);
    CHECK(tsr_net_train_step(alone, &train_set, mine, counts[rank], true) == 0, "alone %d", k);
    if (k % 2) continue;
    int64_t n;
    float *w = params(net, &n), *own = params(alone, &n);
    const double *weight = k == 2 ? w2 : k == 4 ? w4 : k == 6 ? w6 : w8;
    /* what a group average counting from the wrong point would give (steps 4 and 8) */
    const double *other = k == 4 ? w8 : w4;
    float *mean = weighted_mean(own, n, weight), *wrong = weighted_mean(own, n, other);
    const float *want = rank == 2 && k != 6 ? own : mean; /* rank 2 is alone in its group */
    double d = max_rel_diff(w, want, n);
    CHECK(d <= 1e-5, "hier:2,6,2 --weighting samples, step %d, rank %d: %g off the weighted mean",
          k, rank, d);
    if ((k == 4 || k == 8) && rank < 2) {
      double apart = max_rel_diff(wrong, want, n);
      CHECK(apart > 1e-3,
            "step %d: the samples since the last average of all ranks must tell from those "
            "counted %s (%g apart)",
            k, k == 4 ? "since the group's average at step 2" : "across the global average", apart);
      CHECK(max_rel_diff(w, wrong, n) > 1e-4,
            "step %d, rank %d: the group average weighed the samples counted %s", k, rank,
            k == 4 ? "since the group's own last average" : "across the global average");
    }
    if (rank == 0)
      printf("hier samples: step %d: max relative difference to the sample-weighted mean %.2e\n", k,
             d);
    set_params(alone, w);
    free(w), free(own), free(mean), free(wrong);
  }
  tsr__replicas_destroy(&rep);
  free(rows);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
}

/* Every parameter's optimizer state matrix s, concatenated in the net's order. */
static float *optimizer_state(tsr_net_t *net, int s, int64_t *count) {
  int64_t total = tsr_net_param_count(net), off = 0;
  float *all = malloc(sizeof(float) * (size_t)total);
  for (int l = 0; l < net->n_layers; l++)
    for (int k = 0; k < net->layers[l].nparams; k++) {
      const tsr_tiles_t *st = tsr__optim_state(net->optim, net->layers[l].params[k].index, s);
      CHECK(tsr_tiles_read(st, all + off) == 0, "read state %d of layer %d", s, l + 1);
      off += tsr_tiles_rows(st) * tsr_tiles_cols(st);
    }
  *count = total;
  return all;
}

/* post-local:1,3 with SGD momentum 0.9, then with Adam: in epoch 1 the optimizer state is
 * sharded (each chunk's on its home); at the switch every rank gets the whole of it, equal on
 * every rank and equal to the state of one process that took the same steps with the global
 * batch. */
static void test_postlocal_state(void) {
  enum { B = 16, STEPS = 2 };
  load(B * size * STEPS);
  for (int adam = 0; adam < 2; adam++) {
    tsr_net_opts_t o;
    tsr_net_opts_init(&o);
    o.opt.momentum = 0.9f, o.opt.lr = 0.05f;
    if (adam) tsr_optimizer_init(&o.opt, "adam", NULL);
    const char *name = adam ? "adam" : "sgd momentum 0.9";
    tsr_net_t *net = make_net_opt(B, &o.opt);
    tsr_replicas_t *rep = replicas(net, "post-local:1,3", false);
    int32_t *rows = batch_rows(B, STEPS);
    int counts[MPI_TEST_MAX_RANKS];
    equal_counts(counts, B);
    CHECK(tsr__replicas_epoch_begin(rep, 1, 0) == 0, "epoch 1 begins");
    for (int k = 1; k <= STEPS; k++) {
      tsr__replicas_count(rep, counts);
      CHECK(tsr_net_train_step(net, &train_set, rows + ((k - 1) * size + rank) * B, B, true) == 0,
            "step %d", k);
      CHECK(tsr__replicas_after_step(rep, k) == 0, "after step %d", k);
    }
    CHECK(tsr__replicas_epoch_begin(rep, 2, STEPS) == 0, "epoch 2 begins: the switch");
    CHECK(tsr__progress_wait_all() == 0, "wait");
    tsr_net_t *one = NULL;
    if (rank == 0) {
      one = make_net_opt(B * size, &o.opt);
      for (int k = 0; k < STEPS; k++)
        tsr_net_train_step(one, &train_set, rows + k * size * B, B * size, true);
    }
    for (int s = 0; s < tsr__optim_nstate(net->optim); s++) {
      int64_t n;
      float *st = optimizer_state(net, s, &n);
      CHECK(replicas_equal(st, n),
            "post-local, %s: optimizer state %d differs across ranks "
            "after the switch",
            name, s);
      if (rank == 0) {
        float *ref = optimizer_state(one, s, &n);
        double d = max_rel_diff(st, ref, n), zero = 0;
        for (int64_t i = 0; i < n; i++)
          zero = fmax(zero, fabs(ref[i]));
        CHECK(d <= 1e-4,
              "post-local, %s: optimizer state %d after the switch vs one process "
              "with the global batch: %g",
              name, s, d);
        CHECK(zero > 1e-6,
              "post-local, %s: the state must not be zero (%g) for the check to mean "
              "much",
              name, zero);
        printf("postlocal state, %s, state %d: max relative difference to one process %.2e\n", name,
               s, d);
        free(ref);
      }
      free(st);
    }
    tsr__replicas_destroy(&rep);
    free(rows);
    if (one) tsr_net_destroy(&one);
    tsr_net_destroy(&net);
  }
}

/* --sync epoch=2 over 3 epochs (not a multiple of 2), unshuffled: the replicas average after
 * epoch 2 and, the run ending, after epoch 3 (docs/distributed.md: every n epochs and at the
 * end), not after epoch 1. Replicas trained alone through epochs 1-2, averaged, then through
 * epoch 3 and averaged again give the weights; averaging after epoch 1 too (epoch) is far off. */
static void test_epoch_n(void) {
  enum { B = 16, STEPS = 3 };
  load(B * STEPS * size);
  tsr_net_t *avg = make_net(B, 0.9f), *every = make_net(B, 0.9f), *alone = make_net(B, 0.9f);
  train_with(avg, "epoch=2", (run_t){.epochs = 3});
  train_with(every, "epoch", (run_t){.epochs = 3});
  int64_t n;
  train_with(alone, "none", (run_t){.epochs = 2});
  float *own = params(alone, &n), *mean = weighted_mean(own, n, NULL);
  set_params(alone, mean);
  free(own), free(mean);
  train_with(alone, "none", (run_t){.epochs = 1});
  own = params(alone, &n), mean = weighted_mean(own, n, NULL);
  float *w = params(avg, &n), *w1 = params(every, &n);
  CHECK(replicas_equal(w, n), "epoch=2 over 3 epochs: the replicas differ at the end");
  double d = max_rel_diff(w, mean, n), apart = max_rel_diff(w1, mean, n);
  CHECK(d <= 1e-5, "epoch=2 over 3 epochs: weights vs averages after epochs 2 and 3: %g", d);
  CHECK(apart > 1e-3, "averaging after every epoch must end elsewhere (%g)", apart);
  if (rank == 0)
    printf("epoch=2 over 3 epochs: max relative difference to averages after epochs 2 and 3: "
           "%.2e\n",
           d);
  free(own), free(mean), free(w), free(w1);
  tsr_net_destroy(&avg), tsr_net_destroy(&every), tsr_net_destroy(&alone);
}

/* Batchnorm's running statistics: under every=K averaged with the weights (right after step K
 * the mean of the replicas trained alone, each rank's own at step K - 1); under batch each
 * replica's own (the weights agree, the statistics of their different batches do not). */
static void test_bnevery(void) {
  enum { B = 16, K = 3 };
  net_model = "[a]\ntype = dense\nunits = 24\n[bn]\ntype = batchnorm\nactivation = relu\n"
              "[out]\ntype = dense\nunits = 10\n";
  load(B * size * 2 * K);
  tsr_net_t *net = make_net(B, 0.9f), *alone = make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas(net, "every=3", false);
  int32_t *rows = batch_rows(B, 2 * K);
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  for (int k = 1; k <= 2 * K; k++) {
    step_pair(rep, net, alone, rows, B, k, counts);
    if (k % K != 0 && k % K != K - 1) continue;
    int64_t n, nb;
    float *w = params(net, &n), *b = buffers(net, &nb, NULL), *own = buffers(alone, &nb, NULL);
    if (k % K == 0) {
      float *mean = weighted_mean(own, nb, NULL);
      double d = max_rel_diff(b, mean, nb);
      CHECK(d <= 1e-5, "every=%d, step %d: running statistics vs the replicas' mean: %g", K, k, d);
      CHECK(replicas_equal(b, nb), "every=%d, step %d: running statistics differ", K, k);
      set_params(alone, w), buffers(alone, &nb, b);
      free(mean);
    } else {
      double d = max_rel_diff(b, own, nb);
      CHECK(d <= 1e-6, "every=%d, step %d: running statistics must be this rank's (%g)", K, k, d);
      CHECK(!replicas_equal(b, nb), "every=%d, step %d: running statistics agree already", K, k);
    }
    free(w), free(b), free(own);
  }
  tsr__replicas_destroy(&rep);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
  net = make_net(B, 0.9f);
  rep = replicas(net, "batch", false);
  for (int k = 1; k <= K; k++) {
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, rows + ((k - 1) * size + rank) * B, B, true) == 0,
          "batch step %d", k);
    CHECK(tsr__replicas_after_step(rep, k) == 0, "after batch step %d", k);
  }
  tsr_net_wait(net, 0);
  int64_t n, nb;
  float *w = params(net, &n), *b = buffers(net, &nb, NULL);
  CHECK(replicas_equal(w, n), "batch: the weights differ across replicas");
  CHECK(!replicas_equal(b, nb), "batch: every replica's running statistics are the same");
  free(w), free(b), free(rows);
  tsr__replicas_destroy(&rep);
  tsr_net_destroy(&net);
  net_model = NULL;
}

/* grow=K averages exactly after steps K, 3K and 7K (the mean of the replicas) and at no other
 * step (each rank keeps its own replica), and a run ends with one more average unless its last
 * step averaged: 6 steps of grow=2 average twice (steps 2 and 6), 7 steps three times. */
static void test_grow(void) {
  enum { B = 16, K = 2, STEPS = 7 };
  load(B * size * STEPS);
  tsr_net_t *net = make_net(B, 0.9f), *alone = make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas(net, "grow=2", false);
  int32_t *rows = batch_rows(B, STEPS);
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  for (int k = 1; k <= STEPS; k++) {
    step_pair(rep, net, alone, rows, B, k, counts);
    bool due = k == K || k == 3 * K;
    int64_t n;
    float *w = params(net, &n), *own = params(alone, &n);
    if (due) {
      float *mean = weighted_mean(own, n, NULL);
      double d = max_rel_diff(w, mean, n);
      CHECK(d <= 1e-5, "grow=%d, step %d: weights vs the mean of the replicas: %g", K, k, d);
      CHECK(replicas_equal(w, n), "grow=%d, step %d: replicas differ after averaging", K, k);
      set_params(alone, w); /* the average as the engine rounded it, so the next steps compare */
      free(mean);
    } else {
      double d = max_rel_diff(w, own, n);
      CHECK(d <= 1e-6, "grow=%d, step %d: weights must still be this rank's own (%g off)", K, k, d);
      CHECK(!replicas_equal(w, n), "grow=%d, step %d: replicas agree without an average", K, k);
    }
    free(w), free(own);
  }
  tsr__replicas_destroy(&rep);
  free(rows);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
  for (int steps = 6; steps <= 7; steps++) {
    load(B * size * steps);
    tsr_net_t *one = make_net(B, 0.9f);
    tsr_epoch_stats_t st = {0};
    train_with(one, "grow=2",
               (run_t){.epochs = 1, .shuffle = true, .on_epoch = keep_stats, .ctx = &st});
    if (rank == 0)
      CHECK(st.averages == (steps == 6 ? 2 : 3), "grow=2 over %d steps: %lld averages, want %d",
            steps, (long long)st.averages, steps == 6 ? 2 : 3);
    tsr_net_destroy(&one);
  }
}

/* epoch on 1,000 samples. */
static void check_epoch(void) {
  test_epoch(1000);
}

const mpi_check_t mpi_checks[] = {
    {"epoch", check_epoch, 0},
    {"every", test_every, 0},
    {"weighted", test_weighted, 0},
    {"deterministic", test_deterministic, 0},
    {"uneven", test_uneven, 0},
    {"outer", test_outer, 0},
    {"hier", test_hier, 0},
    {"hiersamples", test_hier_samples, 0},
    {"postlocal", test_postlocal, 0},
    {"postlocalstate", test_postlocal_state, 0},
    {"fednova", test_fednova, 0},
    {"epochn", test_epoch_n, 0},
    {"bnevery", test_bnevery, 0},
    {"grow", test_grow, 0},
    {NULL, NULL, 0},
};
