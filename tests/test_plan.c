/* The planner on hand-computed cases: GEMM flops, what one averaging moves
 * (sync.c's reduce-scatter and all-gather) against the ring optimum, the
 * grid's transfers counted tile by tile, the grid reducing to pure data and
 * pure model parallelism at its ends, the layout of the CNN, and cluster
 * files. No StarPU: machines are described, never measured. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/layers.h"
#include "nn/layout.h"
#include "plan/plan_impl.h"
#include "tessera/plan.h"
#include "tmpfile.h"

/* Round numbers: 10 GFLOP/s, 10 GB/s, alpha 1 us, beta 1 ns per byte, no gamma. */
static tsr_machine_t round_machine(void) {
  tsr_machine_t m = {.name = "round",
                     .nodes = 0,
                     .cores_per_node = 1,
                     .ranks_per_node = 1,
                     .workers = 1,
                     .gemm_gflops = 10,
                     .mem_gbs = 10,
                     .alpha = 1e-6,
                     .beta = 1e-9,
                     .gamma = 0,
                     .task_overhead = 0};
  return m;
}

static void plan(const char *model, int ranks, int pr, int pc, const char *sync, int tile,
                 tsr_plan_row_t *row) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, model, 10, &err), 0, "%s", err.msg);
  tsr_plan_opts_t o;
  tsr_plan_opts_init(&o);
  o.ranks = ranks, o.pr = pr, o.pc = pc;
  cr_assert_eq(tsr_plan_sync_parse(&o.sync, sync, &err), 0, "%s", err.msg);
  o.samples = 6400, o.tile_rows = tile ? 64 : 0, o.tile_cols = tile;
  tsr_machine_t m = round_machine();
  int n = 0;
  cr_assert_eq(tsr_plan_run(&spec, &o, &m, row, 1, &n, &err), 0, "%s", err.msg);
  cr_assert_eq(n, 1);
  tsr_model_spec_fini(&spec);
}

Test(plan, gemm_flops_are_2mnk) {
  cr_expect_eq(tsr__plan_gemm_flops(64, 512, 784), 2.0 * 64 * 512 * 784);
  cr_expect_eq(tsr__plan_gemm_flops(1, 1, 1), 2.0);
}

Test(plan, two_ranks_send_the_model_once_per_average) {
  /* One 784 x 512 tile on 2 ranks: one chunk, homed on rank 0; rank 1 sends it (reduce),
   * rank 0 sends the result back (gather): each sends |W| in one message. */
  tsr__plan_param_t p = {784, 512, 784, 512};
  tsr__plan_average_t a;
  cr_assert_eq(tsr__plan_average(&p, 1, 2, 1, false, 0, NULL, &a), 0);
  cr_expect_eq(a.chunks, 1);
  cr_expect_eq(a.sent_max, 784.0 * 512 * 4);
  cr_expect_eq(a.sent_rank0, 784.0 * 512 * 4);
  cr_expect_eq(a.messages_max, 1);
}

Test(plan, four_ranks_move_the_ring_optimum) {
  /* 16 tiles of 256 x 256 on 4 ranks: 4 tiles homed per rank, so each rank sends its 12
   * other tiles once and its 4 to 3 ranks: 24 messages, |W| + 2 |W| / 4 = 2 (P - 1) / P |W|,
   * which the ring all-reduce also moves; at alpha 1 us and beta 1 ns/B: 24 us + 6.29 ms. */
  tsr__plan_param_t p = {1024, 1024, 256, 256};
  tsr__plan_average_t a;
  cr_assert_eq(tsr__plan_average(&p, 1, 4, 1, false, 0, NULL, &a), 0);
  double w = 1024.0 * 1024 * 4;
  cr_expect_eq(a.chunks, 16);
  cr_expect_eq(a.sent_max, 2.0 * 3 / 4 * w);
  cr_expect_eq(a.messages_max, 24);
  cr_expect_eq(a.reduced_max, 3 * w / 4);
  tsr_machine_t m = round_machine();
  cr_expect_float_eq(tsr__plan_average_seconds(&a, &m), 24e-6 + 1.5 * w * 1e-9, 1e-12);
}

Test(plan, buckets_send_one_message_per_bucket) {
  /* The same 16 tiles on 4 ranks, two matrices of 512 x 1024 (8 tiles each). Buckets of 64 MiB:
   * one a home (4 tiles, 1 MiB), so each rank sends 3 buckets (one to each other home) and its
   * own to 3 ranks: 6 = 2 (P - 1) messages, flat's bytes; every bucket closes with its chunk of
   * matrix 0 (packed last), so all the bytes start after matrix 0's gradient. Buckets of 256
   * KiB (one tile): every chunk its own bucket, flat's 24 messages, and each matrix's bytes
   * start with its own gradient. */
  tsr__plan_param_t p[2] = {{512, 1024, 256, 256}, {512, 1024, 256, 256}};
  tsr__plan_average_t a, flat, tile;
  double release[2], own[2];
  cr_assert_eq(tsr__plan_average(p, 2, 4, 1, false, 0, NULL, &flat), 0);
  cr_assert_eq(tsr__plan_average(p, 2, 4, 1, false, 64u << 20, release, &a), 0);
  double w = 1024.0 * 1024 * 4;
  cr_expect_eq(a.buckets, 4);
  cr_expect_eq(a.messages_max, 6);
  cr_expect_eq(flat.messages_max, 24);
  cr_expect_eq(a.sent_max, flat.sent_max);
  cr_expect_eq(a.sent_max, 2.0 * 3 / 4 * w);
  cr_expect_eq(release[0], w);
  cr_expect_eq(release[1], 0);
  cr_assert_eq(tsr__plan_average(p, 2, 4, 1, false, 256u << 10, own, &tile), 0);
  cr_expect_eq(tile.buckets, 16);
  cr_expect_eq(tile.messages_max, 24);
  cr_expect_eq(own[0], w / 2);
  cr_expect_eq(own[1], w / 2);
  /* Two nodes of 2, one bucket a home and one node bucket an index: 2 (G - 1) + 2 (N - 1) = 4
   * messages, the ring's |W| from each node as without buckets. */
  tsr__plan_average_t two, twob;
  cr_assert_eq(tsr__plan_average(p, 2, 4, 2, true, 0, NULL, &two), 0);
  cr_assert_eq(tsr__plan_average(p, 2, 4, 2, true, 64u << 20, NULL, &twob), 0);
  cr_expect_eq(twob.messages_max, 4);
  cr_expect_eq(twob.node_sent_max, w);
  cr_expect_eq(two.node_sent_max, w);
  cr_expect_eq(twob.sent_max, two.sent_max);
}

Test(plan, three_ranks_cut_a_tile_into_bands) {
  /* One 300 x 256 tile on 3 ranks: whole, its home would send 2 |W| > 1.05 x 4/3 |W|, so sync.c
   * cuts it for 1/3 of the model each: bands of 100 rows (the divisor of 300 nearest 76800 / 3
   * floats / 256 columns), one homed per rank: |W| + |W| / 3 sent, 2 + 2 messages. */
  tsr__plan_param_t p = {300, 256, 300, 256};
  tsr__plan_average_t a;
  cr_assert_eq(tsr__plan_average(&p, 1, 3, 1, false, 0, NULL, &a), 0);
  double w = 300.0 * 256 * 4;
  cr_expect_eq(a.chunks, 3);
  cr_expect_float_eq(a.sent_max, w + w / 3, 1e-6);
  cr_expect_eq(a.messages_max, 4);
}

