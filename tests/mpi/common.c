/* What the checks under mpirun share (common.h), and main: the check the first argument names,
 * from the concern file's table, with the runtime started as it needs. */
#include "mpi/common.h"

int passed, failed, rank; /* mpi_check.h's counts, every file's */

int size;

tsr_dataset_t train_set, test_set;

void load(int64_t n) {
  tsr_dataset_fini(&train_set), tsr_dataset_fini(&test_set);
  tsr_errbuf_t err = {""};
  const char *dir = getenv("TSR_DATA_DIR") ? getenv("TSR_DATA_DIR") : TSR_DEFAULT_DATA_DIR;
  if (tsr_dataset_load_dir(&train_set, &test_set, dir, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 77);
  }
  /* The build's prefix of the dataset (tests/meson.build) must hold what a check takes: a check
   * on fewer samples than it asked for would compare other runs than it says. */
  int64_t held = train_set.n, held_test = test_set.n;
  if (tsr_dataset_truncate(&train_set, n) || tsr_dataset_truncate(&test_set, 2000)) {
    fprintf(stderr, "%s holds %lld training and %lld test samples; the check takes %lld and 2000\n",
            dir, (long long)held, (long long)held_test, (long long)n);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  tsr_dataset_standardize(&train_set, &test_set);
}

int tile_rows = 16, tile_cols = 16;

/* The model of make_net_opt's nets: mlp:48,24, or this model file's text (a graph), or this
 * shorthand (a language model, on load_tokens's windows, with GPT-2's initialization). */
const char *net_model, *net_shorthand;

/* Augmentation of make_net_opt's nets (NULL: none), drawn with epoch 2's key. */
const tsr_augment_t *net_augment;

/* make_net_opt's nets' --clip-grad (0: none). */
float net_clip;

tsr_net_t *make_net_opt(int batch, const tsr_optimizer_t *opt) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  if (net_model)
    tsr_model_parse_ini_text(&spec, net_model, "net_model", &err);
  else if (net_shorthand)
    tsr_model_parse(&spec, net_shorthand, train_set.classes, &err);
  else
    tsr_model_parse(&spec, "mlp:48,24", train_set.classes, &err);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = batch, o.seed = 3, o.clip_grad = net_clip;
  if (net_shorthand) o.init = TSR_INIT_GPT2, o.in_height = train_set.height, o.in_width = 1;
  if (net_shorthand) o.in_channels = 1;
  if (opt) o.opt = *opt;
  o.tile_rows = tile_rows, o.tile_cols = tile_cols;
  tsr_net_t *net = NULL;
  if (tsr_net_create(&net, &spec, (int)train_set.features, train_set.classes, &o, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  tsr_model_spec_fini(&spec);
  if (net_augment) {
    CHECK(tsr_net_set_augment(net, net_augment, &err) == 0, "augment: %s", err.msg);
    tsr_net_set_epoch(net, 2);
  }
  return net;
}

tsr_net_t *make_net(int batch, float momentum) {
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.opt.momentum = momentum, o.opt.lr = 0.05f;
  return make_net_opt(batch, &o.opt);
}

float *params(tsr_net_t *net, int64_t *count) {
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

void set_params(tsr_net_t *net, const float *all) {
  int64_t off = 0;
  for (int p = 0; p < tsr_net_n_params(net); p++) {
    int64_t r, c;
    tsr_net_param_info(net, p, &r, &c);
    tsr_net_param_set(net, p, all + off);
    off += r * c;
  }
}

double max_rel_diff(const float *a, const float *b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / (1e-3 + fabs((double)b[i]));
    worst = d > worst ? d : worst;
  }
  return worst;
}

float *gather_all(const float *x, int64_t n) {
  float *all = malloc(sizeof(float) * (size_t)(n * size));
  MPI_Allgather(x, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
  return all;
}

float *weighted_mean(const float *x, int64_t n, const double *weight) {
  float *all = gather_all(x, n), *mean = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    double s = 0;
    for (int q = 0; q < size; q++)
      s += (weight ? weight[q] : 1.0 / size) * all[q * n + i];
    mean[i] = (float)s;
  }
  free(all);
  return mean;
}

bool replicas_equal(const float *w, int64_t n) {
  float *ref = malloc(sizeof(float) * (size_t)n);
  memcpy(ref, w, sizeof(float) * (size_t)n);
  MPI_Bcast(ref, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  int same = memcmp(ref, w, sizeof(float) * (size_t)n) == 0, all;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  free(ref);
  return all;
}

int keep_stats(const tsr_epoch_stats_t *stats, void *ctx) {
  *(tsr_epoch_stats_t *)ctx = *stats;
  return 0;
}

/* --allreduce and --node-size of every run and set of replicas below (test_two_level). */
tsr_allreduce_t allreduce;

int node_size;

float bucket_mb; /* --bucket-mb (test_buckets) */

void set_up_run(tsr_run_setup_t *s, const tsr_net_t *net, const tsr_sync_t *sync,
                const tsr_shares_t *shares, int global_batch) {
  tsr_run_config_t c;
  tsr_run_config_from_net(&c, net, train_set.n);
  c.sync = sync, c.shares = shares, c.global_batch = global_batch;
  tsr_errbuf_t err = {""};
  CHECK(tsr_run_setup(s, &c, &err) == 0, "tsr_run_setup: %s", err.msg);
}

void train_with(tsr_net_t *net, const char *policy, run_t run) {
  tsr_sync_t sync;
  tsr_errbuf_t err = {""};
  tsr_sync_parse(&sync, policy, &err);
  sync.allreduce = allreduce, sync.node_size = node_size, sync.bucket_mb = bucket_mb;
  sync.deterministic = run.deterministic, sync.by_samples = run.by_samples;
  sync.by_steps = run.by_steps, sync.average_state = run.average_state;
  if (run.outer) tsr_outer_init(&sync.outer, run.outer, &err);
  tsr_train_opts_t o;
  tsr_train_opts_init(&o);
  tsr_shares_t shares = {0};
  if (run.shares)
    CHECK(tsr_shares_parse(&shares, run.shares, &err) == 0, "--shares %s: %s", run.shares, err.msg);
  tsr_run_setup_t setup = {0};
  set_up_run(&setup, net, &sync, run.shares ? &shares : NULL, run.global_batch);
  o.epochs = run.epochs, o.setup = &setup, o.lr_schedule = TSR_LR_CONSTANT, o.seed = 5;
  o.shuffle = run.shuffle, o.on_epoch = run.on_epoch, o.ctx = run.ctx;
  o.lr_scaling = run.lr_scaling;
  int rc = tsr_train(net, &train_set, NULL, &o, &err);
  CHECK(rc == 0, "tsr_train(%s): %s", policy, err.msg);
  tsr_run_setup_fini(&setup), tsr_shares_fini(&shares);
}

void train(tsr_net_t *net, const char *policy, int epochs, bool deterministic) {
  train_with(net, policy,
             (run_t){.epochs = epochs, .deterministic = deterministic, .shuffle = true});
}

tsr_replicas_t *replicas_weighted(tsr_net_t *net, const char *policy, bool by_samples,
                                  bool by_steps, const char *outer) {
  tsr_sync_t sync;
  tsr_sync_parse(&sync, policy, NULL);
  sync.by_samples = by_samples, sync.by_steps = by_steps;
  sync.allreduce = allreduce, sync.node_size = node_size, sync.bucket_mb = bucket_mb;
  if (outer) tsr_outer_init(&sync.outer, outer, NULL);
  tsr_replicas_t *rep = NULL;
  tsr_errbuf_t err = {""};
  if (tsr__replicas_create(&rep, net, &sync, NULL, &err)) {
    fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return rep;
}

tsr_replicas_t *replicas_with(tsr_net_t *net, const char *policy, bool by_samples,
                              const char *outer) {
  return replicas_weighted(net, policy, by_samples, false, outer);
}

tsr_replicas_t *replicas(tsr_net_t *net, const char *policy, bool by_samples) {
  return replicas_with(net, policy, by_samples, NULL);
}

int32_t *batch_rows(int B, int steps) {
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)(B * size * steps));
  for (int i = 0; i < B * size * steps; i++)
    rows[i] = (int32_t)((i * 37) % train_set.n);
  return rows;
}

void equal_counts(int *counts, int B) {
  for (int q = 0; q < size; q++)
    counts[q] = B;
}

void step_pair(tsr_replicas_t *rep, tsr_net_t *net, tsr_net_t *alone, const int32_t *rows, int B,
               int k, const int *counts) {
  const int32_t *mine = rows + ((k - 1) * size + rank) * B;
  tsr__replicas_count(rep, counts);
  CHECK(tsr_net_train_step(net, &train_set, mine, B, true) == 0, "step %d", k);
  CHECK(tsr__replicas_after_step(rep, k) == 0, "after step %d", k);
  CHECK(tsr_net_train_step(alone, &train_set, mine, B, true) == 0, "separate step %d", k);
}

void shard_epoch(tsr_net_t *net, int b, int steps) {
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)b);
  for (int k = 0; k < steps; k++) {
    for (int i = 0; i < b; i++)
      rows[i] = (int32_t)(rank * b * steps + k * b + i);
    tsr_net_train_step(net, &train_set, rows, b, true);
  }
  free(rows);
}

