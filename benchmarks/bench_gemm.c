/* The tile GEMMs of the dense layers, by both of tessera's CPU implementations in the same run:
 * BLIS as tessera calls it (src/kernels/gemm.c: bli_sgemm, which picks BLIS's small-matrix path
 * when a dimension is small), the same BLIS call with that path turned off (BLIS then packs
 * both operands: the reference that says where BLIS's choice loses), and oneDNN's dnnl_sgemm as
 * tessera calls it (tsr__k_gemm_dnnl, one thread). Each figure is GFLOP/s (2 m n k), the best of
 * --rounds timings interleaved over the implementations, on the thread's CPU time.
 *
 * The default shapes are the tiles `--tile auto` gives two workers, inside their matrices:
 * VGG-11 at 32x32x3, batch 64 (32 rows of 1024 features; its 4096-wide classifier), the MLPs of
 * issue 38 (784-512-512-10 batch 64, 64x256 tiles; 784-1024-1024-10 batch 128, 128x256;
 * 784-256x4-10 batch 32, 16x256), each as the forward (x w), input gradient (dy w^T) or weight
 * gradient (x^T dy). Each is measured with the operands' rows as far apart as their matrices'
 * widths, and again as tessera lays them out (tsr__tiles_row_stride, where it pads them): the
 * figures move a lot with where the operands' rows lie. --shape gives a product of whole
 * matrices, beta 0.
 *
 * usage: bench_gemm [--shape MxNxK[:TA:TB]]... [--seconds S] [--rounds N] */
#include <blis.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "tile/tiles_impl.h"

/* op(a) (m, k) op(b) (k, n) into c (m, n); each operand a tile of a matrix of wa, wb, wc
 * columns cut in tiles nb wide, held in place as tessera holds its tiles (a 1024x1024 weight
 * tile of VGG-11's 4096-wide classifier has rows 4096 floats apart, or 4112 padded); beta 0 or
 * 1 (the first task of a tile's sum, or a later one). */
typedef struct {
  int m, n, k, ta, tb, wa, wb, wc, nb;
  float beta;
  const char *what;
} shape_t;

static const shape_t defaults[] = {
    {32, 1024, 1024, 0, 0, 4096, 4096, 4096, 1024, 1, "VGG-11 fc2 forward"},
    {32, 1024, 1024, 0, 1, 4096, 4096, 4096, 1024, 1, "VGG-11 fc2 input gradient"},
    {1024, 1024, 32, 1, 0, 4096, 4096, 4096, 1024, 1, "VGG-11 fc2 weight gradient"},
    {32, 1024, 512, 0, 0, 512, 4096, 4096, 1024, 0, "VGG-11 fc1 forward"},
    {64, 256, 256, 0, 0, 784, 512, 512, 256, 1, "MLP 512 b64 fc1 forward"},
    {64, 256, 256, 0, 0, 512, 512, 512, 256, 1, "MLP 512 b64 fc2 forward"},
    {64, 256, 256, 0, 1, 512, 512, 512, 256, 1, "MLP 512 b64 fc2 input gradient"},
    {256, 256, 64, 1, 0, 512, 512, 512, 256, 0, "MLP 512 b64 fc2 weight gradient"},
    {256, 256, 64, 1, 0, 784, 512, 512, 256, 0, "MLP 512 b64 fc1 weight gradient"},
    {128, 256, 256, 0, 0, 1024, 1024, 1024, 256, 1, "MLP 1024 b128 forward"},
    {128, 256, 256, 0, 1, 1024, 1024, 1024, 256, 1, "MLP 1024 b128 input gradient"},
    {256, 256, 128, 1, 0, 1024, 1024, 1024, 256, 0, "MLP 1024 b128 weight gradient"},
    {16, 256, 256, 0, 0, 256, 256, 256, 256, 1, "MLP 256x4 b32 forward"},
    {256, 256, 16, 1, 0, 256, 256, 256, 256, 0, "MLP 256x4 b32 weight gradient"},
};

enum { BLIS, BLIS_PACKED, ONEDNN, IMPLS };
static const char *const names[IMPLS] = {"blis", "blis packed", "onednn"};

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static rntm_t packed; /* one thread, BLIS's small-matrix path off */

/* The product with the operands' rows ld[0], ld[1], ld[2] floats apart (a, b, c). */
static void run(int impl, const shape_t *s, const int *ld, const float *a, const float *b,
                float *c) {
  float one = 1.0f, beta = s->beta;
  if (impl == BLIS_PACKED) {
    bli_sgemm_ex(s->ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
                 s->tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s->m, s->n, s->k, &one, (float *)a,
                 ld[0], 1, (float *)b, ld[1], 1, &beta, c, ld[2], 1, NULL, &packed);
    return;
  }
  tsr__k_gemm_by(impl == ONEDNN, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, ld[0], b, ld[1], beta, c,
                 ld[2]);
}

