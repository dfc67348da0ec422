/* Two-level averages under mpirun (--allreduce two-level, --node-size), mpirun -np P
 * test_mpi_twolevel twolevel: the bytes each node sends to other nodes (StarPU-MPI's count) at
 * most 1.05 x the ring's, no more messages than flat, the weights within 1e-5 of flat's, and
 * under --deterministic the float32 sum in node order bit for bit; under a grid each row on its
 * own nodes. (common.h: the command, its output.) */
#include "mpi/common.h"

/* The float32 average of every rank's x (all: [size][n]) in --allreduce two-level's order for
 * nodes of g consecutive ranks: each node's w x_q in rank order, then the nodes' sums in node
 * order (a node of one rank: its w x_q itself). */
static void node_ordered_mean(const float *all, int64_t n, int g, float *out) {
  float w = (float)(1.0 / size);
  for (int64_t i = 0; i < n; i++) {
    float acc = 0;
    for (int a = 0; a < size; a += g) {
      float s = w * all[a * n + i];
      for (int q = a + 1; q < a + g && q < size; q++)
        s = w * all[q * n + i] + s;
      acc = a == 0 ? s : s + acc;
    }
    out[i] = acc;
  }
}

/* Two levels under --grid 2x(P/2), --node-size 4: each grid row averages its slice of the
 * dense layers over its own nodes (2 of its ranks a node, P/4 nodes). Per step of --sync batch:
 *   - the bytes a node sends to other nodes (StarPU-MPI's count) are at most 1.05 x the ring's
 *     2 (N - 1) / N |W| (the rows' slices together are the model once; the node's ranks of
 *     both rows send at once), and at least half of it; flat sends more;
 *   - every rank's bytes to other grid columns, StarPU-MPI's count, are what the engine counts
 *     (levels_run);
 *   - the weights end within 1e-5 of flat's. */
static void grid_two_level(void) {
  const int g = 4, nodes = size / g;
  levels_run_t flat = levels_run(TSR_ALLREDUCE_FLAT, g, 16, 16, 2);
  levels_run_t two = levels_run(TSR_ALLREDUCE_TWO_LEVEL, g, 16, 16, 2);
  double ring = 2.0 * (nodes - 1) / nodes * (double)two.n * sizeof(float);
  CHECK(two.node_bytes <= 1.05 * ring && two.node_bytes >= 0.5 * ring,
        "--grid 2x%d, %d nodes of %d: a node sent %.0f bytes per step to other nodes, the ring's "
        "optimum %.0f",
        size / 2, nodes, g, two.node_bytes, ring);
  CHECK(flat.node_bytes > two.node_bytes,
        "--grid 2x%d: flat sent %.0f off the node, two-level %.0f", size / 2, flat.node_bytes,
        two.node_bytes);
  double d = max_rel_diff(two.w, flat.w, two.n);
  CHECK(d <= 1e-5, "--grid 2x%d: two-level ends %g (relative) from flat", size / 2, d);
  /* Each grid row packs its own chunks into as many buckets as it needs (in 16x48 tiles row 0
   * holds 48 of the first layer's 64 features and all of the others, row 1 16: more buckets
   * for row 0) and every rank makes as many bucket descriptors as the row with the most: every
   * rank has used as many MPI tag spaces once the replicas are made, so the tags of whatever
   * any ranks create next agree. */
  tile_cols = 48;
  for (int t = 0; t < 2; t++) {
    allreduce = t ? TSR_ALLREDUCE_TWO_LEVEL : TSR_ALLREDUCE_FLAT, node_size = g, bucket_mb = 0.01f;
    tsr_net_t *net = make_grid_net(16, 2, false);
    tsr_replicas_t *rep = replicas(net, "batch", false);
    int64_t next = tsr__tag_space(), lo, hi;
    MPI_Allreduce(&next, &lo, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&next, &hi, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi, "--grid 2x%d --bucket-mb 0.01 %s: the ranks used %lld to %lld tag spaces",
          size / 2, t ? "two-level" : "flat", (long long)lo, (long long)hi);
    tsr__replicas_destroy(&rep);
    tsr_net_destroy(&net);
  }
  allreduce = TSR_ALLREDUCE_AUTO, node_size = 0, bucket_mb = 0, tile_cols = 16;
  if (rank == 0)
    printf("two-level --grid 2x%d, each grid row on %d nodes of 2 ranks, per step: busiest node "
           "sent %.0f bytes to other nodes (%.3f x the ring's %.0f; flat %.0f, %.2f x); weights "
           "%.1e from flat\n",
           size / 2, nodes, two.node_bytes, two.node_bytes / ring, ring, flat.node_bytes,
           flat.node_bytes / ring, d);
  free(flat.w), free(two.w);
}