void ordered_mean(const float *all, int64_t n, bool reversed, float *out) {
  float w = (float)(1.0 / size);
  for (int64_t i = 0; i < n; i++) {
    out[i] = w * all[(reversed ? size - 1 : 0) * n + i];
    for (int k = 1; k < size; k++)
      out[i] = w * all[(reversed ? size - 1 - k : k) * n + i] + out[i];
  }
}

/* A CNN small enough for seconds: conv 3x3 4 (padded) - ReLU - maxpool 2 - dense 32 - ReLU -
 * dense 10; the convolution is replicated in a grid column, the dense layers spread. */
const char grid_cnn[] = "[conv]\ntype = conv\nfilters = 4\nkernel = 3\npadding = 1\n"
                        "activation = relu\n[pool]\ntype = maxpool\nkernel = 2\n"
                        "[hidden]\ntype = dense\nunits = 32\nactivation = relu\n"
                        "[output]\ntype = dense\nunits = 10\n";

/* A graph for the grid: two residual adds of dense layers (spread over the grid column, as their
 * sums and the ReLU after the first are), a's output read by b and s1, s1's by d and s2. Layers
 * of two column tiles, so that a rank's partial input gradients add up in the order one process
 * adds them: the grid then follows one process bit for bit. */
const char grid_graph[] = "[a]\ntype = dense\nunits = 32\nactivation = relu\n"
                          "[b]\ntype = dense\nunits = 32\n"
                          "[s1]\ntype = add\ninputs = a, b\nactivation = relu\n"
                          "[d]\ntype = dense\nunits = 32\n"
                          "[s2]\ntype = add\ninputs = s1, d\n"
                          "[output]\ntype = dense\nunits = 10\n";

