/* Gradient averaging under mpirun (--sync batch), checks of mpirun -np P test_mpi_batch CHECK:
 *   batch    P ranks x batch B with averaged gradients equal one process with the global batch P
 *            B: plain SGD, SGD with momentum and decay, with Nesterov momentum, Adam, AdamW, with
 *            --clip-grad (the norm of the averaged gradient), a graph net (residual add and
 *            concat), a GPT (gpt:1,32,2,16 on token windows, clipped and not); tsr_train scales
 *            the rate by P for batch SGD and Nesterov SGD, not Adam(W) (lr_scaling)
 *   twice    one net trained twice with batch sync (the hook is restored)
 *   bytes    batch sync moves ring-optimal bytes per rank (StarPU-MPI's count)
 *   augment  --crop 28:4 --flip with batch sync: P ranks x batch B end at one process's weights
 *            with the global batch, for two tilings
 *   tiles    a distributed matrix stores only this rank's tiles; a rank's node-local rank and
 *            size come from MPI, not the environment
 * (common.h: the command, its output.) */
#include "mpi/common.h"

/* n windows of t byte tokens and their next-byte targets, as a text makes them, from a
 * deterministic stream of 24 letters (the same on every rank); train_set only. */
static void load_tokens(int64_t n, int t) {
  tsr_dataset_fini(&train_set), tsr_dataset_fini(&test_set);
  train_set = (tsr_dataset_t){
      .n = n, .features = t, .classes = 256, .channels = 1, .height = t, .width = 1, .targets = t};
  train_set.x = malloc(sizeof(float) * (size_t)(n * t));
  train_set.y = malloc(sizeof(float) * (size_t)(n * t));
  CHECK(train_set.x && train_set.y, "out of memory for %lld windows", (long long)n);
  uint32_t h = 12345;
  float next = 'a';
  for (int64_t i = 0; i < n * t; i++) {
    train_set.x[i] = next;
    h = h * 1103515245u + 12345u;
    next = (float)('a' + (h >> 16) % 24);
    train_set.y[i] = next;
  }
}

/* A graph net of 784 features: a residual block (48 + ReLU, 48, add, ReLU), a dense layer of
 * the block's input beside it, and a concat of both along features (misaligned with the 16-wide
 * tiles), then the output: a's output has three readers, whose gradients are summed. */
static const char residual_mlp[] = "[a]\ntype = dense\nunits = 48\nactivation = relu\n"
                                   "[b]\ntype = dense\nunits = 48\n"
                                   "[s]\ntype = add\ninputs = a, b\nactivation = relu\n"
                                   "[c]\ntype = dense\nunits = 24\ninput = a\n"
                                   "[cat]\ntype = concat\ninputs = c, s\n"
                                   "[out]\ntype = dense\nunits = 10\n";

/* P ranks x batch B, gradients averaged == 1 process x batch P B, for any optimizer: the
 * average is the gradient of the global batch and the update runs once, on the tile's home. */
