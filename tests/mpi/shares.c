/* --shares under mpirun, checks of mpirun -np P test_mpi_shares CHECK:
 *   shares      ranks of different shares: batch equals one process on the global batches,
 *               weight averages the sample-weighted and FedNova formulas
 *   gridshares  --shares 3,1 on a 2x2 grid (one share per column) under batch equals one process
 *               on the global batches, and under epoch the sample-weighted and FedNova formulas
 *               over the columns' replicas
 * (common.h: the command, its output.) */
#include "mpi/common.h"

/* One process trained on the global batches of a run with shares (train_with's order: seed 5,
 * epoch 1 of n samples): step k's rows are every replica's part in replica order, replica q's
 * batch[q] rows from its shard at lo[q]. */
static void train_global_batches(tsr_net_t *one, int n, int replicas, const int *batch,
                                 const int *lo, int steps) {
  int global = 0;
  for (int q = 0; q < replicas; q++)
    global += batch[q];
  int32_t *order = malloc(sizeof(int32_t) * (size_t)n),
          *rows = malloc(sizeof(int32_t) * (size_t)global);
  tsr_dataset_epoch_order(order, n, 5, 1);
  for (int k = 0; k < steps; k++) {
    int taken = 0;
    for (int q = 0; q < replicas; q++)
      for (int i = 0; i < batch[q]; i++)
        rows[taken++] = order[lo[q] + k * batch[q] + i];
    tsr_net_train_step(one, &train_set, rows, taken, true);
  }
  free(order), free(rows);
}

/* What weight averaging should give from x0 and the replicas' weights x (replica q's at
 * [q n, (q + 1) n)) with samples p_q and local steps tau_q: the sample-weighted mean
 * sum_q p_q x_q, and FedNova's x0 - tau_eff sum_q p_q (x0 - x_q) / tau_q. */
static void weighted_formulas(const float *x0, const float *x, int64_t n, int replicas,
                              const double *p, const double *tau, float *by_samples,
                              float *fednova) {
  double tau_eff = 0;
  for (int q = 0; q < replicas; q++)
    tau_eff += p[q] * tau[q];
  for (int64_t i = 0; i < n; i++) {
    double s = 0, m = 0;
    for (int q = 0; q < replicas; q++)
      s += p[q] * ((double)x0[i] - x[q * n + i]) / tau[q], m += p[q] * x[q * n + i];
    fednova[i] = (float)(x0[i] - tau_eff * s), by_samples[i] = (float)m;
  }
}

/* --shares 2,1,1 on 3 ranks, by hand: the parts; batch averaging with per-rank batches (24, 12,
 * 12 of a global 48) equals one process on the global batches; epoch averaging on shards of 240,
 * 120 and 120 samples, weighted by samples, equals the weighted mean of replicas trained alone
 * on those shards, and weighted by steps (FedNova; ranks take 15, 8 and 8 steps) equals
 *   x' = x - tau_eff sum_q p_q (x - x_q) / tau_q,  tau_eff = sum_q p_q tau_q
 * computed here in float64 from the initial weights x and the replicas x_q. */
