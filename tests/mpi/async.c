/* async-epoch under mpirun, mpirun -np P test_mpi_async async: in deterministic mode it equals
 * the folds global = (global + w_q) / 2 applied in rank order, each rank going on from its own
 * fold, then the final uniform average. (common.h: the command, its output.) */
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

const mpi_check_t mpi_checks[] = {
    {"async", test_async, 0},
    {NULL, NULL, 0},
};
