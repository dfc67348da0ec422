/* Where a checkpoint may be written under weight averaging, under mpirun (2 ranks): only where
 * the replicas agree. Under --sync epoch=2 with a checkpoint asked for every epoch, epoch 1's
 * is skipped (each rank holds its own weights then), epoch 2's is written after its average,
 * and epoch 3's (the last, averaged at the end) too; under every=3 with a checkpoint asked for
 * every step, only steps after an average write. Rank 0 looks at the file at every epoch end,
 * before that epoch's own checkpoint, through tsr_train's on_epoch.
 *
 *   mpirun -np 2 test_mpi_checkpoint */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/tessera.h"

#include "mpi_check.h"

static char path[96];
static int seen[8];          /* [epoch]: the epoch the file held at that epoch's end, -1: none */
static int64_t seen_step[8]; /* and the step in the epoch after it */

/* What the checkpoint file holds now: its epoch and step, or -1. */
static int holds(int64_t *step) {
  tsr_checkpoint_info_t info;
  tsr_errbuf_t err = {""};
  *step = -1;
  if (access(path, F_OK) != 0) return -1;
  if (tsr_checkpoint_read(path, &info, NULL, NULL, NULL, NULL, &err)) return -2;
  *step = info.step_in_epoch;
  return info.epoch;
}

static int on_epoch(const tsr_epoch_stats_t *st, void *ctx) {
  (void)ctx;
  if (st->epoch < 8) seen[st->epoch] = holds(&seen_step[st->epoch]);
  return 0;
}

static tsr_net_t *make_net(const tsr_dataset_t *train) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  tsr_model_parse(&spec, "mlp:16", train->classes, &err);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 32, o.seed = 3, o.opt.lr = 0.05f, o.opt.momentum = 0.9f;
  tsr_net_t *net = NULL;
  if (tsr_net_create(&net, &spec, (int)train->features, train->classes, &o, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  tsr_model_spec_fini(&spec);
  return net;
}

/* A run of `epochs` under policy with a checkpoint every `every` epochs (or steps). */
static void run(const tsr_dataset_t *train, const char *policy, int epochs, int every,
                bool in_steps) {
  tsr_sync_t sync;
  tsr_errbuf_t err = {""};
  tsr_sync_parse(&sync, policy, &err);
  memset(seen, 0, sizeof seen);
  if (rank == 0) unlink(path);
  tsr_net_t *net = make_net(train);
  tsr_run_config_t c; /* the run set up as a program that built its net does */
  tsr_run_config_from_net(&c, net, train->n);
  c.sync = &sync;
  tsr_run_setup_t setup = {0};
  CHECK(tsr_run_setup(&setup, &c, &err) == 0, "%s: %s", policy, err.msg);
  tsr_train_opts_t o;
  tsr_train_opts_init(&o);
  tsr_checkpoint_info_t info = {0};
  o.epochs = epochs, o.setup = &setup, o.seed = 5, o.lr_schedule = TSR_LR_CONSTANT;
  o.checkpoint_path = path, o.checkpoint_every = every, o.checkpoint_in_steps = in_steps;
  o.checkpoint_info = &info, o.on_epoch = on_epoch;
  int rc = tsr_train(net, train, NULL, &o, &err);
  CHECK(rc == 0, "%s: %s", policy, err.msg);
  tsr_net_destroy(&net);
  tsr_run_setup_fini(&setup);
}

int main(int argc, char **argv) {
  tsr_dist_start(&argc, &argv, true);
  rank = tsr_dist_rank();
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  ro.ncpus = 1;
  tsr_errbuf_t err = {""};
  if (tsr_runtime_init(&ro, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  tsr_dataset_t train = {0}, test = {0};
  const char *dir = getenv("TSR_DATA_DIR") ? getenv("TSR_DATA_DIR") : TSR_DEFAULT_DATA_DIR;
  if (tsr_dataset_load_dir(&train, &test, dir, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    tsr_dist_abort_status(err.msg, 77);
  }
  tsr_dataset_truncate(&train, 256); /* 2 ranks x 32: 4 steps an epoch */
  tsr_dataset_standardize(&train, &test);
  snprintf(path, sizeof path, "/tmp/tessera-agree-%ld.st", (long)getppid());
  run(&train, "epoch=2", 3, 1, false);
  if (rank == 0) {
    CHECK(seen[1] == -1 && seen[2] == -1,
          "epoch=2: after epochs 1 and 2 the file held epochs %d and %d, want none (epoch 1's "
          "replicas differ: no checkpoint there)",
          seen[1], seen[2]);
    CHECK(seen[3] == 2, "epoch=2: after epoch 3 the file held epoch %d, want 2", seen[3]);
    int64_t step;
    CHECK(holds(&step) == 3, "epoch=2: at the end the file holds epoch %d, want 3", holds(&step));
  }
  /* every=3, 4 steps an epoch, a checkpoint asked for at every step: the averages are at steps
   * 3 (epoch 1 step 3), 6 (epoch 2 step 2) and 9; steps 4, 5, 7 and 8 write nothing. */
  run(&train, "every=3", 3, 1, true);
  if (rank == 0) {
    CHECK(seen[1] == 0 && seen_step[1] == 3,
          "every=3: after epoch 1 the file held epoch %d step %lld, want epoch 1 step 3 (the "
          "average)",
          seen[1] + 1, (long long)seen_step[1]);
    CHECK(seen[2] == 1 && seen_step[2] == 2,
          "every=3: after epoch 2 the file held epoch %d step %lld, want epoch 2 step 2",
          seen[2] + 1, (long long)seen_step[2]);
  }
  if (rank == 0) unlink(path);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
  tsr_runtime_fini();
  if (rank == 0) printf("mpi-checkpoint: %d checks passed, %d failed\n", passed, failed);
  tsr_dist_stop();
  return failed ? 1 : 0;
}
