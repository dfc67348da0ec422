/* Pooling kernels on one batch-row tile, for every max and mean pooling shape of the zoo: the
 * forward and the backward pass as a task runs them (src/kernels/pool.c: the backward pass of
 * max pooling finds each window's maximum again from the input and the output), and, measured in
 * the same run, oneDNN's pooling primitives called directly on the same core: one thread, NHWC,
 * forward_training writing its workspace (the argmax of each window) and the backward pass
 * reading it, the pair a framework built on oneDNN runs. Each figure is GB/s of the tensors the
 * pass must touch (forward: x read, y written; backward: dy read, dx written, and for max x and y
 * read again by tessera, the workspace by oneDNN, neither counted), the best of --rounds timings
 * interleaved over the implementations, on the thread's CPU time or the wall clock with --wall.
 * The ratio is tessera's rate over oneDNN's.
 *
 * usage: bench_pool [--model NAME]... [--tile N] [--seconds S] [--rounds N] [--wall] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_kernel.h"
#include "kernels/kernels.h"

#ifdef TSR_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#define PASSES 2 /* forward, backward */
#define MAX_SHAPES 128

typedef struct {
  tsr_conv_geom_t g;
  bool max;
  int n;
  char models[96];
} shape_t;

typedef struct {
  shape_t s;
  float *x, *y, *dy, *dx;
#ifdef TSR_HAVE_DNNL
  dnnl_primitive_t prim[PASSES];
  dnnl_memory_t src, dst, dsrc, ddst, ws; /* over x, y, dx, dy; ws oneDNN's (max only) */
  void *ws_buf;
  char impl[PASSES][32]; /* the implementation oneDNN chose for each pass */
#endif
} bench_pool_t;

static void fail(const char *what) {
  fprintf(stderr, "bench_pool: %s\n", what);
  exit(1);
}

#ifdef TSR_HAVE_DNNL
static dnnl_engine_t engine;
static dnnl_stream_t stream;

static void ref_check(dnnl_status_t s, const char *what) {
  if (s != dnnl_success) {
    fprintf(stderr, "bench_pool: oneDNN %s failed (%d)\n", what, (int)s);
    exit(1);
  }
}

/* oneDNN's forward (training, with its workspace for max) and backward primitives over b's
 * buffers. */
static void ref_make(bench_pool_t *b) {
  const tsr_conv_geom_t *g = &b->s.g;
  int n = b->s.n;
  dnnl_dims_t xd = {n, g->c, g->h, g->w}, yd = {n, g->c, g->oh, g->ow};
  dnnl_dims_t strides = {g->sh, g->sw}, kernel = {g->kh, g->kw}, dil = {0, 0};
  dnnl_dims_t pl = {g->ph, g->pw};
  dnnl_dims_t pr = {(g->oh - 1) * g->sh + g->kh - g->h - g->ph,
                    (g->ow - 1) * g->sw + g->kw - g->w - g->pw};
  dnnl_memory_desc_t x, y;
  ref_check(dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, dnnl_nhwc), "memory desc");
  ref_check(dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_f32, dnnl_nhwc), "memory desc");
  dnnl_alg_kind_t alg = b->s.max ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
  dnnl_pooling_v2_desc_t fd, bd;
  ref_check(dnnl_pooling_v2_forward_desc_init(&fd, dnnl_forward_training, alg, &x, &y, strides,
                                              kernel, dil, pl, pr),
            "forward desc");
  ref_check(dnnl_pooling_v2_backward_desc_init(&bd, alg, &x, &y, strides, kernel, dil, pl, pr),
            "backward desc");
  dnnl_primitive_desc_t fpd, bpd;
  ref_check(dnnl_primitive_desc_create(&fpd, &fd, NULL, engine, NULL), "forward pd");
  ref_check(dnnl_primitive_desc_create(&bpd, &bd, NULL, engine, fpd), "backward pd");
  ref_check(dnnl_memory_create(&b->src, &x, engine, b->x), "memory");
  ref_check(dnnl_memory_create(&b->dst, &y, engine, b->y), "memory");
  ref_check(dnnl_memory_create(&b->dsrc, &x, engine, b->dx), "memory");
  ref_check(dnnl_memory_create(&b->ddst, &y, engine, b->dy), "memory");
  b->ws = NULL, b->ws_buf = NULL;
  const dnnl_memory_desc_t *wsd = dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0);
  size_t wsize = wsd ? dnnl_memory_desc_get_size(wsd) : 0;
  if (wsize) {
    b->ws_buf = aligned_alloc(64, (wsize + 63) / 64 * 64);
    if (!b->ws_buf) fail("out of memory");
    ref_check(dnnl_memory_create(&b->ws, wsd, engine, b->ws_buf), "workspace");
  }
  for (int p = 0; p < PASSES; p++) {
    const char *name = NULL;
    dnnl_primitive_desc_query(p ? bpd : fpd, dnnl_query_impl_info_str, 0, &name);
    snprintf(b->impl[p], sizeof b->impl[p], "%s", name ? name : "?");
  }
  ref_check(dnnl_primitive_create(&b->prim[0], fpd), "forward primitive");
  ref_check(dnnl_primitive_create(&b->prim[1], bpd), "backward primitive");
  dnnl_primitive_desc_destroy(fpd), dnnl_primitive_desc_destroy(bpd);
}

