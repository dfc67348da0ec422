/* OpenCL C versions of the kernels in src/kernels/, one work-item per
 * element unless said otherwise. Built once per device when the runtime
 * starts (codelets/opencl.c), embedded in the library as a string.
 *
 * Every tile is row-major with a leading dimension, as on the CPU: a matrix
 * argument is (buffer, offset, ld), the offset in floats from the buffer's
 * start (StarPU hands out sub-buffers as buffer + offset). 2-D kernels run
 * over (columns, rows): get_global_id(0) is the column j, (1) the row i. */

#define AT(p, o, ld, i, j) (p)[(o) + (long)(i) * (ld) + (j)]

static inline float flush(float x) {
  return fabs(x) < FLT_MIN ? 0.0f : x;
}

__kernel void tsr_fill(int m, int n, __global float *x, int xo, int ldx, float value) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i < m && j < n) AT(x, xo, ldx, i, j) = value;
}

__kernel void tsr_copy(int m, int n, __global float *d, int dof, int ldd, __global const float *s,
                       int so, int lds) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i < m && j < n) AT(d, dof, ldd, i, j) = AT(s, so, lds, i, j);
}

/* y = alpha x + beta y; y is not read when beta is 0 (it may hold garbage). */
__kernel void tsr_axpby(int m, int n, float alpha, __global const float *x, int xo, int ldx,
                        float beta, __global float *y, int yo, int ldy) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float v = alpha * AT(x, xo, ldx, i, j);
  AT(y, yo, ldy, i, j) = beta == 0.0f ? v : v + beta * AT(y, yo, ldy, i, j);
}

/* y = a + b (the add layer), then max(y, 0) with relu (a following ReLU fused). */
__kernel void tsr_add(int m, int n, __global float *y, int yo, int ldy, __global const float *a,
                      int ao, int lda, __global const float *b, int bo, int ldb, int relu) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float v = AT(a, ao, lda, i, j) + AT(b, bo, ldb, i, j);
  AT(y, yo, ldy, i, j) = relu && !(v > 0.0f) ? 0.0f : v;
}

/* A concat's channel block (tsr__k_channels_copy), over (pixels width, m): work-item (q, i)
 * copies (add: adds) value q % width of pixel q / width of row i. */
__kernel void tsr_channels_copy(int m, int pixels, int width, __global float *d, int dof, int ldd,
                                int dst_stride, int dst_off, __global const float *s, int so,
                                int lds, int src_stride, int src_off, int add) {
  int q = get_global_id(0), i = get_global_id(1);
  if (i >= m || q >= pixels * width) return;
  int p = q / width, c = q % width;
  long at = dof + (long)i * ldd + (long)p * dst_stride + dst_off + c;
  float v = s[so + (long)i * lds + (long)p * src_stride + src_off + c];
  d[at] = add ? d[at] + v : v;
}

__kernel void tsr_scale(int m, int n, float alpha, __global float *x, int xo, int ldx) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i < m && j < n) AT(x, xo, ldx, i, j) *= alpha;
}

/* y (m, n) += b (1, n), then max(y, 0) when relu is set. */
__kernel void tsr_bias_add(int m, int n, __global float *y, int yo, int ldy,
                           __global const float *b, int bo, int relu) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float v = AT(y, yo, ldy, i, j) + b[bo + j];
  AT(y, yo, ldy, i, j) = relu ? fmax(v, 0.0f) : v;
}

/* db (1, n) = beta db + column sums of dy (m, n): one work-item per column,
 * rows summed in order as on the CPU. */
__kernel void tsr_bias_grad(int m, int n, __global float *db, int dbo, __global const float *dy,
                            int dyo, int lddy, float beta) {
  int j = get_global_id(0);
  if (j >= n || get_global_id(1) != 0) return; /* launched as one row of work-groups */
  float s = beta == 0.0f ? 0.0f : beta * db[dbo + j];
  for (int i = 0; i < m; i++)
    s += AT(dy, dyo, lddy, i, j);
  db[dbo + j] = s;
}

