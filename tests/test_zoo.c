/* The model zoo (the .ini files of models/, written by scripts/zoo.py): every model builds through
 * the layout at its published input shape, its parameter count matches the published one (exactly;
 * for the models whose published convolutions have no bias, tessera's count less its convolutions'
 * biases), and one training step (forward, loss, backward, update) runs on a batch of random
 * images with a finite loss. tsr_model_summarize against a small model counted by hand. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/layers.h"
#include "tessera/plan.h"
#include "tessera/tessera.h"

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(zoo, .init = start, .fini = stop, .timeout = 600);

typedef struct {
  const char *name;
  int h, w, c, classes;
  int64_t published; /* torchvision's count (He et al.'s 0.27 M is option A: see below) */
  bool conv_bias;    /* the published model's convolutions have biases, as tessera's do */
} zoo_model_t;

static const zoo_model_t models[] = {
    /* CIFAR ResNets, option B shortcuts (1x1 strided convolution + batchnorm) without conv
     * biases: 272,474 for ResNet-20 (the paper's 0.27 M is option A, 269,722); the counts of
     * scripts/zoo.py --counts. */
    {"resnet20", 32, 32, 3, 10, 272474, false},
    {"resnet32", 32, 32, 3, 10, 466906, false},
    {"resnet56", 32, 32, 3, 10, 855770, false},
    {"resnet18", 224, 224, 3, 1000, 11689512, false},
    {"resnet50", 224, 224, 3, 1000, 25557032, false},
    {"vgg11", 224, 224, 3, 1000, 132868840, true},
    {"vgg16", 224, 224, 3, 1000, 138365992, true},
    {"alexnet", 224, 224, 3, 1000, 61100840, true},
    {"googlenet", 224, 224, 3, 1000, 6624904, false},
};
#define NMODELS (int)(sizeof models / sizeof *models)

/* TSR_ZOO_MODELS (names separated by commas) runs the tests on those models only. */
static bool wanted(const zoo_model_t *m) {
  const char *only = getenv("TSR_ZOO_MODELS");
  return !only || strstr(only, m->name);
}

static void load(const zoo_model_t *m, tsr_model_spec_t *spec, tsr_net_opts_t *o) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(spec, m->name, m->classes, &err), 0, "%s: %s", m->name, err.msg);
  tsr_net_opts_init(o);
  o->in_height = m->h, o->in_width = m->w, o->in_channels = m->c;
}

Test(zoo, published_parameter_counts) {
  for (int i = 0; i < NMODELS; i++) {
    const zoo_model_t *m = &models[i];
    if (!wanted(m)) continue;
    tsr_model_spec_t spec;
    tsr_net_opts_t o;
    load(m, &spec, &o);
    o.batch = 2;
    tsr_errbuf_t err = {""};
    tsr_model_summary_t s;
    int inputs = m->h * m->w * m->c;
    cr_assert_eq(tsr_model_summarize(&s, &spec, inputs, m->classes, &o, &err), 0, "%s: %s", m->name,
                 err.msg);
    int64_t biases = 0;
    for (int l = 0; l < s.n_layers; l++)
      if (strncmp(s.layers[l].type, "conv", 4) == 0) biases += s.layers[l].c;
    int64_t got = m->conv_bias ? s.params : s.params - biases;
    cr_expect_eq(got, m->published, "%s: %lld parameters%s, published %lld", m->name,
                 (long long)got, m->conv_bias ? "" : " less the conv biases",
                 (long long)m->published);
    /* The estimate's parameter bytes are the summary's count. */
    tsr_net_memory_t mem;
    cr_assert_eq(tsr_net_estimate(&mem, &spec, inputs, m->classes, &o, &err), 0, "%s: %s", m->name,
                 err.msg);
    cr_expect_eq(mem.params, 4 * s.params, "%s", m->name);
    tsr_model_summary_fini(&s);
    tsr_model_spec_fini(&spec);
  }
}

