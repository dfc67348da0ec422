/* Checkpoints: the safetensors reader refuses every kind of bad file with a
 * message; a checkpoint round-trips a network's parameters, optimizer state
 * and step count; one of another model, optimizer or data is refused; a
 * damaged tensor is caught by its checksum; and a run stopped and resumed
 * ends bit for bit where an uninterrupted run does (with batchnorm: its running statistics and
 * batch counts too). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "nn/net_impl.h"
#include "tessera/tessera.h"

#include "tmpfile.h"

#include "training.h"

static char dir[64];

static void start(void) {
  make_temp_dir(dir, sizeof dir, "tessera-ckpt");
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
  remove_temp_dir(dir);
}

TestSuite(safetensors, .init = start, .fini = stop);
TestSuite(checkpoint, .init = start, .fini = stop, .timeout = 300);

static const char *path_of(const char *name) {
  static char p[128];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return p;
}

Test(safetensors, round_trip_of_tensors_and_metadata) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1, 0.5f, 1e-30f};
  tsr_st_tensor_t t[2] = {{.name = "a", .ndims = 2, .shape = {2, 3}, .data = a},
                          {.name = "layers.0.b", .ndims = 1, .shape = {3}, .data = b}};
  tsr_st_meta_t m[2] = {{"epoch", "3"}, {"model", "784-10\nwith \"quotes\""}};
  tsr_errbuf_t err = {""};
  const char *p = path_of("rt.safetensors");
  cr_assert_eq(tsr__st_write(p, t, 2, m, 2, &err), 0, "%s", err.msg);
  tsr_st_file_t *f;
  cr_assert_eq(tsr__st_open(&f, p, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr__st_count(f), 2);
  int i = tsr__st_find(f, "layers.0.b");
  cr_assert(i >= 0);
  tsr_st_tensor_t got;
  tsr__st_tensor(f, i, &got);
  cr_assert(got.ndims == 1 && got.shape[0] == 3 && memcmp(got.data, b, sizeof b) == 0);
  tsr__st_tensor(f, tsr__st_find(f, "a"), &got);
  cr_assert(got.ndims == 2 && got.shape[1] == 3 && memcmp(got.data, a, sizeof a) == 0);
  cr_assert_str_eq(tsr__st_meta(f, "model"), "784-10\nwith \"quotes\"");
  cr_assert_str_eq(tsr__st_meta(f, "epoch"), "3");
  cr_assert_null(tsr__st_meta(f, "missing"));
  tsr__st_close(&f);
  /* The header is padded so that the buffer starts 8-byte aligned. */
  FILE *fp = fopen(p, "rb");
  unsigned char len[8];
  cr_assert_eq(fread(len, 1, 8, fp), 8);
  fclose(fp);
  cr_assert_eq(len[0] % 8, 0);
}

/* A file of the header text and a buffer of n floats. */
static size_t file_of(unsigned char *out, const char *header, uint64_t declared, int nfloats) {
  for (int k = 0; k < 8; k++)
    out[k] = (unsigned char)(declared >> (8 * k));
  size_t h = strlen(header);
  memcpy(out + 8, header, h);
  memset(out + 8 + h, 0, sizeof(float) * (size_t)nfloats);
  return 8 + h + sizeof(float) * (size_t)nfloats;
}

static void expect_refused(const char *header, uint64_t declared, int nfloats, size_t cut,
                           const char *want) {
  unsigned char bytes[4096];
  size_t n = file_of(bytes, header, declared, nfloats);
  if (cut) n = cut;
  tsr_st_file_t *f = NULL;
  tsr_errbuf_t err = {""};
  int rc = tsr__st_parse(&f, bytes, n, "x.safetensors", &err);
  cr_assert_neq(rc, 0, "accepted: %s", header);
  cr_assert_null(f);
  cr_assert(strstr(err.msg, "x.safetensors") && strstr(err.msg, want), "'%s' lacks '%s'", err.msg,
            want);
}

