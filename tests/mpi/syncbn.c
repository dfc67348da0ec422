/* --sync-bn under mpirun, checks of mpirun -np P test_mpi_syncbn CHECK:
 *   syncbn      batchnorm's statistics over every rank's batch equal one process's with the global
 *               batch, for even and uneven batches
 *   syncbngrid  under --grid (and --domain rows) the statistics along the grid's rows, and the
 *               bytes they move
 * (common.h: the command, its output.) */
#include "mpi/common.h"

/* --sync-bn: P ranks x batch B under --sync batch, batchnorm per channel (after a convolution)
 * and per feature (after a dense layer) with the statistics of every rank's batch, == 1 process
 * x batch P B: the weights and the running statistics; without --sync-bn each rank normalizes
 * with its own batch's statistics and the weights end elsewhere. */
static float *syncbn_run(bool sync_bn, const int32_t *rows, int B, int steps, int64_t *n,
                         float **stats, int64_t *nb) {
  tsr_net_t *net = make_net(B, 0.9f);
  tsr_sync_t sync;
  tsr_sync_parse(&sync, "batch", NULL);
  sync.sync_bn = sync_bn;
  tsr_replicas_t *rep = NULL;
  tsr_errbuf_t err = {""};
  if (tsr__replicas_create(&rep, net, &sync, NULL, &err)) {
    fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  for (int k = 0; k < steps; k++) {
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, rows + (k * size + rank) * B, B, true) == 0, "step");
  }
  tsr__replicas_destroy(&rep);
  float *w = params(net, n);
  *stats = buffers(net, nb, NULL);
  tsr_net_destroy(&net);
  return w;
}

/* --sync-bn with batches of different sizes (as --shares cuts them): rank q takes batch[q] rows
 * of each step's global batch (the ranks' parts in rank order), and in step 4 the last rank
 * none; batchnorm's backward sums are weighted by the counts (sync_bn.c), so the weights and the
 * running statistics equal one process's on the global batches. */
static void test_syncbn_uneven(const int32_t *rows, int B, int steps) {
  int batch[3] = {24, 8, 0}, counts[MPI_TEST_MAX_RANKS], global = B * size;
  if (size == 3) batch[1] = 16, batch[2] = 8;
  tsr_net_t *net = make_net(batch[rank], 0.9f);
  tsr_sync_t sync;
  tsr_sync_parse(&sync, "batch", NULL);
  sync.sync_bn = true;
  tsr_replicas_t *rep = NULL;
  tsr_errbuf_t err = {""};
  if (tsr__replicas_create(&rep, net, &sync, NULL, &err)) {
    fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int lo = 0;
  for (int q = 0; q < rank; q++)
    lo += batch[q];
  for (int k = 0; k < steps; k++) {
    for (int q = 0; q < size; q++)
      counts[q] = k == 3 && q == size - 1 ? 0 : batch[q];
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, rows + k * global + lo, counts[rank], true) == 0,
          "uneven step %d", k + 1);
  }
  tsr__replicas_destroy(&rep);
  int64_t n, nb, m;
  float *w = params(net, &n), *bs = buffers(net, &nb, NULL);
  CHECK(replicas_equal(w, n), "--sync-bn with uneven batches: replicas differ");
  if (rank == 0) {
    tsr_net_t *one = make_net(global, 0.9f), *start = make_net(global, 0.9f);
    for (int k = 0; k < steps; k++)
      tsr_net_train_step(one, &train_set, rows + k * global,
                         k == 3 ? global - batch[size - 1] : global, true);
    float *ref = params(one, &n), *w0 = params(start, &n), *bref = buffers(one, &m, NULL);
    double d = max_rel_diff(w, ref, n), s = max_rel_diff(bs, bref, nb);
    double moved = max_rel_diff(w0, ref, n);
    CHECK(d <= 1e-4 && s <= 1e-4,
          "--sync-bn, batches %d,%d,%d vs 1 process on the global batches: weights %g, running "
          "statistics %g off",
          batch[0], batch[1], size == 3 ? batch[2] : 0, d, s);
    CHECK(moved > 1e-2, "the check must be sensitive: training moved %g", moved);
    printf("--sync-bn, uneven batches: weights %.2e and running statistics %.2e off one process\n",
           d, s);
    free(ref), free(w0), free(bref);
    tsr_net_destroy(&one), tsr_net_destroy(&start);
  }
  free(w), free(bs);
  tsr_net_destroy(&net);
}

