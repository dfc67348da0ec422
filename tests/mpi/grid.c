/* --grid PrxPc under mpirun, mpirun -np P test_mpi_grid grid: every grid PrxPc of the ranks
 * (1xP, Px1, 2x2), MLP with --sync batch: 20 steps follow one process's losses with the global
 * batch (1e-5 relative) and end at its weights; each rank stores |W|/Pr of every matrix within
 * one column tile; StarPU-MPI's count of the bytes sent inside a grid column matches the
 * README's formula and the engine's count, across columns the engine's; the CNN and a graph net
 * (residual adds) likewise; on 4 ranks, 2x2 --sync epoch ends at the mean of the columns'
 * replicas trained alone, and whole-matrix tiles (bands) still equal one process. (common.h:
 * the command, its output.) */
#include "mpi/common.h"

/* The bytes this rank sends inside its grid column per training step, by the README's formula
 * (what `tessera plan` predicts), from the net's tilings alone: per spread dense layer above
 * another layer, input tile (i, k) on row k mod Pr, O the rows 0 .. min(NT, Pr) - 1 owning
 * output tiles; a spread input goes from its row to each other row of O (forward) and a partial
 * comes back from each (backward); below a replicated input, partials go to row k mod Pr,
 * which then sends the sum to every other row. */
static double formula_sent(tsr_net_t *net, int pr) {
  int me = rank % pr;
  double bytes = 0;
  for (int l = 1; l < net->n_layers; l++) {
    const tsr_layer_t *layer = &net->layers[l];
    if (!layer->split || layer->nparams == 0) continue;
    const tsr_tiles_t *w = layer->params[0].w, *y = layer->y;
    int kt = tsr_tiles_mt(w), nt = tsr_tiles_nt(w), o = nt < pr ? nt : pr;
    bool spread_in = net->layers[l - 1].split;
    for (int i = 0; i < tsr_tiles_mt(y); i++)
      for (int k = 0; k < kt; k++) {
        double tile = 4.0 * tsr_tiles_tile_rows(y, i) * tsr_tiles_tile_rows(w, k);
        int home = k % pr, others = o - (home < o ? 1 : 0);
        if (spread_in && me == home) bytes += others * tile;    /* forward all-gather */
        if (me != home && me < o) bytes += tile;                /* backward partial */
        if (!spread_in && me == home) bytes += (pr - 1) * tile; /* the sum to every row */
      }
  }
  return bytes;
}

/* Bytes of activation tiles this rank stores: the input batch and its labels, each layer's
 * output and gradient, the gradients of its other readers, its scratch (a conv's per-batch-tile
 * weight-gradient partials), and under a grid a dense layer's gathered inputs, partial input
 * gradients and input-gradient sums (tsr_net_memory_t.activations). */
static int64_t activation_local_bytes(const tsr_net_t *net) {
  int64_t bytes = tsr_tiles_local_bytes(net->x0) + tsr_tiles_local_bytes(net->labels);
  for (int l = 0; l < net->n_layers; l++) {
    const tsr_layer_t *layer = &net->layers[l];
    bytes += tsr_tiles_local_bytes(layer->y) + tsr_tiles_local_bytes(layer->dy);
    for (int c = 0; c + 1 < layer->lay->consumers; c++)
      bytes += tsr_tiles_local_bytes(layer->grads[c]);
    for (int s = 0; s < TSR_LAYER_MAX_SCRATCH; s++)
      if (layer->scratch[s]) bytes += tsr_tiles_local_bytes(layer->scratch[s]);
    for (int q = 0; q < net->grid_rows; q++) {
      if (layer->gathered && layer->gathered[q]) bytes += tsr_tiles_local_bytes(layer->gathered[q]);
      if (layer->partials && layer->partials[q]) bytes += tsr_tiles_local_bytes(layer->partials[q]);
    }
    if (layer->dx_sums) bytes += tsr_tiles_local_bytes(layer->dx_sums);
  }
  return bytes;
}

