/* Convolution kernels on one batch-row tile, for every convolution shape of the zoo: the three
 * passes (forward with its bias and ReLU, input gradient, filter gradient) as a task runs them,
 * by both of tessera's CPU implementations (the input lowered to BLIS GEMMs, src/kernels/conv.c;
 * oneDNN through src/kernels/conv_dnnl.c, weights reordered inside each call), and, measured in
 * the same run, oneDNN called directly on the same core: one thread, NHWC activations, weights
 * and filter gradient in the layout the primitive chose (their reorders not timed), oneDNN's
 * own scratchpad. The ratio tessera / oneDNN is tessera's fast implementation against the best
 * the library does with the same activations.
 *
 * The shapes come from the zoo's model files as the library lays them out (src/nn/layout.c):
 * ResNet-20/32/56 and VGG-11 at 32x32x3 (batches 128 and 64), ResNet-18/50, VGG-16, AlexNet and
 * GoogLeNet at 224x224x3 (batch 8), each with the batch-row tile two workers get; a shape that
 * several models share is measured once. Each figure is GFLOP/s (2 n oh ow oc kh kw c per
 * pass), the best of --rounds timings interleaved over the implementations, on the thread's CPU
 * time (other processes then slow a figure only through the caches), or the wall clock with
 * --wall.
 *
 * usage: bench_conv [--model NAME]... [--shape HxWxC:OC:K[:S[:P]]]... [--tile N] [--seconds S]
 *                   [--rounds N] [--wall] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_kernel.h"
#include "kernels/kernels.h"

#ifdef TSR_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#define PASSES 3 /* forward, input gradient, filter gradient */
#define IMPLS 3  /* lowered BLIS, tessera's oneDNN kernel, oneDNN direct */
#define MAX_SHAPES 512

typedef struct {
  tsr_conv_geom_t g;
  int n;
  int tiles;       /* batch-row tiles a step has (the model's batch over n): what share of the
                    * step's weight reorder a tile's task bears */
  char models[96]; /* the zoo models with this shape */
} shape_t;

/* ---- oneDNN called directly: the reference ---- */

#ifdef TSR_HAVE_DNNL
typedef struct {
  dnnl_primitive_t prim;
  dnnl_memory_t src, wei, bia, dst; /* wei in the primitive's layout; src/dst NHWC */
  int in, out;                      /* DNNL_ARG_* of src and dst for the pass */
} ref_pass_t;

static dnnl_engine_t engine;
static dnnl_stream_t stream;

static void ref_check(dnnl_status_t s, const char *what) {
  if (s != dnnl_success) {
    fprintf(stderr, "bench_conv: oneDNN %s failed (%d)\n", what, (int)s);
    exit(1);
  }
}

static dnnl_memory_desc_t md_tag(int nd, const dnnl_dims_t dims, dnnl_format_tag_t tag) {
  dnnl_memory_desc_t md;
  ref_check(dnnl_memory_desc_init_by_tag(&md, nd, dims, dnnl_f32, tag), "memory desc");
  return md;
}

