/* Fused softmax + cross-entropy: one pass computes the loss, the prediction
 * and the gradient of a row, with the max subtracted for stability; with PyTorch's label
 * smoothing (eps > 0) against the target (1 - eps) onehot + eps / n. */
#include <math.h>
#include <stddef.h>

#include "kernels/kernels.h"
#include "kernels/hot.h"

TSR_HOT void tsr__k_softmax_xent(int m, int n, float *dlogits, int ldd, const float *logits,
                                 int ldl, const float *labels, int nvalid, float scale, float eps,
                                 float *stats) {
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
    correct += (arg == label);
    if (eps == 0.0f) { /* one-hot: today's digits */
      loss += logsum - (double)(z[label] - zmax);
      if (d) {
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < n; j++)
          d[j] = scale * expf(z[j] - zmax) * inv;
        d[label] -= scale;
      }
      continue;
    }
    /* -log p_j = logsum - (z_j - zmax): the smoothed loss is logsum - (1 - eps) (z_label -
     * zmax) - eps / n sum_j (z_j - zmax), the targets summing to 1. */
    double shifted = 0.0;
    for (int j = 0; j < n; j++)
      shifted += (double)(z[j] - zmax);
    loss += logsum - (1.0 - (double)eps) * (double)(z[label] - zmax) - (double)eps / n * shifted;
    if (d) {
      float inv = (float)(1.0 / sum), off = scale * (float)((double)eps / n);
      for (int j = 0; j < n; j++)
        d[j] = scale * expf(z[j] - zmax) * inv - off;
      d[label] -= scale * (1.0f - eps);
    }
  }
  stats[0] += (float)loss;
  stats[1] += (float)correct;
}
