/* Data-parallel training under mpirun, one check per invocation:
 *   test_mpi batch          2 ranks with batch B match one process with batch 2B
 *   test_mpi epoch          epoch averaging equals the mean of separately trained replicas
 *   test_mpi async          async-epoch finishes, replicas agree, the model evaluates well
 *   test_mpi deterministic  two runs with the same seed give bitwise-identical weights
 *   test_mpi uneven         shards of unequal size (3 ranks) never hang, every policy
 * An optional second argument, thread or worker, says who makes StarPU-MPI
 * progress (tsr_mpi_progress_t); the default is auto.
 * Prints "N passed, M failed" and exits non-zero on a failure. The test may
 * use plain MPI to compare ranks; the engine does not. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/replicas.h"
#include "tessera/tessera.h"

static int passed, failed, rank, size;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (cond) {                                                                                    \
      passed++;                                                                                    \
    } else {                                                                                       \
      failed++;                                                                                    \
      fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__);                          \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

static tsr_dataset_t train_set, test_set;

static void load(int64_t n) {
  tsr_errbuf_t err = {""};
  const char *dir = getenv("TSR_DATA_DIR") ? getenv("TSR_DATA_DIR") : TSR_DEFAULT_DATA_DIR;
  if (tsr_dataset_load_dir(&train_set, &test_set, dir, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 77);
  }
  tsr_dataset_truncate(&train_set, n);
  tsr_dataset_truncate(&test_set, 2000);
  float mean, std;
  tsr_dataset_stats(&train_set, &mean, &std);
  tsr_dataset_normalize(&train_set, mean, std);
  tsr_dataset_normalize(&test_set, mean, std);
}

static tsr_net_t *make_net(int batch, float momentum) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  tsr_model_parse(&spec, "mlp:48,24", train_set.classes, &err);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = batch, o.seed = 3, o.opt.momentum = momentum, o.opt.lr = 0.05f;
  o.tile_rows = 16, o.tile_cols = 16; /* several tiles per parameter: several home ranks */
  tsr_net_t *net = NULL;
  if (tsr_net_create(&net, &spec, (int)train_set.features, train_set.classes, &o, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return net;
}

/* All parameters, concatenated. */
static float *params(tsr_net_t *net, int64_t *count) {
  int64_t total = tsr_net_param_count(net), off = 0;
  float *all = malloc(sizeof(float) * (size_t)total);
  for (int p = 0; p < tsr_net_n_params(net); p++) {
    int64_t r, c;
    tsr_net_param_info(net, p, &r, &c);
    tsr_net_param_get(net, p, all + off);
    off += r * c;
  }
  *count = total;
  return all;
}

static double max_rel_diff(const float *a, const float *b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / (1e-3 + fabs((double)b[i]));
    worst = d > worst ? d : worst;
  }
  return worst;
}