/* A memory object over a buffer of md's size filled with small values (ref_fini frees both). */
static dnnl_memory_t filled_memory(const dnnl_memory_desc_t *md, tsr_rng_t *rng) {
  size_t n = dnnl_memory_desc_get_size(md) / sizeof(float);
  float *v = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64);
  if (!v) {
    fprintf(stderr, "bench_conv: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(tsr__rng_uniform(rng) - 0.5);
  dnnl_memory_t m;
  ref_check(dnnl_memory_create(&m, md, engine, v), "memory");
  return m;
}

/* The primitive of pass p for g over n samples, its weights in the layout it chose. */
static void ref_make(ref_pass_t *r, const tsr_conv_geom_t *g, int n, int pass, tsr_rng_t *rng) {
  dnnl_dims_t xd = {n, g->c, g->h, g->w}, yd = {n, g->oc, g->oh, g->ow};
  dnnl_dims_t wd = {g->oc, g->c, g->kh, g->kw}, bd = {g->oc};
  dnnl_dims_t strides = {g->sh, g->sw}, pl = {g->ph, g->pw};
  dnnl_dims_t pr = {(g->oh - 1) * g->sh + g->kh - g->h - g->ph,
                    (g->ow - 1) * g->sw + g->kw - g->w - g->pw};
  dnnl_memory_desc_t x = md_tag(4, xd, dnnl_nhwc), y = md_tag(4, yd, dnnl_nhwc);
  dnnl_memory_desc_t w = md_tag(4, wd, dnnl_format_tag_any), b = md_tag(1, bd, dnnl_a);
  dnnl_convolution_desc_t fd, d;
  dnnl_primitive_desc_t hint, pd;
  ref_check(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                               &x, &w, &b, &y, strides, pl, pr),
            "forward desc");
  dnnl_primitive_attr_t attr;
  dnnl_post_ops_t ops;
  ref_check(dnnl_primitive_attr_create(&attr), "attr");
  ref_check(dnnl_post_ops_create(&ops), "post ops");
  ref_check(dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f), "relu");
  ref_check(dnnl_primitive_attr_set_post_ops(attr, ops), "attr ops");
  ref_check(dnnl_primitive_desc_create(&hint, &fd, pass == 0 ? attr : NULL, engine, NULL),
            "forward pd");
  if (pass == 1)
    ref_check(dnnl_convolution_backward_data_desc_init(&d, dnnl_convolution_direct, &x, &w, &y,
                                                       strides, pl, pr),
              "backward data desc");
  if (pass == 2)
    ref_check(dnnl_convolution_backward_weights_desc_init(&d, dnnl_convolution_direct, &x, &w, &b,
                                                          &y, strides, pl, pr),
              "backward weights desc");
  pd = hint;
  if (pass > 0) ref_check(dnnl_primitive_desc_create(&pd, &d, NULL, engine, hint), "pass pd");
  const dnnl_memory_desc_t *wm = dnnl_primitive_desc_query_md(
      pd, pass == 2 ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
  r->src = filled_memory(&x, rng), r->dst = filled_memory(&y, rng);
  r->wei = filled_memory(wm, rng), r->bia = filled_memory(&b, rng);
  ref_check(dnnl_primitive_create(&r->prim, pd), "primitive");
  r->in = pass == 1 ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC;
  r->out = pass == 0 ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST;
  if (pd != hint) dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_desc_destroy(hint), dnnl_post_ops_destroy(ops), dnnl_primitive_attr_destroy(attr);
}

static void ref_run(const ref_pass_t *r, int pass) {
  dnnl_exec_arg_t a[4] = {{r->in, r->src}, {r->out, r->dst}};
  a[2] = (dnnl_exec_arg_t){pass == 2 ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS, r->wei};
  a[3] = (dnnl_exec_arg_t){pass == 2 ? DNNL_ARG_DIFF_BIAS : DNNL_ARG_BIAS, r->bia};
  ref_check(dnnl_primitive_execute(r->prim, stream, pass == 1 ? 3 : 4, a), "execute");
  ref_check(dnnl_stream_wait(stream), "wait");
}

static void ref_fini(ref_pass_t *r) {
  dnnl_primitive_destroy(r->prim);
  dnnl_memory_t m[] = {r->src, r->wei, r->bia, r->dst};
  for (int i = 0; i < 4; i++) {
    void *h = NULL;
    dnnl_memory_get_data_handle(m[i], &h);
    dnnl_memory_destroy(m[i]);
    free(h);
  }
}
#endif

/* ---- tessera's kernels on one tile ---- */

typedef struct {
  tsr_conv_geom_t g;
  int n;
  float *x, *w, *b, *y, *dy, *dx, *dw, *db, *work;
  float *wb[2];                  /* the weights reordered for the forward and the input gradient */
  tsr_dnnl_blocked_t blocked[2]; /* as a step's reorder task leaves them (w NULL: none) */
#ifdef TSR_HAVE_DNNL
  ref_pass_t ref[PASSES];
#endif
} bench_conv_t;

static float *filled(size_t count, tsr_rng_t *rng) {
  return bench_kernel_filled(count, rng);
}