Test(plan, two_levels_send_the_ring_optimum_between_nodes) {
  /* The same 16 tiles on 4 ranks in 2 nodes of 2. Two levels: each index (rank of a node) takes
   * 8 whole tiles, each rank sends its node's local home the 8 tiles it does not hold and gets
   * its 8 back summed: |W| and 16 messages inside the node; then chunks (tiles here) go 8 to
   * a node, 4 to each rank, which gets the other node's band of each of its 4 and sends the
   * result back, and sends its own band of its index's 4 chunks of the other node: |W| / 2
   * and 8 messages out of the node; a node sends 2 (N - 1) / N |W| = |W| to the other, the
   * ring optimum. Flat sends 2 |W| out of each node (a rank's 12 chunks each, to or from
   * both ranks of the other node). */
  tsr__plan_param_t p = {1024, 1024, 256, 256};
  tsr__plan_average_t a, flat;
  cr_assert_eq(tsr__plan_average(&p, 1, 4, 2, true, 0, NULL, &a), 0);
  double w = 1024.0 * 1024 * 4;
  cr_expect_eq(a.chunks, 16);
  cr_expect_eq(a.intra_sent_max, w);
  cr_expect_eq(a.intra_messages_max, 16);
  cr_expect_eq(a.inter_messages_max, 8);
  cr_expect_eq(a.node_sent_max, w);
  cr_expect_eq(a.sent_max, 1.5 * w);
  cr_expect_eq(a.messages_max, 24);
  cr_expect_eq(a.reduced_max, w / 2 + w / 4);
  cr_assert_eq(tsr__plan_average(&p, 1, 4, 2, false, 0, NULL, &flat), 0);
  cr_expect_eq(flat.sent_max, 1.5 * w);
  cr_expect_eq(flat.node_sent_max, 2 * w);
  /* Intra-node links 10x faster: two levels cost 16 x 0.1 us + |W| x 0.1 ns inside, 8 us +
   * |W| ns between the nodes. */
  tsr_machine_t m = round_machine();
  m.intra_alpha = 1e-7, m.intra_beta = 1e-10;
  cr_expect_float_eq(tsr__plan_average_seconds(&a, &m), 16e-7 + w * 1e-10 + 8e-6 + w * 1e-9, 1e-12);
}

Test(plan, two_levels_cut_the_messages_of_thousands_of_ranks) {
  /* Issue 24's target: the MLP 4096x2 on 8,192 ranks of ib100 (1,024 nodes of 8) averaged
   * every step sent 80,135 messages from its busiest rank, flat; two levels at most 1/20. */
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp:4096,4096", 10, &err), 0, "%s", err.msg);
  tsr_plan_opts_t o;
  tsr_plan_opts_init(&o);
  o.ranks = 8192, o.pr = 1, o.pc = 8192, o.batch = 128;
  cr_assert_eq(tsr_plan_sync_parse(&o.sync, "batch", &err), 0, "%s", err.msg);
  tsr_machine_t m = round_machine();
  m.cores_per_node = 32, m.ranks_per_node = 8, m.workers = 4;
  tsr_plan_row_t flat, two;
  int n = 0;
  o.allreduce = TSR_ALLREDUCE_FLAT;
  cr_assert_eq(tsr_plan_run(&spec, &o, &m, &flat, 1, &n, &err), 0, "%s", err.msg);
  o.allreduce = TSR_ALLREDUCE_AUTO;
  cr_assert_eq(tsr_plan_run(&spec, &o, &m, &two, 1, &n, &err), 0, "%s", err.msg);
  cr_expect(!flat.two_level && two.two_level);
  cr_expect_eq(two.nodes, 1024);
  cr_expect_eq(two.node_size, 8);
  cr_expect_eq(flat.sync_messages_step, 80135);
  cr_expect(two.sync_messages_step <= 80135 / 20, "%.0f messages", two.sync_messages_step);
  /* Between nodes, each node sends within 5% of the ring's 2 (N - 1) / N |W|. */
  double w = 4.0 * (784 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10);
  double ring = 2.0 * 1023 / 1024 * w;
  cr_expect(two.node_bytes_step >= ring && two.node_bytes_step <= 1.05 * ring, "%g vs %g",
            two.node_bytes_step, ring);
  cr_expect(flat.node_bytes_step > 7 * ring, "%g", flat.node_bytes_step);
  tsr_model_spec_fini(&spec);
}

Test(plan, one_rank_moves_nothing) {
  tsr_plan_row_t r;
  plan("mlp:512,512", 1, 1, 1, "batch", 0, &r);
  cr_expect_eq(r.grid_bytes_step, 0);
  cr_expect_eq(r.sync_bytes_epoch, 0);
  cr_expect_eq(r.exposed_sync_s, 0);
  cr_expect_eq(r.steps_per_epoch, 100); /* 6400 / 64 */
}

/* A run's description gives the planner its options (tsr_plan_opts_from_run, what --domain
 * auto plans with): every field taken from the run, a policy the planner does not model left at
 * the default, nothing from a run without a policy. */
Test(plan, the_options_come_from_the_run_described) {
  tsr_sync_t sync;
  cr_assert_eq(tsr_sync_parse(&sync, "every=4", NULL), 0);
  sync.allreduce = TSR_ALLREDUCE_TWO_LEVEL, sync.node_size = 2, sync.bucket_mb = 3;
  tsr_run_config_t c;
  tsr_run_config_init(&c);
  c.inputs = 3072, c.classes = 100, c.samples = 50000, c.sync = &sync;
  c.net.batch = 32, c.net.grid_rows = 2, c.net.tile_rows = 16, c.net.tile_cols = 64;
  c.net.in_channels = 3, c.net.in_height = 32, c.net.in_width = 32;
  c.net.domain = true, c.net.domain_layers = 2;
  cr_assert_eq(tsr_optimizer_init(&c.net.opt, "adam", NULL), 0);
  tsr_plan_opts_t o;
  tsr_plan_opts_from_run(&o, &c, 8);
  cr_expect(o.inputs == 3072 && o.classes == 100 && o.samples == 50000 && o.batch == 32);
  cr_expect(o.ranks == 8 && o.pr == 2 && o.pc == 4 && !o.all_policies);
  cr_expect(o.sync.kind == TSR_SYNC_EVERY && o.sync.every == 4);
  cr_expect_eq(o.nstate, 2); /* Adam's two moments */
  cr_expect(o.tile_rows == 16 && o.tile_cols == 64);
  cr_expect(o.in_channels == 3 && o.in_height == 32 && o.in_width == 32);
  cr_expect(o.allreduce == TSR_ALLREDUCE_TWO_LEVEL && o.node_size == 2 && o.bucket_mb == 3);
  cr_expect(o.domain == TSR_PLAN_DOMAIN_ROWS && o.domain_layers == 2);
  cr_assert_eq(tsr_sync_parse(&sync, "async-epoch", NULL), 0); /* not modelled */
  c.net.grid_rows = 0, c.net.domain = false;
  tsr_plan_opts_from_run(&o, &c, 8);
  cr_expect(o.sync.kind == TSR_SYNC_BATCH && o.pr == 1 && o.pc == 8);
  cr_expect(o.domain == TSR_PLAN_DOMAIN_NONE);
  c.sync = NULL;
  tsr_plan_opts_from_run(&o, &c, 8);
  cr_expect(o.sync.kind == TSR_SYNC_BATCH && o.allreduce == TSR_ALLREDUCE_AUTO &&
            o.node_size == 0 && o.bucket_mb == 0);
}