Test(safetensors, refuses_bad_files_with_a_message) {
  const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  size_t hl = strlen(ok);
  unsigned char bytes[256];
  size_t n = file_of(bytes, ok, hl, 2);
  tsr_st_file_t *f;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr__st_parse(&f, bytes, n, "ok", &err), 0, "%s", err.msg);
  tsr__st_close(&f);
  expect_refused(ok, hl, 2, 5, "shorter than its 8-byte header length");
  expect_refused(ok, hl, 2, 8 + hl - 3, "truncated inside its header");
  expect_refused(ok, hl, 2, 8 + hl + 4, "data_offsets out of the buffer");
  expect_refused(ok, (uint64_t)1 << 63, 2, 0, "header length above 100 MB");
  expect_refused("not json at all", 15, 0, 0, "not a JSON object");
  expect_refused("[1,2]", 5, 0, 0, "not a JSON object");
  const char *shape = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
  expect_refused(shape, strlen(shape), 2, 0, "do not match its shape");
  const char *overlap = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
  expect_refused(overlap, strlen(overlap), 3, 0, "overlaps");
  const char *range = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
  expect_refused(range, strlen(range), 2, 0, "out of the buffer");
  const char *dup = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
  expect_refused(dup, strlen(dup), 2, 0, "appears twice");
  const char *hole = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
  expect_refused(hole, strlen(hole), 2, 0, "hole");
  expect_refused(ok, hl, 3, 0, "bytes no tensor describes");
  const char *dtype = "{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}";
  expect_refused(dtype, strlen(dtype), 2, 0, "only dtype F32");
  const char *neg = "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}";
  expect_refused(neg, strlen(neg), 2, 0, "not an integer >= 0");
  const char *meta = "{\"__metadata__\":{\"k\":3}}";
  expect_refused(meta, strlen(meta), 0, 0, "not a string");
}

/* A header of n one-float tensors t0 .. t(n-1) and as many metadata keys k0 ..: dup 'k' makes
 * the last key repeat the first's name, 't' the last tensor. Into a malloc'd file of *size
 * bytes. */
static unsigned char *many_tensors(int n, char dup, size_t *size) {
  size_t cap = (size_t)n * 96 + 64, at = 0;
  char *h = malloc(cap);
  cr_assert_not_null(h);
  at += (size_t)snprintf(h + at, cap - at, "{\"__metadata__\":{");
  for (int i = 0; i < n; i++)
    at += (size_t)snprintf(h + at, cap - at, "%s\"k%d\":\"v\"", i ? "," : "",
                           dup == 'k' && i == n - 1 ? 0 : i);
  at += (size_t)snprintf(h + at, cap - at, "}");
  for (int i = 0; i < n; i++)
    at += (size_t)snprintf(h + at, cap - at,
                           ",\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],"
                           "\"data_offsets\":[%d,%d]}",
                           dup == 't' && i == n - 1 ? 0 : i, 4 * i, 4 * i + 4);
  at += (size_t)snprintf(h + at, cap - at, "}");
  unsigned char *bytes = calloc(8 + at + 4 * (size_t)n, 1);
  cr_assert_not_null(bytes);
  for (int k = 0; k < 8; k++)
    bytes[k] = (unsigned char)((uint64_t)at >> (8 * k));
  memcpy(bytes + 8, h, at);
  free(h);
  *size = 8 + at + 4 * (size_t)n;
  return bytes;
}

/* Names are checked and found through a hash index (issue 20: a pairwise duplicate check made
 * a header of many tensors quadratic): 100,000 tensors and keys read, every one found by name,
 * and a duplicate at the very end is still caught. */