static int conv_init(bench_conv_t *c, const shape_t *s) {
  const tsr_conv_geom_t *g = &s->g;
  int n = s->n;
  tsr_rng_t rng = {7};
  size_t in = (size_t)n * g->h * g->w * g->c, out = (size_t)n * g->oh * g->ow * g->oc;
  size_t fan = (size_t)g->kh * g->kw * g->c * g->oc, work = tsr__k_conv_work(g, n);
  for (int p = 0; p < PASSES; p++) {
    size_t d = tsr__k_dnnl_conv_work(g, n, p, p == 0);
    work = d > work ? d : work;
  }
  *c = (bench_conv_t){.g = *g, .n = n};
  c->x = filled(in, &rng), c->dx = filled(in, &rng);
  c->y = filled(out, &rng), c->dy = filled(out, &rng);
  c->w = filled(fan, &rng), c->dw = filled(fan, &rng);
  c->b = filled((size_t)g->oc, &rng), c->db = filled((size_t)g->oc, &rng);
  c->work = filled(work, &rng);
  for (int p = 0; p < 2; p++) {
    size_t f = tsr__k_dnnl_conv_wfloats(g, n, p, p == 0);
    c->wb[p] = f ? filled(f, &rng) : NULL;
    c->blocked[p] = (tsr_dnnl_blocked_t){NULL, n};
    if (c->wb[p] && tsr__k_dnnl_conv_wreorder(g, n, p, p == 0, c->w, g->oc, c->wb[p]))
      c->blocked[p].w = c->wb[p];
  }
#ifdef TSR_HAVE_DNNL
  for (int p = 0; p < PASSES; p++)
    ref_make(&c->ref[p], g, n, p, &rng);
#endif
  return c->x && c->dx && c->y && c->dy && c->w && c->dw && c->b && c->db && c->work ? 0
                                                                                     : TSR_ENOMEM;
}

static void conv_fini(bench_conv_t *c) {
  float *all[] = {c->x, c->w, c->b, c->y, c->dy, c->dx, c->dw, c->db, c->work, c->wb[0], c->wb[1]};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    free(all[i]);
#ifdef TSR_HAVE_DNNL
  for (int p = 0; p < PASSES; p++)
    ref_fini(&c->ref[p]);
#endif
}

/* One pass by implementation impl: 0 lowered BLIS, 1 tessera's oneDNN kernel (with the weights
 * a step reorders once, as the layer's tasks have them), 2 oneDNN direct, 3 that reorder alone
 * (passes 0 and 1; false where there is none). False when impl cannot run it (oneDNN not built,
 * or refusing the shape). */
static bool conv_pass(void *ctx, int impl, int pass) {
  bench_conv_t *c = ctx;
  const tsr_conv_geom_t *g = &c->g;
  int in = g->h * g->w * g->c, out = g->oh * g->ow * g->oc, n = c->n;
  if (impl == 2) {
#ifdef TSR_HAVE_DNNL
    ref_run(&c->ref[pass], pass);
    return true;
#else
    return false;
#endif
  }
  if (impl == 3)
    return pass < 2 && c->blocked[pass].w &&
           tsr__k_dnnl_conv_wreorder(g, n, pass, pass == 0, c->w, g->oc, c->wb[pass]);
  if (impl == 1) {
    if (pass == 0)
      return tsr__k_dnnl_conv_fwd(g, n, c->y, out, c->x, in, c->w, g->oc, c->b, true,
                                  &c->blocked[0], c->work);
    if (pass == 1)
      return tsr__k_dnnl_conv_bwd_data(g, n, c->dx, in, c->dy, out, c->w, g->oc, &c->blocked[1],
                                       c->work);
    return tsr__k_dnnl_conv_bwd_filter(g, n, c->dw, g->oc, c->db, c->x, in, c->dy, out, 0.0f,
                                       c->work);
  }
  if (pass == 0)
    tsr__k_conv_fwd(g, n, c->y, out, c->x, in, c->w, g->oc, c->b, true, c->work);
  else if (pass == 1)
    tsr__k_conv_bwd_data(g, n, c->dx, in, c->dy, out, c->w, g->oc, c->work);
  else
    tsr__k_conv_bwd_filter(g, n, c->dw, g->oc, c->db, c->x, in, c->dy, out, 0.0f, c->work);
  return true;
}