/* --grid PrxPc with --sync batch: Pc columns of batch B each equal one process with the global
 * batch Pc B, step by step. */
static void grid_equals_one_process(int pr, bool cnn) {
  enum { B = 16, STEPS = 20, BYTE_STEPS = 3 };
  int pc = size / pr, column = rank / pr;
  const char *model = cnn ? "cnn" : grid_graph_net ? "graph" : "mlp";
  tsr_net_t *net = make_grid_net(B, pr, cnn);
  /* Summed in rank order (--deterministic): with 3 or more columns, contributions added as they
   * arrive round differently from run to run ((a + b) + c against (a + c) + b), and after 20
   * steps that moved the CNN's weights from one process by 1.4e-5 in most runs and by 4.9e-4 in
   * some (issue 20: 6 failures in 10 on a loaded machine). The comparison with one process is
   * of the mathematics, so it is made on one fixed order; the arrival-order sum is checked
   * elsewhere (mpi-batch-*, within float tolerance of the same mean). */
  tsr_sync_t sync;
  tsr_sync_parse(&sync, "batch", NULL);
  sync.deterministic = true;
  tsr_replicas_t *rep = NULL;
  tsr_errbuf_t rerr = {""};
  CHECK(tsr__replicas_create(&rep, net, &sync, NULL, &rerr) == 0, "replicas: %s", rerr.msg);
  int32_t *rows = batch_rows(B, STEPS);
  int counts[MPI_TEST_MAX_RANKS];
  equal_counts(counts, B);
  double loss[STEPS];
  for (int k = 0; k < STEPS; k++) {
    tsr__replicas_count(rep, counts);
    /* Column c takes part c of the step's global batch (rows of Pc B). */
    CHECK(tsr_net_train_step(net, &train_set, rows + (k * pc + column) * B, B, true) == 0,
          "%s %dx%d: step %d", model, pr, pc, k + 1);
    double correct;
    CHECK(tsr__replicas_reduce_stats(rep, &loss[k], &correct) == 0, "%s %dx%d: stats", model, pr,
          pc);
  }
  /* Bytes: a few more steps, without the statistics' transfers. */
  CHECK(tsr__progress_wait_all() == 0, "wait");
  MPI_Barrier(MPI_COMM_WORLD);
  tsr_sync_stats_t st;
  tsr__replicas_take_stats(rep, &st);
  uint64_t in0, across0, in1, across1, sent0, sent1, recv;
  int64_t msgs, msgr;
  bytes_by_peer(pr, &in0, &across0);
  tsr_net_grid_traffic(net, &sent0, &recv, &msgs, &msgr);
  for (int k = 0; k < BYTE_STEPS; k++) {
    tsr__replicas_count(rep, counts);
    CHECK(tsr_net_train_step(net, &train_set, rows + (k * pc + column) * B, B, true) == 0, "step");
  }
  CHECK(tsr__progress_wait_all() == 0, "wait");
  MPI_Barrier(MPI_COMM_WORLD);
  bytes_by_peer(pr, &in1, &across1);
  tsr_net_grid_traffic(net, &sent1, &recv, &msgs, &msgr);
  tsr__replicas_take_stats(rep, &st);
  double inside = (double)(in1 - in0), counted = (double)(sent1 - sent0);
  double across = (double)(across1 - across0), synced = (double)st.bytes_sent;
  double formula = formula_sent(net, pr) * BYTE_STEPS;
  CHECK(fabs(inside - formula) <= 0.05 * formula + 1,
        "%s %dx%d: bytes sent inside the grid column: StarPU-MPI %.0f, the README's formula %.0f",
        model, pr, pc, inside, formula);
  CHECK(fabs(inside - counted) <= 0.05 * counted + 1,
        "%s %dx%d: bytes sent inside the grid column: StarPU-MPI %.0f, the engine %.0f", model, pr,
        pc, inside, counted);
  CHECK(fabs(across - synced) <= 0.05 * synced + 1,
        "%s %dx%d: bytes sent across grid columns: StarPU-MPI %.0f, the engine %.0f", model, pr, pc,
        across, synced);
  /* Not vacuous: row 0 sends inside its column where the formula says so, and every rank that
   * stores a slice averages it across columns. */
  if (pr > 1 && rank == 0 && formula > 0)
    CHECK(counted > 0, "%s %dx%d: row 0 must send inside its column", model, pr, pc);
  if (pc > 1 && tsr_net_param_local_bytes(net) > 0)
    CHECK(synced > 0, "%s %dx%d: every rank averages its slice across columns", model, pr, pc);
  /* Memory: each dense matrix's tiles on this rank are its 1/Pr share within one column tile. */
  for (int l = 0; l < net->n_layers; l++)
    for (int k = 0; k < net->layers[l].nparams; k++) {
      const tsr_tiles_t *w = net->layers[l].params[k].w;
      double whole = (double)(tsr_tiles_rows(w) * tsr_tiles_cols(w)) * sizeof(float);
      double tile = (double)tsr_tiles_rows(w) * tsr_tiles_nb(w) * sizeof(float);
      double here = (double)tsr_tiles_local_bytes(w);
      /* Convolutions stay whole on every rank of the column. */
      double share = net->layers[l].split ? whole / pr : whole;
      CHECK(fabs(here - share) <= tile,
            "%s %dx%d: layer %d parameter %d: %.0f bytes here, want %.0f (tile column %.0f)", model,
            pr, pc, l + 1, k, here, share, tile);
    }
  /* The memory estimate counts the busiest rank's parameters: row 0's (the logits are there). */
  tsr_net_memory_t m;
  tsr_errbuf_t err = {""};
  CHECK(tsr_net_estimate(&m, &net->spec, (int)train_set.features, train_set.classes, &net->opts,
                         &err) == 0,
        "estimate: %s", err.msg);
  int64_t stored = tsr_net_param_local_bytes(net);
  CHECK(rank % pr == 0 ? m.params == stored : m.params >= stored,
        "%s %dx%d: %lld parameter bytes estimated, %lld stored here (row %d)", model, pr, pc,
        (long long)m.params, (long long)stored, rank % pr);
  /* And its activations: row 0 holds exactly what the estimate counts, the other rows no more. */
  int64_t acts = activation_local_bytes(net);
  CHECK(rank % pr == 0 ? m.activations == acts : m.activations >= acts,
        "%s %dx%d: %lld activation bytes estimated, %lld stored here (row %d)", model, pr, pc,
        (long long)m.activations, (long long)acts, rank % pr);
  tsr__replicas_destroy(&rep);
  int64_t n;
  float *w = grid_params(net, pc, &n);
  if (rank == 0) {
    tsr_net_t *one = make_grid_net(B * pc, 1, cnn), *start = make_grid_net(B * pc, 1, cnn);
    double worst = 0;
    for (int k = 0; k < STEPS; k++) {
      tsr_net_train_step(one, &train_set, rows + k * pc * B, B * pc, true);
      double ref, correct;
      tsr_net_take_stats(one, false, &ref, &correct);
      double d = fabs(loss[k] - ref) / fabs(ref);
      worst = d > worst ? d : worst;
    }
    CHECK(worst <= 1e-5, "%s %dx%d: losses over %d steps vs one process with batch %d: %g", model,
          pr, pc, STEPS, B * pc, worst);
    for (int k = 0; k < BYTE_STEPS; k++) /* the byte count's steps */
      tsr_net_train_step(one, &train_set, rows + k * pc * B, B * pc, true);
    int64_t m;
    float *ref = params(one, &m), *w0 = params(start, &m);
    double d = max_rel_diff(w, ref, n), moved = max_rel_diff(w0, ref, n);
    /* The graph's residual sums amplify the averaging's other order of additions more (1x4, no
     * grid at all, ends 3e-4 from one process); along a column (Px1) it is bit for bit. */
    double wtol = grid_graph_net ? 1e-3 : 1e-4;
    CHECK(d <= wtol, "%s %dx%d: weights after %d steps vs one process: %g", model, pr, pc, STEPS,
          d);
    CHECK(moved > 1e-2, "%s %dx%d: training must move the weights (%g)", model, pr, pc, moved);
    printf(
        "grid %s %dx%d: losses within %.2e of one process (batch %d, %d steps), then weights %.2e; "
        "rank 0 sent %.0f bytes per step inside its column, %.0f across\n",
        model, pr, pc, worst, B * pc, STEPS, d, counted / BYTE_STEPS, synced / BYTE_STEPS);
    free(ref), free(w0);
    tsr_net_destroy(&one), tsr_net_destroy(&start);
  }
  free(w), free(rows);
  tsr_net_destroy(&net);
}