/* --allreduce two-level with --node-size 4 on 8 and 16 ranks (2 and 4 "nodes"):
 *   - the bytes each node sends to other nodes per step of --sync batch (StarPU-MPI's count) are
 *     at most 1.05 x the ring's 2 (N - 1) / N |W| (flat sends G times that: printed), with
 *     16x16 tiles and whole-matrix tiles, and the engine counts what StarPU-MPI sent and, on
 *     every rank, what the others' StarPU-MPI sent it (levels_run);
 *   - the most messages a rank sends per step are no more than flat's, fewer where flat cuts
 *     tiles into bands for P homes;
 *   - the weights end where flat's do (1e-5 relative; the sums' order differs);
 *   - in deterministic mode an epoch average is the float32 sum in the documented order, bit
 *     for bit: node by node (node_ordered_mean) for nodes of 4, rank order for nodes of 1 and of
 *     P (flat's contract), and the orders differ for the check to mean much;
 *   - under --grid 2x(P/2), each grid row over its own nodes (grid_two_level). */
static void test_two_level(void) {
  load(16 * size * 3);
  const int g = 4, nodes = (size + g - 1) / g;
  for (int t = 0; t < 2; t++) {
    int tr = t == 0 ? 16 : WHOLE;
    levels_run_t flat = levels_run(TSR_ALLREDUCE_FLAT, g, tr, tr, 1);
    levels_run_t two = levels_run(TSR_ALLREDUCE_TWO_LEVEL, g, tr, tr, 1);
    int64_t n = two.n;
    double ring = 2.0 * (nodes - 1) / nodes * (double)n * sizeof(float);
    const char *tiles = t == 0 ? "16x16" : "whole-matrix";
    CHECK(two.node_bytes <= 1.05 * ring,
          "%s tiles, %d nodes of %d: a node sent %.0f bytes per step to other nodes, the ring's "
          "optimum %.0f",
          tiles, nodes, g, two.node_bytes, ring);
    CHECK(two.node_bytes >= 0.5 * ring, "%s tiles: a node sent only %.0f bytes (ring %.0f)", tiles,
          two.node_bytes, ring);
    /* Whole tiles are chunks enough for both with 16x16 tiles (as many messages); with
     * whole-matrix tiles flat cuts bands for P homes, two levels for max(N, G). */
    CHECK(t == 0 ? two.messages <= flat.messages : two.messages < flat.messages,
          "%s tiles: %.0f messages per step, flat %.0f", tiles, two.messages, flat.messages);
    double d = max_rel_diff(two.w, flat.w, n);
    CHECK(d <= 1e-5, "%s tiles: two-level ends %g (relative) from flat", tiles, d);
    if (rank == 0)
      printf("two-level, %d ranks, %d nodes of %d, %s tiles, per step: busiest node sent %.0f "
             "bytes to other nodes (%.3f x the ring's %.0f; flat %.0f, %.2f x), busiest rank "
             "%.0f bytes (flat %.0f), most messages a rank sent %.0f (flat %.0f); weights %.1e "
             "from flat\n",
             size, nodes, g, tiles, two.node_bytes, two.node_bytes / ring, ring, flat.node_bytes,
             flat.node_bytes / ring, two.rank_bytes, flat.rank_bytes, two.messages, flat.messages,
             d);
    free(flat.w), free(two.w);
  }
  tile_rows = tile_cols = 16;
  /* The deterministic contract, on an epoch average. */
  static const int sizes[] = {4, 1, 0}; /* 0: all ranks one node */
  for (int c = 0; c < 3; c++) {
    int gs = sizes[c] ? sizes[c] : size;
    allreduce = TSR_ALLREDUCE_TWO_LEVEL, node_size = gs;
    tsr_net_t *avg = make_net(32, 0.9f), *alone = make_net(32, 0.9f);
    train(avg, "epoch", 1, true);
    allreduce = TSR_ALLREDUCE_AUTO, node_size = 0;
    train(alone, "none", 1, true);
    int64_t n;
    float *w = params(avg, &n), *own = params(alone, &n), *all = gather_all(own, n);
    float *want = malloc(sizeof(float) * (size_t)n), *flat = malloc(sizeof(float) * (size_t)n);
    node_ordered_mean(all, n, gs, want);
    ordered_mean(all, n, false, flat);
    int64_t off = 0;
    for (int64_t i = 0; i < n; i++)
      off += memcmp(&w[i], &want[i], sizeof(float)) != 0;
    CHECK(off == 0,
          "--deterministic --allreduce two-level, nodes of %d: %lld of %lld weights differ from "
          "the float32 sum in its order",
          gs, (long long)off, (long long)n);
    bool same_as_flat = memcmp(want, flat, sizeof(float) * (size_t)n) == 0;
    if (gs == 1 || gs == size)
      CHECK(same_as_flat, "nodes of %d: the order must be flat's rank order", gs);
    else
      CHECK(!same_as_flat,
            "nodes of %d: the node order must change some bits for the check to "
            "mean much",
            gs);
    if (rank == 0)
      printf("two-level --deterministic, nodes of %d: the epoch average is the float32 sum in "
             "node order bit for bit (%s flat's rank order)\n",
             gs, same_as_flat ? "equal to" : "differs from");
    free(w), free(own), free(all), free(want), free(flat);
    tsr_net_destroy(&avg), tsr_net_destroy(&alone);
  }
  grid_two_level();
}

const mpi_check_t mpi_checks[] = {
    {"twolevel", test_two_level, MPI_CHECK_COMM_STATS},
    {NULL, NULL, 0},
};