Test(plan, pure_data_parallelism_has_no_grid_transfers) {
  tsr_plan_row_t r;
  plan("mlp:512,512", 4, 1, 4, "batch", 256, &r);
  cr_expect_eq(r.grid_bytes_step, 0);
  cr_expect_eq(r.grid_s, 0);
  /* Every parameter, 784 x 512 + 512 + 512 x 512 + 512 + 512 x 10 + 10 floats, averaged every
   * step at the ring optimum (16x16 tiles balance on 4 ranks within 5%). */
  double w = 4.0 * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  cr_expect(r.sync_bytes_step >= 1.5 * w && r.sync_bytes_step <= 1.05 * 1.5 * w, "%g vs %g",
            r.sync_bytes_step, 1.5 * w);
  cr_expect_eq(r.steps_per_epoch, 25); /* 6400 / 4 ranks / 64 */
}

Test(plan, pure_model_parallelism_has_no_averaging) {
  tsr_plan_row_t r;
  plan("mlp:512,512", 2, 2, 1, "batch", 256, &r);
  cr_expect_eq(r.sync_bytes_step, 0);
  cr_expect_eq(r.sync_bytes_epoch, 0);
  cr_expect_eq(r.exposed_sync_s, 0);
  /* 64 x 256 tiles, 2 rows; row 0 owns feature tiles 0, row 1 tiles 1:
   * forward, layer 2's input tile k goes to the row that lacks it (64 x 256 x 4 B each way),
   * and row 1's tile to row 0 for the logits; backward, layer 3's partial for tile 1 goes to
   * row 1, and layer 2's partials cross both ways. Layer 1's input is the batch: nothing.
   * Each row sends 3 tiles: 196,608 bytes in 3 messages. */
  cr_expect_eq(r.grid_bytes_step, 3 * 64 * 256 * 4.0);
  cr_expect_eq(r.grid_messages_step, 3);
  cr_expect_eq(r.steps_per_epoch, 100);
}

Test(plan, a_grid_splits_the_dense_work) {
  tsr_plan_row_t one, two;
  plan("mlp:512,512", 1, 1, 1, "batch", 256, &one);
  plan("mlp:512,512", 2, 2, 1, "batch", 256, &two);
  /* Row 0 computes half of each hidden layer's tiles and all of the logits: per step
   * 2 x 64 (784 x 256 + 512 x 256 + 512 x 10) x 3 passes, less the first layer's input gradient
   * (784 x 256, not computed). */
  double half = 2.0 * 64 * (784 * 256 + 512 * 256 + 512 * 10) * 3 - 2.0 * 64 * 784 * 256;
  double all = 2.0 * 64 * (784 * 512 + 512 * 512 + 512 * 10) * 3 - 2.0 * 64 * 784 * 512;
  cr_expect_float_eq(two.flops_step, half, 1);
  cr_expect_float_eq(one.flops_step, all, 1);
}

Test(plan, epoch_averaging_sends_once_per_epoch) {
  tsr_plan_row_t b, e;
  plan("mlp:512,512", 2, 1, 2, "batch", 0, &b);
  plan("mlp:512,512", 2, 1, 2, "epoch", 0, &e);
  double w = 4.0 * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  cr_expect_eq(e.sync_bytes_epoch, w);
  cr_expect_eq(b.sync_bytes_epoch, 50 * w); /* 6400 / 2 / 64 steps */
  cr_expect(e.epoch_s < b.epoch_s);
}

Test(plan, grid_must_match_the_ranks) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp", 10, &err), 0);
  tsr_plan_opts_t o;
  tsr_plan_opts_init(&o);
  o.ranks = 6, o.pr = 4, o.pc = 2;
  tsr_machine_t m = round_machine();
  tsr_plan_row_t rows[4];
  int n;
  cr_expect_eq(tsr_plan_run(&spec, &o, &m, rows, 4, &n, &err), TSR_EINVAL);
  cr_expect(strstr(err.msg, "4x2") != NULL, "%s", err.msg);
  tsr_model_spec_fini(&spec);
}

Test(plan, every_grid_shape_and_policy) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp", 10, &err), 0);
  tsr_plan_opts_t o;
  tsr_plan_opts_init(&o);
  o.ranks = 12, o.all_policies = true;
  tsr_machine_t m = round_machine();
  tsr_plan_row_t rows[64];
  int n, best = 0;
  cr_assert_eq(tsr_plan_run(&spec, &o, &m, rows, 64, &n, &err), 0, "%s", err.msg);
  cr_expect_eq(n, 6 * 3); /* 1x12 2x6 3x4 4x3 6x2 12x1, three policies each */
  for (int i = 0; i < n; i++) {
    cr_expect_eq(rows[i].pr * rows[i].pc, 12);
    best += rows[i].best;
    for (int k = 0; k < n; k++)
      if (rows[i].best) cr_expect(rows[i].epoch_s <= rows[k].epoch_s);
  }
  cr_expect_eq(best, 1);
  tsr_model_spec_fini(&spec);
}

/* The batch-row tile of a network with convolutions: one tile per worker, but not under the
 * samples that make a typical task worth its overhead (16 MFLOP, the flops-weighted mean of the
 * layers'): a 32x32 ResNet keeps 4 samples, a 224x224 ResNet-50 goes down to one per worker. */
static int conv_rows(const char *model, int c, int h, int w, int batch, int workers) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, model, 10, &err), 0, "%s", err.msg);
  tsr_model_bind_classes(&spec, 10);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = batch, o.in_channels = c, o.in_height = h, o.in_width = w;
  tsr_net_layout_t lay;
  cr_assert_eq(tsr__net_layout(&lay, &spec, c * h * w, 10, &o, workers, &err), 0, "%s", err.msg);
  int mb = lay.mb;
  tsr__net_layout_fini(&lay);
  tsr_model_spec_fini(&spec);
  return mb;
}

Test(plan, convolution_tiles_from_the_work_per_sample) {
  cr_expect_eq(conv_rows("resnet20", 3, 32, 32, 128, 2), 64);
  cr_expect_eq(conv_rows("resnet20", 3, 32, 32, 8, 2), 4); /* 4.7 MFLOP a convolution: 4 rows */
  cr_expect_eq(conv_rows("resnet50", 3, 224, 224, 8, 2), 4);
  cr_expect_eq(conv_rows("resnet50", 3, 224, 224, 8, 4), 2);
  cr_expect_eq(conv_rows("cnn", 1, 28, 28, 64, 2), 32);
  cr_expect_eq(conv_rows("cnn", 1, 28, 28, 8, 4), 3); /* 7.2 and 0.45 MFLOP: 3 rows, not 2 */
}