Test(safetensors, a_hundred_thousand_names_are_indexed_and_a_late_duplicate_caught) {
  int n = 100000;
  size_t size;
  unsigned char *bytes = many_tensors(n, 0, &size);
  tsr_st_file_t *f = NULL;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr__st_parse(&f, bytes, size, "many", &err), 0, "%s", err.msg);
  cr_expect_eq(tsr__st_count(f), n);
  cr_expect_eq(tsr__st_nmeta(f), n);
  int missing = 0;
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    int k = tsr__st_find(f, name);
    tsr_st_tensor_t t;
    if (k >= 0) tsr__st_tensor(f, k, &t);
    missing += k < 0 || strcmp(t.name, name) != 0;
    snprintf(name, sizeof name, "k%d", i);
    missing += tsr__st_meta(f, name) == NULL;
  }
  cr_expect_eq(missing, 0);
  cr_expect_eq(tsr__st_find(f, "t100000"), -1);
  cr_expect_null(tsr__st_meta(f, "nope"));
  tsr__st_close(&f);
  free(bytes);
  const char *said[] = {"metadata key 'k0' appears twice", "tensor name 't0' appears twice"};
  for (int d = 0; d < 2; d++) {
    bytes = many_tensors(n, d == 0 ? 'k' : 't', &size);
    cr_expect_neq(tsr__st_parse(&f, bytes, size, "dup", &err), 0);
    cr_expect(strstr(err.msg, said[d]) != NULL, "%s", err.msg);
    cr_expect_null(f);
    free(bytes);
  }
}

/* A write killed before its rename leaves PATH.tmp.PID.XXXXXX behind: the next write of the
 * same path removes those of writers that no longer run (and the PID-less ones of older
 * builds), and leaves a live writer's alone. */
Test(safetensors, the_next_write_removes_a_killed_writes_temporary_file) {
  char dir[] = "/tmp/tsr-stale-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[256], dead[300], old[300], live[300], other[300];
  snprintf(path, sizeof path, "%s/c.st", dir);
  /* PID 2^31 - 1 is above any Linux pid_max: that writer is gone. */
  snprintf(dead, sizeof dead, "%s.tmp.2147483647.a1B2c3", path);
  snprintf(old, sizeof old, "%s.tmp.Zz9Yy8", path);
  snprintf(live, sizeof live, "%s.tmp.%ld.q1w2e3", path, (long)getppid());
  snprintf(other, sizeof other, "%s/d.st.tmp.2147483647.a1B2c3", dir);
  const char *files[] = {dead, old, live, other};
  for (int i = 0; i < 4; i++) {
    FILE *f = fopen(files[i], "w");
    cr_assert_not_null(f);
    fputs("half a checkpoint", f);
    fclose(f);
  }
  float v[2] = {1, 2};
  tsr_st_tensor_t t = {.name = "a", .ndims = 1, .shape = {2}, .data = v};
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr__st_write(path, &t, 1, NULL, 0, &err), 0, "%s", err.msg);
  cr_expect_neq(access(dead, F_OK), 0, "a dead writer's temporary file is left");
  cr_expect_neq(access(old, F_OK), 0, "an older build's temporary file is left");
  cr_expect_eq(access(live, F_OK), 0, "a live writer's temporary file was removed");
  cr_expect_eq(access(other, F_OK), 0, "another checkpoint's temporary file was removed");
  cr_expect_eq(access(path, F_OK), 0);
  for (int i = 0; i < 4; i++)
    unlink(files[i]);
  unlink(path);
  rmdir(dir);
}

/* A checkpoint gets the mode any new file of the user gets, 0666 less the umask (issue 21: it was
 * 0600 whatever the umask, while logs were 0644). */
Test(safetensors, a_checkpoint_has_the_users_umask) {
  float v[1] = {1};
  tsr_st_tensor_t t = {.name = "a", .ndims = 1, .shape = {1}, .data = v};
  const mode_t masks[] = {022, 077, 002};
  for (int i = 0; i < 3; i++) {
    mode_t before = umask(masks[i]);
    char path[] = "/tmp/tsr-mode-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    tsr_errbuf_t err = {""};
    cr_assert_eq(tsr__st_write(path, &t, 1, NULL, 0, &err), 0, "%s", err.msg);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_expect_eq(sb.st_mode & 0777, 0666 & ~masks[i], "umask %03o: mode %03o", masks[i],
                 sb.st_mode & 0777);
    unlink(path);
    umask(before);
  }
}

