/* Convolution kernels on one batch-row tile, at ResNet shapes: for each input shape the four
 * convolutions a ResNet puts on it (3x3 stride 1 padding 1, 3x3 stride 2 padding 1, and the
 * 1x1 shortcut projections and bottleneck convolutions, stride 1 and 2), the forward pass and
 * the two backward passes (input gradient, filter gradient) as one task runs them
 * (src/kernels/conv.c, one worker, BLIS single-threaded), in GFLOP/s (2 n oh ow oc kh kw c
 * flops per pass), each next to the 3x3 stride-1 figure of the same input measured in the
 * same run (the ratio). Each figure is the best of --rounds timings, rounds interleaved over
 * the convolutions of a shape so that load from other processes hits them alike. The clock is
 * the thread's CPU time (a shared machine's other processes then slow a figure only through
 * the caches), or the wall clock with --wall.
 *
 * usage: bench_conv [--tile N] [--seconds S] [--rounds N] [--wall] [--shape HxWxC:OC]... */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "kernels/kernels.h"

typedef struct {
  int h, w, c, oc;
  int n; /* samples in the tile (0: --tile) */
} shape_t;

/* ResNet-20's three stages at 32x32 (16, 32, 64 channels), and ResNet-50's first bottleneck
 * at 56x56 (64 channels in, 256 out: its 1x1 expansion and projection). */
static const shape_t default_shapes[] = {
    {32, 32, 16, 16, 0}, {16, 16, 32, 32, 0}, {8, 8, 64, 64, 0}, {56, 56, 64, 256, 2}};

typedef struct {
  const char *name;
  int k, s, p;
} conv_kind_t;

static const conv_kind_t kinds[] = {
    {"3x3 s1", 3, 1, 1}, {"3x3 s2", 3, 2, 1}, {"1x1 s1", 1, 1, 0}, {"1x1 s2", 1, 2, 0}};
#define NKINDS 4
#define NPASSES 3 /* forward, input gradient, filter gradient */

typedef struct {
  tsr_conv_geom_t g;
  int n;
  float *x, *w, *b, *y, *dy, *dx, *dw, *db, *work;
} bench_conv_t;

static float *filled(size_t count, tsr_rng_t *rng) {
  float *v = malloc(sizeof(float) * (count ? count : 1));
  if (!v) return NULL;
  for (size_t i = 0; i < count; i++)
    v[i] = (float)(tsr__rng_uniform(rng) - 0.5);
  return v;
}

static int conv_init(bench_conv_t *c, const shape_t *s, const conv_kind_t *k, int n) {
  tsr_conv_geom_t g = {.c = s->c,
                       .h = s->h,
                       .w = s->w,
                       .oc = s->oc,
                       .kh = k->k,
                       .kw = k->k,
                       .sh = k->s,
                       .sw = k->s,
                       .ph = k->p,
                       .pw = k->p};
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1, g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  tsr_rng_t rng = {7};
  size_t in = (size_t)n * g.h * g.w * g.c, out = (size_t)n * g.oh * g.ow * g.oc;
  size_t fan = (size_t)g.kh * g.kw * g.c * g.oc;
  *c = (bench_conv_t){.g = g, .n = n};
  c->x = filled(in, &rng), c->dx = filled(in, &rng);
  c->y = filled(out, &rng), c->dy = filled(out, &rng);
  c->w = filled(fan, &rng), c->dw = filled(fan, &rng);
  c->b = filled((size_t)g.oc, &rng), c->db = filled((size_t)g.oc, &rng);
  c->work = filled(tsr__k_conv_work(&g, n), &rng);
  return c->x && c->dx && c->y && c->dy && c->w && c->dw && c->b && c->db && c->work ? 0
                                                                                     : TSR_ENOMEM;
}

static void conv_fini(bench_conv_t *c) {
  float *all[] = {c->x, c->w, c->b, c->y, c->dy, c->dx, c->dw, c->db, c->work};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    free(all[i]);
}

static void conv_pass(bench_conv_t *c, int pass) {
  const tsr_conv_geom_t *g = &c->g;
  int in = g->h * g->w * g->c, out = g->oh * g->ow * g->oc;
  if (pass == 0)
    tsr__k_conv_fwd(g, c->n, c->y, out, c->x, in, c->w, g->oc, c->b, true, c->work);
  else if (pass == 1)
    tsr__k_conv_bwd_data(g, c->n, c->dx, in, c->dy, out, c->w, g->oc, c->work);
  else
    tsr__k_conv_bwd_filter(g, c->n, c->dw, g->oc, c->db, c->x, in, c->dy, out, 0.0f, c->work);
}