Test(plan, cnn_layout_is_whole_samples_then_dense) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "cnn", 10, &err), 0);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  tsr_net_layout_t lay;
  cr_assert_eq(tsr__net_layout(&lay, &spec, 784, 10, &o, 2, &err), 0, "%s", err.msg);
  /* conv+relu, pool, conv+relu, pool, dense+relu, dense: flatten builds nothing. */
  cr_assert_eq(lay.n_layers, 6);
  cr_expect_eq(lay.mb, 32); /* one batch-row tile per worker */
  cr_expect(lay.layers[0].whole_samples && lay.layers[0].relu && !lay.layers[0].has_dx);
  cr_expect_eq(lay.layers[3].fout, 7 * 7 * 64);
  cr_expect_eq(lay.layers[4].kind, TSR_LAYER_DENSE);
  cr_expect_eq(lay.layers[4].in_nb, 3136); /* whole samples after a convolution */
  cr_expect_eq(lay.layers[5].out_nb, 10);
  cr_expect(lay.layers[5].has_dx);
  tsr__net_layout_fini(&lay);
  tsr_model_spec_fini(&spec);
}

Test(plan, cluster_files) {
  tsr_machine_t m;
  tsr_errbuf_t err = {""};
  char *p = write_temp("[cluster]\nname = ib\nnodes = 64\ncores_per_node = 32\n"
                       "gflops_per_core = 50\nmem_gbs = 8\nlatency_us = 2\n"
                       "bandwidth_gbits = 100\n");
  cr_assert_eq(tsr_machine_load_ini(&m, p, &err), 0, "%s", err.msg);
  cr_expect_str_eq(m.name, "ib");
  cr_expect_eq(m.ranks_per_node, 8); /* 4 workers a rank: StarPU's cap */
  cr_expect_float_eq(m.alpha, 2e-6, 1e-15);
  cr_expect_float_eq(m.beta, 8.0 / 100e9, 1e-18);
  unlink(p);
  p = write_temp("[cluster]\ncores_per_node = 32\nlatency = 2\n");
  cr_expect_eq(tsr_machine_load_ini(&m, p, &err), TSR_EFORMAT);
  cr_expect(strstr(err.msg, "unknown key 'latency'") != NULL, "%s", err.msg);
  unlink(p);
  p = write_temp("[cluster]\ncores_per_node = 32\nmem_gbs = 8\nbandwidth_gbits = 10\n");
  cr_expect_eq(tsr_machine_load_ini(&m, p, &err), TSR_EFORMAT);
  cr_expect(strstr(err.msg, "gflops_per_core") != NULL, "%s", err.msg);
  unlink(p);
}

/* Every value is range-checked before it is converted (issue 20: 1e20 cores overflowed the int
 * cast and read as "missing or 0"; 1e9 ranks per node overflowed a product; 1e300 nodes made
 * 300-digit table cells). Each bad value is refused with its key, its value and the range. */
