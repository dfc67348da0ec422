/* The zoo's models at the shapes the kernel benchmarks (bench_conv, bench_pool) measure them:
 * each model's input and batch, laid out as the library lays it out (src/nn/layout.c) for two
 * workers, or with a given batch-row tile. */
#ifndef TSR_BENCH_ZOO_H
#define TSR_BENCH_ZOO_H

#include <stdio.h>
#include <string.h>

#include "nn/layout.h"
#include "tessera/tessera.h"

typedef struct {
  const char *model, *input;
  int batch;
} bench_zoo_model_t;

static const bench_zoo_model_t bench_zoo[] = {
    {"resnet20", "32x32x3", 128}, {"resnet32", "32x32x3", 128}, {"resnet56", "32x32x3", 128},
    {"vgg11", "32x32x3", 64},     {"resnet18", "224x224x3", 8}, {"resnet50", "224x224x3", 8},
    {"vgg16", "224x224x3", 8},    {"alexnet", "224x224x3", 8},  {"googlenet", "224x224x3", 8},
};
#define BENCH_ZOO_MODELS (sizeof bench_zoo / sizeof *bench_zoo)

/* The zoo model called name, or NULL (with the list of names on stderr, prog's message). */
static inline const bench_zoo_model_t *bench_zoo_find(const char *prog, const char *name) {
  for (size_t z = 0; z < BENCH_ZOO_MODELS; z++)
    if (strcmp(name, bench_zoo[z].model) == 0) return &bench_zoo[z];
  fprintf(stderr, "%s: --model %s: not one of the zoo's (", prog, name);
  for (size_t z = 0; z < BENCH_ZOO_MODELS; z++)
    fprintf(stderr, "%s%s", z ? ", " : "", bench_zoo[z].model);
  fprintf(stderr, ")\n");
  return NULL;
}

/* Lays z out for its batch on two workers (or with the batch-row tile `tile` when > 0) into
 * *lay (tsr__net_layout_fini frees it); the samples a tile holds in *n. */
static inline int bench_zoo_layout(tsr_net_layout_t *lay, int *n, const bench_zoo_model_t *z,
                                   int tile, const char *prog) {
  int h, w, c;
  if (sscanf(z->input, "%dx%dx%d", &h, &w, &c) != 3) return TSR_EINVAL;
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  int rc = tsr_model_parse(&spec, z->model, 10, &err);
  if (rc) {
    fprintf(stderr, "%s: %s\n", prog, err.msg);
    return rc;
  }
  tsr_model_bind_classes(&spec, 10);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = z->batch, o.in_channels = c, o.in_height = h, o.in_width = w;
  if (tile > 0) o.tile_rows = tile;
  rc = tsr__net_layout(lay, &spec, h * w * c, 10, &o, 2, &err);
  tsr_model_spec_fini(&spec);
  if (rc) {
    fprintf(stderr, "%s: %s: %s\n", prog, z->model, err.msg);
    return rc;
  }
  *n = lay->mb < z->batch ? lay->mb : z->batch;
  return 0;
}

/* Adds model to the comma-separated list names (of size size) unless it is there or full. */
static inline void bench_zoo_name(char *names, size_t size, const char *model) {
  if (!strstr(names, model) && strlen(names) + strlen(model) + 2 < size)
    snprintf(names + strlen(names), size - strlen(names), "%s%s", names[0] ? "," : "", model);
}

#endif
