/* Optimizer updates on one parameter tile, following PyTorch's SGD and Adam
 * (L2 weight decay added to the gradient) so results compare one to one. */
#include <math.h>

#include "kernels/kernels.h"

void tsr__k_sgd(int m, int n, float *w, int ldw, float *v, int ldv, const float *g, int ldg,
                float lr, float momentum, float wd) {
  for (int i = 0; i < m; i++) {
    float *wr = w + (long)i * ldw;
    const float *gr = g + (long)i * ldg;
    if (momentum == 0.0f) {
      for (int j = 0; j < n; j++)
        wr[j] -= lr * (gr[j] + wd * wr[j]);
      continue;
    }
    float *vr = v + (long)i * ldv;
    for (int j = 0; j < n; j++) {
      float vj = momentum * vr[j] + gr[j] + wd * wr[j];
      vr[j] = vj;
      wr[j] -= lr * vj;
    }
  }
}

void tsr__k_adam(int m, int n, float *w, int ldw, float *m1, int ldm1, float *m2, int ldm2,
                 const float *g, int ldg, float lr, float beta1, float beta2, float eps, float wd,
                 int t) {
  float c1 = 1.0f / (1.0f - powf(beta1, (float)t));
  float c2 = 1.0f / (1.0f - powf(beta2, (float)t));
  for (int i = 0; i < m; i++) {
    float *wr = w + (long)i * ldw, *ar = m1 + (long)i * ldm1, *br = m2 + (long)i * ldm2;
    const float *gr = g + (long)i * ldg;
    for (int j = 0; j < n; j++) {
      float gj = gr[j] + wd * wr[j];
      ar[j] = beta1 * ar[j] + (1.0f - beta1) * gj;
      br[j] = beta2 * br[j] + (1.0f - beta2) * gj * gj;
      wr[j] -= lr * (ar[j] * c1) / (sqrtf(br[j] * c2) + eps);
    }
  }
}

void tsr__k_outer(int m, int n, float *x, int ldx, float *u, int ldu, const float *a, int lda,
                  const float *b, int ldb, float scale, bool nesterov, float lr, float momentum,
                  float gamma) {
  for (int i = 0; i < m; i++) {
    float *xr = x + (long)i * ldx, *ur = u + (long)i * ldu;
    const float *ar = a + (long)i * lda, *br = b + (long)i * ldb;
    for (int j = 0; j < n; j++) {
      float d = scale * (ar[j] - br[j]);
      if (nesterov) {
        ur[j] = momentum * ur[j] + d;
        xr[j] -= lr * (d + momentum * ur[j]);
      } else if (gamma > 0.0f) {
        ur[j] = momentum * ur[j] + d / gamma;
        xr[j] -= lr * gamma * ur[j];
      } else {
        xr[j] -= d;
      }
    }
  }
}