/* GFLOP/s of one timing: calls repeated for about `seconds` of CPU time. */
static double rate(int impl, const shape_t *s, const int *ld, const float *a, const float *b,
                   float *c, double seconds) {
  double flops = 2.0 * s->m * s->n * s->k, t0 = cpu_now(), t;
  long reps = 0;
  do {
    run(impl, s, ld, a, b, c);
    reps++;
  } while ((t = cpu_now() - t0) < seconds);
  return flops * (double)reps / t / 1e9;
}

/* n floats, 64-byte aligned as tessera's matrices are. */
static float *buffer(size_t n) {
  float *p = aligned_alloc(64, (n * sizeof *p + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "bench_gemm: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++)
    p[i] = (float)(i % 7) * 0.1f - 0.3f;
  return p;
}

/* A row of the table: shape s with the operands' rows ld[] apart. */
static void measure(const shape_t *s, const int *ld, const char *layout, int rounds, double seconds,
                    bool dnnl) {
  int rows[3] = {s->ta ? s->k : s->m, s->tb ? s->n : s->k, s->m};
  float *p[3];
  for (int i = 0; i < 3; i++)
    p[i] = buffer((size_t)rows[i] * (size_t)ld[i]);
  double best[IMPLS] = {0};
  for (int r = 0; r < rounds; r++)
    for (int impl = 0; impl < IMPLS; impl++) {
      if (impl == ONEDNN && !dnnl) continue;
      double g = rate(impl, s, ld, p[0], p[1], p[2], seconds);
      if (g > best[impl]) best[impl] = g;
    }
  char label[64];
  snprintf(label, sizeof label, "%dx%dx%d %s%s%s", s->m, s->n, s->k, s->ta ? "a^T" : "a",
           s->tb ? " b^T" : " b", s->beta != 0.0f ? " +c" : "");
  printf("%-22s %-31s %-23s %6.1f %12.1f %8.1f %14.2f\n", label, s->what, layout, best[BLIS],
         best[BLIS_PACKED], best[ONEDNN], dnnl ? best[ONEDNN] / best[BLIS] : 0.0);
  fflush(stdout);
  for (int i = 0; i < 3; i++)
    free(p[i]);
}

int main(int argc, char **argv) {
  shape_t shapes[64];
  int n = 0, rounds = 5;
  double seconds = 0.2;
  static const struct option opts[] = {{"shape", required_argument, 0, 's'},
                                       {"seconds", required_argument, 0, 'S'},
                                       {"rounds", required_argument, 0, 'r'},
                                       {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    shape_t s = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0f, "--shape"};
    if (c == 's' && n < 64 &&
        sscanf(optarg, "%dx%dx%d:%d:%d", &s.m, &s.n, &s.k, &s.ta, &s.tb) >= 3 && s.m > 0 &&
        s.n > 0 && s.k > 0 && s.m <= 8192 && s.n <= 8192 && s.k <= 8192) {
      s.ta = s.ta != 0, s.tb = s.tb != 0;
      s.wa = s.ta ? s.m : s.k, s.wb = s.tb ? s.k : s.n, s.wc = s.n; /* whole matrices */
      s.nb = 8192;                                                  /* one tile each */
      shapes[n++] = s;
    } else if (c == 'S' && (seconds = atof(optarg)) > 0) {
      continue;
    } else if (c == 'r' && (rounds = atoi(optarg)) >= 1 && rounds <= 100) {
      continue;
    } else {
      fprintf(stderr, "usage: bench_gemm [--shape MxNxK[:TA:TB]]... [--seconds S] "
                      "[--rounds N]\n  (M, N, K from 1 to 8192; S > 0; N from 1 to 100)\n");
      return 2;
    }
  }
  if (n == 0) {
    n = (int)(sizeof defaults / sizeof *defaults);
    memcpy(shapes, defaults, sizeof defaults);
  }
  tsr__k_init();
  bli_rntm_init_from_global(&packed);
  bli_rntm_set_num_threads(1, &packed);
  bli_rntm_disable_l3_sup(&packed);
  bool dnnl = tsr__k_dnnl_built();
  printf("GEMM c = op(a) op(b), row-major, one thread, GFLOP/s (best of %d rounds of %.2f s CPU "
         "time); BLIS kernels %s, %s\n",
         rounds, seconds, tsr__k_blis_kernels(), dnnl ? tsr__k_dnnl_version() : "no oneDNN");
  printf("%-22s %-31s %-23s %6s %12s %8s %14s\n", "m x n x k, operands", "where",
         "rows apart (a,b,c)", names[BLIS], names[BLIS_PACKED], names[ONEDNN], "onednn / blis");
  for (int i = 0; i < n; i++) {
    const shape_t *s = &shapes[i];
    int w[3] = {s->wa, s->wb, s->wc}, ld[3];
    bool padded = false;
    for (int j = 0; j < 3; j++)
      padded |= (ld[j] = (int)tsr__tiles_row_stride(w[j], s->nb)) != w[j];
    char text[40];
    snprintf(text, sizeof text, "%d,%d,%d", w[0], w[1], w[2]);
    measure(s, w, text, rounds, seconds, dnnl);
    snprintf(text, sizeof text, "%d,%d,%d tessera", ld[0], ld[1], ld[2]);
    if (padded) measure(s, ld, text, rounds, seconds, dnnl);
  }
  return 0;
}