static bool wall_clock;

static double clock_now(void) {
  if (wall_clock) return now();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds per call of one pass, timed over about `budget` seconds. */
static double time_pass(bench_conv_t *c, int pass, double budget) {
  conv_pass(c, pass); /* warm */
  int reps = 0;
  double t0 = clock_now(), t;
  do {
    conv_pass(c, pass);
    reps++;
  } while ((t = clock_now() - t0) < budget);
  return t / reps;
}

static double flops(const bench_conv_t *c) {
  const tsr_conv_geom_t *g = &c->g;
  return 2.0 * c->n * g->oh * g->ow * (double)g->oc * g->kh * g->kw * g->c;
}

static int parse_shape(const char *text, shape_t *s) {
  char tail;
  *s = (shape_t){0};
  return sscanf(text, "%dx%dx%d:%d%c", &s->h, &s->w, &s->c, &s->oc, &tail) == 4 && s->h > 0 &&
                 s->w > 0 && s->c > 0 && s->oc > 0
             ? 0
             : TSR_EINVAL;
}

int main(int argc, char **argv) {
  int tile = 16, rounds = 5;
  double seconds = 2.0;
  shape_t shapes[16];
  int nshapes = 0;
  static const struct option longs[] = {
      {"tile", required_argument, 0, 't'},   {"seconds", required_argument, 0, 's'},
      {"rounds", required_argument, 0, 'r'}, {"shape", required_argument, 0, 'x'},
      {"wall", no_argument, 0, 'w'},         {0, 0, 0, 0}};
  for (int ch; (ch = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
    if (ch == 't')
      tile = atoi(optarg);
    else if (ch == 's')
      seconds = atof(optarg);
    else if (ch == 'r')
      rounds = atoi(optarg);
    else if (ch == 'x' && nshapes < 16 && parse_shape(optarg, &shapes[nshapes]) == 0)
      nshapes++;
    else {
      fprintf(stderr, "usage: bench_conv [--tile N] [--seconds S] [--rounds N] "
                      "[--wall] [--shape HxWxC:OC]... (a shape as 32x32x16:16)\n");
      return 2;
    }
  }
  if (tile < 1 || rounds < 1 || !(seconds > 0)) {
    fprintf(stderr, "bench_conv: --tile and --rounds must be >= 1, --seconds > 0\n");
    return 2;
  }
  if (nshapes == 0) {
    nshapes = (int)(sizeof default_shapes / sizeof *default_shapes);
    memcpy(shapes, default_shapes, sizeof default_shapes);
  }
  tsr__k_init();
  static const char *const pass_names[NPASSES] = {"forward", "input grad", "filter grad"};
  printf("# bench_conv: one batch-row tile per task, one worker; GFLOP/s (%s time), best of %d "
         "rounds; x: against 3x3 s1 on the same input in this run\n",
         wall_clock ? "wall" : "CPU", rounds);
  printf("%-14s %-7s %4s  %-22s %-22s %-22s\n", "input hxwxc:oc", "conv", "n", pass_names[0],
         pass_names[1], pass_names[2]);
  for (int si = 0; si < nshapes; si++) {
    const shape_t *s = &shapes[si];
    int n = s->n > 0 ? s->n : tile;
    bench_conv_t convs[NKINDS];
    for (int k = 0; k < NKINDS; k++)
      if (conv_init(&convs[k], s, &kinds[k], n)) {
        fprintf(stderr, "bench_conv: out of memory for %dx%dx%d\n", s->h, s->w, s->c);
        return 1;
      }
    double best[NKINDS][NPASSES] = {{0}};
    double budget = seconds / 10 / (NKINDS * NPASSES) * 4;
    for (int r = 0; r < rounds; r++)
      for (int k = 0; k < NKINDS; k++)
        for (int p = 0; p < NPASSES; p++) {
          double rate = flops(&convs[k]) / time_pass(&convs[k], p, budget) * 1e-9;
          if (rate > best[k][p]) best[k][p] = rate;
        }
    for (int k = 0; k < NKINDS; k++) {
      char cell[NPASSES][32];
      for (int p = 0; p < NPASSES; p++)
        snprintf(cell[p], sizeof cell[p], "%7.2f (%.2fx)", best[k][p], best[k][p] / best[0][p]);
      printf("%3dx%-3dx%-3d:%-3d %-7s %4d  %-22s %-22s %-22s\n", s->h, s->w, s->c, s->oc,
             kinds[k].name, n, cell[0], cell[1], cell[2]);
      conv_fini(&convs[k]);
    }
    fflush(stdout);
  }
  return 0;
}