__kernel void tsr_relu_fwd(int m, int n, __global float *y, int yo, int ldy,
                           __global const float *x, int xo, int ldx) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i < m && j < n) AT(y, yo, ldy, i, j) = fmax(AT(x, xo, ldx, i, j), 0.0f);
}

/* dx = dy where y > 0, else 0; dx may be dy. */
__kernel void tsr_relu_bwd(int m, int n, __global float *dx, int dxo, int lddx,
                           __global const float *dy, int dyo, int lddy, __global const float *y,
                           int yo, int ldy) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float g = AT(dy, dyo, lddy, i, j);
  AT(dx, dxo, lddx, i, j) = AT(y, yo, ldy, i, j) > 0.0f ? g : 0.0f;
}

/* Softmax + cross-entropy over the rows of z (m, n), labels (m, 1) as
 * floats. One work-group: each work-item takes rows lid, lid + size, ...,
 * writes their gradient (when has_d) and keeps its loss and correct counts
 * in local memory; work-item 0 adds the group's totals to stats (1, 2). */
__kernel void tsr_softmax_xent(int m, int n, __global float *d, int dof, int ldd, int has_d,
                               __global const float *z, int zo, int ldz,
                               __global const float *labels, int lo, int ldl, int nvalid,
                               float scale, float eps, __global float *stats, int so,
                               __local float *part) {
  int lid = get_local_id(0), size = get_local_size(0);
  float loss = 0.0f, correct = 0.0f;
  for (int i = lid; i < m; i += size) {
    if (i >= nvalid) {
      if (has_d)
        for (int j = 0; j < n; j++)
          AT(d, dof, ldd, i, j) = 0.0f;
      continue;
    }
    int label = (int)labels[lo + (long)i * ldl];
    int arg = 0;
    float zmax = AT(z, zo, ldz, i, 0);
    for (int j = 1; j < n; j++) {
      float v = AT(z, zo, ldz, i, j);
      if (v > zmax) zmax = v, arg = j;
    }
    float sum = 0.0f;
    for (int j = 0; j < n; j++)
      sum += exp(AT(z, zo, ldz, i, j) - zmax);
    /* PyTorch's label smoothing: the target (1 - eps) onehot + eps / n */
    float shifted = 0.0f;
    if (eps != 0.0f)
      for (int j = 0; j < n; j++)
        shifted += AT(z, zo, ldz, i, j) - zmax;
    loss += log(sum) - (1.0f - eps) * (AT(z, zo, ldz, i, label) - zmax) - eps / n * shifted;
    correct += arg == label ? 1.0f : 0.0f;
    if (has_d) {
      float inv = 1.0f / sum, off = scale * (eps / n);
      for (int j = 0; j < n; j++)
        AT(d, dof, ldd, i, j) = scale * exp(AT(z, zo, ldz, i, j) - zmax) * inv - off;
      AT(d, dof, ldd, i, label) -= scale * (1.0f - eps);
    }
  }
  part[2 * lid] = loss;
  part[2 * lid + 1] = correct;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid != 0) return;
  for (int k = 1; k < size; k++)
    loss += part[2 * k], correct += part[2 * k + 1];
  stats[so] += loss;
  stats[so + 1] += correct;
}

/* PyTorch's SGD: g' = g + wd w; v = momentum v + g'; w -= lr v (v unused
 * when momentum is 0). w and v start at the band's first row already. */
__kernel void tsr_sgd(int m, int n, __global float *w, int wo, int ldw, __global float *v, int vo,
                      int ldv, __global const float *g, int go, int ldg, float lr, float momentum,
                      float wd) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float wj = AT(w, wo, ldw, i, j), gj = AT(g, go, ldg, i, j);
  if (momentum == 0.0f) {
    AT(w, wo, ldw, i, j) = wj - lr * (gj + wd * wj);
    return;
  }
  float vj = flush(momentum * AT(v, vo, ldv, i, j) + gj + wd * wj);
  AT(v, vo, ldv, i, j) = vj;
  AT(w, wo, ldw, i, j) = wj - lr * vj;
}