static double flops(const shape_t *s) {
  const tsr_conv_geom_t *g = &s->g;
  return 2.0 * s->n * g->oh * g->ow * (double)g->oc * g->kh * g->kw * g->c;
}

/* ---- the shapes ---- */

static bool same_geom(const tsr_conv_geom_t *a, const tsr_conv_geom_t *b) {
  return memcmp(a, b, sizeof *a) == 0;
}

/* Adds model's convolutions (as laid out for `batch` on two workers, or with the batch-row tile
 * `tile` when > 0) to shapes, each distinct (geometry, tile) once. */
static int add_model(shape_t *shapes, int *nshapes, const bench_zoo_model_t *z, int tile) {
  tsr_net_layout_t lay;
  int n, rc = bench_zoo_layout(&lay, &n, z, tile, "bench_conv");
  if (rc) return rc;
  for (int l = 0; l < lay.n_layers; l++) {
    if (lay.layers[l].kind != TSR_LAYER_CONV) continue;
    shape_t s = {.g = lay.layers[l].geom, .n = n};
    s.tiles = (z->batch + s.n - 1) / s.n;
    int k = 0;
    while (k < *nshapes && !(same_geom(&shapes[k].g, &s.g) && shapes[k].n == s.n))
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

/* "HxWxC:OC:K[:S[:P]]": a square kernel K, stride S (1), padding P (K / 2). */
static int parse_shape(const char *text, shape_t *s, int tile) {
  int h, w, c, oc, k, st = 1, p = -1;
  char tail;
  int got = sscanf(text, "%dx%dx%d:%d:%d:%d:%d%c", &h, &w, &c, &oc, &k, &st, &p, &tail);
  if (got < 5 || got > 7 || h < 1 || w < 1 || c < 1 || oc < 1 || k < 1 || st < 1) return TSR_EINVAL;
  if (p < 0) p = k / 2;
  if (h + 2 * p < k || w + 2 * p < k || p >= k) return TSR_EINVAL;
  *s = (shape_t){
      .g = {c, h, w, oc, (h + 2 * p - k) / st + 1, (w + 2 * p - k) / st + 1, k, k, st, st, p, p},
      .n = tile > 0 ? tile : 16,
      .tiles = 1};
  snprintf(s->models, sizeof s->models, "--shape");
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: bench_conv [--model NAME]... [--shape HxWxC:OC:K[:S[:P]]]... [--tile N] "
             "[--seconds S] [--rounds N] [--wall]\n"
             "  --model NAME   a zoo model's convolutions (several allowed; default: the whole "
             "zoo)\n"
             "  --shape ...    one convolution: input HxWxC, OC filters KxK, stride S [1], "
             "padding P [K/2]\n"
             "  --tile N       samples per tile [the tile two workers get at the model's batch; "
             "16 for --shape]\n"
             "  --seconds S    timed per implementation, pass and round [0.2]\n"
             "  --rounds N     interleaved rounds, the best kept [3]\n"
             "  --wall         wall clock instead of the thread's CPU time\n");
}

int main(int argc, char **argv) {
  bench_kernel_opts_t o = {.rounds = 3, .seconds = 0.2};
  int status = bench_kernel_parse(&o, argc, argv, "bench_conv", true, usage);
  if (status >= 0) return status;
  static shape_t shapes[MAX_SHAPES];
  int nshapes = 0;
  for (int i = 0; i < o.nshapes; i++)
    if (parse_shape(o.shapes[i], &shapes[nshapes++], o.tile)) {
      fprintf(stderr, "bench_conv: --shape %s: expected HxWxC:OC:K[:S[:P]] (e.g. 32x32x16:16:3)\n",
              o.shapes[i]);
      return 2;
    }
  for (size_t z = 0; z < BENCH_ZOO_MODELS; z++)
    if (bench_kernel_asked(&o, &bench_zoo[z]) && add_model(shapes, &nshapes, &bench_zoo[z], o.tile))
      return 1;
  tsr__k_init();
#ifdef TSR_HAVE_DNNL
  omp_set_num_threads(1);
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
    fprintf(stderr, "bench_conv: oneDNN has no CPU engine here\n");
    return 1;
  }
#endif
  static const char *const pass_names[PASSES] = {"forward", "input grad", "filter grad"};
  bench_print_machine(stdout);
  printf("# bench_conv: one batch-row tile per task, one thread; GFLOP/s (%s time), best of %d "
         "rounds\n# blis: the lowered kernel (BLIS %s kernels); tessera: its oneDNN kernel "
         "(%s) as a task runs it, plus its share of the step's weight reorder (the model's "
         "batch over n tiles; --shape: one tile); oneDNN: called directly, NHWC activations, "
         "weights in its own layout\n",
         o.wall ? "wall" : "CPU", o.rounds, tsr__k_blis_kernels(), tsr__k_dnnl_version());
  printf("%-28s %4s  %-11s %8s %8s %8s %9s %9s  %-14s %s\n", "convolution (in:out k s p)", "n",
         "pass", "blis", "tessera", "oneDNN", "tess/oDNN", "best/oDNN", "oneDNN impl", "models");
  double worst = 1e9, worst_best = 1e9;
  int below = 0, below_best = 0, measured = 0;
  for (int si = 0; si < nshapes; si++) {
    const shape_t *s = &shapes[si];
    const tsr_conv_geom_t *g = &s->g;
    bench_conv_t c;
    if (conv_init(&c, s)) {
      fprintf(stderr, "bench_conv: out of memory for %dx%dx%d\n", g->h, g->w, g->c);
      return 1;
    }
    /* tessera's figure is its task's call plus its share of the step's weight reorder. */
    double best[IMPLS][PASSES] = {{0}}, reorder[PASSES] = {0, 0, 0};
    for (int r = 0; r < o.rounds; r++)
      for (int p = 0; p < PASSES; p++) {
        double tr = bench_kernel_time(conv_pass, &c, 3, p, o.seconds / 4, o.wall);
        if (tr > 0 && (reorder[p] == 0 || tr < reorder[p])) reorder[p] = tr;
        for (int i = 0; i < IMPLS; i++) {
          double t = bench_kernel_time(conv_pass, &c, i, p, o.seconds, o.wall);
          if (i == 1 && t > 0) t += reorder[p] / s->tiles;
          double rate = t > 0 ? flops(s) / t * 1e-9 : 0;
          if (rate > best[i][p]) best[i][p] = rate;
        }
      }
    char name[64];
    snprintf(name, sizeof name, "%dx%dx%d:%dx%dx%d %dx%d s%d p%d", g->h, g->w, g->c, g->oh, g->ow,
             g->oc, g->kh, g->kw, g->sh, g->ph);
    for (int p = 0; p < PASSES; p++) {
      /* best: the faster of tessera's two implementations, the one dmda and dmdas pick. */
      double ratio = best[2][p] > 0 ? best[1][p] / best[2][p] : 0;
      double mine = best[0][p] > best[1][p] ? best[0][p] : best[1][p];
      double ratio_best = best[2][p] > 0 ? mine / best[2][p] : 0;
      if (best[2][p] > 0) {
        measured++;
        worst = ratio < worst ? ratio : worst;
        worst_best = ratio_best < worst_best ? ratio_best : worst_best;
        below += ratio < 0.95, below_best += ratio_best < 0.95;
      }
      printf("%-28s %4d  %-11s %8.1f %8.1f %8.1f %8.2fx %8.2fx  %-14s %s\n", p ? "" : name, s->n,
             pass_names[p], best[0][p], best[1][p], best[2][p], ratio, ratio_best,
             tsr__k_dnnl_conv_impl(g, s->n, p), p ? "" : s->models);
    }
    fflush(stdout);
    conv_fini(&c);
  }
  if (measured)
    printf("# %d shapes x %d passes: tessera's oneDNN kernel / oneDNN at least %.2fx, %d of %d "
           "below 0.95x; the better of tessera's two / oneDNN at least %.2fx, %d below 0.95x\n",
           nshapes, PASSES, worst, below, measured, worst_best, below_best);
  else
    printf("# %d shapes: oneDNN is not built in, only the lowered kernel was measured\n", nshapes);
  return 0;
}
