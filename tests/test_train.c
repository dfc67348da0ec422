/* Whole-network behaviour: the loss after a few steps does not depend on the
 * tile size or on scheduling, a short run on a Fashion-MNIST subset learns,
 * and model descriptions are parsed or rejected with useful messages. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"

#include "training.h"

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(train, .init = start, .fini = stop, .timeout = 300);
TestSuite(model);

/* training.h's loss_after_steps for a model given as text. */
static double loss_after(const tsr_dataset_t *ds, int steps, int tile_rows, int tile_cols,
                         const char *model) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, model, ds->classes, &err), 0, "%s", err.msg);
  return loss_after_steps(ds, &spec, steps, tile_rows, tile_cols);
}

Test(train, tile_size_invariance_after_five_steps) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 1000);
  const char *model = "mlp:40,24";
  double one = loss_after(&train, 5, 32, 1 << 20, model); /* one tile per matrix */
  double t8 = loss_after(&train, 5, 8, 8, model);
  double t32 = loss_after(&train, 5, 32, 32, model);
  double t5x7 = loss_after(&train, 5, 5, 7, model);
  double start = loss_after(&train, 0, 32, 32, model);
  cr_assert(one < start * 0.9, "5 steps must lower the loss (%g -> %g)", start, one);
  cr_assert(fabs(t8 - one) <= 1e-5 * one, "tile 8: %.9g vs one tile %.9g", t8, one);
  cr_assert(fabs(t32 - one) <= 1e-5 * one, "tile 32: %.9g vs one tile %.9g", t32, one);
  cr_assert(fabs(t5x7 - one) <= 1e-5 * one, "tile 5x7: %.9g vs one tile %.9g", t5x7, one);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}

Test(train, same_seed_same_loss_bit_for_bit) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 1000);
  /* GEMM tiles accumulate over K in a fixed order, so scheduling cannot change results. */
  double a = loss_after(&train, 5, 8, 16, "mlp:64");
  double b = loss_after(&train, 5, 8, 16, "mlp:64");
  cr_assert(a == b, "%.17g vs %.17g", a, b);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}

static int count_epochs(const tsr_epoch_stats_t *s, void *ctx) {
  cr_assert(isfinite(s->loss) && s->samples_per_s > 0);
  *(tsr_epoch_stats_t *)ctx = *s;
  return 0;
}

Test(train, subset_of_2000_images_beats_75_percent) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 2000);
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp", train.classes, &err), 0);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  tsr_net_t *net;
  cr_assert_eq(tsr_net_create(&net, &spec, (int)train.features, train.classes, &o, &err), 0);
  tsr_train_opts_t to;
  tsr_train_opts_init(&to);
  tsr_epoch_stats_t last = {0};
  to.epochs = 5, to.on_epoch = count_epochs, to.ctx = &last;
  cr_assert_eq(tsr_train(net, &train, &test, &to, &err), 0, "%s", err.msg);
  cr_assert_eq(last.epoch, 5);
  cr_assert_eq(last.samples, 2000);
  cr_assert(last.test_accuracy > 0.75, "test accuracy %.4f", last.test_accuracy);
  tsr_net_destroy(&net);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}

Test(train, rejects_a_last_layer_that_does_not_fit_the_classes) {
  tsr_model_spec_t spec = {1, {{.kind = TSR_LAYER_DENSE, .units = 7}}};
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  tsr_net_t *net = NULL;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, &spec, 784, 10, &o, &err), TSR_ESHAPE);
  cr_assert_null(net);
  cr_assert(strstr(err.msg, "10") && strstr(err.msg, "7"), "%s", err.msg);
}

Test(model, shorthand) {
  tsr_model_spec_t s;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&s, "mlp", 10, &err), 0);
  char buf[128];
  tsr_model_describe(&s, 784, buf, sizeof buf);
  cr_assert_str_eq(buf, "784-512-relu-512-relu-10");
  cr_assert_eq(tsr_model_parse(&s, "mlp:100,20,7", 3, &err), 0);
  cr_assert_eq(s.n_layers, 7);
  cr_assert_eq(tsr_model_parse(&s, "linear", 10, &err), 0);
  cr_assert_eq(s.n_layers, 1);
  const char *bad[] = {"mlp:", "mlp:12,,4", "mlp:-3", "mlp:x", "cnn7", "mlp:5,"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err.msg[0] = '\0';
    cr_assert_neq(tsr_model_parse(&s, bad[i], 10, &err), 0, "%s accepted", bad[i]);
    cr_assert(strstr(err.msg, "--model"), "%s: message '%s'", bad[i], err.msg);
  }
}

static char *write_temp(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/tessera-model-XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

Test(model, ini_file) {
  tsr_model_spec_t s;
  tsr_errbuf_t err = {""};
  char *path = write_temp("; the default MLP\n[hidden1]\ntype = dense\nunits = 512\nactivation = "
                          "relu\n[hidden2]\ntype = dense\nunits = 256\n[act]\ntype = relu\n"
                          "[out]\ntype = dense\nunits = 10\n");
  cr_assert_eq(tsr_model_load_ini(&s, path, &err), 0, "%s", err.msg);
  char buf[128];
  tsr_model_describe(&s, 784, buf, sizeof buf);
  cr_assert_str_eq(buf, "784-512-relu-256-relu-10");
  remove(path);
}

Test(model, ini_errors_name_the_file_section_and_fix) {
  struct {
    const char *text, *expect;
  } cases[] = {
      {"[a]\nunits = 5\n", "before 'type'"},
      {"[a]\ntype = lstm\n", "unknown layer type"},
      {"[a]\ntype = conv\nkernel = 3\n", "without 'filters'"},
      {"[a]\ntype = conv\nfilters = 8\n", "no 'kernel'"},
      {"[a]\ntype = maxpool\nkernel = 2\npadding = 1\n", "unknown key"},
      {"[a]\ntype = dropout\n", "without 'rate'"},
      {"[a]\ntype = dropout\nrate = 1.5\n", "[0, 1)"},
      {"[a]\ntype = conv\nfilters = 8\nkernel = 3x\n", "NHxNW"},
      {"[a]\ntype = dense\n", "without 'units'"},
      {"[a]\ntype = dense\nunits = -4\n", "positive integer"},
      {"[a]\ntype = dense\nunits = 4\nactivation = tanh\n", "relu or none"},
      {"[a]\ntype = dense\nunits = 4\nstride = 2\n", "unknown key"},
      {"", "no layers"},
      {"[a]\ntype = dense\nthis is not ini\n", "not an INI line"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tsr_model_spec_t s;
    tsr_errbuf_t err = {""};
    char *path = write_temp(cases[i].text);
    cr_assert_neq(tsr_model_load_ini(&s, path, &err), 0, "case %zu accepted", i);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, cases[i].expect), "case %zu: '%s'", i,
              err.msg);
    remove(path);
  }
  tsr_model_spec_t s;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_load_ini(&s, "/nonexistent/model.ini", &err), TSR_EIO);
  cr_assert(strstr(err.msg, "/nonexistent/model.ini"));
}
