/* async-epoch under mpirun, mpirun -np P test_mpi_async CHECK:
 *   async    in deterministic mode it equals the folds global = (global + w_q) / 2 applied in
 *            rank order, each rank going on from its own fold, then the final uniform average
 *   asyncbn  batchnorm's running statistics are folded the same way, beside the weights
 * (common.h: the command, its output.) */
#include "mpi/common.h"

/* async-epoch, deterministic, unshuffled: at each epoch end, for q = 0, 1, ...: global =
 * 0.5 w_q + 0.5 global (float32, as the fold computes it), and rank q goes on from that
 * result; global starts as rank 0's initial weights; after the last epoch, the uniform average
 * of the ranks' fold results in rank order. Every rank trains a separate replica through the
 * same steps and computes all of this itself. */
static void test_async(void) {
  enum { B = 32, STEPS = 3, EPOCHS = 2 };
  load(B * STEPS * size); /* shards of B STEPS samples: rank q takes rows q B STEPS ... */
  tsr_net_t *net = make_net(B, 0.9f);
  train_with(net, "async-epoch", (run_t){.epochs = EPOCHS, .deterministic = true});
  tsr_net_t *alone = make_net(B, 0.9f);
  int64_t n;
  float *global = params(alone, &n), *snaps = malloc(sizeof(float) * (size_t)(n * size));
  float *trained = NULL; /* the replicas' weights before the last folds */
  for (int e = 1; e <= EPOCHS; e++) {
    shard_epoch(alone, B, STEPS);
    float *own = params(alone, &n), *all = gather_all(own, n);
    for (int q = 0; q < size; q++)
      for (int64_t i = 0; i < n; i++)
        snaps[q * n + i] = global[i] = 0.5f * all[q * n + i] + 0.5f * global[i];
    set_params(alone, snaps + rank * n);
    free(trained);
    trained = weighted_mean(own, n, NULL);
    free(own), free(all);
  }
  float *want = malloc(sizeof(float) * (size_t)n), uniform = (float)(1.0 / size);
  for (int64_t i = 0; i < n; i++) {
    want[i] = uniform * snaps[i];
    for (int q = 1; q < size; q++)
      want[i] = uniform * snaps[q * n + i] + want[i];
  }
  float *w = params(net, &n);
  double d = max_rel_diff(w, want, n), apart = max_rel_diff(trained, want, n);
  CHECK(d <= 1e-6, "async-epoch vs the folds in rank order: max relative difference %g", d);
  CHECK(apart > 1e-3,
        "the folds must differ from a plain average of the replicas (%g) for the check to mean "
        "much",
        apart);
  if (rank == 0) printf("async: max relative difference to the folds in rank order: %.2e\n", d);
  free(global), free(snaps), free(want), free(w), free(trained);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
}

/* The fold of the weights and, beside it, of batchnorm's running statistics (a net with a
 * batchnorm layer): each replica trains an epoch from its own fold's result, then, for q = 0,
 * 1, ...: global = 0.5 x_q + 0.5 global for the weights and for the statistics alike, each
 * global starting as rank 0's initial values; after the last epoch the uniform average of both.
 * Without the statistics' fold each replica would go on from its own statistics. */
static void test_async_bn(void) {
  enum { B = 16, STEPS = 3, EPOCHS = 2 };
  net_model = "[a]\ntype = dense\nunits = 24\n[bn]\ntype = batchnorm\nactivation = relu\n"
              "[out]\ntype = dense\nunits = 10\n";
  load(B * STEPS * size);
  tsr_net_t *net = make_net(B, 0.9f);
  train_with(net, "async-epoch", (run_t){.epochs = EPOCHS, .deterministic = true});
  tsr_net_t *alone = make_net(B, 0.9f);
  int64_t n, nb;
  float *global = params(alone, &n), *bglobal = buffers(alone, &nb, NULL);
  float *snaps = malloc(sizeof(float) * (size_t)(n * size));
  float *bsnaps = malloc(sizeof(float) * (size_t)(nb * size));
  float *kept = NULL; /* the replicas' own statistics before the last folds, averaged */
  for (int e = 1; e <= EPOCHS; e++) {
    shard_epoch(alone, B, STEPS);
    float *own = params(alone, &n), *all = gather_all(own, n);
    float *bown = buffers(alone, &nb, NULL), *ball = gather_all(bown, nb);
    for (int q = 0; q < size; q++) {
      for (int64_t i = 0; i < n; i++)
        snaps[q * n + i] = global[i] = 0.5f * all[q * n + i] + 0.5f * global[i];
      for (int64_t i = 0; i < nb; i++)
        bsnaps[q * nb + i] = bglobal[i] = 0.5f * ball[q * nb + i] + 0.5f * bglobal[i];
    }
    set_params(alone, snaps + rank * n);
    buffers(alone, &nb, bsnaps + rank * nb);
    free(kept);
    kept = weighted_mean(bown, nb, NULL);
    free(own), free(all), free(bown), free(ball);
  }
  float *want = malloc(sizeof(float) * (size_t)n), *bwant = malloc(sizeof(float) * (size_t)nb);
  ordered_mean(snaps, n, false, want);
  ordered_mean(bsnaps, nb, false, bwant);
  float *w = params(net, &n), *b = buffers(net, &nb, NULL);
  double d = max_rel_diff(w, want, n), db = max_rel_diff(b, bwant, nb);
  double apart = max_rel_diff(kept, bwant, nb);
  CHECK(d <= 1e-6, "async-epoch with batchnorm: weights vs the folds in rank order: %g", d);
  CHECK(db <= 1e-6, "async-epoch: running statistics vs their folds in rank order: %g", db);
  CHECK(apart > 1e-3, "the folded statistics must differ from the replicas' own (%g)", apart);
  if (rank == 0)
    printf("async bn: max relative difference to the folds, weights %.2e, statistics %.2e\n", d,
           db);
  free(global), free(bglobal), free(snaps), free(bsnaps), free(kept), free(want), free(bwant);
  free(w), free(b);
  tsr_net_destroy(&net), tsr_net_destroy(&alone);
  net_model = NULL;
}

const mpi_check_t mpi_checks[] = {
    {"async", test_async, 0},
    {"asyncbn", test_async_bn, 0},
    {NULL, NULL, 0},
};
