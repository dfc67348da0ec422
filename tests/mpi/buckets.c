/* Buckets under mpirun (--bucket-mb), mpirun -np P test_mpi_buckets buckets: one bucket a home
 * sends 2 (P - 1) messages a step, 4 KiB buckets between that and flat's one a chunk, the weights
 * within 1e-5 of flat's, and deterministic batch and every=2 --sync-state bit for bit as flat,
 * flat and with two levels. (common.h: the command, its output.) */
#include "mpi/common.h"

/* --bucket-mb on 4 and 8 ranks, flat, 16x16 tiles (each rank homes dozens of chunks):
 *   - --sync batch with buckets of 25 MiB (one a home): a rank sends 2 (P - 1) messages per step,
 *     its bucket of every other home's chunks to that home and its own bucket's result to every
 *     other rank, where flat sends one a chunk; StarPU-MPI counts the same bytes as flat's (the
 *     same chunks travel) and the engine's count of them;
 *   - buckets of 4 KiB: more messages than one a home, fewer than one a chunk;
 *   - two levels, nodes of P / 2, 25 MiB: StarPU-MPI counts the same bytes between the nodes as
 *     without buckets, and the busiest rank sends 2 (G - 1) + 2 (N - 1) messages a step;
 *   - the weights end where flat's (two levels': without buckets) do (1e-5 relative: the copies
 *     are added as they arrive), and in deterministic mode bit for bit, after an epoch of batch
 *     and of every=2 with --sync-state, flat and two-level, since each float sums in the same
 *     order. */
static void test_buckets(void) {
  load(16 * size * 3);
  levels_run_t flat = levels_run(TSR_ALLREDUCE_FLAT, 1, 16, 16, 1);
  bucket_mb = 25;
  levels_run_t one = levels_run(TSR_ALLREDUCE_FLAT, 1, 16, 16, 1);
  bucket_mb = 4.0f / 1024;
  levels_run_t small = levels_run(TSR_ALLREDUCE_FLAT, 1, 16, 16, 1);
  bucket_mb = 0;
  CHECK(one.messages == 2.0 * (size - 1),
        "--bucket-mb 25: the busiest rank sent %.0f messages per step, 2 (P - 1) = %d",
        one.messages, 2 * (size - 1));
  CHECK(flat.messages > 4.0 * one.messages,
        "flat sends one message a chunk: %.0f per step, buckets %.0f (the check needs many chunks)",
        flat.messages, one.messages);
  CHECK(small.messages > one.messages && small.messages < flat.messages,
        "--bucket-mb 4 KiB: %.0f messages per step, between one a home (%.0f) and flat (%.0f)",
        small.messages, one.messages, flat.messages);
  CHECK(
      fabs(one.rank_bytes - flat.rank_bytes) <= 1e-3 * flat.rank_bytes &&
          fabs(small.rank_bytes - flat.rank_bytes) <= 1e-3 * flat.rank_bytes,
      "the same chunks travel: StarPU-MPI counted %.0f and %.0f bytes per step with buckets, %.0f "
      "flat",
      one.rank_bytes, small.rank_bytes, flat.rank_bytes);
  double d = fmax(max_rel_diff(one.w, flat.w, flat.n), max_rel_diff(small.w, flat.w, flat.n));
  CHECK(d <= 1e-5, "--sync batch in buckets: the weights end %g (relative) from flat's", d);
  if (rank == 0)
    printf("--bucket-mb, %d ranks, 16x16 tiles, per step of batch: the busiest rank sent %.0f "
           "messages with one bucket a home, %.0f with 4 KiB buckets, %.0f flat; %.0f bytes all "
           "three (StarPU-MPI)\n",
           size, one.messages, small.messages, flat.messages, flat.rank_bytes);
  free(flat.w), free(one.w), free(small.w);
  /* Two levels, nodes of P / 2: buckets between the nodes carry the same bytes in fewer
   * messages. */
  const int g = size / 2;
  levels_run_t two = levels_run(TSR_ALLREDUCE_TWO_LEVEL, g, 16, 16, 1);
  bucket_mb = 25;
  levels_run_t twob = levels_run(TSR_ALLREDUCE_TWO_LEVEL, g, 16, 16, 1);
  bucket_mb = 0;
  CHECK(two.node_bytes > 0 && fabs(twob.node_bytes - two.node_bytes) <= 1e-3 * two.node_bytes,
        "two levels: StarPU-MPI counted %.0f bytes a step between nodes with buckets, %.0f without",
        twob.node_bytes, two.node_bytes);
  /* One node bucket per index and one bucket per home: a rank sends its node bucket to each of
   * the node's G - 1 other local homes and as one spreads its own back to them, and as a local
   * home sends its node's bucket to the other N - 1 nodes' homes of its index and as a home the
   * result back: 2 (G - 1) + 2 (N - 1). */
  CHECK(twob.messages == 2.0 * (g - 1) + 2.0 * (size / g - 1) && two.messages > 4 * twob.messages,
        "two levels: %.0f messages a step with buckets (2 (G - 1) + 2 (N - 1) = %d), %.0f without",
        twob.messages, 2 * (g - 1) + 2 * (size / g - 1), two.messages);
  double d2 = max_rel_diff(twob.w, two.w, two.n);
  CHECK(d2 <= 1e-5, "two levels in buckets: the weights end %g (relative) from without", d2);
  if (rank == 0)
    printf("--bucket-mb 25, two levels, 2 nodes of %d: the busiest node sent %.0f bytes a step to "
           "the other (%.0f without buckets), the busiest rank %.0f messages (%.0f without)\n",
           g, twob.node_bytes, two.node_bytes, twob.messages, two.messages);
  free(two.w), free(twob.w);
  /* Deterministic mode: batch, and weight averages with state (momentum), flat and two-level. */
  static const char *const policies[] = {"batch", "every=2"};
  for (int c = 0; c < 4; c++) {
    tsr_net_t *bucketed = make_net(32, 0.9f), *chunked = make_net(32, 0.9f);
    run_t run = {.epochs = 1, .deterministic = true, .shuffle = true, .average_state = c % 2};
    allreduce = c < 2 ? TSR_ALLREDUCE_FLAT : TSR_ALLREDUCE_TWO_LEVEL, node_size = c < 2 ? 0 : g;
    bucket_mb = 4.0f / 1024;
    train_with(bucketed, policies[c % 2], run);
    bucket_mb = 0;
    train_with(chunked, policies[c % 2], run);
    int64_t n;
    float *a = params(bucketed, &n), *b = params(chunked, &n);
    CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0,
          "--sync %s --allreduce %s --deterministic: the weights in buckets differ from without",
          policies[c % 2], c < 2 ? "flat" : "two-level");
    CHECK(replicas_equal(a, n), "%s in buckets: the replicas differ at the end", policies[c % 2]);
    free(a), free(b);
    tsr_net_destroy(&bucketed), tsr_net_destroy(&chunked);
  }
  allreduce = TSR_ALLREDUCE_AUTO, node_size = 0;
  if (rank == 0)
    printf("--bucket-mb: batch %.1e from flat, %.1e from two levels without; deterministic batch "
           "and every=2 --sync-state end bit for bit as without buckets, flat and two-level\n",
           d, d2);
}

const mpi_check_t mpi_checks[] = {
    {"buckets", test_buckets, MPI_CHECK_COMM_STATS},
    {NULL, NULL, 0},
};