/* PyTorch's SGD with Nesterov momentum (tsr__k_sgd_nesterov). */
__kernel void tsr_sgd_nesterov(int m, int n, __global float *w, int wo, int ldw, __global float *v,
                               int vo, int ldv, __global const float *g, int go, int ldg, float lr,
                               float momentum, float wd) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float wj = AT(w, wo, ldw, i, j), gj = AT(g, go, ldg, i, j) + wd * wj;
  float vj = flush(momentum * AT(v, vo, ldv, i, j) + gj);
  AT(v, vo, ldv, i, j) = vj;
  AT(w, wo, ldw, i, j) = wj - lr * (gj + momentum * vj);
}

/* Adam's moments and weight at (i, j) from the gradient gj and the weight wj, as
 * src/kernels/optim.c's adam_element; c1, c2: the bias corrections 1 / (1 - beta^t),
 * computed on the host as the CPU kernel does. */
static inline void adam_at(int i, int j, __global float *w, int wo, int ldw, __global float *m1,
                           int m1o, int ldm1, __global float *m2, int m2o, int ldm2, float wj,
                           float gj, float lr, float beta1, float beta2, float eps, float c1,
                           float c2) {
  float a = flush(beta1 * AT(m1, m1o, ldm1, i, j) + (1.0f - beta1) * gj);
  float b = flush(beta2 * AT(m2, m2o, ldm2, i, j) + (1.0f - beta2) * gj * gj);
  AT(m1, m1o, ldm1, i, j) = a;
  AT(m2, m2o, ldm2, i, j) = b;
  AT(w, wo, ldw, i, j) = wj - lr * (a * c1) / (sqrt(b * c2) + eps);
}

/* PyTorch's Adam with L2 weight decay. */
__kernel void tsr_adam(int m, int n, __global float *w, int wo, int ldw, __global float *m1,
                       int m1o, int ldm1, __global float *m2, int m2o, int ldm2,
                       __global const float *g, int go, int ldg, float lr, float beta1,
                       float beta2, float eps, float wd, float c1, float c2) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float wj = AT(w, wo, ldw, i, j);
  adam_at(i, j, w, wo, ldw, m1, m1o, ldm1, m2, m2o, ldm2, wj, AT(g, go, ldg, i, j) + wd * wj, lr,
          beta1, beta2, eps, c1, c2);
}

/* PyTorch's AdamW (tsr__k_adamw): w *= 1 - lr wd, then Adam's step on g alone. */
__kernel void tsr_adamw(int m, int n, __global float *w, int wo, int ldw, __global float *m1,
                        int m1o, int ldm1, __global float *m2, int m2o, int ldm2,
                        __global const float *g, int go, int ldg, float lr, float beta1,
                        float beta2, float eps, float wd, float c1, float c2) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float wj = AT(w, wo, ldw, i, j) * (1.0f - lr * wd);
  adam_at(i, j, w, wo, ldw, m1, m1o, ldm1, m2, m2o, ldm2, wj, AT(g, go, ldg, i, j), lr, beta1,
          beta2, eps, c1, c2);
}

/* The dropout mask of src/kernels/dropout.c: a hash of (seed, row, col). */
static inline ulong mix(ulong z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9UL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebUL;
  return z ^ (z >> 31);
}

__kernel void tsr_dropout(int m, int n, __global float *y, int yo, int ldy,
                          __global const float *x, int xo, int ldx, ulong seed, long row0,
                          long col0, float rate) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
  ulong rs = mix(seed + 0x9e3779b97f4a7c15UL * (ulong)(row0 + i + 1));
  ulong h = mix(rs + 0xd1b54a32d192ed03UL * (ulong)(col0 + j + 1));
  float u = (float)(h >> 40) * 0x1.0p-24f;
  AT(y, yo, ldy, i, j) = u >= rate ? AT(x, xo, ldx, i, j) * scale : 0.0f;
}