static void batch_equals_one_process(const char *name, const tsr_optimizer_t *opt, double tol) {
  const int B = 32, steps = 6;
  tsr_net_t *net = make_net_opt(B, opt);
  tsr_replicas_t *rep = replicas(net, "batch", false);
  int32_t *rows = batch_rows(B, steps);
  int counts[MPI_TEST_MAX_RANKS];
  for (int k = 0; k < steps; k++) {
    equal_counts(counts, B);
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, rows + (k * size + rank) * B, B, true) == 0, "step");
  }
  tsr__replicas_destroy(&rep);
  int64_t n;
  float *w = params(net, &n);
  CHECK(replicas_equal(w, n), "%s: replicas differ after batch averaging", name);
  if (rank == 0) {
    tsr_net_t *one = make_net_opt(B * size, opt), *start = make_net_opt(B * size, opt);
    for (int k = 0; k < steps; k++)
      tsr_net_train_step(one, &train_set, rows + k * size * B, B * size, true);
    float *ref = params(one, &n), *w0 = params(start, &n);
    double d = max_rel_diff(w, ref, n), moved = max_rel_diff(w0, ref, n);
    CHECK(d <= tol, "%s: %d ranks x batch %d vs 1 process x batch %d: max relative difference %g",
          name, size, B, B * size, d);
    CHECK(moved > 100 * tol, "%s: training must move the weights (%g) for the check to mean much",
          name, moved);
    printf("batch, %s: max relative difference to one process with batch %d: %.2e\n", name,
           B * size, d);
    if (net_clip > 0) { /* the clipping changed the steps: it was on */
      float clip = net_clip;
      net_clip = 0;
      tsr_net_t *plain = make_net_opt(B * size, opt);
      net_clip = clip;
      for (int k = 0; k < steps; k++)
        tsr_net_train_step(plain, &train_set, rows + k * size * B, B * size, true);
      float *p = params(plain, &n);
      double off = max_rel_diff(p, ref, n);
      CHECK(off > 100 * tol, "%s: clipping must change the steps (%g)", name, off);
      free(p);
      tsr_net_destroy(&plain);
    }
    free(ref), free(w0);
    tsr_net_destroy(&one), tsr_net_destroy(&start);
  }
  free(w), free(rows);
  tsr_net_destroy(&net);
}

/* A library user of tsr_train gets the linear scaling rule: with batch averaging and SGD the base
 * rate is P times the net's (AUTO, LINEAR), with Adam or local SGD it stays the net's (AUTO), and
 * NONE keeps it. A constant schedule takes every step at that rate, on every rank, and the epoch
 * stats report it as lr_end; tsr_train_base_lr says it beforehand. */
static void test_lr_scaling(void) {
  static const struct {
    const char *policy;
    const char *optimizer;
    tsr_lr_scaling_t scaling;
    bool scaled;
  } cases[] = {{"batch", "sgd", TSR_LR_SCALING_AUTO, true},
               {"batch", "sgd", TSR_LR_SCALING_LINEAR, true},
               {"batch", "sgd", TSR_LR_SCALING_NONE, false},
               {"batch", "adam", TSR_LR_SCALING_AUTO, false},
               {"batch", "sgd-nesterov", TSR_LR_SCALING_AUTO, true},
               {"batch", "adamw", TSR_LR_SCALING_AUTO, false},
               {"every=2", "sgd", TSR_LR_SCALING_AUTO, false},
               {"post-local:1,2", "sgd", TSR_LR_SCALING_AUTO, true},
               {"hier:2,4", "sgd", TSR_LR_SCALING_AUTO, false},
               {"every=2", "sgd", TSR_LR_SCALING_LINEAR, true}};
  static const char *const names[] = {"auto", "linear", "none"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tsr_net_opts_t no;
    tsr_net_opts_init(&no);
    tsr_optimizer_init(&no.opt, cases[i].optimizer, NULL);
    no.opt.lr = strncmp(cases[i].optimizer, "adam", 4) == 0 ? 0.003f : 0.05f;
    tsr_net_t *net = make_net_opt(32, &no.opt);
    float want = cases[i].scaled ? no.opt.lr * (float)size : no.opt.lr;
    tsr_sync_t sync;
    tsr_sync_parse(&sync, cases[i].policy, NULL);
    tsr_run_setup_t setup = {0};
    set_up_run(&setup, net, &sync, NULL, 0);
    tsr_train_opts_t o;
    tsr_train_opts_init(&o);
    o.setup = &setup, o.lr_scaling = cases[i].scaling;
    float told = tsr_train_base_lr(net, &o);
    tsr_run_setup_fini(&setup);
    tsr_epoch_stats_t st = {0};
    train_with(net, cases[i].policy,
               (run_t){.epochs = 1,
                       .shuffle = true,
                       .lr_scaling = cases[i].scaling,
                       .on_epoch = keep_stats,
                       .ctx = &st});
    const char *what = cases[i].optimizer;
    CHECK(told == want, "%s, %s, lr_scaling %s, %d ranks: tsr_train_base_lr %.9g, want %.9g",
          cases[i].policy, what, names[cases[i].scaling], size, (double)told, (double)want);
    CHECK(tsr_net_lr(net) == want, "%s, %s, lr_scaling %s, %d ranks: the rate used %.9g, want %.9g",
          cases[i].policy, what, names[cases[i].scaling], size, (double)tsr_net_lr(net),
          (double)want);
    if (rank == 0)
      CHECK(st.lr_end == (double)want,
            "%s, %s, lr_scaling %s, %d ranks: lr_end %.9g, want %.9g (base %.9g%s)",
            cases[i].policy, what, names[cases[i].scaling], size, st.lr_end, (double)want,
            (double)no.opt.lr, cases[i].scaled ? " x ranks" : "");
    tsr_net_destroy(&net);
  }
  if (rank == 0) printf("lr scaling: %zu cases checked\n", sizeof cases / sizeof cases[0]);
}