static void test_syncbn(void) {
  enum { B = 16, STEPS = 5 };
  net_model = "[c]\ntype = conv\nfilters = 4\nkernel = 3\nstride = 2\n"
              "[cbn]\ntype = batchnorm\nactivation = relu\n"
              "[h]\ntype = dense\nunits = 24\n[hbn]\ntype = batchnorm\nactivation = relu\n"
              "[out]\ntype = dense\nunits = 10\n";
  load(B * size * STEPS);
  int32_t *rows = batch_rows(B, STEPS);
  int64_t n, nb;
  float *bs, *bs_own;
  float *w = syncbn_run(true, rows, B, STEPS, &n, &bs, &nb);
  float *own = syncbn_run(false, rows, B, STEPS, &n, &bs_own, &nb);
  CHECK(replicas_equal(w, n), "--sync-bn: replicas differ");
  CHECK(replicas_equal(bs, nb), "--sync-bn: running statistics differ across replicas");
  CHECK(!replicas_equal(bs_own, nb), "without --sync-bn the running statistics are each rank's");
  if (rank == 0) {
    tsr_net_t *one = make_net(B * size, 0.9f), *start = make_net(B * size, 0.9f);
    for (int k = 0; k < STEPS; k++)
      tsr_net_train_step(one, &train_set, rows + k * size * B, B * size, true);
    int64_t m;
    float *ref = params(one, &n), *w0 = params(start, &n), *bref = buffers(one, &m, NULL);
    double d = max_rel_diff(w, ref, n), moved = max_rel_diff(w0, ref, n);
    double e = max_rel_diff(own, ref, n), s = max_rel_diff(bs, bref, nb);
    CHECK(d <= 1e-4, "--sync-bn, %d ranks x batch %d vs 1 process x batch %d: weights %g off", size,
          B, B * size, d);
    CHECK(s <= 1e-4, "--sync-bn: running statistics %g off one process's", s);
    CHECK(moved > 1e-2 && e > 100 * d,
          "the check must be sensitive: training moved %g, without --sync-bn %g off", moved, e);
    printf("--sync-bn: weights %.2e and running statistics %.2e off one process (without: %.2e)\n",
           d, s, e);
    free(ref), free(w0), free(bref);
    tsr_net_destroy(&one), tsr_net_destroy(&start);
  }
  test_syncbn_uneven(rows, B, STEPS);
  free(w), free(own), free(bs), free(bs_own), free(rows);
  net_model = NULL;
}

/* --sync-bn under --grid 2xPc: a column's ranks hold the column's batch statistics (batchnorm
 * whole on each, or reduced from its bands under --domain rows), and each grid row combines its
 * columns'. Pc columns of batch B under --sync batch then equal one process with batch Pc B:
 * the weights and the running statistics, with and without the domain split; without --sync-bn
 * each column normalizes with its own batch's and the weights end elsewhere. */
static const char syncbn_grid_cnn[] =
    "[c1]\ntype = conv\nfilters = 4\nkernel = 3\npadding = 1\n"
    "[bn1]\ntype = batchnorm\nactivation = relu\n[pool]\ntype = maxpool\nkernel = 2\n"
    "[c2]\ntype = conv\nfilters = 8\nkernel = 3\npadding = 1\n"
    "[bn2]\ntype = batchnorm\nactivation = relu\n[out]\ntype = dense\nunits = 10\n";

/* What a --sync-bn run's ranks sent: StarPU-MPI's count inside this rank's grid column and to
 * other columns, and what the statistics' combines should have sent across: per batchnorm
 * layer and pass (forward; backward when it has an input gradient) a (3, C) tile of floats from
 * each rank to its row's first, and back from there to each (Pc - 1 tiles from the first). */
typedef struct {
  double inside, across, stats_formula;
} syncbn_bytes_t;