/* A small net trained a few steps (Adam, so there is state), its tensors. */
static tsr_net_t *trained_net(const tsr_dataset_t *ds, const char *model, int steps) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, model, ds->classes, &err), 0, "%s", err.msg);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 16, o.seed = 4;
  cr_assert_eq(tsr_optimizer_init(&o.opt, "adam", NULL), 0);
  o.opt.lr = 0.01f;
  tsr_net_t *net;
  cr_assert_eq(tsr_net_create(&net, &spec, (int)ds->features, ds->classes, &o, &err), 0, "%s",
               err.msg);
  int32_t rows[16];
  for (int s = 0; s < steps; s++) {
    for (int i = 0; i < 16; i++)
      rows[i] = (int32_t)((s * 16 + i) % ds->n);
    cr_assert_eq(tsr_net_train_step(net, ds, rows, 16, true), 0);
  }
  tsr_model_spec_fini(&spec);
  return net;
}

static float *all_params(const tsr_net_t *net) {
  float *all = malloc(sizeof(float) * (size_t)tsr_net_param_count(net));
  int64_t off = 0;
  for (int p = 0; p < tsr_net_n_params(net); p++) {
    int64_t r, c;
    tsr_net_param_info(net, p, &r, &c);
    cr_assert_eq(tsr_net_param_get(net, p, all + off), 0);
    off += r * c;
  }
  return all;
}

/* all_params, then every layer's buffers and batch count (batchnorm); *n: the floats. */
static float *all_state(const tsr_net_t *net, int64_t *n) {
  *n = tsr_net_param_count(net);
  for (int i = 0; i < net->n_layers; i++)
    for (int k = 0; k < net->layers[i].nbuffers; k++)
      *n += tsr_tiles_cols(net->layers[i].buffers[k]) + 1;
  float *all = realloc(all_params(net), sizeof(float) * (size_t)*n);
  int64_t off = tsr_net_param_count(net);
  for (int i = 0; i < net->n_layers; i++)
    for (int k = 0; k < net->layers[i].nbuffers; k++) {
      cr_assert_eq(tsr_tiles_read(net->layers[i].buffers[k], all + off), 0);
      off += tsr_tiles_cols(net->layers[i].buffers[k]);
      all[off++] = (float)net->layers[i].batches_tracked;
    }
  return all;
}

static tsr_checkpoint_info_t info_for(const tsr_dataset_t *ds, const tsr_net_t *net) {
  tsr_checkpoint_info_t info = {
      .epoch = 1, .epochs = 3, .seed = 7, .input_mean = 0.5f, .input_std = 0.25f};
  tsr_dataset_fingerprint(ds, info.data, sizeof info.data);
  (void)net;
  return info;
}

/* A safetensors file of another format version: refused with the version it has, read before
 * the file is closed (the fuzzer found the message reading freed memory). */
