/* Fused softmax + cross-entropy: one pass computes the loss, the prediction
 * and the gradient of a row, with the max subtracted for stability. */
#include <math.h>
#include <stddef.h>

#include "kernels/kernels.h"

void tsr__k_softmax_xent(int m, int n, float *dlogits, int ldd, const float *logits, int ldl,
                         const float *labels, int nvalid, float scale, float *stats) {
  double loss = 0.0, correct = 0.0;
  for (int i = 0; i < m; i++) {
    float *d = dlogits ? dlogits + (long)i * ldd : NULL;
    if (i >= nvalid) {
      if (d)
        for (int j = 0; j < n; j++)
          d[j] = 0.0f;
      continue;
    }
    const float *z = logits + (long)i * ldl;
    int label = (int)labels[i];
    int arg = 0;
    float zmax = z[0];
    for (int j = 1; j < n; j++)
      if (z[j] > zmax) zmax = z[j], arg = j;
    double sum = 0.0;
    for (int j = 0; j < n; j++)
      sum += exp((double)(z[j] - zmax));
    double logsum = log(sum);
    loss += logsum - (double)(z[label] - zmax);
    correct += (arg == label);
    if (d) {
      float inv = (float)(1.0 / sum);
      for (int j = 0; j < n; j++)
        d[j] = scale * expf(z[j] - zmax) * inv;
      d[label] -= scale;
    }
  }
  stats[0] += (float)loss;
  stats[1] += (float)correct;
}
