/* What the kernel benchmarks (bench_conv, bench_pool) share: the zoo's models at the shapes
 * they measure them (each model's input and batch, laid out as the library lays it out,
 * src/nn/layout.c, for two workers, or with a given batch-row tile), their common options, and
 * how a pass is timed (the thread's CPU time, or the wall clock). */
#ifndef TSR_BENCH_KERNEL_H
#define TSR_BENCH_KERNEL_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"

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

/* ---- options ---- */

typedef struct {
  int tile, rounds; /* --tile N (0: the model's), --rounds N */
  double seconds;   /* --seconds S, timed per implementation, pass and round */
  bool wall;        /* --wall: the wall clock instead of the thread's CPU time */
  int nmodels, nshapes;
  const char *models[16], *shapes[64]; /* --model NAME..., --shape TEXT... (bench_conv) */
} bench_kernel_opts_t;

/* Parses argv into *o (its defaults set by the caller); --shape only where shapes. Returns -1 to
 * go on, or the status main exits with: 0 after --help (usage(stdout)), 2 on a bad option or an
 * unknown zoo model (usage(stderr), or the zoo's names). */
static inline int bench_kernel_parse(bench_kernel_opts_t *o, int argc, char **argv,
                                     const char *prog, bool shapes, void (*usage)(FILE *)) {
  static const struct option longs[] = {
      {"tile", required_argument, 0, 't'},   {"seconds", required_argument, 0, 's'},
      {"rounds", required_argument, 0, 'r'}, {"shape", required_argument, 0, 'x'},
      {"model", required_argument, 0, 'm'},  {"wall", no_argument, 0, 'w'},
      {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
  for (int ch; (ch = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
    if (ch == 't')
      o->tile = atoi(optarg);
    else if (ch == 's')
      o->seconds = atof(optarg);
    else if (ch == 'r')
      o->rounds = atoi(optarg);
    else if (ch == 'x' && shapes && o->nshapes < 64)
      o->shapes[o->nshapes++] = optarg;
    else if (ch == 'm' && o->nmodels < 16)
      o->models[o->nmodels++] = optarg;
    else if (ch == 'w')
      o->wall = true;
    else if (ch == 'h')
      return usage(stdout), 0;
    else
      return usage(stderr), 2;
  }
  if (optind < argc || o->tile < 0 || o->rounds < 1 || !(o->seconds > 0)) return usage(stderr), 2;
  for (int i = 0; i < o->nmodels; i++)
    if (!bench_zoo_find(prog, o->models[i])) return 2;
  return -1;
}

/* Whether the zoo model z is one the options ask for (all of them when they name neither a
 * model nor a shape). */
static inline bool bench_kernel_asked(const bench_kernel_opts_t *o, const bench_zoo_model_t *z) {
  bool asked = o->nmodels == 0 && o->nshapes == 0;
  for (int i = 0; i < o->nmodels; i++)
    asked |= strcmp(o->models[i], z->model) == 0;
  return asked;
}

/* ---- timing ---- */

static inline double bench_kernel_clock(bool wall) {
  if (wall) return now();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds per call of pass(ctx, impl, which), timed over about `budget` seconds (at least two
 * calls) after one call that warms it up; 0 when that call says the implementation cannot run
 * it (false). */
static inline double bench_kernel_time(bool (*pass)(void *ctx, int impl, int which), void *ctx,
                                       int impl, int which, double budget, bool wall) {
  if (!pass(ctx, impl, which)) return 0;
  int reps = 0;
  double t0 = bench_kernel_clock(wall), t;
  do {
    pass(ctx, impl, which);
    reps++;
  } while ((t = bench_kernel_clock(wall) - t0) < budget || reps < 2);
  return t / reps;
}

/* count floats in [-0.5, 0.5), 64-byte aligned as the workers' workspace
 * (codelets/workspace.c) and StarPU's buffers; NULL when out of memory. */
static inline float *bench_kernel_filled(size_t count, tsr_rng_t *rng) {
  float *v = aligned_alloc(64, (sizeof(float) * (count ? count : 1) + 63) / 64 * 64);
  if (!v) return NULL;
  for (size_t i = 0; i < count; i++)
    v[i] = (float)(tsr__rng_uniform(rng) - 0.5);
  return v;
}

#endif