Test(safetensors, refuses_another_checkpoint_format_naming_it) {
  float x[2] = {1, 2};
  tsr_st_tensor_t t = {.name = "x", .ndims = 1, .shape = {2}, .data = x};
  tsr_st_meta_t m = {"format", "tessera-checkpoint/0"};
  tsr_errbuf_t err = {""};
  const char *p = path_of("old.safetensors");
  cr_assert_eq(tsr__st_write(p, &t, 1, &m, 1, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_checkpoint_read(p, NULL, NULL, NULL, NULL, NULL, &err), TSR_EFORMAT);
  cr_assert(strstr(err.msg, "format tessera-checkpoint/0, want"), "%s", err.msg);
  tsr_checkpoint_listing_t l;
  cr_assert_eq(tsr_checkpoint_list(&l, p, &err), TSR_EFORMAT);
  cr_assert(strstr(err.msg, "format tessera-checkpoint/0, want"), "%s", err.msg);
}

Test(checkpoint, round_trip_then_the_same_next_step) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 200);
  tsr_net_t *a = trained_net(&train, "mlp:24", 3);
  tsr_checkpoint_info_t info = info_for(&train, a);
  tsr_errbuf_t err = {""};
  const char *p = path_of("a.safetensors");
  cr_assert_eq(tsr_checkpoint_save(a, &info, p, &err), 0, "%s", err.msg);
  /* A fresh net loads it: same parameters, and the same next step (so the Adam moments and
   * the step count came back too). */
  tsr_net_t *b = trained_net(&train, "mlp:24", 0);
  tsr_checkpoint_info_t got;
  cr_assert_eq(tsr_checkpoint_load(b, p, info.data, &got, &err), 0, "%s", err.msg);
  cr_assert(got.epoch == 1 && got.epochs == 3 && got.seed == 7 && got.input_std == 0.25f);
  int64_t n = tsr_net_param_count(a);
  float *wa = all_params(a), *wb = all_params(b);
  cr_assert(memcmp(wa, wb, sizeof(float) * (size_t)n) == 0, "parameters differ after loading");
  int32_t rows[16];
  for (int i = 0; i < 16; i++)
    rows[i] = (int32_t)(100 + i);
  cr_assert_eq(tsr_net_train_step(a, &train, rows, 16, true), 0);
  cr_assert_eq(tsr_net_train_step(b, &train, rows, 16, true), 0);
  free(wa), free(wb);
  wa = all_params(a), wb = all_params(b);
  cr_assert(memcmp(wa, wb, sizeof(float) * (size_t)n) == 0, "the next step differs");
  /* A fresh net that skipped the load takes another step: the check means something. */
  tsr_net_t *c = trained_net(&train, "mlp:24", 0);
  cr_assert_eq(tsr_net_train_step(c, &train, rows, 16, true), 0);
  float *wc = all_params(c);
  cr_assert(memcmp(wa, wc, sizeof(float) * (size_t)n) != 0);
  free(wa), free(wb), free(wc);
  tsr_net_destroy(&a), tsr_net_destroy(&b), tsr_net_destroy(&c);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}

Test(checkpoint, refuses_another_model_optimizer_data_or_a_damaged_tensor) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 200);
  tsr_net_t *a = trained_net(&train, "mlp:24", 2);
  tsr_checkpoint_info_t info = info_for(&train, a);
  tsr_errbuf_t err = {""};
  const char *p = path_of("b.safetensors");
  cr_assert_eq(tsr_checkpoint_save(a, &info, p, &err), 0, "%s", err.msg);
  tsr_net_t *other = trained_net(&train, "mlp:32", 0);
  cr_assert_eq(tsr_checkpoint_load(other, p, NULL, NULL, &err), TSR_EINVAL);
  cr_assert(strstr(err.msg, "784-24-relu-10") && strstr(err.msg, "784-32-relu-10"), "%s", err.msg);
  cr_assert_eq(tsr_checkpoint_load(a, p, "60000 x 784, 10 classes, checksum 1", NULL, &err),
               TSR_EINVAL);
  cr_assert(strstr(err.msg, "checksum 1") && strstr(err.msg, info.data), "%s", err.msg);
  /* SGD with momentum where Adam wrote it. */
  tsr_model_spec_t spec;
  tsr_model_parse(&spec, "mlp:24", 10, &err);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  tsr_net_t *sgd;
  cr_assert_eq(tsr_net_create(&sgd, &spec, 784, 10, &o, &err), 0);
  cr_assert_eq(tsr_checkpoint_load(sgd, p, NULL, NULL, &err), TSR_EINVAL);
  cr_assert(strstr(err.msg, "adam") && strstr(err.msg, "--optimizer"), "%s", err.msg);
  /* One flipped byte of the buffer: its tensor's checksum says so. */
  FILE *fp = fopen(p, "r+b");
  fseek(fp, -5, SEEK_END);
  int c = fgetc(fp);
  fseek(fp, -5, SEEK_END);
  fputc(c ^ 0x10, fp);
  fclose(fp);
  cr_assert_eq(tsr_checkpoint_load(a, p, NULL, NULL, &err), TSR_EFORMAT);
  cr_assert(strstr(err.msg, "damaged") && strstr(err.msg, p), "%s", err.msg);
  /* Not a checkpoint: a safetensors file without tessera's metadata. */
  float x[2] = {1, 2};
  tsr_st_tensor_t t = {.name = "x", .ndims = 1, .shape = {2}, .data = x};
  cr_assert_eq(tsr__st_write(path_of("plain.safetensors"), &t, 1, NULL, 0, &err), 0);
  cr_assert_eq(tsr_checkpoint_load(a, path_of("plain.safetensors"), NULL, NULL, &err), TSR_EFORMAT);
  cr_assert(strstr(err.msg, "not a tessera checkpoint"), "%s", err.msg);
  tsr_net_destroy(&a), tsr_net_destroy(&other), tsr_net_destroy(&sgd);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
  tsr_model_spec_fini(&spec);
}