/* Convolution and pooling geometry: tsr_conv_geom_t's twelve ints, in order. */
typedef struct {
  int c, h, w;
  int oc, oh, ow;
  int kh, kw, sh, sw, ph, pw;
} geom_t;

/* col (n oh ow, kh kw c), contiguous: every output pixel's receptive field
 * of x (n, h w c), zero over the padding. Over (kh kw c, n oh ow). */
__kernel void tsr_im2col(geom_t g, int n, __global float *col, __global const float *x, int xo,
                         int ldx) {
  int kk = get_global_id(0), r = get_global_id(1);
  int k = g.kh * g.kw * g.c, p = g.oh * g.ow;
  if (kk >= k || r >= n * p) return;
  int s = r / p, oy = r % p / g.ow, ox = r % p % g.ow;
  int ky = kk / (g.kw * g.c), kx = kk / g.c % g.kw, q = kk % g.c;
  int iy = oy * g.sh - g.ph + ky, ix = ox * g.sw - g.pw + kx;
  float v = 0.0f;
  if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
    v = x[xo + (long)s * ldx + ((long)iy * g.w + ix) * g.c + q];
  col[(long)r * k + kk] = v;
}

/* dx (n, h w c) = the adjoint of im2col applied to dcol (n oh ow, kh kw c):
 * each input element gathers the patch entries that read it (no two
 * work-items write the same element). Over (h w c, n). */
__kernel void tsr_col2im(geom_t g, int n, __global float *dx, int dxo, int lddx,
                         __global const float *dcol) {
  int t = get_global_id(0), s = get_global_id(1);
  if (t >= g.h * g.w * g.c || s >= n) return;
  int k = g.kh * g.kw * g.c, p = g.oh * g.ow;
  int iy = t / (g.w * g.c), ix = t / g.c % g.w, q = t % g.c;
  float sum = 0.0f;
  for (int ky = 0; ky < g.kh; ky++) {
    int ty = iy + g.ph - ky;
    if (ty < 0 || ty % g.sh || ty / g.sh >= g.oh) continue;
    for (int kx = 0; kx < g.kw; kx++) {
      int tx = ix + g.pw - kx;
      if (tx < 0 || tx % g.sw || tx / g.sw >= g.ow) continue;
      long r = (long)s * p + (long)(ty / g.sh) * g.ow + tx / g.sw;
      sum += dcol[r * k + ((long)ky * g.kw + kx) * g.c + q];
    }
  }
  dx[dxo + (long)s * lddx + t] = sum;
}

/* y (n, oh ow c) = max (or mean) of x (n, h w c) over each window's part inside the sample
 * (the padding never wins a max and counts as zeros in a mean: divisor kh kw), in the CPU
 * kernel's order. Over (oh ow c, n). */
__kernel void tsr_pool_fwd(geom_t g, int max, int n, __global float *y, int yo, int ldy,
                           __global const float *x, int xo, int ldx) {
  int t = get_global_id(0), s = get_global_id(1);
  if (t >= g.oh * g.ow * g.c || s >= n) return;
  int oy = t / (g.ow * g.c), ox = t / g.c % g.ow, q = t % g.c;
  int iy0 = oy * g.sh - g.ph, ix0 = ox * g.sw - g.pw;
  int ky0 = iy0 < 0 ? -iy0 : 0, kx0 = ix0 < 0 ? -ix0 : 0;
  int ky1 = min(g.kh, g.h - iy0), kx1 = min(g.kw, g.w - ix0);
  __global const float *corner = x + xo + (long)s * ldx + q;
  float v = corner[((long)(iy0 + ky0) * g.w + ix0 + kx0) * g.c];
  for (int ky = ky0; ky < ky1; ky++)
    for (int kx = kx0; kx < kx1; kx++) {
      if (ky == ky0 && kx == kx0) continue;
      float xi = corner[((long)(iy0 + ky) * g.w + ix0 + kx) * g.c];
      v = max ? (xi > v ? xi : v) : v + xi;
    }
  y[yo + (long)s * ldy + t] = max ? v : v * (1.0f / (float)(g.kh * g.kw));
}