/* Any class count and, for the CIFAR ones, any input size where the windows fit. */
Test(zoo, other_classes_and_inputs) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "resnet20", 7, &err), 0, "%s", err.msg);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.in_height = 28, o.in_width = 28, o.in_channels = 1;
  tsr_model_summary_t s;
  cr_assert_eq(tsr_model_summarize(&s, &spec, 784, 7, &o, &err), 0, "%s", err.msg);
  const tsr_layer_summary_t *last = &s.layers[s.n_layers - 1];
  cr_expect_eq(last->c, 7);
  cr_expect_eq(s.layers[s.n_layers - 2].h, 1); /* the global pooling */
  tsr_model_summary_fini(&s);
  tsr_model_spec_fini(&spec);
}

/* One step of every model: the ImageNet ones at 224x224x3, batch 2; the CIFAR ones at 32x32x3. */
Test(zoo, one_step_each) {
  for (int i = 0; i < NMODELS; i++) {
    const zoo_model_t *m = &models[i];
    if (!wanted(m)) continue;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tsr_model_spec_t spec;
    tsr_net_opts_t o;
    load(m, &spec, &o);
    o.batch = 2;
    int features = m->h * m->w * m->c;
    tsr_dataset_t ds = {.n = 2, .features = features, .classes = m->classes};
    ds.channels = m->c, ds.height = m->h, ds.width = m->w;
    float *x = malloc(sizeof(float) * 2 * (size_t)features), y[2] = {0, 1};
    cr_assert(x);
    for (int64_t k = 0; k < 2 * (int64_t)features; k++)
      x[k] = (float)((k * 2654435761u) % 1000) / 1000.0f - 0.5f;
    ds.x = x, ds.y = y;
    tsr_errbuf_t err = {""};
    tsr_net_t *net = NULL;
    cr_assert_eq(tsr_net_create(&net, &spec, features, m->classes, &o, &err), 0, "%s: %s", m->name,
                 err.msg);
    int32_t rows[2] = {0, 1};
    cr_assert_eq(tsr_net_train_step(net, &ds, rows, 2, true), 0, "%s", m->name);
    double loss, correct;
    cr_assert_eq(tsr_net_take_stats(net, false, &loss, &correct), 0);
    cr_expect(isfinite(loss) && loss > 0, "%s: loss %g", m->name, loss);
    tsr_net_destroy(&net);
    tsr_model_spec_fini(&spec);
    free(x);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "zoo: %s one step in %.2f s\n", m->name,
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  }
}

/* A model counted by hand: input 8x8x2; conv 3x3/4 padding 1 + ReLU; maxpool 2; flatten; dense
 * 5 classes. */
Test(zoo, summary_by_hand) {
  const char *ini = "[c]\ntype = conv\nfilters = 4\nkernel = 3\npadding = 1\nactivation = relu\n"
                    "[p]\ntype = maxpool\nkernel = 2\n[f]\ntype = flatten\n"
                    "[out]\ntype = dense\nunits = classes\n";
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse_ini_text(&spec, ini, "hand", &err), 0, "%s", err.msg);
  tsr_model_summary_t s;
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.in_height = 8, o.in_width = 8, o.in_channels = 2;
  /* Not bound: refused with a message saying so. */
  cr_expect_neq(tsr_model_summarize(&s, &spec, 128, 5, &o, &err), 0);
  cr_expect(strstr(err.msg, "units = classes"), "%s", err.msg);
  tsr_model_bind_classes(&spec, 5);
  cr_assert_eq(tsr_model_summarize(&s, &spec, 128, 5, &o, &err), 0, "%s", err.msg);
  cr_assert_eq(s.n_layers, 3); /* the ReLU fused into the conv, the flatten builds nothing */
  /* conv: 3*3*2*4 weights + 4 biases; 8x8x4 outputs of 18 multiply-adds (36 flops), a bias add
   * and a ReLU each: 256 * 38 */
  cr_expect_str_eq(s.layers[0].type, "conv+relu");
  cr_expect_eq(s.layers[0].params, 76);
  cr_expect_eq(s.layers[0].flops, 256.0 * 38);
  cr_expect_eq(s.layers[0].h * s.layers[0].w * s.layers[0].c, 256);
  /* pool: 4x4x4 outputs of a 4-element window */
  cr_expect_eq(s.layers[1].params, 0);
  cr_expect_eq(s.layers[1].flops, 64.0 * 4);
  /* dense: 64 -> 5, 64 multiply-adds and a bias per output */
  cr_expect_eq(s.layers[2].params, 64 * 5 + 5);
  cr_expect_eq(s.layers[2].flops, 5.0 * 129);
  cr_expect_eq(s.params, 76 + 325);
  cr_expect_eq(s.flops, 256.0 * 38 + 256 + 645);
  cr_expect_eq(s.act_bytes, 4 * (256 + 64 + 5));
  tsr_model_summary_fini(&s);
  tsr_model_spec_fini(&spec);
}