/* A net rebuilt from what the checkpoint says (tsr_checkpoint_read) loads it: what `tessera
 * eval` does; the CNN exercises the input geometry and a dropout layer's pass count, and the
 * net's initialization (he, not the default) is recorded. */
Test(checkpoint, read_builds_a_net_that_loads_it) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 200);
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  const char *ini = "[c]\ntype = conv\nfilters = 4\nkernel = 3\npadding = 1\nactivation = relu\n"
                    "[p]\ntype = maxpool\nkernel = 2\n[d]\ntype = dropout\nrate = 0.25\n"
                    "[o]\ntype = dense\nunits = 10\n";
  cr_assert_eq(tsr_model_parse_ini_text(&spec, ini, "inline", &err), 0, "%s", err.msg);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 16, o.in_channels = 1, o.in_height = 28, o.in_width = 28, o.seed = 9;
  o.init = TSR_INIT_HE; /* not the default: the file must say it */
  tsr_net_t *a;
  cr_assert_eq(tsr_net_create(&a, &spec, 784, 10, &o, &err), 0, "%s", err.msg);
  int32_t rows[16];
  for (int i = 0; i < 16; i++)
    rows[i] = i;
  cr_assert_eq(tsr_net_train_step(a, &train, rows, 16, true), 0);
  tsr_checkpoint_info_t info = info_for(&train, a);
  const char *p = path_of("cnn.safetensors");
  cr_assert_eq(tsr_checkpoint_save(a, &info, p, &err), 0, "%s", err.msg);
  tsr_model_spec_t rspec;
  tsr_net_opts_t ro;
  int inputs, classes;
  cr_assert_eq(tsr_checkpoint_read(p, NULL, &rspec, &ro, &inputs, &classes, &err), 0, "%s",
               err.msg);
  cr_assert(inputs == 784 && classes == 10 && ro.in_height == 28 && ro.seed == 9);
  cr_assert_eq(ro.init, TSR_INIT_HE, "the checkpoint records the initialization");
  ro.batch = 16;
  tsr_net_t *b;
  cr_assert_eq(tsr_net_create(&b, &rspec, inputs, classes, &ro, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_checkpoint_load(b, p, NULL, NULL, &err), 0, "%s", err.msg);
  /* The next training step (dropout mask included) is the same on both. */
  cr_assert_eq(tsr_net_train_step(a, &train, rows, 16, true), 0);
  cr_assert_eq(tsr_net_train_step(b, &train, rows, 16, true), 0);
  float *wa = all_params(a), *wb = all_params(b);
  cr_assert(memcmp(wa, wb, sizeof(float) * (size_t)tsr_net_param_count(a)) == 0);
  free(wa), free(wb);
  tsr_net_destroy(&a), tsr_net_destroy(&b);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
  tsr_model_spec_fini(&spec);
  tsr_model_spec_fini(&rspec);
}

static int stop_after = 0, epochs_seen = 0;

static int count_epoch(const tsr_epoch_stats_t *st, void *ctx) {
  (void)st, (void)ctx;
  epochs_seen++;
  return 0;
}

static bool stop_now(void *ctx) {
  (void)ctx;
  return epochs_seen >= stop_after;
}

