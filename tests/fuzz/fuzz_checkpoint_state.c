/* libFuzzer harness for the checkpoint reader's state beyond what tsr_checkpoint_read
 * interprets (fuzz_safetensors): what a resumed run takes from a file, per replica included
 * (src/train/checkpoint_format.c, checkpoint_resume.c). The input is the bytes of a checkpoint,
 * written to an in-memory file (memfd) and read through its path. Once tsr_checkpoint_read
 * accepts it, the net the file describes is laid out (src/nn/layout.c: the graph, the shapes,
 * no StarPU) and every tensor a run would load is looked up by name and shape as
 * tsr_checkpoint_load and tsr__checkpoint_restore_run do, through the same readers: each
 * parameter, its optimizer state, each layer's buffers and batch counter; under a file of every
 * replica's state (optimizer_state per-rank or per-column, grid PrxPc) each replica's state
 * (optimizer.rank<q>. or optimizer.column<q>.) and its step count; the outer momentum; the local
 * SGD switch. A refusal must come with a message; a found tensor is read whole (ASan checks it
 * lies inside the file). */
#include <limits.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "nn/layout.h"
#include "optim/optim.h"
#include "train/checkpoint_impl.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

/* A refusal says why; an accepted tensor of rows x cols floats is read whole. */
static void check_found(int rc, const tsr_errbuf_t *err, const float *data, int64_t count) {
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && err->msg[0] != '\0');
    return;
  }
  FUZZ_CHECK(data != NULL);
  volatile float sink = 0.0f;
  for (int64_t k = 0; k < count; k++)
    sink += data[k];
  (void)sink;
}

/* Replica q's optimizer state (q = 0: the plain optimizer.<param>.<state>, with the parameters
 * themselves) and its layers' own state, as restore_own_state looks them up. */
static void replica_state(const tsr_st_file_t *f, const char *path, const tsr_net_layout_t *lay,
                          const tsr_optim_kind_t *kind, int nstate, bool columns, int q,
                          bool outer) {
  for (int i = 0; i < lay->n_layers; i++) {
    const tsr_layout_layer_t *ll = &lay->layers[i];
    if (!ll->type->ops) continue; /* builds no layer (flatten) */
    for (int k = 0; k < ll->nparams; k++) {
      const tsr_layout_matrix_t *m = &ll->params[k];
      char name[96], full[192];
      const float *data = NULL;
      tsr_errbuf_t err = {{0}};
      tsr__ckpt_layout_param_name(ll, k, name, sizeof name);
      if (q == 0) {
        int rc = tsr__ckpt_find_shaped(f, path, name, m->rows, m->cols, &data, &err);
        check_found(rc, &err, data, m->rows * m->cols);
      }
      for (int s = 0; s < nstate; s++) {
        if (q == 0)
          snprintf(full, sizeof full, "optimizer.");
        else
          tsr__ckpt_replica_prefix(full, sizeof full, columns, q);
        snprintf(full + strlen(full), sizeof full - strlen(full), "%s.%s", name,
                 kind->state_names[s]);
        err.msg[0] = '\0', data = NULL;
        int rc = tsr__ckpt_find_shaped(f, path, full, m->rows, m->cols, &data, &err);
        check_found(rc, &err, data, m->rows * m->cols);
      }
      if (outer && q == 0) {
        snprintf(full, sizeof full, "outer.%s.momentum", name);
        err.msg[0] = '\0', data = NULL;
        int rc = tsr__ckpt_find_sized(f, path, full, m->rows * m->cols, &data, &err);
        check_found(rc, &err, data, m->rows * m->cols);
      }
    }
    for (int k = 0; k < tsr__ckpt_layout_state_count(ll); k++) {
      char name[96];
      tsr_errbuf_t err = {{0}};
      tsr__ckpt_layout_state_name(ll, k, name, sizeof name);
      if (k < ll->nbuffers) {
        const tsr_layout_matrix_t *m = &ll->buffers[k];
        const float *data = NULL;
        int rc = tsr__ckpt_find_shaped(f, path, name, m->rows, m->cols, &data, &err);
        check_found(rc, &err, data, m->rows * m->cols);
      } else {
        int64_t n = -1;
        int rc = tsr__ckpt_load_counter(f, path, name, &n, &err);
        FUZZ_CHECK(rc == 0 ? n >= 0 && n <= 1 << 24 : rc < 0 && err.msg[0] != '\0');
      }
    }
  }
  if (q > 0) {
    int64_t steps = -2;
    tsr_errbuf_t err = {{0}};
    int rc = tsr__ckpt_replica_steps(f, path, columns, q, &steps, &err);
    FUZZ_CHECK(rc == 0 ? steps >= -1 : rc < 0 && err.msg[0] != '\0');
  }
}

static void check_state(const char *path) {
  tsr_checkpoint_info_t info;
  tsr_model_spec_t spec;
  tsr_net_opts_t opts;
  int inputs, classes;
  tsr_errbuf_t err = {{0}};
  int rc = tsr_checkpoint_read(path, &info, &spec, &opts, &inputs, &classes, &err);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && err.msg[0] != '\0');
    return;
  }
  FUZZ_CHECK(info.ranks >= 1 && info.grid_rows >= 1 && info.ranks % info.grid_rows == 0);
  FUZZ_CHECK(info.state_ranks >= 0 && info.state_ranks <= info.ranks);
  tsr_st_file_t *f = NULL;
  FUZZ_CHECK(tsr__ckpt_open_checked(&f, path, &err) == 0);
  const tsr_optim_kind_t *kind = tsr__optim_find(opts.opt.name);
  FUZZ_CHECK(kind != NULL);
  int nstate = tsr_optimizer_nstate(&opts.opt);
  FUZZ_CHECK(nstate >= 0 && nstate <= TSR_OPTIM_MAX_STATE);
  tsr_net_layout_t lay;
  tsr_errbuf_t lerr = {{0}};
  rc = tsr__net_layout_build(&lay, &spec, inputs, classes, &opts, 1, nstate, &lerr);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && lerr.msg[0] != '\0');
  } else {
    int replicas = info.state_ranks > 1 ? info.state_ranks : 1;
    for (int q = 0; q < replicas && q < 16; q++)
      replica_state(f, path, &lay, kind, nstate, info.state_columns, q, info.outer_momentum);
    tsr__net_layout_fini(&lay);
  }
  if (tsr__st_meta(f, "local_since")) {
    int64_t since = -1;
    err.msg[0] = '\0';
    rc = tsr__ckpt_meta_int(f, path, "local_since", 0, INT64_MAX, &since, &err);
    FUZZ_CHECK(rc == 0 ? since >= 0 : rc < 0 && err.msg[0] != '\0');
  }
  tsr__st_close(&f);
  tsr_model_spec_fini(&spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("checkpoint", MFD_CLOEXEC);
  if (fd < 0) return 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if (write(fd, data, size) == (ssize_t)size) check_state(path);
  close(fd);
  return 0;
}