Test(plan, cluster_values_out_of_range_are_refused_with_their_range) {
  static const struct {
    const char *line, *says;
  } bad[] = {
      {"cores_per_node = 1e20", "cores_per_node = 1e20 is out of range: expected a whole number "
                                "from 1 to 65536"},
      {"cores_per_node = 3e9", "cores_per_node = 3e9 is out of range"},
      {"cores_per_node = inf", "cores_per_node = inf is not a finite number"},
      {"cores_per_node = 0.5", "cores_per_node = 0.5 is not a whole number"},
      {"cores_per_node = 0", "cores_per_node = 0 is out of range"},
      {"bandwidth_gbits = 1e308", "bandwidth_gbits = 1e308 is out of range"},
      {"bandwidth_gbits = 0", "bandwidth_gbits = 0 is out of range: expected a number above 0"},
      {"ranks_per_node = 1e9", "ranks_per_node = 1e9 is out of range"},
      {"latency_us = 1e308", "latency_us = 1e308 is out of range"},
      {"nodes = 1e300", "nodes = 1e300 is out of range"},
      {"workers = 1e12", "workers = 1e12 is out of range"},
      {"mem_gbs = inf", "mem_gbs = inf is not a finite number"},
      {"mem_gbs = nan", "mem_gbs = nan is not a finite number"},
      {"mem_gbs = 1e-320", "mem_gbs = 1e-320 is out of range"},
      {"mem_gbs = -2", "mem_gbs = -2 is out of range"},
      {"mem_gbs = 2x", "mem_gbs = 2x is not a number"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char text[256];
    /* The bad line last: it overrides the good value before it. */
    snprintf(text, sizeof text,
             "[cluster]\ncores_per_node = 32\ngflops_per_core = 50\nmem_gbs = 8\n"
             "bandwidth_gbits = 100\n%s\n",
             bad[i].line);
    tsr_machine_t m;
    tsr_errbuf_t err = {""};
    cr_expect_eq(tsr__machine_parse_ini_mem(&m, text, strlen(text), "c.ini", &err), TSR_EFORMAT,
                 "%s accepted", bad[i].line);
    cr_expect(strstr(err.msg, bad[i].says) != NULL, "%s: %s", bad[i].line, err.msg);
    cr_expect(strncmp(err.msg, "c.ini: ", 7) == 0, "%s", err.msg);
  }
  /* The ends of each range are accepted. */
  const char *edge = "[cluster]\nnodes = 0\ncores_per_node = 65536\nranks_per_node = 65536\n"
                     "workers = 4096\ngflops_per_core = 1e6\nmem_gbs = 1e5\nlatency_us = 0\n"
                     "bandwidth_gbits = 1e6\ngamma_gbs = 0\ntask_overhead_us = 0\n";
  tsr_machine_t m;
  tsr_errbuf_t err = {""};
  cr_expect_eq(tsr__machine_parse_ini_mem(&m, edge, strlen(edge), "edge.ini", &err), 0, "%s",
               err.msg);
  cr_expect_eq(m.cores_per_node, 65536);
  cr_expect_eq(m.workers, 4096);
}

Test(plan, a_cluster_path_that_is_a_directory_says_so) {
  tsr_machine_t m;
  tsr_errbuf_t err = {""};
  cr_expect_eq(tsr_machine_load_ini(&m, "/tmp", &err), TSR_EIO);
  cr_expect(strstr(err.msg, "/tmp: is a folder, not a cluster file") != NULL, "%s", err.msg);
}

Test(plan, grid_count_matches_the_grid_branchs_example) {
  /* The grid README's example: MLP 784-64-32-10 in 16x16 tiles, batch 16, 2x1. Each row sends
   * 5 tiles of 1 KB per step: layer 2 (4 input tiles, both rows own output) 2 forward and 2
   * partials backward; the logits (row 0 only) row 1's input tile forward, or row 0's partial
   * of tile 1 backward. */
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp:64,32", 10, &err), 0);
  tsr_plan_opts_t o;
  tsr_plan_opts_init(&o);
  o.ranks = 2, o.pr = 2, o.pc = 1, o.batch = 16, o.tile_rows = 16, o.tile_cols = 16;
  tsr_machine_t m = round_machine();
  tsr_plan_row_t r;
  int n;
  cr_assert_eq(tsr_plan_run(&spec, &o, &m, &r, 1, &n, &err), 0, "%s", err.msg);
  cr_expect_eq(r.grid_bytes_step, 5 * 1024.0);
  cr_expect_eq(r.grid_messages_step, 5);
  tsr_model_spec_fini(&spec);
}

Test(plan, grid_caps_the_feature_tile_at_the_widest_layer_over_pr) {
  /* mlp:512,512 on one worker picks 1024-wide tiles: one tile column, nothing for row 1.
   * Under 2x1 the tile is capped at 512 / 2 = 256, as tessera train --grid does. */
  tsr_plan_row_t r;
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp:512,512", 10, &err), 0);
  tsr_plan_opts_t o;
  tsr_plan_opts_init(&o);
  o.ranks = 2, o.pr = 2, o.pc = 1;
  tsr_machine_t m = round_machine();
  int n;
  cr_assert_eq(tsr_plan_run(&spec, &o, &m, &r, 1, &n, &err), 0, "%s", err.msg);
  cr_expect_eq(r.tile_cols, 256);
  cr_expect_eq(r.tile_rows, 64);
  cr_expect(r.grid_bytes_step > 0);
  tsr_model_spec_fini(&spec);
}

/* The planner's memory per rank is the memory estimate of the rank it plans for (row 0 of a
 * grid column: tsr_net_estimate's count for that column's batch, tiles and grid, the layout
 * both read) plus the averaging's buffers when there are columns to average across: the sums
 * of the chunks the rank homes, 1/Pc of its parameters, and under batch their updated copies
 * as many again. For the MLP, the CNN (whose per-batch-tile weight-gradient partials and
 * lowered inputs are activations and workspace too: the planner once left the workspace out)
 * and MLP 64-32, on every grid of 4 ranks, with batch and epoch averaging. */
Test(plan, memory_per_rank_is_the_estimate_of_that_rank) {
  static const char *const models[] = {"mlp", "cnn", "mlp:64,32"};
  static const char *const policies[] = {"batch", "epoch"};
  for (int k = 0; k < 3; k++)
    for (int s = 0; s < 2; s++) {
      tsr_model_spec_t spec;
      tsr_errbuf_t err = {""};
      cr_assert_eq(tsr_model_parse(&spec, models[k], 10, &err), 0, "%s", err.msg);
      tsr_plan_opts_t o;
      tsr_plan_opts_init(&o);
      o.ranks = 4, o.batch = 32;
      cr_assert_eq(tsr_plan_sync_parse(&o.sync, policies[s], &err), 0, "%s", err.msg);
      tsr_machine_t m = round_machine();
      tsr_plan_row_t rows[8];
      int n = 0;
      cr_assert_eq(tsr_plan_run(&spec, &o, &m, rows, 8, &n, &err), 0, "%s", err.msg);
      cr_assert_geq(n, 2, "%s: every grid of 4 ranks", models[k]);
      for (int r = 0; r < n; r++) {
        tsr_net_opts_t no;
        tsr_net_opts_init(&no);
        no.batch = o.batch, no.grid_rows = rows[r].pr;
        no.tile_rows = rows[r].tile_rows, no.tile_cols = rows[r].tile_cols;
        tsr_net_layout_t lay;
        cr_assert_eq(tsr__net_layout_build(&lay, &spec, 784, 10, &no, 1, o.nstate, &err), 0, "%s",
                     err.msg);
        cr_assert_eq(lay.grid_rc, 0, "%s", lay.grid_err.msg);
        const tsr_net_memory_t *mem = &lay.memory;
        int pc = rows[r].pc;
        double sums = pc > 1 ? (double)mem->params / pc * (s == 0 ? 2 : 1) : 0;
        double want = (double)mem->total + sums;
        cr_assert(fabs(rows[r].memory_bytes - want) <= 1e-9 * want,
                  "%s %dx%d --sync %s: the planner holds %.0f bytes per rank, the estimate %lld "
                  "(params %lld, activations %lld, workspace %lld) + sums %.0f = %.0f",
                  models[k], rows[r].pr, pc, policies[s], rows[r].memory_bytes,
                  (long long)mem->total, (long long)mem->params, (long long)mem->activations,
                  (long long)mem->workspace, sums, want);
        tsr__net_layout_fini(&lay);
      }
      tsr_model_spec_fini(&spec);
    }
}

/* Under --grid 2x1 a dense layer's tile columns alternate between the two grid rows, and the
 * memory estimate counts what row 0 holds at the columns' own widths: 600 features in tiles of
 * 256 are columns of 256, 256 and 88, row 0 holding the first and the last, 344 features (not
 * 512: a narrow last tile counted whole), and the layer's parameters 785 x 344 floats. */
Test(plan, memory_counts_a_narrow_last_tile_column_at_its_width) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp:600", 10, &err), 0, "%s", err.msg);
  tsr_net_opts_t no;
  tsr_net_opts_init(&no);
  no.batch = 32, no.grid_rows = 2, no.tile_rows = 32, no.tile_cols = 256;
  tsr_net_layout_t lay;
  cr_assert_eq(tsr__net_layout_build(&lay, &spec, 784, 10, &no, 1, 1, &err), 0, "%s", err.msg);
  cr_assert_eq(lay.grid_rc, 0, "%s", lay.grid_err.msg);
  int found = 0;
  for (int j = 0; j < lay.n_layers; j++) {
    const tsr_layout_layer_t *l = &lay.layers[j];
    if (l->fout != 600) continue;
    found++;
    cr_expect_eq(l->place, TSR_PLACE_SPREAD, "the hidden dense layer is spread over the rows");
    cr_expect_eq(l->share, 344, "row 0 holds %lld of the 600 features; its columns are 344",
                 (long long)l->share);
    cr_expect_eq(l->param_floats, 785 * 344,
                 "row 0's parameters: %lld floats; its columns hold 785 x 344",
                 (long long)l->param_floats);
  }
  cr_expect_eq(found, 1, "one layer of 600 features");
  tsr__net_layout_fini(&lay);
  tsr_model_spec_fini(&spec);
}

/* tessera plan --layers: the step's layers, in the layout's order, add up to the step: on one
 * worker with no task overhead the compute is every task's seconds, the layers' forward and
 * backward plus the batch's assembly (its rows and labels, read and written: 2 x 4 x 64 x 785
 * bytes) and the loss (3 x 4 x 64 x 10 bytes), each bytes / 10 GB/s; the layers' flops are the
 * step's. The MLP 784-512-512-10 is three dense layers (the ReLUs fused), each with flops. */
Test(plan, the_layers_of_a_plan_add_up_to_its_step) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp", 10, &err), 0, "%s", err.msg);
  tsr_plan_opts_t o;
  tsr_plan_opts_init(&o);
  o.ranks = 1, o.batch = 64, o.samples = 6400;
  cr_assert_eq(tsr_plan_sync_parse(&o.sync, "batch", &err), 0, "%s", err.msg);
  tsr_machine_t m = round_machine();
  tsr_plan_row_t row;
  int n = 0;
  cr_assert_eq(tsr_plan_run(&spec, &o, &m, &row, 1, &n, &err), 0, "%s", err.msg);
  tsr_plan_layer_t layers[8];
  cr_assert_eq(tsr_plan_layers(&spec, &o, &m, &row, layers, 8, &n, &err), 0, "%s", err.msg);
  cr_assert_eq(n, 3, "%d layers", n);
  double work = 0, flops = 0;
  for (int k = 0; k < n; k++) {
    cr_expect_str_eq(layers[k].type, "dense");
    cr_expect(layers[k].name[0] != '\0');
    cr_expect(layers[k].forward_s > 0 && layers[k].backward_s > layers[k].forward_s,
              "layer %d: forward %g s, backward %g s (two GEMMs and an update)", k + 1,
              layers[k].forward_s, layers[k].backward_s);
    cr_expect(layers[k].flops > 0);
    work += layers[k].forward_s + layers[k].backward_s, flops += layers[k].flops;
  }
  double rest = (4.0 * 2 * 64 * 785 + 4.0 * 3 * 64 * 10) / 10e9;
  cr_expect(fabs(work + rest - row.compute_s) <= 1e-9 * row.compute_s,
            "layers %g s + assembly and loss %g s, the step's compute %g s", work, rest,
            row.compute_s);
  cr_expect(fabs(flops - row.flops_step) <= 1e-9 * row.flops_step, "layers %g flops, step %g",
            flops, row.flops_step);
  cr_expect_eq(tsr_plan_layers(&spec, &o, &m, &row, layers, 2, &n, &err), TSR_EINVAL);
  cr_expect(strstr(err.msg, "3 layers, room for 2"), "%s", err.msg);
  tsr_model_spec_fini(&spec);
}