bool grid_graph_net; /* make_grid_net builds grid_graph instead of the MLP */

tsr_net_t *net_or_abort(tsr_model_spec_t *spec, const tsr_net_opts_t *o) {
  tsr_errbuf_t err = {""};
  tsr_net_t *net = NULL;
  if (tsr_net_create(&net, spec, (int)train_set.features, train_set.classes, o, &err)) {
    fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  tsr_model_spec_fini(spec);
  return net;
}

tsr_net_t *make_grid_net(int batch, int grid_rows, bool cnn) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  int rc = cnn              ? tsr_model_parse_ini_text(&spec, grid_cnn, "grid_cnn", &err)
           : grid_graph_net ? tsr_model_parse_ini_text(&spec, grid_graph, "grid_graph", &err)
                            : tsr_model_parse(&spec, "mlp:64,32", train_set.classes, &err);
  if (rc) {
    fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = batch, o.seed = 3, o.opt.lr = 0.05f, o.opt.momentum = 0.9f;
  o.tile_rows = tile_rows, o.tile_cols = tile_cols, o.grid_rows = grid_rows;
  return net_or_abort(&spec, &o);
}

float *grid_params(tsr_net_t *net, int columns, int64_t *count) {
  int64_t total = tsr_net_param_count(net), off = 0;
  float *mine = calloc((size_t)total, sizeof(float)), *all = malloc(sizeof(float) * (size_t)total);
  float *copies = malloc(sizeof(float) * (size_t)total);
  for (int l = 0; l < net->n_layers; l++)
    for (int k = 0; k < net->layers[l].nparams; k++) {
      const tsr_tiles_t *w = net->layers[l].params[k].w;
      CHECK(tsr_tiles_read_owned(w, mine + off) == 0, "read layer %d parameter %d", l + 1, k);
      int64_t n = tsr_tiles_rows(w) * tsr_tiles_cols(w);
      /* A domain-split layer's bands are spread, its parameters replicated. */
      bool sliced = net->layers[l].split && net->layers[l].lay->place != TSR_PLACE_BANDS;
      for (int64_t i = 0; i < n; i++)
        copies[off + i] = (float)(sliced ? columns : size);
      off += n;
    }
  MPI_Allreduce(mine, all, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int64_t i = 0; i < total; i++)
    all[i] /= copies[i];
  free(copies);
  free(mine);
  *count = total;
  return all;
}

void bytes_by_peer(int grid_rows, uint64_t *inside, uint64_t *across) {
  size_t amounts[MPI_TEST_MAX_RANKS] = {0};
  starpu_mpi_comm_amounts_retrieve(amounts);
  *inside = *across = 0;
  for (int q = 0; q < size; q++)
    if (q != rank) *(q / grid_rows == rank / grid_rows ? inside : across) += amounts[q];
}

float *buffers(tsr_net_t *net, int64_t *count, const float *set) {
  int64_t total = 0, off = 0;
  for (int i = 0; i < net->n_layers; i++)
    for (int k = 0; k < net->layers[i].nbuffers; k++)
      total += tsr_tiles_cols(net->layers[i].buffers[k]);
  float *all = set ? NULL : malloc(sizeof(float) * (size_t)total);
  for (int i = 0; i < net->n_layers; i++)
    for (int k = 0; k < net->layers[i].nbuffers; k++) {
      tsr_tiles_t *b = net->layers[i].buffers[k];
      if (set)
        tsr_tiles_write(b, set + off);
      else
        tsr_tiles_read(b, all + off);
      off += tsr_tiles_cols(b);
    }
  *count = total;
  return all;
}

levels_run_t levels_run(tsr_allreduce_t mode, int g, int tr, int tc, int pr) {
  enum { B = 16, STEPS = 3 };
  int pc = size / pr, column = rank / pr;
  allreduce = mode, node_size = g, tile_rows = tr, tile_cols = tc;
  tsr_net_t *net = pr > 1 ? make_grid_net(B, pr, false) : make_net(B, 0.9f);
  tsr_replicas_t *rep = replicas(net, "batch", false);
  CHECK(tsr__progress_wait_all() == 0, "start-up transfers");
  tsr_sync_stats_t st;
  tsr__replicas_take_stats(rep, &st);
  size_t before[MPI_TEST_MAX_RANKS] = {0}, after[MPI_TEST_MAX_RANKS] = {0};
  uint64_t inside0, across0, inside1, across1;
  bytes_by_peer(pr, &inside0, &across0);
  starpu_mpi_comm_amounts_retrieve(before);
  int32_t *rows = batch_rows(B, STEPS);
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  for (int k = 0; k < STEPS; k++) {
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, rows + (k * pc + column) * B, B, true) == 0, "step");
  }
  CHECK(tsr__progress_wait_all() == 0, "wait");
  starpu_mpi_comm_amounts_retrieve(after);
  bytes_by_peer(pr, &inside1, &across1);
  tsr__replicas_take_stats(rep, &st);
  double off_node = 0, mine = (double)(across1 - across0) / STEPS;
  for (int q = 0; q < size; q++)
    if (q / g != rank / g) off_node += (double)(after[q] - before[q]) / STEPS;
  CHECK(fabs(mine - (double)st.bytes_sent / STEPS) <= 0.05 * mine,
        "--allreduce %s, nodes of %d, %d grid rows: bytes sent per step to other columns: "
        "StarPU-MPI counted %.0f, the engine %.0f",
        mode == TSR_ALLREDUCE_FLAT ? "flat" : "two-level", g, pr, mine,
        (double)st.bytes_sent / STEPS);
  /* What this rank received from the ranks of other columns (each one's StarPU-MPI count of
   * what it sent here) against the engine's count: a chunk's home receives its own node's
   * partial (whole tiles from the node's ranks, on the tile's local home) as well as the other
   * nodes' bands, and a rank of a node the results through its local home. */
  uint64_t sent_to[MPI_TEST_MAX_RANKS] = {0}, got_from[MPI_TEST_MAX_RANKS] = {0};
  for (int q = 0; q < size; q++)
    sent_to[q] = (uint64_t)(after[q] - before[q]);
  MPI_Alltoall(sent_to, 1, MPI_UINT64_T, got_from, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  double got = 0;
  for (int q = 0; q < size; q++)
    if (q / pr != column) got += (double)got_from[q] / STEPS;
  double counted = (double)st.bytes_received / STEPS;
  CHECK(fabs(got - counted) <= 64, /* measured equal on every rank of every run here */
        "--allreduce %s, nodes of %d, %d grid rows: bytes rank %d received per step from other "
        "columns: StarPU-MPI counted %.0f, the engine %.0f",
        mode == TSR_ALLREDUCE_FLAT ? "flat" : "two-level", g, pr, rank, got, counted);
  double *of_rank = malloc(sizeof(double) * (size_t)size);
  MPI_Allgather(&off_node, 1, MPI_DOUBLE, of_rank, 1, MPI_DOUBLE, MPI_COMM_WORLD);
  levels_run_t out = {0};
  for (int n = 0; n * g < size; n++) {
    double node = 0;
    for (int q = n * g; q < (n + 1) * g && q < size; q++)
      node += of_rank[q];
    out.node_bytes = fmax(out.node_bytes, node);
  }
  double msgs = (double)st.messages_sent / STEPS;
  MPI_Allreduce(&mine, &out.rank_bytes, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&msgs, &out.messages, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  free(of_rank);
  tsr__replicas_destroy(&rep);
  out.w = pr > 1 ? grid_params(net, pc, &out.n) : params(net, &out.n);
  CHECK(pr > 1 || replicas_equal(out.w, out.n), "two-level: replicas differ after batch averaging");
  free(rows);
  tsr_net_destroy(&net);
  allreduce = TSR_ALLREDUCE_AUTO, node_size = 0;
  return out;
}

int main(int argc, char **argv) {
  const mpi_check_t *which = NULL;
  for (int i = 0; argc >= 2 && mpi_checks[i].name; i++)
    if (strcmp(argv[1], mpi_checks[i].name) == 0) which = &mpi_checks[i];
  if (!which || argc > 3 ||
      (argc == 3 && strcmp(argv[2], "thread") != 0 && strcmp(argv[2], "worker") != 0)) {
    fprintf(stderr, "usage: mpirun -np P %s CHECK [thread|worker], CHECK one of:", argv[0]);
    for (int i = 0; mpi_checks[i].name; i++)
      fprintf(stderr, " %s", mpi_checks[i].name);
    fprintf(stderr, "\n");
    return 2;
  }
  /* tiles: MPI started here, then Open MPI's node-local variables made wrong: tessera must take
   * the node's ranks from MPI itself (issue 21: under Slurm's srun they are absent, and every
   * rank placed its workers as if alone on its node). */
  bool own_mpi = which->needs & MPI_CHECK_OWN_MPI;
  if (own_mpi) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "77", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "99", 1);
  }
  tsr_dist_start(&argc, &argv, true);
  rank = tsr_dist_rank(), size = tsr_dist_size();
  if (size > MPI_TEST_MAX_RANKS) {
    fprintf(stderr, "%s runs on at most %d ranks (MPI_TEST_MAX_RANKS), not %d\n", argv[0],
            MPI_TEST_MAX_RANKS, size);
    tsr_dist_stop();
    return 2;
  }
  if (own_mpi) /* every rank of the test runs on this one machine */
    CHECK(tsr_dist_local_size() == size && tsr_dist_local_rank() == rank,
          "node-local rank %d of %d, want %d of %d (from MPI, not the environment)",
          tsr_dist_local_rank(), tsr_dist_local_size(), rank, size);
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  ro.ncpus = 1;
  if (argc == 3)
    ro.mpi_progress =
        strcmp(argv[2], "thread") == 0 ? TSR_MPI_PROGRESS_THREAD : TSR_MPI_PROGRESS_WORKER;
  if (which->needs & MPI_CHECK_COMM_STATS) setenv("STARPU_COMM_STATS", "1", 1);
  if (which->needs & MPI_CHECK_LOWERED_CONV) ro.kernels = TSR_KERNELS_BLIS;
  tsr_errbuf_t err = {""};
  if (tsr_runtime_init(&ro, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  if (argc == 3)
    CHECK(strcmp(tsr_runtime_mpi_progress(), argv[2]) == 0, "progress mode %s, asked for %s",
          tsr_runtime_mpi_progress(), argv[2]);
  which->run();
  tsr_runtime_fini();
  tsr_dataset_fini(&train_set), tsr_dataset_fini(&test_set);
  int all_failed;
  MPI_Allreduce(&failed, &all_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%d passed, %d failed\n", passed, all_failed);
  tsr_dist_stop();
  if (own_mpi) MPI_Finalize();
  return all_failed ? 1 : 0;
}
