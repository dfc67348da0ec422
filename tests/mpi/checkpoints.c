/* Checkpoints under mpirun, mpirun -np P test_mpi_checkpoints resume: a batch run stopped inside
 * an epoch and resumed from its checkpoint ends bit for bit where an uninterrupted one does.
 * (common.h: the command, its output.) */
#include "mpi/common.h"

static int stop_calls;

/* Asked after every step on every rank: stop at the second call, after step 2, which the ranks
 * learn a step later (epoch 1, step 3 of 4; one process stops at once). */
static bool stop_at_second(void *ctx) {
  (void)ctx;
  return ++stop_calls >= 2;
}

/* 3 epochs of --sync batch, deterministic; or stopped inside epoch 1 with a
 * checkpoint at path, then resumed in a fresh net: the final weights. */
static float *batch_run(const char *path, bool interrupted, int64_t *n) {
  tsr_sync_t sync;
  tsr_sync_parse(&sync, "batch", NULL);
  sync.deterministic = true;
  tsr_checkpoint_info_t info = {0};
  tsr_errbuf_t err = {""};
  tsr_net_t *net = make_net(32, 0.9f);
  tsr_run_setup_t setup = {0}; /* the resumed net is built alike */
  set_up_run(&setup, net, &sync, NULL, 0);
  tsr_train_opts_t o;
  tsr_train_opts_init(&o);
  o.epochs = 3, o.setup = &setup, o.seed = 5;
  if (interrupted) {
    stop_calls = 0;
    o.should_stop = stop_at_second, o.checkpoint_path = path, o.checkpoint_info = &info;
    int rc = tsr_train(net, &train_set, NULL, &o, &err);
    CHECK(rc == TSR_ESTOPPED, "stopped run: %d %s", rc, err.msg);
    tsr_net_destroy(&net);
    net = make_net(32, 0.9f);
    tsr_checkpoint_info_t got;
    CHECK(tsr_checkpoint_load(net, path, NULL, &got, &err) == 0, "load: %s", err.msg);
    CHECK(got.epoch == 0 && got.step_in_epoch == (size > 1 ? 3 : 2) && got.ranks == size,
          "checkpoint at epoch %d step %lld of %d ranks", got.epoch, (long long)got.step_in_epoch,
          got.ranks);
    o.start_epoch = got.epoch + 1, o.start_step = got.step_in_epoch;
    o.should_stop = NULL, o.checkpoint_path = NULL;
  }
  CHECK(tsr_train(net, &train_set, NULL, &o, &err) == 0, "train: %s", err.msg);
  float *w = params(net, n);
  tsr_net_destroy(&net);
  tsr_run_setup_fini(&setup);
  return w;
}

/* A --sync batch run stopped inside an epoch and resumed from its checkpoint
 * ends bit for bit where an uninterrupted one does (the optimizer state,
 * sharded by chunk home during training, was gathered for the checkpoint). */
static void test_resume(void) {
  load(32 * size * 4);
  char path[128] = "";
  if (rank == 0) {
    char dir[64] = "/tmp/tessera-resume-XXXXXX";
    if (mkdtemp(dir)) snprintf(path, sizeof path, "%s/c.safetensors", dir);
  }
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  int64_t n;
  float *whole = batch_run(path, false, &n), *resumed = batch_run(path, true, &n);
  int64_t off = 0;
  for (int64_t i = 0; i < n; i++)
    off += memcmp(&whole[i], &resumed[i], sizeof(float)) != 0;
  CHECK(off == 0, "%lld of %lld weights differ between the resumed and the uninterrupted run",
        (long long)off, (long long)n);
  CHECK(replicas_equal(resumed, n), "replicas differ after resuming");
  if (rank == 0)
    printf("resume: stopped inside epoch 1, resumed: %lld weights differ\n", (long long)off);
  free(whole), free(resumed);
}

const mpi_check_t mpi_checks[] = {
    {"resume", test_resume, 0},
    {NULL, NULL, 0},
};