/* dx (n, h w c) from dy (n, oh ow c), gathered per input element over the
 * windows that contain it. Max: an element takes a window's gradient when it
 * is the window's first input (inside the sample) equal to the output (and, with relu, that
 * output is positive); mean: every element takes 1 / (kh kw) of it. Over
 * (h w c, n). */
__kernel void tsr_pool_bwd(geom_t g, int max, int relu, int n, __global float *dx, int dxo,
                           int lddx, __global const float *dy, int dyo, int lddy,
                           __global const float *x, int xo, int ldx, __global const float *y,
                           int yo, int ldy) {
  int t = get_global_id(0), s = get_global_id(1);
  if (t >= g.h * g.w * g.c || s >= n) return;
  int iy = t / (g.w * g.c), ix = t / g.c % g.w, q = t % g.c;
  const float inv = 1.0f / (float)(g.kh * g.kw);
  __global const float *dys = dy + dyo + (long)s * lddy;
  float sum = 0.0f;
  for (int ky = 0; ky < g.kh; ky++) {
    int ty = iy + g.ph - ky;
    if (ty < 0 || ty % g.sh || ty / g.sh >= g.oh) continue;
    int oy = ty / g.sh;
    for (int kx = 0; kx < g.kw; kx++) {
      int tx = ix + g.pw - kx;
      if (tx < 0 || tx % g.sw || tx / g.sw >= g.ow) continue;
      int ox = tx / g.sw;
      long out = ((long)oy * g.ow + ox) * g.c + q;
      if (!max) {
        sum += inv * dys[out];
        continue;
      }
      float ym = y[yo + (long)s * ldy + out];
      if (relu && !(ym > 0.0f)) continue;
      /* Is (ky, kx) the first position of the window inside the sample holding the maximum? */
      int iy0 = oy * g.sh - g.ph, ix0 = ox * g.sw - g.pw;
      int ky0 = iy0 < 0 ? -iy0 : 0, kx0 = ix0 < 0 ? -ix0 : 0, kx1 = min(g.kw, g.w - ix0);
      __global const float *corner = x + xo + (long)s * ldx + q;
      bool earlier = false;
      for (int a = ky0; a <= ky && !earlier; a++)
        for (int b = kx0; b < (a == ky ? kx : kx1); b++)
          if (corner[((long)(iy0 + a) * g.w + ix0 + b) * g.c] == ym) {
            earlier = true;
            break;
          }
      if (!earlier && x[xo + (long)s * ldx + t] == ym) sum += dys[out];
    }
  }
  dx[dxo + (long)s * lddx + t] = sum;
}

/* One outer-optimizer step (tsr__k_outer): d = scale (a - b), a may be x. */
__kernel void tsr_outer(int m, int n, __global float *x, int xo, int ldx, __global float *u,
                        int uo, int ldu, __global const float *a, int ao, int lda,
                        __global const float *b, int bo, int ldb, float scale, int nesterov,
                        float lr, float momentum, float gamma) {
  int j = get_global_id(0), i = get_global_id(1);
  if (i >= m || j >= n) return;
  float d = scale * (AT(a, ao, lda, i, j) - AT(b, bo, ldb, i, j));
  if (nesterov) {
    float uj = flush(momentum * AT(u, uo, ldu, i, j) + d);
    AT(u, uo, ldu, i, j) = uj;
    AT(x, xo, ldx, i, j) -= lr * (d + momentum * uj);
  } else if (gamma > 0.0f) {
    float uj = flush(momentum * AT(u, uo, ldu, i, j) + d / gamma);
    AT(u, uo, ldu, i, j) = uj;
    AT(x, xo, ldx, i, j) -= lr * gamma * uj;
  } else {
    AT(x, xo, ldx, i, j) -= d;
  }
}