static void ref_run(bench_pool_t *b, int pass) {
  dnnl_exec_arg_t a[3];
  if (pass == 0)
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, b->src}, a[1] = (dnnl_exec_arg_t){DNNL_ARG_DST, b->dst};
  else
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, b->ddst},
    a[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, b->dsrc};
  a[2] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, b->ws};
  ref_check(dnnl_primitive_execute(b->prim[pass], stream, b->ws ? 3 : 2, a), "execute");
  ref_check(dnnl_stream_wait(stream), "wait");
}

static void ref_fini(bench_pool_t *b) {
  for (int p = 0; p < PASSES; p++)
    dnnl_primitive_destroy(b->prim[p]);
  dnnl_memory_t m[] = {b->src, b->dst, b->dsrc, b->ddst, b->ws};
  for (int i = 0; i < 5; i++)
    if (m[i]) dnnl_memory_destroy(m[i]);
  free(b->ws_buf);
}
#endif

static float *filled(size_t count, tsr_rng_t *rng) {
  float *v = bench_kernel_filled(count, rng);
  if (!v) fail("out of memory");
  return v;
}

static size_t in_floats(const shape_t *s) {
  return (size_t)s->g.h * s->g.w * s->g.c;
}

static size_t out_floats(const shape_t *s) {
  return (size_t)s->g.oh * s->g.ow * s->g.c;
}

static void pool_init(bench_pool_t *b, const shape_t *s) {
  tsr_rng_t rng = {7};
  *b = (bench_pool_t){.s = *s};
  b->x = filled(s->n * in_floats(s), &rng), b->dx = filled(s->n * in_floats(s), &rng);
  b->y = filled(s->n * out_floats(s), &rng), b->dy = filled(s->n * out_floats(s), &rng);
  /* y as the forward pass leaves it: the backward pass of max pooling looks for it in x. */
  tsr__k_pool_fwd(&s->g, s->max, s->n, b->y, (int)out_floats(s), b->x, (int)in_floats(s));
#ifdef TSR_HAVE_DNNL
  ref_make(b);
#endif
}

static void pool_fini(bench_pool_t *b) {
#ifdef TSR_HAVE_DNNL
  ref_fini(b);
#endif
  free(b->x), free(b->y), free(b->dy), free(b->dx);
}

/* One pass (which: 0 forward, 1 backward) by tessera (impl 0) or oneDNN (1); false where
 * oneDNN is not built in. */
static bool pool_pass(void *ctx, int impl, int which) {
  bench_pool_t *b = ctx;
  const shape_t *s = &b->s;
  int in = (int)in_floats(s), out = (int)out_floats(s);
  if (impl == 1) {
#ifdef TSR_HAVE_DNNL
    ref_run(b, which);
    return true;
#else
    return false;
#endif
  }
  if (which == 0)
    tsr__k_pool_fwd(&s->g, s->max, s->n, b->y, out, b->x, in);
  else
    tsr__k_pool_bwd(&s->g, s->max, false, s->n, b->dx, in, b->dy, out, b->x, in, b->y, out);
  return true;
}

static int add_model(shape_t *shapes, int *nshapes, const bench_zoo_model_t *z, int tile) {
  tsr_net_layout_t lay;
  int n, rc = bench_zoo_layout(&lay, &n, z, tile, "bench_pool");
  if (rc) return rc;
  for (int l = 0; l < lay.n_layers; l++) {
    int kind = lay.layers[l].kind;
    if (kind != TSR_LAYER_MAXPOOL && kind != TSR_LAYER_AVGPOOL) continue;
    shape_t s = {.g = lay.layers[l].geom, .max = kind == TSR_LAYER_MAXPOOL, .n = n};
    int k = 0;
    while (k < *nshapes && !(memcmp(&shapes[k].g, &s.g, sizeof s.g) == 0 &&
                             shapes[k].max == s.max && shapes[k].n == s.n))
      k++;
    if (k == *nshapes) {
      if (k == MAX_SHAPES) break;
      shapes[(*nshapes)++] = s;
    }
    bench_zoo_name(shapes[k].models, sizeof shapes[k].models, z->model);
  }
  tsr__net_layout_fini(&lay);
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: bench_pool [--model NAME]... [--tile N] [--seconds S] [--rounds N] [--wall]\n"
             "  --model NAME   a zoo model's max and mean poolings (several allowed; default: "
             "the whole zoo)\n"
             "  --tile N       samples per tile [the tile two workers get at the model's batch]\n"
             "  --seconds S    timed per implementation, pass and round [0.1]\n"
             "  --rounds N     interleaved rounds, the best kept [3]\n"
             "  --wall         wall clock instead of the thread's CPU time\n");
}