static const char dropout_mlp[] = "[h]\ntype = dense\nunits = 32\nactivation = relu\n"
                                  "[d]\ntype = dropout\nrate = 0.2\n[o]\ntype = dense\n"
                                  "units = 10\n";

/* Trains 4 epochs of 300 images (cosine schedule, optimizer opt, model, dropout), in
 * one go, or stopped after `stop` epochs with a checkpoint then resumed into a
 * fresh net built from what the checkpoint says (tsr_checkpoint_read: the
 * optimizer's name and hyper-parameters must come back as they were); returns
 * the final parameters (and buffers: all_state). */
static float *train_four_epochs(const tsr_dataset_t *train, int stop, const tsr_optimizer_t *opt,
                                int64_t *n, const char *model) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse_ini_text(&spec, model, "inline", &err), 0, "%s", err.msg);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 32, o.seed = 6, o.opt = *opt;
  tsr_net_t *net;
  cr_assert_eq(tsr_net_create(&net, &spec, 784, 10, &o, &err), 0, "%s", err.msg);
  tsr_train_opts_t to;
  tsr_train_opts_init(&to);
  to.epochs = 4, to.seed = 3, to.on_epoch = count_epoch;
  tsr_checkpoint_info_t info = info_for(train, net);
  const char *p = path_of("resume.safetensors");
  epochs_seen = 0;
  if (stop) {
    stop_after = stop;
    to.should_stop = stop_now, to.checkpoint_path = p, to.checkpoint_info = &info;
    cr_assert_eq(tsr_train(net, train, NULL, &to, &err), TSR_ESTOPPED, "%s", err.msg);
    cr_assert(strstr(err.msg, "--resume") && strstr(err.msg, p), "%s", err.msg);
    cr_assert_eq(epochs_seen, stop);
    tsr_net_destroy(&net);
    tsr_net_opts_t ro;
    cr_assert_eq(tsr_checkpoint_read(p, NULL, NULL, &ro, NULL, NULL, &err), 0, "%s", err.msg);
    cr_assert(memcmp(&ro.opt, &o.opt, sizeof o.opt) == 0,
              "%s: the checkpoint's optimizer %s (lr %g, momentum %g, decay %g) is not the run's",
              tsr_optimizer_name(opt), tsr_optimizer_name(&ro.opt), (double)ro.opt.lr,
              (double)ro.opt.momentum, (double)ro.opt.weight_decay);
    ro.batch = o.batch;
    cr_assert_eq(tsr_net_create(&net, &spec, 784, 10, &ro, &err), 0, "%s", err.msg);
    tsr_checkpoint_info_t got;
    cr_assert_eq(tsr_checkpoint_load(net, p, info.data, &got, &err), 0, "%s", err.msg);
    cr_assert_eq(got.epoch, stop);
    to.start_epoch = got.epoch + 1, to.start_step = got.step_in_epoch, to.seed = got.seed;
    to.should_stop = NULL, to.checkpoint_path = NULL;
  }
  cr_assert_eq(tsr_train(net, train, NULL, &to, &err), 0, "%s", err.msg);
  cr_assert_eq(epochs_seen, 4, "epochs reported: %d", epochs_seen);
  float *w = all_state(net, n);
  tsr_net_destroy(&net);
  tsr_model_spec_fini(&spec);
  return w;
}

/* Stopped after 2 of 4 epochs and resumed, then the same bits as 4 epochs in one go, for
 * optimizer name at rate lr and weight decay wd; and the decay changes those bits (a resume
 * that lost it, or took the default, would not end there). */
