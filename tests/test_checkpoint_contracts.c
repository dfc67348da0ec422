/* The contracts of a checkpoint file that a damaged or hostile file tests (docs/checkpoints.md):
 * a tensor with no recorded checksum is refused, not trusted; a write that fails leaves no
 * temporary file beside its path; every number of the metadata is range-checked before its
 * cast (1e300, inf, nan, a float's subnormal, 2^64 refused with the key that holds it). Each
 * case rewrites a real checkpoint with one thing changed. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "tessera/tessera.h"

#include "tmpfile.h"

static char dir[64];

static void start(void) {
  make_temp_dir(dir, sizeof dir, "tessera-contracts");
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
  remove_temp_dir(dir);
}

TestSuite(contracts, .init = start, .fini = stop, .timeout = 120);

static const char *path_of(const char *name) {
  static char p[4][128];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

/* A checkpoint of a small SGD net with momentum (784-8-10) at path. */
static tsr_net_t *saved(const char *path) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp:8", 10, &err), 0, "%s", err.msg);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 8, o.seed = 4;
  tsr_net_t *net;
  cr_assert_eq(tsr_net_create(&net, &spec, 784, 10, &o, &err), 0, "%s", err.msg);
  tsr_model_spec_fini(&spec);
  tsr_checkpoint_info_t info = {
      .epoch = 1, .epochs = 3, .seed = 7, .input_mean = 0.5f, .input_std = 0.25f};
  snprintf(info.data, sizeof info.data, "test data");
  cr_assert_eq(tsr_checkpoint_save(net, &info, path, &err), 0, "%s", err.msg);
  return net;
}

/* src rewritten to dst with metadata key given value (NULL: left out). */
static void rewrite(const char *src, const char *dst, const char *key, const char *value) {
  tsr_st_file_t *f;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr__st_open(&f, src, &err), 0, "%s", err.msg);
  int n = tsr__st_count(f), nm = tsr__st_nmeta(f), k = 0;
  tsr_st_tensor_t *t = calloc((size_t)n, sizeof *t);
  tsr_st_meta_t *m = calloc((size_t)nm, sizeof *m);
  for (int i = 0; i < n; i++)
    tsr__st_tensor(f, i, &t[i]);
  bool found = false;
  for (int i = 0; i < nm; i++) {
    tsr_st_meta_t e = tsr__st_meta_at(f, i);
    if (strcmp(e.key, key) == 0) {
      found = true;
      if (!value) continue;
      e.value = value;
    }
    m[k++] = e;
  }
  cr_assert(found, "%s has no metadata %s", src, key);
  cr_assert_eq(tsr__st_write(dst, t, n, m, k, &err), 0, "%s", err.msg);
  free(t), free(m);
  tsr__st_close(&f);
}

/* A tensor whose checksum is missing from the metadata is refused on load, as a damaged one
 * is: the checksum is what says the data is what was written. */
Test(contracts, a_tensor_without_a_recorded_checksum_is_refused) {
  const char *p = path_of("a.st"), *q = path_of("nocrc.st");
  tsr_net_t *net = saved(p);
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_checkpoint_load(net, p, NULL, NULL, &err), 0, "%s", err.msg);
  rewrite(p, q, "crc32.layers.0.dense.bias", NULL);
  cr_assert_eq(tsr_checkpoint_load(net, q, NULL, NULL, &err), TSR_EFORMAT);
  cr_assert(strstr(err.msg, "layers.0.dense.bias") && strstr(err.msg, "recorded none"), "%s",
            err.msg);
  tsr_checkpoint_listing_t l;
  cr_assert_eq(tsr_checkpoint_list(&l, q, &err), TSR_EFORMAT, "inspect trusted it");
  cr_assert_eq(tsr_checkpoint_read(q, NULL, NULL, NULL, NULL, NULL, &err), TSR_EFORMAT);
  tsr_net_destroy(&net);
}

/* The entries of dir whose name holds ".tmp.". */
static int temporaries(void) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

/* A write that fails, whether writing the data (the file size limit: EFBIG, as a full disk
 * fails) or renaming it over the path (a folder there), leaves no temporary file. */
Test(contracts, a_failed_write_leaves_no_temporary_file) {
  static float big[1 << 16];
  tsr_st_tensor_t t = {.name = "x", .ndims = 1, .shape = {1 << 16}, .data = big};
  tsr_errbuf_t err = {""};
  /* A folder where the file would go: everything written, the rename refused. */
  const char *folder = path_of("taken");
  cr_assert_eq(mkdir(folder, 0700), 0);
  cr_assert_eq(tsr__st_write(folder, &t, 1, NULL, 0, &err), TSR_EIO);
  cr_assert(strstr(err.msg, folder), "%s", err.msg);
  cr_assert_eq(temporaries(), 0, "a failed rename left its temporary file");
  /* Writes cut short at 4 KiB (this test runs in its own process). */
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = {4096, 4096};
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  cr_assert_eq(tsr__st_write(path_of("cut.st"), &t, 1, NULL, 0, &err), TSR_EIO);
  cr_assert(strstr(err.msg, "File too large"), "%s", err.msg);
  cr_assert_eq(temporaries(), 0, "a failed write left its temporary file");
  cr_assert_neq(access(path_of("cut.st"), F_OK), 0, "a failed write left a file at its path");
}

