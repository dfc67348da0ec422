/* GEMM on one tile: BLIS's typed API with explicit row and column strides, so
 * row-major tiles and transposed operands need no copies. */
#include <assert.h>
#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#ifdef TSR_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

static char blis_choice[64]; /* what choose_blis_kernels set, "" for nothing */

/* BLIS 0.9 runs its generic kernels on x86-64 CPUs it does not know (AMD's Zen 4 and later),
 * where its skx kernels work and are 5.4x faster: one core of this project's AMD EPYC, a
 * 1024^3 SGEMM, 28 GFLOP/s generic, 150 skx (68 haswell, 109 zen3). With AVX-512 F, DQ, BW and
 * VL (what the skx kernels use) tessera asks for them through BLIS_ARCH_TYPE, which BLIS reads
 * once, at its first initialization, so this runs before any BLIS call. An Intel CPU with these
 * gets what BLIS would pick anyway; a BLIS_ARCH_TYPE already set (the user's) is left alone. */
static void choose_blis_kernels(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (blis_choice[0] || getenv("BLIS_ARCH_TYPE")) return;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq") ||
      !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl"))
    return;
  for (int id = 0; id < (int)BLIS_NUM_ARCHS; id++)
    if (strcmp(bli_arch_string((arch_t)id), "skx") == 0) {
      char v[16];
      snprintf(v, sizeof v, "%d", id);
      setenv("BLIS_ARCH_TYPE", v, 0);
      snprintf(blis_choice, sizeof blis_choice, "BLIS_ARCH_TYPE=%d (skx), set by tessera", id);
      return;
    }
#endif
}

void tsr__k_init(void) {
  choose_blis_kernels();
  bli_thread_set_num_threads(1);
}

const char *tsr__k_blis_choice(void) {
  return blis_choice;
}

const char *tsr__k_blis_kernels(void) {
  tsr__k_init();
  return bli_arch_string(bli_arch_query_id());
}

void tsr__k_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
  assert(m >= 0 && n >= 0 && k >= 0);
  if (m == 0 || n == 0) return;
  bli_sgemm(ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n,
            k, &alpha, (float *)a, lda, 1, (float *)b, ldb, 1, &beta, c, ldc, 1);
}

/* On the dense layers' tiles as tessera lays them out (rows padded: src/tile/tiles.c), one core
 * of the Zen 3 EPYC, idle, ran dnnl_sgemm at 76-96 GFLOP/s and BLIS 0.9 (zen3 kernels, which
 * take their unpacked small-matrix path when a dimension is small) at 57-92, 1.03-1.37x
 * (benchmarks/bench_gemm: VGG-11's classifier and the MLPs of issue 38). dnnl_sgemm runs on the
 * calling thread's OpenMP setting, set to one thread here once per thread: StarPU's workers are
 * the parallelism, as for the convolutions (conv_dnnl.c). With beta 0 it reads nothing of c. */
bool tsr__k_gemm_dnnl(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc) {
#ifdef TSR_HAVE_DNNL
  static _Thread_local bool one_thread;
  if (m <= 0 || n <= 0 || k <= 0) return false;
  if (!one_thread) omp_set_num_threads(1), one_thread = true;
  return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) ==
         dnnl_success;
#else
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
  (void)ldb, (void)beta, (void)c, (void)ldc;
  return false;
#endif
}

void tsr__k_gemm_by(bool dnnl, bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
                    int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (!dnnl || !tsr__k_gemm_dnnl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    tsr__k_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tsr__k_gemm_ref(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) {
        double av = ta ? a[(long)p * lda + i] : a[(long)i * lda + p];
        double bv = tb ? b[(long)j * ldb + p] : b[(long)p * ldb + j];
        s += av * bv;
      }
      float *cij = &c[(long)i * ldc + j];
      *cij = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * *cij));
    }
}