static void test_batch(void) {
  load(32 * size * 6);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  tsr_optimizer_t sgd = o.opt, momentum = o.opt, adam, nesterov, adamw;
  sgd.lr = 0.05f, sgd.momentum = 0;
  momentum.lr = 0.05f, momentum.momentum = 0.9f, momentum.weight_decay = 1e-3f;
  nesterov = momentum;
  tsr_optimizer_variant(&nesterov, "nesterov", NULL);
  /* Adam steps by about lr whatever the gradient's size: its bias correction at step t
   * (1 - beta^t) is what differs between steps 1 and 2. For the same reason a weight whose
   * gradient cancels to about eps steps by anything from 0 to lr depending on the order of
   * the gradient's sum: with eps 1e-8 and whole-matrix tiles one of the 37,632 weights of the
   * first layer ended 3e-4 (relative) away from one process on 2 ranks, for Adam without decay
   * as for AdamW (L2 decay adds wd w to every gradient and hides it). AdamW runs with eps 1e-3:
   * measured at most 2.0e-5 on 2, 3, 4 and 8 ranks (1.4e-4 on 3 with eps 1e-5). Its decay,
   * 0.1, shrinks the weights by lr wd = 3e-4 a step, so that a sharded update without it would
   * be 1.8e-3 off after the 6 steps. */
  tsr_optimizer_init(&adam, "adam", NULL);
  adam.lr = 0.003f, adam.weight_decay = 1e-3f;
  tsr_optimizer_init(&adamw, "adamw", NULL);
  adamw.lr = 0.003f, adamw.weight_decay = 0.1f, adamw.eps = 1e-3f;
  /* Nesterov's differences are rounding of weights that cross zero (3 ranks, whole-matrix
   * tiles: 1.6e-5 to 3.5e-5 in 8 runs, absolute 1.4e-8, a few float steps of the starting
   * weights; plain momentum's stay below 9e-6), hence 1e-4 as for Adam; a home updating
   * with its own gradient instead of the mean is 15 off (measured). Adam (L2 decay 1e-3, eps
   * 1e-8) with BLIS's skx kernels: 1.05e-4 on 4 ranks with whole-matrix tiles (the sums'
   * order, magnified where a gradient cancels), hence 2e-4 for it. */
  batch_equals_one_process("sgd", &sgd, 1e-5);
  batch_equals_one_process("sgd momentum 0.9, decay 1e-3", &momentum, 1e-5);
  batch_equals_one_process("sgd-nesterov momentum 0.9, decay 1e-3", &nesterov, 1e-4);
  batch_equals_one_process("adam", &adam, 2e-4);
  batch_equals_one_process("adamw, decay 0.1", &adamw, 1e-4);
  /* --clip-grad: the norm of the averaged gradient, summed over the ranks' chunks, clips as one
   * process's of the global batch (0.05 is below the norms of these steps). */
  net_clip = 0.05f;
  batch_equals_one_process("sgd momentum 0.9, decay 1e-3, --clip-grad 0.05", &momentum, 1e-5);
  batch_equals_one_process("adamw, decay 0.1, --clip-grad 0.05", &adamw, 1e-4);
  net_clip = 0;
  tile_rows = tile_cols = WHOLE;
  batch_equals_one_process("sgd momentum 0.9, decay 1e-3, whole-matrix tiles", &momentum, 1e-5);
  batch_equals_one_process("sgd-nesterov, whole-matrix tiles", &nesterov, 1e-4);
  batch_equals_one_process("adam, whole-matrix tiles", &adam, 2e-4);
  batch_equals_one_process("adamw, whole-matrix tiles", &adamw, 1e-4);
  tile_rows = tile_cols = 16;
  /* a deeper net, its gradient sums in another order than one process's: 5e-5 */
  net_model = residual_mlp;
  batch_equals_one_process("graph (residual add, concat), sgd momentum 0.9, decay 1e-3", &momentum,
                           5e-5);
  net_model = NULL;
  /* A language model (the embedding tied to the head, layer norms, attention, GELU; the loss
   * per token): its averaged gradient, clipped or not, is one process's over the global batch. */
  load_tokens(32 * size * 6, 16);
  net_shorthand = "gpt:1,32,2,16";
  batch_equals_one_process("gpt:1,32,2,16, adamw, decay 0.1", &adamw, 1e-4);
  net_clip = 0.5f;
  batch_equals_one_process("gpt:1,32,2,16, adamw, decay 0.1, --clip-grad 0.5", &adamw, 1e-4);
  net_clip = 0, net_shorthand = NULL;
  load(32 * size * 6);
  test_lr_scaling();
}