int main(int argc, char **argv) {
  bench_kernel_opts_t o = {.rounds = 3, .seconds = 0.1};
  int status = bench_kernel_parse(&o, argc, argv, "bench_pool", false, usage);
  if (status >= 0) return status;
  static shape_t shapes[MAX_SHAPES];
  int nshapes = 0;
  for (size_t z = 0; z < BENCH_ZOO_MODELS; z++)
    if (bench_kernel_asked(&o, &bench_zoo[z]) && add_model(shapes, &nshapes, &bench_zoo[z], o.tile))
      return 1;
  tsr__k_init();
#ifdef TSR_HAVE_DNNL
  omp_set_num_threads(1);
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
    fail("oneDNN has no CPU engine here");
#endif
  static const char *const pass_names[PASSES] = {"forward", "backward"};
  bench_print_machine(stdout);
  printf("# bench_pool: one batch-row tile per task, one thread; GB/s of the tensors a pass "
         "must touch (%s time), best of %d rounds\n# tessera: src/kernels/pool.c as a task runs "
         "it; oneDNN (%s): its pooling primitives called directly, NHWC, training forward with "
         "its workspace and the backward pass reading it\n",
         o.wall ? "wall" : "CPU", o.rounds, tsr__k_dnnl_version());
  printf("%-30s %4s  %-9s %9s %9s %9s %8s  %-16s %s\n", "pooling (in:out k s p)", "n", "pass",
         "tessera", "oneDNN", "tess/oDNN", "us/tile", "oneDNN impl", "models");
  double worst = 1e9, sum_t = 0, sum_ref = 0;
  int below = 0, measured = 0;
  for (int si = 0; si < nshapes; si++) {
    const shape_t *s = &shapes[si];
    const tsr_conv_geom_t *g = &s->g;
    bench_pool_t b;
    pool_init(&b, s);
    double best[2][PASSES] = {{1e9, 1e9}, {1e9, 1e9}};
    for (int r = 0; r < o.rounds; r++)
      for (int p = 0; p < PASSES; p++)
        for (int i = 0; i < 2; i++) {
          double t = bench_kernel_time(pool_pass, &b, i, p, o.seconds, o.wall);
          if (t > 0 && t < best[i][p]) best[i][p] = t;
        }
    char name[64];
    snprintf(name, sizeof name, "%s %dx%dx%d:%dx%d %dx%d s%d p%d", s->max ? "max" : "mean", g->h,
             g->w, g->c, g->oh, g->ow, g->kh, g->kw, g->sh, g->ph);
    double bytes = 4.0 * s->n * (double)(in_floats(s) + out_floats(s));
    for (int p = 0; p < PASSES; p++) {
      bool ref = best[1][p] < 1e9;
      double ratio = ref ? best[1][p] / best[0][p] : 0;
      if (ref) {
        measured++, below += ratio < 0.95;
        worst = ratio < worst ? ratio : worst;
        sum_t += best[0][p], sum_ref += best[1][p];
      }
#ifdef TSR_HAVE_DNNL
      const char *impl = b.impl[p];
#else
      const char *impl = "-";
#endif
      printf("%-30s %4d  %-9s %9.1f %9.1f %8.2fx %8.1f  %-16s %s\n", p ? "" : name, s->n,
             pass_names[p], bytes / best[0][p] * 1e-9, ref ? bytes / best[1][p] * 1e-9 : 0, ratio,
             best[0][p] * 1e6, impl, p ? "" : s->models);
    }
    fflush(stdout);
    pool_fini(&b);
  }
  if (measured)
    printf("# %d shapes x %d passes: tessera / oneDNN at least %.2fx, %d of %d below 0.95x; "
           "all passes once each: tessera %.2f ms, oneDNN %.2f ms (%.2fx)\n",
           nshapes, PASSES, worst, below, measured, sum_t * 1e3, sum_ref * 1e3, sum_ref / sum_t);
  else
    printf("# %d shapes: oneDNN is not built in, only tessera's kernels were measured\n", nshapes);
  return 0;
}