static void test_shares(void) {
  if (size != 3) {
    if (rank == 0) fprintf(stderr, "the shares check is written for 3 ranks\n");
    failed++;
    return;
  }
  if (rank == 0) {
    int64_t part[3];
    tsr_shares_split((const double[]){0.5, 0.25, 0.25}, 3, 48, 1, part);
    CHECK(part[0] == 24 && part[1] == 12 && part[2] == 12, "split 48: %lld %lld %lld",
          (long long)part[0], (long long)part[1], (long long)part[2]);
    /* 9.8, 0.1, 0.1: rank 0 gets the remainder (10, 0, 0), then ranks 1 and 2 one sample
     * each, taken from the largest part. */
    tsr_shares_split((const double[]){0.98, 0.01, 0.01}, 3, 10, 1, part);
    CHECK(part[0] == 8 && part[1] == 1 && part[2] == 1,
          "split 10 with a minimum of 1: %lld %lld "
          "%lld",
          (long long)part[0], (long long)part[1], (long long)part[2]);
    tsr_shares_split((const double[]){1.0 / 3, 1.0 / 3, 1.0 / 3}, 3, 10, 0, part);
    CHECK(part[0] == 4 && part[1] == 3 && part[2] == 3,
          "ties go to the lower rank: %lld %lld "
          "%lld",
          (long long)part[0], (long long)part[1], (long long)part[2]);
    int rows[3];
    tsr_shares_tile_rows((const int64_t[]){40, 20, 4}, 3, 32, 8, rows);
    CHECK(rows[0] == 10 && rows[1] == 5 && rows[2] == 1, "tile rows for 4 tiles: %d %d %d", rows[0],
          rows[1], rows[2]);
    /* A batch of 3 cannot make 4 tiles: 3 tiles each. */
    tsr_shares_tile_rows((const int64_t[]){5, 40, 3}, 3, 32, 8, rows);
    CHECK(rows[0] == 2 && rows[1] == 14 && rows[2] == 1, "tile rows for 3 tiles: %d %d %d", rows[0],
          rows[1], rows[2]);
  }
  enum { N = 480 };
  static const int batch[3] = {24, 12, 12}, lo[3] = {0, 240, 360};
  load(N);
  /* batch: each rank's net is built for its batch, one batch-row tile each. */
  int saved_rows = tile_rows;
  tile_rows = batch[rank];
  tsr_net_t *net = make_net(batch[rank], 0.9f);
  tile_rows = saved_rows;
  tsr_epoch_stats_t st = {0};
  train_with(net, "batch",
             (run_t){.epochs = 1,
                     .shuffle = true,
                     .lr_scaling = TSR_LR_SCALING_NONE,
                     .shares = "2,1,1",
                     .global_batch = 48,
                     .on_epoch = keep_stats,
                     .ctx = &st});
  int64_t n;
  float *w = params(net, &n);
  CHECK(replicas_equal(w, n), "batch with shares: replicas differ at the end");
  if (rank == 0) {
    /* Homes follow the shares: rank 0 homes half the chunks, so a step it sends |W| + (P - 2)
     * x |W| / 2 = 1.5 |W| (4/3 |W| with equal homes), within the chunks' granularity. */
    double per_step = (double)st.bytes_sent / 10.0 / ((double)n * sizeof(float));
    CHECK(fabs(per_step - 1.5) <= 0.05,
          "batch with shares 2,1,1: rank 0 sent %.3f |W| a step, "
          "want 1.5 (homes in proportion to the shares)",
          per_step);
    printf("shares: rank 0 sent %.3f |W| a step (homes follow the shares: 1.5)\n", per_step);
  }
  if (rank == 0) {
    tsr_net_t *one = make_net(48, 0.9f);
    train_global_batches(one, N, 3, batch, lo, 10);
    float *ref = params(one, &n);
    double d = max_rel_diff(w, ref, n);
    CHECK(d <= 1e-4, "batch with shares vs one process on the global batches: %g", d);
    printf("shares: batch with per-rank batches vs one process: max relative difference %.2e\n", d);
    free(ref);
    tsr_net_destroy(&one);
  }
  free(w);
  tsr_net_destroy(&net);

  /* epoch: the replicas alone on the same shards, then both weightings. */
  tsr_net_t *alone = make_net(16, 0.9f);
  float *x0 = params(alone, &n);
  train_with(alone, "none", (run_t){.epochs = 1, .shuffle = true, .shares = "2,1,1"});
  float *mine = params(alone, &n), *all = gather_all(mine, n);
  const double p[3] = {0.5, 0.25, 0.25}, tau[3] = {15, 8, 8};
  float *fednova = malloc(sizeof(float) * (size_t)n),
        *by_samples = malloc(sizeof(float) * (size_t)n);
  weighted_formulas(x0, all, n, 3, p, tau, by_samples, fednova);
  for (int steps = 0; steps < 2; steps++) {
    net = make_net(16, 0.9f);
    train_with(net, "epoch",
               (run_t){.epochs = 1,
                       .shuffle = true,
                       .by_samples = true,
                       .by_steps = steps,
                       .shares = "2,1,1"});
    w = params(net, &n);
    CHECK(replicas_equal(w, n), "epoch with shares: replicas differ at the end");
    const float *want = steps ? fednova : by_samples;
    double d = max_rel_diff(w, want, n), apart = max_rel_diff(fednova, by_samples, n);
    CHECK(d <= 1e-4, "epoch with shares, --weighting %s: vs the formula: %g",
          steps ? "steps" : "samples", d);
    CHECK(apart > 1e-3, "FedNova and the sample-weighted mean must differ (%g) here", apart);
    if (rank == 0)
      printf("shares: epoch, --weighting %s vs its formula: max relative difference %.2e\n",
             steps ? "steps" : "samples", d);
    free(w);
    tsr_net_destroy(&net);
  }
  free(x0), free(mine), free(all), free(fednova), free(by_samples);
  tsr_net_destroy(&alone);
}

/* A grid net's parameters as its column holds them, whole, on every rank: the column's own
 * tiles summed over its ranks (a replicated parameter divided by its Pr copies); then every
 * column's, column c's at [c n, (c + 1) n). The caller frees. */