/* Tile (i, j) of the distributed matrices below lives on rank (i + j + shift) mod P. */
static int diagonal(int i, int j, void *ctx) {
  return (i + j + *(const int *)ctx) % size;
}

/* A distributed matrix stores only this rank's tiles: its own accounting says
 * so, other ranks' tiles get a handle (without memory) only once a task names
 * them, and a StarPU-MPI copy between two matrices moves the data. */
static void test_tiles(void) {
  enum { M = 10, N = 7, MB = 3, NB = 2 };
  static int shift_a = 0, shift_b = 1;
  tsr_tiles_t *a, *b;
  CHECK(tsr_tiles_create_distributed(&a, M, N, MB, NB, diagonal, &shift_a) == 0, "create a");
  CHECK(tsr_tiles_create_distributed(&b, M, N, MB, NB, diagonal, &shift_b) == 0, "create b");
  int64_t owned = 0;
  int remote = 0;
  for (int i = 0; i < tsr_tiles_mt(a); i++)
    for (int j = 0; j < tsr_tiles_nt(a); j++) {
      bool mine = (i + j) % size == rank;
      CHECK(tsr_tiles_is_local(a, i, j) == mine && tsr_tiles_rank_of(a, i, j) == (i + j) % size,
            "tile (%d, %d): owner %d", i, j, tsr_tiles_rank_of(a, i, j));
      if (mine)
        owned += (int64_t)tsr_tiles_tile_rows(a, i) * tsr_tiles_tile_cols(a, j) * 4;
      else
        remote++;
    }
  CHECK(remote > 0, "every rank must own only part of the matrix");
  CHECK(tsr_tiles_local_bytes(a) == owned, "local bytes %lld, owned tiles' bytes %lld",
        (long long)tsr_tiles_local_bytes(a), (long long)owned);
  CHECK(tsr_tiles_remote_handles(a) == 0 && tsr_tiles_remote_handles(b) == 0,
        "other ranks' tiles registered before any use: %d, %d", tsr_tiles_remote_handles(a),
        tsr_tiles_remote_handles(b));
  float whole[M * N];
  CHECK(tsr_tiles_read(a, whole) == TSR_EINVAL, "reading a matrix with remote tiles must fail");
  /* Every owner fills its tiles of a with 100 i + j (plain local tasks); then
   * b(i, j) = a(i, j) for tile (1, 1) only, through StarPU-MPI: the task runs
   * on b's owner, a's owner sends. */
  tsr_task_opts_t local = tsr__task_opts_default(), mpi = local;
  mpi.mpi = true;
  for (int i = 0; i < tsr_tiles_mt(a); i++)
    for (int j = 0; j < tsr_tiles_nt(a); j++)
      if (tsr_tiles_is_local(a, i, j))
        CHECK(tsr__tile_fill(&local, a, i, j, 100.0f * i + j) == 0, "fill");
  CHECK(tsr__tile_copy(&mpi, b, a, 1, 1) == 0, "copy");
  CHECK(tsr_tiles_remote_handles(a) == !tsr_tiles_is_local(a, 1, 1) &&
            tsr_tiles_remote_handles(b) == !tsr_tiles_is_local(b, 1, 1),
        "one task on tile (1, 1) registered %d and %d remote tiles", tsr_tiles_remote_handles(a),
        tsr_tiles_remote_handles(b));
  if (tsr_tiles_is_local(b, 1, 1)) {
    float tile[MB * NB];
    CHECK(tsr_tiles_read_tile(b, 1, 1, tile) == 0, "read b(1, 1)");
    for (int k = 0; k < MB * NB; k++)
      CHECK(tile[k] == 101.0f, "b(1, 1)[%d] = %g, sent 101", k, (double)tile[k]);
  }
  tsr_tiles_destroy(&a), tsr_tiles_destroy(&b);
  if (rank == 0) printf("tiles: each rank holds only its tiles of a %dx%d matrix\n", M, N);
}