/* Pr 1: one process with batch B on every rank, the step's rows alone (no replicas). */
static float *syncbn_grid_run(int pr, bool domain, bool sync_bn, const int32_t *rows, int B,
                              int steps, int64_t *n, float **stats, int64_t *nb,
                              syncbn_bytes_t *sent) {
  int pc = size / pr, column = rank / pr;
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  CHECK(tsr_model_parse_ini_text(&spec, syncbn_grid_cnn, "syncbn_grid_cnn", &err) == 0, "%s",
        err.msg);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = B, o.seed = 3, o.opt.lr = 0.05f, o.opt.momentum = 0.9f, o.tile_rows = 8;
  o.grid_rows = pr, o.domain = domain && pr > 1;
  tsr_net_t *net = net_or_abort(&spec, &o);
  tsr_sync_t sync;
  tsr_sync_parse(&sync, "batch", NULL);
  sync.sync_bn = sync_bn, sync.deterministic = true;
  tsr_replicas_t *rep = NULL;
  if (pr > 1)
    CHECK(tsr__replicas_create(&rep, net, &sync, NULL, &err) == 0, "replicas: %s", err.msg);
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  uint64_t in0 = 0, across0 = 0, in1 = 0, across1 = 0;
  CHECK(tsr__progress_wait_all() == 0, "wait");
  MPI_Barrier(MPI_COMM_WORLD);
  bytes_by_peer(pr, &in0, &across0);
  for (int k = 0; k < steps; k++) {
    if (rep) tsr__replicas_count(rep, counts);
    const int32_t *mine = rep ? rows + (k * pc + column) * B : rows + k * B;
    CHECK(tsr_net_train_step(net, &train_set, mine, B, true) == 0, "--sync-bn %dx%d: step %d", pr,
          pc, k + 1);
  }
  CHECK(tsr__progress_wait_all() == 0, "wait");
  MPI_Barrier(MPI_COMM_WORLD);
  bytes_by_peer(pr, &in1, &across1);
  *sent = (syncbn_bytes_t){(double)(in1 - in0), (double)(across1 - across0), 0};
  for (int l = 0; l < net->n_layers && sync_bn; l++) {
    const tsr_layout_layer_t *ll = net->layers[l].lay;
    if (ll->type->batch_stats)
      sent->stats_formula +=
          steps * (1 + ll->has_dx) * 4.0 * 3 * ll->geom.c * (column == 0 ? pc - 1 : 1);
  }
  tsr__replicas_destroy(&rep);
  tsr_net_wait(net, 0);
  float *w = pr > 1 ? grid_params(net, pc, n) : params(net, n);
  *stats = buffers(net, nb, NULL);
  tsr_net_destroy(&net);
  return w;
}

static void test_syncbn_grid(void) {
  enum { B = 8, STEPS = 5, PR = 2 };
  int pc = size / PR;
  load(B * size * STEPS);
  int32_t *rows = batch_rows(B, STEPS);
  int64_t n, nb, m;
  syncbn_bytes_t with, without;
  float *ref_stats, *start_stats;
  float *ref = syncbn_grid_run(1, false, false, rows, pc * B, STEPS, &n, &ref_stats, &m, &with);
  float *start = syncbn_grid_run(1, false, false, rows, pc * B, 0, &n, &start_stats, &m, &with);
  for (int domain = 0; domain < 2; domain++) {
    const char *how = domain ? "rows" : "none";
    float *bs, *bs_own;
    float *w = syncbn_grid_run(PR, domain, true, rows, B, STEPS, &n, &bs, &nb, &with);
    float *own = syncbn_grid_run(PR, domain, false, rows, B, STEPS, &n, &bs_own, &nb, &without);
    CHECK(nb == m, "--sync-bn %dx%d: %lld running statistics, one process %lld", PR, pc,
          (long long)nb, (long long)m);
    CHECK(replicas_equal(bs, nb), "--sync-bn %dx%d --domain %s: running statistics differ", PR, pc,
          how);
    CHECK(!replicas_equal(bs_own, nb),
          "--grid %dx%d --domain %s without --sync-bn: the columns' running statistics agree", PR,
          pc, how);
    double d = max_rel_diff(w, ref, n), s = max_rel_diff(bs, ref_stats, nb);
    double e = max_rel_diff(own, ref, n), moved = max_rel_diff(start, ref, n);
    CHECK(d <= 1e-4,
          "--sync-bn %dx%d --domain %s, batch %d per column vs 1 process x batch %d: weights %g "
          "off",
          PR, pc, how, B, pc * B, d);
    CHECK(s <= 1e-4, "--sync-bn %dx%d --domain %s: running statistics %g off one process's", PR, pc,
          how, s);
    CHECK(moved > 1e-2 && e > 100 * d,
          "the check must be sensitive: training moved %g, without --sync-bn %g off", moved, e);
    /* The statistics go along the grid's rows only: nothing more inside a column. */
    double across = with.across - without.across, inside = with.inside - without.inside;
    CHECK(across == with.stats_formula && inside == 0,
          "--sync-bn %dx%d --domain %s: rank %d sent %.0f bytes more to other columns (the "
          "formula %.0f) and %.0f more inside its column (want 0)",
          PR, pc, how, rank, across, with.stats_formula, inside);
    if (rank == 0)
      printf("--sync-bn %dx%d --domain %s: weights %.2e and running statistics %.2e off one "
             "process (without --sync-bn: %.2e); rank 0 sent %.0f bytes of statistics per step\n",
             PR, pc, how, d, s, e, across / STEPS);
    free(w), free(own), free(bs), free(bs_own);
  }
  free(ref), free(ref_stats), free(start), free(start_stats), free(rows);
}

const mpi_check_t mpi_checks[] = {
    {"syncbn", test_syncbn, 0},
    {"syncbngrid", test_syncbn_grid, MPI_CHECK_COMM_STATS | MPI_CHECK_LOWERED_CONV},
    {NULL, NULL, 0},
};