static float *column_params(tsr_net_t *net, int pr, int64_t *count) {
  int64_t total = tsr_net_param_count(net), off = 0;
  float *mine = calloc((size_t)total, sizeof(float)), *col = malloc(sizeof(float) * (size_t)total);
  for (int l = 0; l < net->n_layers; l++)
    for (int k = 0; k < net->layers[l].nparams; k++) {
      const tsr_tiles_t *w = net->layers[l].params[k].w;
      CHECK(tsr_tiles_read_owned(w, mine + off) == 0, "read layer %d parameter %d", l + 1, k);
      int64_t n = tsr_tiles_rows(w) * tsr_tiles_cols(w);
      bool sliced = net->layers[l].split && net->layers[l].lay->place != TSR_PLACE_BANDS;
      for (int64_t i = 0; !sliced && i < n; i++)
        mine[off + i] /= (float)pr;
      off += n;
    }
  MPI_Comm column;
  MPI_Comm_split(MPI_COMM_WORLD, rank / pr, rank, &column);
  MPI_Allreduce(mine, col, (int)total, MPI_FLOAT, MPI_SUM, column);
  MPI_Comm_free(&column);
  float *every = gather_all(col, total), *all = malloc(sizeof(float) * (size_t)(total * size / pr));
  for (int c = 0; c < size / pr; c++)
    memcpy(all + c * total, every + c * pr * total, sizeof(float) * (size_t)total);
  free(mine), free(col), free(every);
  *count = total;
  return all;
}

/* --shares under --grid 2x2: one share per grid column, whose ranks take its batch and shard
 * together. Under batch with shares 3,1 of a global batch of 16 the columns take 12 and 4 rows
 * a step and equal one process on the global batches; under epoch each column trains its shard
 * (240 and 80 samples: 15 and 5 steps of 16) and the average is the formula's, weighted by
 * samples or by steps (FedNova). */
static void test_grid_shares(void) {
  enum { N = 320, PR = 2 };
  if (size != 4) {
    if (rank == 0) fprintf(stderr, "the grid shares check is written for 4 ranks (2x2)\n");
    failed++;
    return;
  }
  static const int batch[2] = {12, 4}, lo[2] = {0, 240};
  int column = rank / PR;
  load(N);
  int saved_rows = tile_rows;
  tile_rows = batch[column]; /* one batch-row tile each, as tsr_shares_tile_rows makes them */
  tsr_net_t *net = make_grid_net(batch[column], PR, false);
  tile_rows = saved_rows;
  train_with(net, "batch",
             (run_t){.epochs = 1,
                     .shuffle = true,
                     .deterministic = true,
                     .lr_scaling = TSR_LR_SCALING_NONE,
                     .shares = "3,1",
                     .global_batch = 16});
  int64_t n;
  float *w = grid_params(net, 2, &n);
  tsr_net_destroy(&net);
  if (rank == 0) {
    tsr_net_t *one = make_grid_net(16, 1, false);
    train_global_batches(one, N, 2, batch, lo, 20);
    float *ref = params(one, &n);
    double d = max_rel_diff(w, ref, n);
    CHECK(d <= 1e-4, "--grid 2x2 batch with shares 3,1 vs one process on the global batches: %g",
          d);
    printf("grid shares: batch, columns of 12 and 4 rows vs one process of 16: %.2e\n", d);
    free(ref);
    tsr_net_destroy(&one);
  }
  free(w);
  /* epoch: the columns alone on the same shards, then both weightings. */
  tsr_net_t *alone = make_grid_net(16, PR, false);
  float *x0 = grid_params(alone, 2, &n);
  train_with(alone, "none", (run_t){.epochs = 1, .shuffle = true, .shares = "3,1"});
  float *cols = column_params(alone, PR, &n);
  tsr_net_destroy(&alone);
  const double p[2] = {0.75, 0.25}, column_steps[2] = {15, 5};
  float *fednova = malloc(sizeof(float) * (size_t)n),
        *by_samples = malloc(sizeof(float) * (size_t)n);
  weighted_formulas(x0, cols, n, 2, p, column_steps, by_samples, fednova);
  for (int steps = 0; steps < 2; steps++) {
    net = make_grid_net(16, PR, false);
    train_with(
        net, "epoch",
        (run_t){
            .epochs = 1, .shuffle = true, .by_samples = true, .by_steps = steps, .shares = "3,1"});
    float *got = column_params(net, PR, &n);
    tsr_net_destroy(&net);
    CHECK(memcmp(got, got + n, sizeof(float) * (size_t)n) == 0,
          "--grid 2x2 epoch with shares: the columns differ at the end");
    const float *want = steps ? fednova : by_samples;
    double d = max_rel_diff(got, want, n), apart = max_rel_diff(fednova, by_samples, n);
    CHECK(d <= 1e-4, "--grid 2x2 epoch with shares 3,1, --weighting %s: vs the formula: %g",
          steps ? "steps" : "samples", d);
    CHECK(apart > 1e-3, "FedNova and the sample-weighted mean must differ (%g) here", apart);
    if (rank == 0)
      printf("grid shares: epoch, --weighting %s vs its formula: max relative difference %.2e\n",
             steps ? "steps" : "samples", d);
    free(got);
  }
  free(x0), free(cols), free(fednova), free(by_samples);
}

const mpi_check_t mpi_checks[] = {
    {"shares", test_shares, 0},
    {"gridshares", test_grid_shares, MPI_CHECK_COMM_STATS},
    {NULL, NULL, 0},
};