/* Bytes this rank has sent to every other rank, as StarPU-MPI counted them
 * (STARPU_COMM_STATS=1, set before the runtime starts). */
static uint64_t bytes_sent_to_others(void) {
  size_t amounts[MPI_TEST_MAX_RANKS] = {0};
  starpu_mpi_comm_amounts_retrieve(amounts);
  uint64_t total = 0;
  for (int q = 0; q < size; q++)
    if (q != rank) total += amounts[q];
  return total;
}

/* --sync batch moves what a ring all-reduce would: per step every rank sends
 * (and receives) about 2 (P - 1) / P |W| bytes, the busiest at most 1.1 x
 * that; StarPU-MPI's own count of the bytes sent agrees with the engine's
 * accounting within 5%, and the result is still one process's with the
 * global batch. */
static void bytes_with_tiles(int tr, int tc) {
  enum { B = 16, STEPS = 3 };
  tile_rows = tr, tile_cols = tc;
  tsr_net_t *net = make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas(net, "batch", false);
  CHECK(tsr__progress_wait_all() == 0, "start-up transfers");
  tsr_sync_stats_t st;
  tsr__replicas_take_stats(rep, &st); /* counters from here on */
  uint64_t before = bytes_sent_to_others();
  int32_t *rows = batch_rows(B, STEPS);
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  for (int k = 0; k < STEPS; k++) {
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, rows + (k * size + rank) * B, B, true) == 0, "step");
  }
  CHECK(tsr__progress_wait_all() == 0, "wait");
  double measured = (double)(bytes_sent_to_others() - before) / STEPS;
  tsr__replicas_take_stats(rep, &st);
  double counted = (double)st.bytes_sent / STEPS, received = (double)st.bytes_received / STEPS;
  double ring = 2.0 * (size - 1) / size * (double)tsr_net_param_count(net) * sizeof(float);
  CHECK(fabs(measured - counted) <= 0.05 * counted,
        "%dx%d tiles: bytes sent per step: StarPU-MPI counted %.0f, the engine %.0f", tr, tc,
        measured, counted);
  double busiest, busiest_in;
  MPI_Allreduce(&measured, &busiest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&received, &busiest_in, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  CHECK(busiest <= 1.1 * ring && busiest_in <= 1.1 * ring,
        "%dx%d tiles: busiest rank sends %.0f and receives %.0f bytes per step, ring-optimal %.0f",
        tr, tc, busiest, busiest_in, ring);
  CHECK(measured >= 0.5 * ring, "this rank sent %.0f bytes per step, ring-optimal %.0f", measured,
        ring);
  if (rank == 0)
    printf("bytes: %d ranks, %s tiles, per step: busiest rank sent %.0f, received %.0f; "
           "ring-optimal %.0f (%.3f x)\n",
           size, tr == WHOLE ? "whole-matrix" : "16x16", busiest, busiest_in, ring, busiest / ring);
  tsr__replicas_destroy(&rep);
  free(rows);
  tsr_net_destroy(&net);
}

