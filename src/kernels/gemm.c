/* GEMM on one tile: BLIS's typed API with explicit row and column strides, so
 * row-major tiles and transposed operands need no copies. */
#include <assert.h>
#include <blis.h>

#include "kernels/kernels.h"

void tsr__k_init(void) {
  bli_thread_set_num_threads(1);
}

void tsr__k_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
  assert(m >= 0 && n >= 0 && k >= 0);
  if (m == 0 || n == 0) return;
  bli_sgemm(ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n,
            k, &alpha, (float *)a, lda, 1, (float *)b, ldb, 1, &beta, c, ldc, 1);
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