/* An epoch's steps count its last, partial batch: 60,000 samples in batches of 64 are 937 full
 * batches and one of 32, so 938 steps; on 7 ranks each shard has ceil(60000 / 7) = 8572
 * samples, 134 steps (133 full and one of 60); 64 samples are exactly 1 step. */
Test(plan, steps_per_epoch_count_the_last_partial_batch) {
  static const struct {
    int64_t samples;
    int ranks;
    int64_t steps;
  } cases[] = {{60000, 1, 938}, {60000, 7, 134}, {64, 1, 1}, {65, 1, 2}, {6400, 1, 100}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    tsr_model_spec_t spec;
    tsr_errbuf_t err = {""};
    cr_assert_eq(tsr_model_parse(&spec, "mlp:64", 10, &err), 0, "%s", err.msg);
    tsr_plan_opts_t o;
    tsr_plan_opts_init(&o);
    o.samples = cases[k].samples, o.ranks = cases[k].ranks, o.pr = 1, o.pc = cases[k].ranks;
    o.batch = 64;
    tsr_machine_t m = round_machine();
    tsr_plan_row_t row;
    int n = 0;
    cr_assert_eq(tsr_plan_run(&spec, &o, &m, &row, 1, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 1);
    cr_expect_eq(row.steps_per_epoch, cases[k].steps,
                 "%lld samples on %d ranks: %lld steps, not %lld", (long long)cases[k].samples,
                 cases[k].ranks, (long long)cases[k].steps, (long long)row.steps_per_epoch);
    tsr_model_spec_fini(&spec);
  }
}

/* Under batch averaging each chunk's update runs on its home only, one of the Pc replicas of
 * the grid row (the columns), so a rank's update work is 1/Pc of its tiles' updates. On a 2 x 3
 * grid (Pr 2, Pc 3) of the MLP 512-512 in 256-wide tiles, row 0 holds feature tile 0 of each
 * hidden layer and all of the logits: 784 x 256 + 256 + 512 x 256 + 256 + 512 x 10 + 10
 * floats, each update reading w, g and 1 state and writing w and the state (20 bytes a float)
 * at 10 GB/s. Averaging by epoch updates every tile on every rank, the rest of the step being
 * the same: with 1 worker its compute per step is 2/3 of those updates' seconds more. */
Test(plan, a_sharded_update_is_shared_by_the_grid_columns) {
  tsr_plan_row_t b, e;
  plan("mlp:512,512", 6, 2, 3, "batch", 256, &b);
  plan("mlp:512,512", 6, 2, 3, "epoch", 256, &e);
  cr_assert_eq(b.pr, 2);
  cr_assert_eq(b.pc, 3);
  double floats = 784.0 * 256 + 256 + 512 * 256 + 256 + 512 * 10 + 10;
  double updates_s = floats * 4 * (3 + 2 * 1) / 10e9;
  double want = updates_s * (1.0 - 1.0 / 3);
  double got = e.compute_s - b.compute_s;
  cr_expect(fabs(got - want) <= 1e-9 * want,
            "2 x 3 grid: batch averaging saves %.6g s of updates per step, expected %.6g "
            "(2/3 of %.6g s: the update shared by the 3 columns)",
            got, want, updates_s);
}

/* The critical path of a graph is its longest path: two equal convolution branches joined by a
 * concat, on 4 workers, take about the time of one branch (the work spread over the workers is
 * less than one branch's chain), not of the two in a row. */
static double compute_of(const char *ini) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse_ini_text(&spec, ini, "branches", &err), 0, "%s", err.msg);
  tsr_model_bind_classes(&spec, 10);
  tsr_plan_opts_t o;
  tsr_plan_opts_init(&o);
  o.ranks = 1, o.pr = 1, o.pc = 1, o.batch = 4, o.tile_rows = 4;
  o.inputs = 32 * 32 * 8, o.in_height = 32, o.in_width = 32, o.in_channels = 8;
  tsr_plan_sync_parse(&o.sync, "batch", &err);
  tsr_machine_t m = round_machine();
  m.workers = 4, m.cores_per_node = 4;
  tsr_plan_row_t row;
  int n = 0;
  cr_assert_eq(tsr_plan_run(&spec, &o, &m, &row, 1, &n, &err), 0, "%s", err.msg);
  tsr_model_spec_fini(&spec);
  return row.compute_s;
}

Test(plan, parallel_branches_are_priced_as_the_longest_path) {
  const char *conv = "type = conv\nfilters = 64\nkernel = 3\npadding = 1\ninput = input\n";
  char one[512], two[1024];
  snprintf(one, sizeof one,
           "[a]\n%s[pool]\ntype = avgpool\nkernel = 32\n[out]\ntype = dense\nunits = classes\n",
           conv);
  snprintf(two, sizeof two,
           "[a]\n%s[b]\n%s[cat]\ntype = concat\ninputs = a, b\n[pool]\ntype = avgpool\n"
           "kernel = 32\n[out]\ntype = dense\nunits = classes\n",
           conv, conv);
  double t1 = compute_of(one), t2 = compute_of(two);
  cr_expect(t2 < 1.3 * t1, "two branches %g s, one %g s", t2, t1);
  cr_expect(t2 > t1, "two branches %g s, one %g s", t2, t1);
}

/* A sink that counts the tasks, their bytes and the updates, a task taking bytes ns. */
typedef struct {
  tsr_cost_sink_t k;
  int tasks, updates;
  double bytes, work;
} counting_sink_t;

static double count_task(tsr_cost_sink_t *k, double flops, double rate, double bytes) {
  (void)flops, (void)rate;
  counting_sink_t *c = (counting_sink_t *)k;
  c->tasks++, c->bytes += bytes, c->work += bytes * 1e-9;
  return bytes * 1e-9;
}

static double count_update(tsr_cost_sink_t *k, double n) {
  counting_sink_t *c = (counting_sink_t *)k;
  c->updates++, c->work += n * 1e-9;
  return n * 1e-9;
}

static double count_work(const tsr_cost_sink_t *k) {
  return ((const counting_sink_t *)k)->work;
}

/* The two batchnorm tests' network: a convolution of 8 x 8 x 1 images to 4 channels, batchnorm
 * (its ReLU fused) and a dense output, batch 40 in 16-row tiles. */