static void test_bytes(void) {
  load(16 * size * 3);
  bytes_with_tiles(16, 16);       /* many tiles: whole tiles are chunks enough */
  bytes_with_tiles(WHOLE, WHOLE); /* one tile per matrix: chunks are bands of it */
  tile_rows = tile_cols = 16;
}

/* The same net trained twice with --sync batch: the synchronization hook is
 * put back after each run, so a second run, and a plain step afterwards,
 * work (a plain step then updates with the net's own optimizer). */
static void test_twice(void) {
  load(32 * size * 4);
  tsr_net_t *net = make_net(32, 0.9f);
  train(net, "batch", 1, false);
  train(net, "batch", 1, false);
  int64_t n;
  float *w = params(net, &n);
  CHECK(replicas_equal(w, n), "replicas differ after the second run");
  int32_t rows[32];
  for (int i = 0; i < 32; i++)
    rows[i] = i;
  CHECK(tsr_net_train_step(net, &train_set, rows, 32, true) == 0, "a plain step after the runs");
  float *after = params(net, &n);
  CHECK(max_rel_diff(after, w, n) > 1e-4, "the plain step must update the weights");
  free(w), free(after);
  tsr_net_destroy(&net);
}

/* --crop 28:4 --flip under --sync batch: P ranks x batch B of augmented batches end at one
 * process's weights with the global batch P B (a sample's draws are keyed by its index in the
 * dataset, not by the rank or its row in the batch), on 16-row tiles cut into 16-column tiles
 * (pixels cut apart) and on whole-matrix tiles; and elsewhere than the same run unaugmented. */
static void test_augment(void) {
  load(32 * size * 6);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  tsr_optimizer_t momentum = o.opt;
  momentum.lr = 0.05f, momentum.momentum = 0.9f, momentum.weight_decay = 1e-3f;
  const float fill[1] = {-0.8f};
  const tsr_augment_t crop_flip = {
      .crop_h = 28, .crop_w = 28, .pad = 4, .flip = true, .fill = fill};
  net_augment = &crop_flip;
  batch_equals_one_process("--crop 28:4 --flip, sgd momentum 0.9", &momentum, 1e-5);
  tile_rows = tile_cols = WHOLE;
  batch_equals_one_process("--crop 28:4 --flip, whole-matrix tiles", &momentum, 1e-5);
  tile_rows = tile_cols = 16;
  if (rank == 0) { /* the augmentation changes the training: one process with and without */
    const int B = 32 * size;
    int32_t *rows = batch_rows(32, 6);
    tsr_net_t *aug = make_net_opt(B, &momentum);
    net_augment = NULL;
    tsr_net_t *plain = make_net_opt(B, &momentum);
    for (int k = 0; k < 6; k++) {
      tsr_net_train_step(aug, &train_set, rows + k * B, B, true);
      tsr_net_train_step(plain, &train_set, rows + k * B, B, true);
    }
    int64_t n;
    float *a = params(aug, &n), *p = params(plain, &n);
    double apart = max_rel_diff(a, p, n);
    CHECK(apart > 1e-3, "augmented and plain training end %g apart: augmentation did nothing",
          apart);
    free(a), free(p), free(rows);
    tsr_net_destroy(&aug), tsr_net_destroy(&plain);
  }
  net_augment = NULL;
}

const mpi_check_t mpi_checks[] = {
    {"batch", test_batch, 0},
    {"twice", test_twice, 0},
    {"bytes", test_bytes, MPI_CHECK_COMM_STATS},
    {"augment", test_augment, 0},
    {"tiles", test_tiles, MPI_CHECK_OWN_MPI},
    {NULL, NULL, 0},
};