static void resumes_model_bit_for_bit(const char *name, float lr, float wd, const char *model) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 300);
  tsr_optimizer_t opt;
  cr_assert_eq(tsr_optimizer_init(&opt, name, NULL), 0);
  opt.lr = lr, opt.weight_decay = wd;
  int64_t n;
  float *whole = train_four_epochs(&train, 0, &opt, &n, model),
        *resumed = train_four_epochs(&train, 2, &opt, &n, model);
  int64_t off = 0;
  for (int64_t i = 0; i < n; i++)
    off += memcmp(&whole[i], &resumed[i], sizeof(float)) != 0;
  cr_assert_eq(off, 0, "%s: %lld of %lld parameters differ", name, (long long)off, (long long)n);
  if (wd > 0) {
    opt.weight_decay = 0;
    float *other = train_four_epochs(&train, 0, &opt, &n, model);
    cr_assert(memcmp(whole, other, sizeof(float) * (size_t)n) != 0,
              "%s: the decay changes nothing: the check is blind to it", name);
    free(other);
  }
  free(whole), free(resumed);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}

static void resumes_bit_for_bit(const char *name, float lr, float wd) {
  resumes_model_bit_for_bit(name, lr, wd, dropout_mlp);
}

/* Per channel after a convolution and per feature after a dense layer; 300 samples at batch 32
 * end each epoch with a short batch. */
Test(checkpoint, batchnorm_stopped_and_resumed_equals_uninterrupted_bit_for_bit) {
  resumes_model_bit_for_bit("sgd", 0.05f, 0.0f,
                            "[c]\ntype = conv\nfilters = 4\nkernel = 3\nstride = 2\n"
                            "[cbn]\ntype = batchnorm\nactivation = relu\n"
                            "[h]\ntype = dense\nunits = 32\n[hbn]\ntype = batchnorm\n"
                            "activation = relu\n[d]\ntype = dropout\nrate = 0.2\n"
                            "[o]\ntype = dense\nunits = 10\n");
}

Test(checkpoint, stopped_and_resumed_equals_uninterrupted_bit_for_bit) {
  resumes_bit_for_bit("sgd", 0.05f, 0.0f);
}

Test(checkpoint, sgd_nesterov_stopped_and_resumed_equals_uninterrupted_bit_for_bit) {
  resumes_bit_for_bit("sgd-nesterov", 0.05f, 1e-3f);
}

Test(checkpoint, adamw_stopped_and_resumed_equals_uninterrupted_bit_for_bit) {
  resumes_bit_for_bit("adamw", 0.002f, 0.05f);
}

/* A checkpoint naming an optimizer this tessera does not know is refused, by name, with the
 * known ones, when loaded into a net and when read to build one: never taken for SGD. */
Test(checkpoint, refuses_an_unknown_optimizer_naming_it) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 200);
  tsr_net_t *a = trained_net(&train, "mlp:24", 1);
  tsr_checkpoint_info_t info = info_for(&train, a);
  tsr_errbuf_t err = {""};
  const char *p = path_of("lion.safetensors");
  cr_assert_eq(tsr_checkpoint_save(a, &info, p, &err), 0, "%s", err.msg);
  /* "adam" -> "lion" in the header: the same length, so the offsets stay right. */
  FILE *fp = fopen(p, "r+b");
  cr_assert_not_null(fp);
  static char bytes[1 << 16];
  size_t got = fread(bytes, 1, sizeof bytes, fp);
  const char *key = "\"optimizer\":\"adam\"";
  char *at = memmem(bytes, got, key, strlen(key));
  cr_assert_not_null(at, "no %s in the header", key);
  memcpy(at + strlen(key) - 5, "lion", 4);
  fseek(fp, at - bytes, SEEK_SET);
  fwrite(at, 1, strlen(key), fp);
  fclose(fp);
  const char *known = "known: sgd, sgd-nesterov, adam, adamw";
  cr_assert_eq(tsr_checkpoint_load(a, p, NULL, NULL, &err), TSR_EFORMAT);
  cr_assert(strstr(err.msg, "optimizer lion") && strstr(err.msg, known) && strstr(err.msg, p), "%s",
            err.msg);
  tsr_net_opts_t o;
  cr_assert_eq(tsr_checkpoint_read(p, NULL, NULL, &o, NULL, NULL, &err), TSR_EFORMAT);
  cr_assert(strstr(err.msg, "optimizer lion") && strstr(err.msg, known), "%s", err.msg);
  tsr_net_destroy(&a);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}