static void conv_bn(tsr_model_spec_t *spec, tsr_net_opts_t *o) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse_ini_text(spec,
                                        "[c]\ntype = conv\nfilters = 4\nkernel = 3\npadding = 1\n"
                                        "[bn]\ntype = batchnorm\nactivation = relu\n"
                                        "[out]\ntype = dense\nunits = 10\n",
                                        "inline", &err),
               0, "%s", err.msg);
  tsr_net_opts_init(o);
  o->batch = 40, o->tile_rows = 16, o->in_channels = 1, o->in_height = 8, o->in_width = 8;
}

/* Batchnorm per channel of 8 x 8 x 4 samples after a convolution (its ReLU fused), batch 40 in
 * 16-row tiles (3 tiles: a tree of depth 2): 2 tasks per tile and 2 combines and a finalize
 * forward; a sums and an input-gradient task per tile, 2 adds, the parameters' gradients and 2
 * updates backward; bytes as each task reads and writes them. */
Test(plan, batchnorm_prices_its_tasks) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  tsr_net_opts_t o;
  conv_bn(&spec, &o);
  tsr_net_layout_t lay;
  cr_assert_eq(tsr__net_layout(&lay, &spec, 64, 10, &o, 2, &err), 0, "%s", err.msg);
  cr_assert_eq(lay.n_layers, 3); /* the ReLU is fused */
  const tsr_layout_layer_t *l = &lay.layers[1];
  cr_assert_eq(l->kind, TSR_LAYER_BATCHNORM);
  cr_assert(l->relu && l->has_dx && l->whole_samples);
  cr_assert_eq(l->nparams, 2);
  cr_assert_eq(l->params[0].cols, 4);
  cr_assert_eq(l->nbuffers, 2);
  cr_assert_eq(l->scratch[0].rows, 9); /* a (3, C) partial per batch-row tile */
  counting_sink_t c = {.k = {.batch = 40,
                             .mb = 16,
                             .pr = 1,
                             .task = count_task,
                             .update = count_update,
                             .work = count_work}};
  double bwd = 0, chain = l->type->cost(&lay, l, &c.k, &bwd);
  cr_assert_eq(c.tasks, (2 * 3 + 2 + 1) + (2 * 3 + 2 + 1));
  cr_assert_eq(c.updates, 2);
  double n = 40.0 * 256, C = 4; /* values of the batch, channels */
  double fwd = 4 * (n + 3 * C * 3) + 4 * (2 * n + 5 * C * 3) + 4 * 9 * C * 2 + 4 * 10 * C;
  double back = 4 * (3 * n + 6 * C * 3) + 4 * (4 * n + 7 * C * 3) + 4 * 9 * C * 2 + 4 * 5 * C;
  cr_assert_float_eq(c.bytes, fwd + back, 1e-6 * (fwd + back));
  cr_assert_float_eq(bwd, back * 1e-9 + 2 * C * 1e-9, 1e-15);
  /* the chain: tile 0's forward tasks, two combines, the finalize; tile 0's backward tasks and
   * two adds */
  double t0 = 16.0 * 256;
  double want = 4 * (t0 + 3 * C) + 4 * (2 * t0 + 5 * C) + 2 * 4 * 9 * C + 4 * 10 * C +
                4 * (3 * t0 + 6 * C) + 4 * (4 * t0 + 7 * C) + 2 * 4 * 9 * C;
  cr_assert_float_eq(chain, want * 1e-9, 1e-15, "chain %g vs %g", chain, want * 1e-9);
  tsr__net_layout_fini(&lay);
  tsr_model_spec_fini(&spec);
}

/* A memory-bound layer copied whole on every grid row (a dropout on the input batch, before the
 * dense layers spread) is priced with all its tile columns on row 0, as row 0 runs them: 784
 * features in tiles of 128 are 7 columns, batch 40 in 16-row tiles 3 rows of tiles, a forward
 * and a backward task each under --grid 2x1 as without a grid (not the 4 columns j % 2 = 0 of a
 * spread matrix). */
Test(plan, a_pass_copied_whole_on_each_grid_row_prices_every_column) {
  for (int pr = 1; pr <= 2; pr++) {
    tsr_model_spec_t spec;
    tsr_errbuf_t err = {""};
    cr_assert_eq(tsr_model_parse_ini_text(&spec,
                                          "[d]\ntype = dropout\nrate = 0.2\n"
                                          "[h]\ntype = dense\nunits = 256\n"
                                          "[out]\ntype = dense\nunits = 10\n",
                                          "inline", &err),
                 0, "%s", err.msg);
    tsr_net_opts_t o;
    tsr_net_opts_init(&o);
    o.batch = 40, o.tile_rows = 16, o.tile_cols = 128, o.grid_rows = pr;
    tsr_net_layout_t lay;
    cr_assert_eq(tsr__net_layout(&lay, &spec, 784, 10, &o, 2, &err), 0, "%s", err.msg);
    cr_assert_eq(lay.grid_rc, 0, "%s", lay.grid_err.msg);
    const tsr_layout_layer_t *l = &lay.layers[0];
    cr_assert_eq(l->kind, TSR_LAYER_DROPOUT);
    cr_assert_eq(l->place, TSR_PLACE_WHOLE, "--grid %dx1: the dropout is copied whole", pr);
    cr_assert(!l->whole_samples);
    cr_assert_eq(l->out_nb, 128);
    counting_sink_t c = {.k = {.batch = 40,
                               .mb = 16,
                               .pr = pr,
                               .task = count_task,
                               .update = count_update,
                               .work = count_work}};
    double bwd = 0;
    (void)l->type->cost(&lay, l, &c.k, &bwd);
    int backward = l->has_dx ? 2 : 1;
    cr_expect_eq(c.tasks, 3 * 7 * backward, "--grid %dx1: %d tasks priced, row 0 runs %d", pr,
                 c.tasks, 3 * 7 * backward);
    tsr__net_layout_fini(&lay);
    tsr_model_spec_fini(&spec);
  }
}

/* Under --grid 2x1 --domain rows the same batchnorm runs on each rank's band of image rows (4 of
 * the 8): the planner prices its tasks on the band, half the values of the whole images and the
 * same per-channel work, as it prices the convolution before it; priced on the whole image, the
 * plan of a domain-split network would show batchnorm Pr times slower than it runs. */
Test(plan, batchnorm_under_domain_rows_prices_a_band) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  tsr_net_opts_t o;
  conv_bn(&spec, &o);
  o.grid_rows = 2, o.domain = true;
  tsr_net_layout_t lay;
  cr_assert_eq(tsr__net_layout(&lay, &spec, 64, 10, &o, 2, &err), 0, "%s", err.msg);
  cr_assert_eq(lay.grid_rc, 0, "%s", lay.grid_err.msg);
  const tsr_layout_layer_t *l = &lay.layers[1], *conv = &lay.layers[0];
  cr_assert_eq(l->kind, TSR_LAYER_BATCHNORM);
  cr_assert(l->place == TSR_PLACE_BANDS && conv->domain, "batchnorm over the convolution's bands");
  counting_sink_t c = {.k = {.batch = 40,
                             .mb = 16,
                             .pr = 2,
                             .task = count_task,
                             .update = count_update,
                             .work = count_work}};
  double bwd = 0, chain = l->type->cost(&lay, l, &c.k, &bwd);
  cr_assert_eq(c.tasks, (2 * 3 + 2 + 1) + (2 * 3 + 2 + 1));
  cr_assert(l->has_dx);
  double n = 40.0 * 4 * 8 * 4, C = 4; /* the band's values of the batch: 4 rows of 8 x 4 */
  double relu = l->relu ? 1 : 0;      /* a fused ReLU reads y too */
  double fwd = 4 * (n + 3 * C * 3) + 4 * (2 * n + 5 * C * 3) + 4 * 9 * C * 2 + 4 * 10 * C;
  double back = 4 * ((2 + relu) * n + 6 * C * 3) + 4 * ((3 + relu) * n + 7 * C * 3) +
                4 * 9 * C * 2 + 4 * 5 * C;
  cr_expect_float_eq(c.bytes, fwd + back, 1e-6 * (fwd + back),
                     "bytes %g, the band's %g (the whole image's would be about twice)", c.bytes,
                     fwd + back);
  double t0 = 16.0 * 4 * 8 * 4;
  double want = 4 * (t0 + 3 * C) + 4 * (2 * t0 + 5 * C) + 2 * 4 * 9 * C + 4 * 10 * C +
                4 * ((2 + relu) * t0 + 6 * C) + 4 * ((3 + relu) * t0 + 7 * C) + 2 * 4 * 9 * C;
  cr_expect_float_eq(chain, want * 1e-9, 1e-15, "chain %g s, the band's %g s", chain, want * 1e-9);
  tsr__net_layout_fini(&lay);
  tsr_model_spec_fini(&spec);
}