/* Replicas agree bit for bit: every rank compares with rank 0's copy. */
static bool replicas_equal(const float *w, int64_t n) {
  float *ref = malloc(sizeof(float) * (size_t)n);
  memcpy(ref, w, sizeof(float) * (size_t)n);
  MPI_Bcast(ref, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  int same = memcmp(ref, w, sizeof(float) * (size_t)n) == 0, all;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  free(ref);
  return all;
}

static void train(tsr_net_t *net, const char *policy, int epochs, bool deterministic) {
  tsr_sync_t sync;
  tsr_errbuf_t err = {""};
  tsr_sync_parse(&sync, policy, &err);
  sync.deterministic = deterministic;
  tsr_train_opts_t o;
  tsr_train_opts_init(&o);
  o.epochs = epochs, o.sync = &sync, o.lr_schedule = TSR_LR_CONSTANT, o.seed = 5;
  int rc = tsr_train(net, &train_set, NULL, &o, &err);
  CHECK(rc == 0, "tsr_train(%s): %s", policy, err.msg);
}

/* 2 ranks x batch B, gradients averaged, plain SGD == 1 process x batch 2B. */
static void test_batch(void) {
  const int B = 32, steps = 6;
  load(B * size * steps);
  tsr_net_t *net = make_net(B, 0.0f);
  tsr_sync_t sync;
  tsr_sync_parse(&sync, "batch", NULL);
  tsr_replicas_t *rep;
  tsr_errbuf_t err = {""};
  CHECK(tsr__replicas_create(&rep, net, &sync, &err) == 0, "%s", err.msg);
  int counts[64];
  int32_t rows[4096];
  for (int i = 0; i < B * size * steps; i++)
    rows[i] = (int32_t)((i * 37) % train_set.n);
  for (int k = 0; k < steps; k++) {
    for (int q = 0; q < size; q++)
      counts[q] = B;
    tsr__replicas_count(rep, counts);
    /* Step k's global batch is rows[k*size*B ...]; this rank takes its B. */
    CHECK(tsr_net_train_step(net, &train_set, rows + (k * size + rank) * B, B, true) == 0, "step");
  }
  tsr__replicas_destroy(&rep);
  int64_t n;
  float *w = params(net, &n);
  CHECK(replicas_equal(w, n), "replicas differ after batch averaging");
  if (rank == 0) {
    tsr_net_t *one = make_net(B * size, 0.0f);
    for (int k = 0; k < steps; k++)
      tsr_net_train_step(one, &train_set, rows + k * size * B, B * size, true);
    float *ref = params(one, &n);
    double d = max_rel_diff(w, ref, n);
    CHECK(d <= 1e-5, "2 ranks x batch %d vs 1 process x batch %d: max relative difference %g", B,
          B * size, d);
    printf("batch: max relative difference to one process with batch %d: %.2e\n", B * size, d);
    free(ref);
    tsr_net_destroy(&one);
  }
  free(w);
  tsr_net_destroy(&net);
}

/* One epoch with epoch averaging == the mean of replicas trained alone on the same shards. */
static void test_epoch(void) {
  load(1000);
  tsr_net_t *avg = make_net(32, 0.9f), *alone = make_net(32, 0.9f);
  train(avg, "epoch", 1, false);
  train(alone, "none", 1, false);
  int64_t n;
  float *w = params(avg, &n), *mine = params(alone, &n), *mean = malloc(sizeof(float) * (size_t)n);
  CHECK(replicas_equal(w, n), "replicas differ after epoch averaging");
  MPI_Allreduce(mine, mean, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int64_t i = 0; i < n; i++)
    mean[i] /= (float)size;
  double d = max_rel_diff(w, mean, n);
  CHECK(d <= 1e-5, "epoch-averaged weights vs mean of separate replicas: %g", d);
  double spread = max_rel_diff(mine, mean, n);
  CHECK(spread > 1e-3, "the separate replicas should differ (spread %g), else the test is vacuous",
        spread);
  if (rank == 0) printf("epoch: max relative difference to the mean of replicas: %.2e\n", d);
  free(w), free(mine), free(mean);
  tsr_net_destroy(&avg), tsr_net_destroy(&alone);
}

static void test_async(void) {
  load(4000);
  tsr_net_t *net = make_net(32, 0.9f);
  train(net, "async-epoch", 4, false);
  int64_t n;
  float *w = params(net, &n);
  CHECK(replicas_equal(w, n), "replicas differ after the final average");
  if (rank == 0) {
    double loss, acc;
    CHECK(tsr_evaluate(net, &test_set, &loss, &acc) == 0, "evaluate");
    CHECK(acc > 0.60 && isfinite(loss), "async-epoch model: accuracy %.4f loss %g", acc, loss);
    printf("async-epoch: test accuracy %.4f after 4 epochs on 4000 images\n", acc);
  }
  free(w);
  tsr_net_destroy(&net);
}

static void test_deterministic(void) {
  load(1000);
  const char *policies[] = {"batch", "every=3", "async-epoch"};
  for (int p = 0; p < 3; p++) {
    tsr_net_t *a = make_net(32, 0.9f), *b = make_net(32, 0.9f);
    train(a, policies[p], 2, true);
    train(b, policies[p], 2, true);
    int64_t n;
    float *wa = params(a, &n), *wb = params(b, &n);
    CHECK(memcmp(wa, wb, sizeof(float) * (size_t)n) == 0, "%s --deterministic: runs differ",
          policies[p]);
    free(wa), free(wb);
    tsr_net_destroy(&a), tsr_net_destroy(&b);
  }
}

static void test_uneven(void) {
  load(1001); /* 1001 = 333 + 334 + 334 on 3 ranks: shards of unequal size */
  const char *policies[] = {"batch", "every=4", "epoch", "async-epoch"};
  for (int p = 0; p < 4; p++) {
    tsr_net_t *net = make_net(32, 0.9f);
    train(net, policies[p], 2, false);
    int64_t n;
    float *w = params(net, &n);
    CHECK(replicas_equal(w, n), "%s: replicas differ at the end", policies[p]);
    free(w);
    tsr_net_destroy(&net);
  }
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3 ||
      (argc == 3 && strcmp(argv[2], "thread") != 0 && strcmp(argv[2], "worker") != 0)) {
    fprintf(stderr, "usage: mpirun -np P test_mpi batch|epoch|async|deterministic|uneven "
                    "[thread|worker]\n");
    return 2;
  }
  tsr_dist_start(&argc, &argv, true);
  rank = tsr_dist_rank(), size = tsr_dist_size();
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  ro.ncpus = 1;
  if (argc == 3)
    ro.mpi_progress =
        strcmp(argv[2], "thread") == 0 ? TSR_MPI_PROGRESS_THREAD : TSR_MPI_PROGRESS_WORKER;
  tsr_errbuf_t err = {""};
  if (tsr_runtime_init(&ro, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  if (argc == 3)
    CHECK(strcmp(tsr_runtime_mpi_progress(), argv[2]) == 0, "progress mode %s, asked for %s",
          tsr_runtime_mpi_progress(), argv[2]);
  if (strcmp(argv[1], "batch") == 0)
    test_batch();
  else if (strcmp(argv[1], "epoch") == 0)
    test_epoch();
  else if (strcmp(argv[1], "async") == 0)
    test_async();
  else if (strcmp(argv[1], "deterministic") == 0)
    test_deterministic();
  else if (strcmp(argv[1], "uneven") == 0)
    test_uneven();
  else
    CHECK(0, "unknown check %s", argv[1]);
  tsr_runtime_fini();
  tsr_dataset_fini(&train_set), tsr_dataset_fini(&test_set);
  int all_failed;
  MPI_Allreduce(&failed, &all_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%d passed, %d failed\n", passed, all_failed);
  tsr_dist_stop();
  return all_failed ? 1 : 0;
}