/* Every number of the metadata out of its range is refused with the key that holds it, by
 * tsr_checkpoint_read (eval, resume) and tsr_checkpoint_load alike, before any cast. */
Test(contracts, numbers_of_the_metadata_out_of_range_are_refused_naming_the_key) {
  const char *p = path_of("base.st"), *q = path_of("bad.st");
  tsr_net_t *net = saved(p);
  tsr_errbuf_t err = {""};
  /* The file unchanged reads. */
  rewrite(p, q, "epoch", "1");
  cr_assert_eq(tsr_checkpoint_read(q, NULL, NULL, NULL, NULL, NULL, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_checkpoint_load(net, q, NULL, NULL, &err), 0, "%s", err.msg);
  static const struct {
    const char *key, *value, *named; /* named: what the message must name */
  } cases[] = {
      {"epoch", "1e300", "epoch"},
      {"epoch", "99999999999999999999", "epoch"},
      {"epoch", "4294967297", "epoch"},
      {"epochs", "-1", "epochs"},
      {"step_in_epoch", "nan", "step_in_epoch"},
      {"ranks", "3000000000", "ranks"},
      {"ranks", "0", "ranks"},
      {"seed", "-3", "seed"},
      {"seed", "18446744073709551616", "seed"},
      {"base_lr", "1e300", "base_lr"},
      {"base_lr", "inf", "base_lr"},
      {"base_lr", "nan", "base_lr"},
      {"base_lr", "1e-40", "base_lr"}, /* a float's subnormal */
      {"input_mean", "-inf", "input_mean"},
      {"input_std", "1e39", "input_std"},
      {"input_std", "0.25x", "input_std"},
      {"inputs", "1e20", "inputs"},
      {"classes", "2147483648", "classes"},
      {"net_seed", "", "net_seed"},
      {"optimizer_hyper", "lr inf momentum 0.9 weight_decay 0 beta1 0.9 beta2 0.999 eps 1e-08",
       "optimizer_hyper's lr"},
      {"optimizer_hyper", "lr 0.01 momentum 1e-45 weight_decay 0 beta1 0.9 beta2 0.999 eps 1e-08",
       "optimizer_hyper's momentum"},
      {"input_shape", "1 28 1e9", "input_shape"},
      {"input_shape", "1 28 99999999999", "input_shape"},
      {"schedule_epochs", "-1", "schedule_epochs"},
      {"batch", "0", "batch"},
      {"clip_grad", "inf", "clip_grad"},
      {"label_smoothing", "1.5", "label_smoothing"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    rewrite(p, q, cases[c].key, cases[c].value);
    err.msg[0] = '\0';
    cr_expect_eq(tsr_checkpoint_read(q, NULL, NULL, NULL, NULL, NULL, &err), TSR_EFORMAT,
                 "%s = '%s' read", cases[c].key, cases[c].value);
    cr_expect(strstr(err.msg, cases[c].named) != NULL, "%s = '%s': %s", cases[c].key,
              cases[c].value, err.msg);
  }
  /* Those tsr_checkpoint_load reads itself. */
  static const struct {
    const char *key, *value;
  } loaded[] = {{"optimizer_steps", "1e20"},
                {"optimizer_steps", "-5"},
                {"dropout_calls", "99999999999:1"},
                {"dropout_calls", "3:18446744073709551616"},
                {"epoch", "inf"}};
  for (size_t c = 0; c < sizeof loaded / sizeof *loaded; c++) {
    rewrite(p, q, loaded[c].key, loaded[c].value);
    err.msg[0] = '\0';
    cr_expect_eq(tsr_checkpoint_load(net, q, NULL, NULL, &err), TSR_EFORMAT, "%s = '%s' loaded",
                 loaded[c].key, loaded[c].value);
    cr_expect(strstr(err.msg, loaded[c].key) != NULL, "%s = '%s': %s", loaded[c].key,
              loaded[c].value, err.msg);
  }
  tsr_net_destroy(&net);
}

/* The run's settings (issue 40: the schedule's horizon, the batch, clipping, label smoothing)
 * read back; a file without them (every one of before) reads as one that has none, a resume's
 * note. */
Test(contracts, the_runs_settings_read_back_and_older_files_have_none) {
  const char *p = path_of("settings.st"), *q = path_of("settings-old.st");
  tsr_net_t *net = saved(p);
  tsr_errbuf_t err = {""};
  tsr_checkpoint_info_t got;
  cr_assert_eq(tsr_checkpoint_read(p, &got, NULL, NULL, NULL, NULL, &err), 0, "%s", err.msg);
  cr_expect(got.settings && got.schedule_epochs == 3 && got.batch == 8 && got.clip_grad == 0 &&
                got.label_smoothing == 0,
            "settings %d, horizon %d, batch %d", got.settings, got.schedule_epochs, got.batch);
  tsr_checkpoint_info_t info = {
      .epoch = 1, .epochs = 2, .schedule_epochs = 5, .batch = 32, .seed = 7, .input_std = 1};
  cr_assert_eq(tsr_checkpoint_save(net, &info, p, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_checkpoint_read(p, &got, NULL, NULL, NULL, NULL, &err), 0, "%s", err.msg);
  cr_expect(got.schedule_epochs == 5 && got.batch == 32, "horizon %d, batch %d",
            got.schedule_epochs, got.batch);
  rewrite(p, q, "schedule_epochs", NULL);
  const char *r = path_of("settings-older.st");
  rewrite(q, r, "batch", NULL);
  rewrite(r, q, "clip_grad", NULL);
  rewrite(q, r, "label_smoothing", NULL);
  cr_assert_eq(tsr_checkpoint_read(r, &got, NULL, NULL, NULL, NULL, &err), 0, "%s", err.msg);
  cr_expect(!got.settings && got.schedule_epochs == 0 && got.batch == 0);
  tsr_net_destroy(&net);
}

/* The validation split's and the schedules' keys (docs/checkpoints.md, "Validation and
 * schedules") read back every digit (an infinite best loss too), and each out of its range or
 * form is refused naming the key. */
Test(contracts, the_schedules_state_reads_back_and_is_range_checked) {
  const char *p = path_of("sched.st"), *q = path_of("sched-bad.st");
  tsr_net_t *net = saved(p);
  tsr_errbuf_t err = {""};
  tsr_checkpoint_info_t info = {.epoch = 2, .epochs = 4, .seed = 7, .input_std = 1};
  info.lr_schedule = TSR_LR_PLATEAU;
  info.lr = (tsr_lr_opts_t){.warmup = 5, .patience = 3, .factor = 0.3, .threshold = 1e-4};
  info.early_stop = 4, info.has_schedule_state = true;
  info.val_split = 0.15, info.val_samples = 90, info.val_from = 600;
  snprintf(info.val_data, sizeof info.val_data, "90 x 784");
  info.schedule_state = (tsr_schedule_state_t){.lr_factor = 0.09,
                                               .plateau_best = 0.1 + 0.2,
                                               .plateau_bad = 2,
                                               .early_best = INFINITY,
                                               .early_best_epoch = 0,
                                               .early_bad = 1};
  cr_assert_eq(tsr_checkpoint_save(net, &info, p, &err), 0, "%s", err.msg);
  tsr_checkpoint_info_t got;
  cr_assert_eq(tsr_checkpoint_read(p, &got, NULL, NULL, NULL, NULL, &err), 0, "%s", err.msg);
  cr_expect(got.lr_schedule == TSR_LR_PLATEAU && got.lr.warmup == 5 && got.lr.patience == 3 &&
            got.lr.factor == 0.3 && got.early_stop == 4);
  cr_expect(got.val_split == 0.15 && got.val_samples == 90 && got.val_from == 600 &&
            strcmp(got.val_data, "90 x 784") == 0);
  cr_expect(got.has_schedule_state &&
                memcmp(&got.schedule_state, &info.schedule_state, sizeof info.schedule_state) == 0,
            "the schedules' state did not read back bit for bit");
  static const struct {
    const char *key, *value;
  } cases[] = {
      {"lr_schedule", "plateau:3:2"},
      {"lr_warmup", "-1"},
      {"early_stop", "0"},
      {"val_split", "1"},
      {"val_split", "nan"},
      {"val_samples", "0"},
      {"val_from", "90"},
      {"schedule_state", "lr_factor 2 plateau_best 0.3 plateau_bad 2 early_best inf "
                         "early_best_epoch 0 early_bad 1"},
      {"schedule_state", "lr_factor 0.5 plateau_best nan plateau_bad 2 early_best inf "
                         "early_best_epoch 0 early_bad 1"},
      {"schedule_state", "lr_factor 0.5 plateau_best 0.3 plateau_bad -2 early_best inf "
                         "early_best_epoch 0 early_bad 1"},
      {"schedule_state", "lr_factor 0.5 plateau_best 0.3 plateau_bad 2 early_best inf "
                         "early_best_epoch 0 early_bad 1 extra"},
      {"schedule_state", "lr_factor 0.5"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    rewrite(p, q, cases[c].key, cases[c].value);
    err.msg[0] = '\0';
    cr_expect_eq(tsr_checkpoint_read(q, NULL, NULL, NULL, NULL, NULL, &err), TSR_EFORMAT,
                 "%s = '%s' read", cases[c].key, cases[c].value);
    cr_expect(strstr(err.msg, cases[c].key) != NULL, "%s = '%s': %s", cases[c].key, cases[c].value,
              err.msg);
  }
  tsr_net_destroy(&net);
}