/* A sink that records the pooling tasks it is asked to price, each taking 1 ms forward and
 * 3 ms backward (what the planner's timing of the kernel would say). */
typedef struct {
  counting_sink_t c;
  int pools;
  tsr_conv_geom_t g[8];
  int n[8], which[8];
  bool max[8];
} pool_sink_t;

static double record_pool(tsr_cost_sink_t *k, const tsr_conv_geom_t *g, int n, bool max, int which,
                          double bytes) {
  pool_sink_t *p = (pool_sink_t *)k;
  int i = p->pools++;
  cr_assert_lt(i, 8, "more pooling tasks than the batch has tiles");
  p->g[i] = *g, p->n[i] = n, p->max[i] = max, p->which[i] = which;
  p->c.bytes += bytes, p->c.tasks++;
  double t = which ? 3e-3 : 1e-3;
  p->c.work += t;
  return t;
}

/* A 3x3 max pooling of stride 1 after a convolution of 8 x 8 x 1 images to 4 channels, batch
 * 40 in 16-row tiles: each tile's forward and backward task priced on the tile's samples and the
 * layer's window (the planner times the kernel on that shape), under --domain rows on band 0's
 * rows with their halo. The pooling's price is its kernel's, not its bytes': GoogLeNet's 13 max
 * poolings ran 12x the bytes' price (benchmarks/results/plan/googlenet-layers-zen3-2026-12-07). */
Test(plan, pooling_is_priced_by_its_kernel_on_each_tile) {
  for (int domain = 0; domain < 2; domain++) {
    tsr_model_spec_t spec;
    tsr_errbuf_t err = {""};
    cr_assert_eq(tsr_model_parse_ini_text(&spec,
                                          "[c]\ntype = conv\nfilters = 4\nkernel = 3\npadding = "
                                          "1\n[p]\ntype = maxpool\nkernel = 3\nstride = 1\n"
                                          "padding = 1\n[out]\ntype = dense\nunits = 10\n",
                                          "inline", &err),
                 0, "%s", err.msg);
    tsr_net_opts_t o;
    tsr_net_opts_init(&o);
    o.batch = 40, o.tile_rows = 16, o.in_channels = 1, o.in_height = 8, o.in_width = 8;
    if (domain) o.grid_rows = 2, o.domain = true;
    tsr_net_layout_t lay;
    cr_assert_eq(tsr__net_layout(&lay, &spec, 64, 10, &o, 2, &err), 0, "%s", err.msg);
    const tsr_layout_layer_t *l = &lay.layers[1];
    cr_assert_eq(l->kind, TSR_LAYER_MAXPOOL);
    cr_assert_eq(l->place == TSR_PLACE_BANDS, domain == 1);
    pool_sink_t p = {.c = {.k = {.batch = 40,
                                 .mb = 16,
                                 .pr = domain ? 2 : 1,
                                 .task = count_task,
                                 .update = count_update,
                                 .pool_task = record_pool,
                                 .work = count_work}}};
    double bwd = 0, chain = l->type->cost(&lay, l, &p.c.k, &bwd);
    cr_assert_eq(p.pools, 6,
                 "domain %d: %d pooling tasks, want a forward and a backward for "
                 "each of the 3 tiles",
                 domain, p.pools);
    cr_expect_eq(p.c.tasks, 6, "no other task");
    /* band 0 of 2 of the 8 output rows: rows 0-3, reading input rows 0-4 (the halo below) */
    int h = domain ? 5 : 8, oh = domain ? 4 : 8;
    for (int i = 0; i < 6; i++) {
      cr_expect(p.max[i] && p.which[i] == i % 2 && p.n[i] == (i < 4 ? 16 : 8),
                "task %d: max %d, pass %d, %d samples", i, p.max[i], p.which[i], p.n[i]);
      const tsr_conv_geom_t *g = &p.g[i];
      cr_expect(g->c == 4 && g->w == 8 && g->ow == 8 && g->kh == 3 && g->sh == 1 && g->pw == 1,
                "task %d: %dx%dx%d window %dx%d", i, g->h, g->w, g->c, g->kh, g->kw);
      cr_expect(g->h == h && g->oh == oh, "domain %d, task %d: rows %d -> %d, want %d -> %d",
                domain, i, g->h, g->oh, h, oh);
    }
    cr_expect_float_eq(chain, 4e-3, 1e-12, "the chain: tile 0's forward and backward");
    cr_expect_float_eq(bwd, 9e-3, 1e-12, "the backward pass: 3 tiles' 3 ms");
    tsr__net_layout_fini(&lay);
    tsr_model_spec_fini(&spec);
  }
}

/* The planner's timing of a pooling kernel: none on a described machine (the task is priced by
 * its bytes), measured and cached on this one, a cached value read back by its shape. */
Test(plan, pooling_kernels_are_timed_here_and_cached) {
  /* c h w, oc oh ow, kh kw, sh sw, ph pw: 6x6x8, a 3x3 window of stride 1 padded by 1 */
  tsr_conv_geom_t g = {8, 6, 6, 8, 6, 6, 3, 3, 1, 1, 1, 1};
  tsr_machine_t described = round_machine();
  cr_expect_eq(tsr__plan_pool_seconds(&described, &g, 4, true, 0), 0);
  const char *cache = write_temp("pool1/max 8 6 6 6 6 3 3 1 1 1 1 4 0.25\n");
  tsr_machine_t here = described;
  here.measure_kernels = true;
  snprintf(here.cache, sizeof here.cache, "%s", cache);
  cr_expect_float_eq(tsr__plan_pool_seconds(&here, &g, 4, true, 1), 0.25, 1e-12,
                     "the cached backward pass");
  double fwd = tsr__plan_pool_seconds(&here, &g, 4, true, 0);
  cr_expect(fwd > 0 && fwd < 0.01, "a 6x6x8 forward pass timed here: %g s", fwd);
  double mean = tsr__plan_pool_seconds(&here, &g, 4, false, 0);
  cr_expect(mean > 0 && mean < 0.01, "the mean pooling's: %g s", mean);
  unlink(cache);
}
