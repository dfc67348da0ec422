/* Float64 finite-difference gradient checks of whole networks, shared by the
 * dense (test_grad.c) and convolutional (test_conv.c) suites: direct
 * references for every layer kind, a float64 forward pass and loss, and a
 * check that runs one engine step (no update) over edge tiles and compares
 * every parameter gradient and the input gradient with central differences. */
#ifndef TSR_TEST_GRADCHECK_H
#define TSR_TEST_GRADCHECK_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/net_impl.h"
#include "rng.h"
#include "tessera/tessera.h"

static tsr_conv_geom_t geom(int c, int h, int w, int oc, int kh, int kw, int sh, int sw, int ph,
                            int pw) {
  tsr_conv_geom_t g = {
      c, h, w, oc, (h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1, kh, kw, sh, sw, ph, pw};
  return g;
}

/* Direct convolution, channels-last, in double: y (n, oh ow oc). */
static void conv_ref(const tsr_conv_geom_t *g, int n, double *y, const double *x, const double *w,
                     const double *b) {
  for (int s = 0; s < n; s++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++)
        for (int o = 0; o < g->oc; o++) {
          double acc = b[o];
          for (int ky = 0; ky < g->kh; ky++)
            for (int kx = 0; kx < g->kw; kx++)
              for (int c = 0; c < g->c; c++) {
                int iy = oy * g->sh - g->ph + ky, ix = ox * g->sw - g->pw + kx;
                if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
                acc += x[(long)s * g->h * g->w * g->c + ((long)iy * g->w + ix) * g->c + c] *
                       w[(((long)ky * g->kw + kx) * g->c + c) * g->oc + o];
              }
          y[(long)s * g->oh * g->ow * g->oc + ((long)oy * g->ow + ox) * g->oc + o] = acc;
        }
}

static void pool_ref(const tsr_conv_geom_t *g, bool max, int n, double *y, const double *x) {
  for (int s = 0; s < n; s++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++)
        for (int c = 0; c < g->c; c++) {
          double acc = max ? -INFINITY : 0.0;
          for (int ky = 0; ky < g->kh; ky++)
            for (int kx = 0; kx < g->kw; kx++) {
              double v = x[(long)s * g->h * g->w * g->c +
                           ((long)(oy * g->sh + ky) * g->w + ox * g->sw + kx) * g->c + c];
              acc = max ? fmax(acc, v) : acc + v;
            }
          y[(long)s * g->oh * g->ow * g->c + ((long)oy * g->ow + ox) * g->c + c] =
              max ? acc : acc / (g->kh * g->kw);
        }
}

static void fill(float *v, double *d, long n, tsr_rng_t *rng) {
  for (long i = 0; i < n; i++) {
    v[i] = (float)(2 * tsr__rng_uniform(rng) - 1);
    if (d) d[i] = v[i];
  }
}

typedef struct {
  const tsr_model_spec_t *spec;
  int c, h, w; /* input geometry */
  int n, batch;
  const double *x;     /* (n, c h w) */
  const float *labels; /* (n) */
  double *params[2 * TSR_MAX_LAYERS];
  uint64_t seed; /* the net's, for dropout masks (first training step) */
} ref_t;

static double ref_loss(const ref_t *r) {
  int c = r->c, h = r->h, w = r->w, p = 0;
  size_t cap = 1 << 16;
  double *a = malloc(sizeof(double) * r->n * cap), *z = malloc(sizeof(double) * r->n * cap);
  memcpy(a, r->x, sizeof(double) * (size_t)r->n * (size_t)(c * h * w));
  for (int l = 0; l < r->spec->n_layers; l++) {
    const tsr_layer_spec_t *s = &r->spec->layers[l];
    int width = c * h * w;
    switch (s->kind) {
    case TSR_LAYER_RELU:
      for (long i = 0; i < (long)r->n * width; i++)
        a[i] = a[i] > 0 ? a[i] : 0;
      break;
    case TSR_LAYER_FLATTEN: c = width, h = w = 1; break;
    case TSR_LAYER_DROPOUT: {
      uint64_t seed = tsr__dropout_seed(r->seed, l + 1, 1);
      for (int i = 0; i < r->n; i++)
        for (int j = 0; j < width; j++)
          a[(long)i * width + j] = tsr__k_dropout_keep(seed, i, j, s->rate)
                                       ? a[(long)i * width + j] / (1.0 - s->rate)
                                       : 0.0;
      break;
    }
    case TSR_LAYER_DENSE: {
      const double *W = r->params[p], *b = r->params[p + 1];
      p += 2;
      for (int i = 0; i < r->n; i++)
        for (int j = 0; j < s->units; j++) {
          double acc = b[j];
          for (int k = 0; k < width; k++)
            acc += a[(long)i * width + k] * W[(long)k * s->units + j];
          z[(long)i * s->units + j] = acc;
        }
      c = s->units, h = w = 1;
      memcpy(a, z, sizeof(double) * (size_t)r->n * (size_t)c);
      break;
    }
    case TSR_LAYER_CONV: {
      int kw = s->kernel_w ? s->kernel_w : s->kernel_h;
      int sh = s->stride_h ? s->stride_h : 1, sw = s->stride_w ? s->stride_w : sh;
      tsr_conv_geom_t g = geom(c, h, w, s->units, s->kernel_h, kw, sh, sw, s->pad_h, s->pad_w);
      conv_ref(&g, r->n, z, a, r->params[p], r->params[p + 1]);
      p += 2;
      c = g.oc, h = g.oh, w = g.ow;
      memcpy(a, z, sizeof(double) * (size_t)r->n * (size_t)(c * h * w));
      break;
    }
    case TSR_LAYER_MAXPOOL:
    case TSR_LAYER_AVGPOOL: {
      int kw = s->kernel_w ? s->kernel_w : s->kernel_h;
      int sh = s->stride_h ? s->stride_h : s->kernel_h, sw = s->stride_w ? s->stride_w : kw;
      tsr_conv_geom_t g = geom(c, h, w, c, s->kernel_h, kw, sh, sw, 0, 0);
      pool_ref(&g, s->kind == TSR_LAYER_MAXPOOL, r->n, z, a);
      h = g.oh, w = g.ow;
      memcpy(a, z, sizeof(double) * (size_t)r->n * (size_t)(c * h * w));
      break;
    }
    }
  }
  int width = c * h * w;
  double loss = 0;
  for (int i = 0; i < r->n; i++) {
    double m = a[(long)i * width];
    for (int j = 1; j < width; j++)
      m = fmax(m, a[(long)i * width + j]);
    double s = 0;
    for (int j = 0; j < width; j++)
      s += exp(a[(long)i * width + j] - m);
    loss += log(s) + m - a[(long)i * width + (int)r->labels[i]];
  }
  free(a), free(z);
  return loss / r->n;
}

static void check_close(const char *what, int p, long idx, double got, double want) {
  cr_assert(fabs(got - want) <= 2e-4 + 2e-3 * fabs(want),
            "%s (param %d)[%ld]: engine %.7g, finite difference %.7g", what, p, idx, got, want);
}

/* One step without update on the first n of `batch` samples of shape (c, h, w);
 * every parameter gradient and the input gradient against central differences. */
static void gradient_check(const tsr_model_spec_t *spec, int c, int h, int w, int classes,
                           int batch, int n, int tile_rows, int tile_cols) {
  int inputs = c * h * w;
  tsr_rng_t rng = {42};
  tsr_dataset_t ds = {.n = batch, .features = inputs, .classes = classes};
  ds.x = malloc(sizeof(float) * (size_t)batch * (size_t)inputs);
  ds.y = malloc(sizeof(float) * (size_t)batch);
  fill(ds.x, NULL, (long)batch * inputs, &rng);
  for (int i = 0; i < batch; i++)
    ds.y[i] = (float)(i % classes);
  int32_t rows[64];
  for (int i = 0; i < batch; i++)
    rows[i] = batch - 1 - i;

  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = batch, o.tile_rows = tile_rows, o.tile_cols = tile_cols, o.seed = 5;
  o.in_channels = c, o.in_height = h, o.in_width = w;
  tsr_net_t *net;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, spec, inputs, classes, &o, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_net_keep_input_grad(net), 0);
  int np = tsr_net_n_params(net);
  /* Non-zero biases keep pre-activations off ReLU's kink. */
  for (int p = 1; p < np; p += 2) {
    int64_t pr, pc;
    cr_assert_eq(tsr_net_param_info(net, p, &pr, &pc), 0);
    float bias[256];
    for (int64_t k = 0; k < pc; k++)
      bias[k] = (float)(tsr__rng_uniform(&rng) - 0.5);
    cr_assert_eq(tsr_net_param_set(net, p, bias), 0);
  }
  cr_assert_eq(tsr_net_train_step(net, &ds, rows, n, false), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);

  double *x = malloc(sizeof(double) * (size_t)n * (size_t)inputs);
  float labels[64];
  for (int i = 0; i < n; i++) {
    labels[i] = ds.y[rows[i]];
    for (int k = 0; k < inputs; k++)
      x[(long)i * inputs + k] = ds.x[(long)rows[i] * inputs + k];
  }
  ref_t r = {spec, c, h, w, n, batch, x, labels, {0}, o.seed};
  float *grads[2 * TSR_MAX_LAYERS];
  int64_t sizes[2 * TSR_MAX_LAYERS];
  for (int p = 0; p < np; p++) {
    int64_t pr, pc;
    cr_assert_eq(tsr_net_param_info(net, p, &pr, &pc), 0);
    sizes[p] = pr * pc;
    float *v = malloc(sizeof(float) * (size_t)sizes[p]);
    grads[p] = malloc(sizeof(float) * (size_t)sizes[p]);
    cr_assert_eq(tsr_net_param_get(net, p, v), 0);
    cr_assert_eq(tsr_net_grad_get(net, p, grads[p]), 0);
    r.params[p] = malloc(sizeof(double) * (size_t)sizes[p]);
    for (int64_t k = 0; k < sizes[p]; k++)
      r.params[p][k] = v[k];
    free(v);
  }
  const double eps = 1e-6;
  for (int p = 0; p < np; p++)
    for (int64_t k = 0; k < sizes[p]; k++) {
      double keep = r.params[p][k];
      r.params[p][k] = keep + eps;
      double up = ref_loss(&r);
      r.params[p][k] = keep - eps;
      double down = ref_loss(&r);
      r.params[p][k] = keep;
      check_close(p % 2 ? "db" : "dW", p, (long)k, grads[p][k], (up - down) / (2 * eps));
    }
  float *dx = malloc(sizeof(float) * (size_t)batch * (size_t)inputs);
  cr_assert_eq(tsr_net_input_grad_get(net, dx), 0);
  for (long k = 0; k < (long)n * inputs; k++) {
    double keep = x[k];
    x[k] = keep + eps;
    double up = ref_loss(&r);
    x[k] = keep - eps;
    double down = ref_loss(&r);
    x[k] = keep;
    check_close("dX", -1, k, dx[k], (up - down) / (2 * eps));
  }
  for (long k = (long)n * inputs; k < (long)batch * inputs; k++)
    cr_assert_float_eq(dx[k], 0.0f, 0, "padding row gradient must be 0");
  for (int p = 0; p < np; p++)
    free(grads[p]), free(r.params[p]);
  free(dx), free(x), free(ds.x), free(ds.y);
  tsr_net_destroy(&net);
}

#endif