/* Every zoo model planned for 1,024 nodes of each shipped cluster (benchmarks/clusters/), batch
 * 64 per replica, ImageNet's or CIFAR-10's epoch, every grid shape under batch averaging: every
 * row a finite positive step, the per-sample flops about three forward passes (forward, input
 * and weight gradients; the first convolution computes no input gradient), and on one rank the
 * memory tsr_net_estimate counts for that batch. */
Test(zoo, plans_for_1024_nodes) {
  static const char *const clusters[] = {"ib100", "eth10"};
  tsr_plan_row_t *rows = calloc(512, sizeof *rows);
  cr_assert(rows);
  for (int i = 0; i < NMODELS; i++) {
    const zoo_model_t *m = &models[i];
    if (!wanted(m)) continue;
    tsr_model_spec_t spec;
    tsr_net_opts_t no;
    load(m, &spec, &no);
    tsr_errbuf_t err = {""};
    tsr_model_summary_t s;
    int inputs = m->h * m->w * m->c;
    cr_assert_eq(tsr_model_summarize(&s, &spec, inputs, m->classes, &no, &err), 0, "%s", err.msg);
    for (int k = 0; k < 2; k++) {
      tsr_machine_t mach;
      cr_assert_eq(tsr_machine_load_ini(&mach, clusters[k], &err), 0, "%s", err.msg);
      for (int one = 0; one < 2; one++) {
        tsr_plan_opts_t o;
        tsr_plan_opts_init(&o);
        o.inputs = inputs, o.classes = m->classes;
        o.in_height = m->h, o.in_width = m->w, o.in_channels = m->c;
        o.samples = m->classes == 1000 ? 1281167 : 50000;
        o.ranks = one ? 1 : 1024 * mach.ranks_per_node;
        int n = 0;
        cr_assert_eq(tsr_plan_run(&spec, &o, &mach, rows, 512, &n, &err), 0, "%s on %s: %s",
                     m->name, clusters[k], err.msg);
        cr_assert_gt(n, 0);
        for (int r = 0; r < n; r++) {
          const tsr_plan_row_t *p = &rows[r];
          cr_expect(isfinite(p->step_s) && p->step_s > 0 && isfinite(p->epoch_s), "%s %dx%d",
                    m->name, p->pr, p->pc);
          if (p->pr != 1) continue;
          double per_sample = p->flops_step / o.batch;
          cr_expect(per_sample > 2.5 * s.flops && per_sample < 3.1 * s.flops,
                    "%s on %s: %.4g flops per sample per step, forward %.4g", m->name, clusters[k],
                    per_sample, s.flops);
        }
        if (one) {
          tsr_net_memory_t mem;
          tsr_net_opts_t eo = no;
          eo.batch = o.batch;
          cr_assert_eq(tsr_net_estimate(&mem, &spec, inputs, m->classes, &eo, &err), 0, "%s",
                       err.msg);
          cr_expect_gt(rows[0].memory_bytes, 0.9 * (double)mem.total, "%s", m->name);
        }
      }
    }
    tsr_model_summary_fini(&s);
    tsr_model_spec_fini(&spec);
  }
  free(rows);
}

/* The planner prices every layer a network builds through its type's cost hook, and summary
 * counts its FLOPs through its flops hook: every registered type with forward and backward
 * passes has a cost hook (batchnorm, add, concat, globalavgpool included), and every type but
 * the copies and shape changes a flops hook. */
Test(zoo, every_type_that_builds_a_layer_is_priced) {
  for (int i = 0; i < tsr__layer_type_count(); i++) {
    const tsr_layer_type_t *t = tsr__layer_type_at(i);
    if (!t->ops) continue;
    cr_expect(t->cost != NULL, "%s: no cost hook: the planner cannot price it", t->name);
    bool copies = strcmp(t->name, "concat") == 0;
    cr_expect(copies || t->flops != NULL, "%s: no flops hook: tessera summary counts none",
              t->name);
  }
}