/* --grid PrxPc with --sync epoch: one epoch ends at the mean of the columns' replicas trained
 * alone (--sync none), each rank averaging its slice with its grid row. */
static void grid_epoch_is_mean(int pr) {
  int pc = size / pr;
  tsr_net_t *avg = make_grid_net(16, pr, false), *alone = make_grid_net(16, pr, false);
  train(avg, "epoch", 1, false);
  train(alone, "none", 1, false);
  int64_t n;
  float *w = grid_params(avg, pc, &n), *mean = grid_params(alone, pc, &n);
  double d = max_rel_diff(w, mean, n);
  CHECK(d <= 1e-5, "mlp %dx%d, epoch: weights vs the mean of the columns' replicas: %g", pr, pc, d);
  /* The columns' replicas differ from their mean, else the check says little. */
  float *own = calloc((size_t)n, sizeof(float));
  int64_t off = 0;
  for (int l = 0; l < alone->n_layers; l++)
    for (int k = 0; k < alone->layers[l].nparams; k++) {
      const tsr_tiles_t *t = alone->layers[l].params[k].w;
      tsr_tiles_read_owned(t, own + off);
      off += tsr_tiles_rows(t) * tsr_tiles_cols(t);
    }
  double spread = 0;
  for (int64_t i = 0; i < n; i++)
    if (own[i] != 0.0f) {
      double e = fabs((double)own[i] - mean[i]) / (1e-3 + fabs((double)mean[i]));
      spread = e > spread ? e : spread;
    }
  CHECK(spread > 1e-3, "mlp %dx%d: a column's replica should differ from the mean (%g)", pr, pc,
        spread);
  if (rank == 0)
    printf("grid mlp %dx%d, --sync epoch: %.2e from the mean of the columns' replicas\n", pr, pc,
           d);
  free(w), free(mean), free(own);
  tsr_net_destroy(&avg), tsr_net_destroy(&alone);
}

/* Every grid shape of the ranks: 1xP (data parallel), Px1 (model parallel) and 2x2. */
static void test_grid(void) {
  load(16 * size * 20);
  for (int cnn = 0; cnn < 2; cnn++)
    for (int pr = 1; pr <= size; pr++)
      if (size % pr == 0 && (pr == 1 || pr == size || pr == 2)) grid_equals_one_process(pr, cnn);
  grid_graph_net = true;
  for (int pr = 1; pr <= size; pr++)
    if (size % pr == 0 && (pr == size || pr == 2)) grid_equals_one_process(pr, false);
  grid_graph_net = false;
  if (size % 2 == 0 && size > 2) grid_epoch_is_mean(2);
  /* Whole-matrix tiles: everything on row 0, and the averaging cuts tiles into bands (staged
   * like the weights). */
  if (size == 4) {
    tile_rows = tile_cols = WHOLE;
    grid_equals_one_process(2, false);
    tile_rows = tile_cols = 16;
  }
}

const mpi_check_t mpi_checks[] = {
    {"grid", test_grid, MPI_CHECK_COMM_STATS},
    {NULL, NULL, 0},
};
