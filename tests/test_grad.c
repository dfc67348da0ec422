/* Gradient checks: the engine's gradients (float32 tasks over edge tiles)
 * against central finite differences of a float64 reference forward pass,
 * for dense layers, ReLU (standalone and fused) and softmax cross-entropy. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "tessera/tessera.h"

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(grad, .init = start, .fini = stop);

/* The float64 reference: the same layer stack, written out plainly. */
typedef struct {
  const tsr_model_spec_t *spec;
  int inputs, classes, n;
  const double *x;                    /* (n, inputs) */
  const float *labels;                /* (n) */
  double *params[2 * TSR_MAX_LAYERS]; /* W (fin, fout), b (fout) per dense layer */
} ref_t;

static double ref_loss(const ref_t *r) {
  int width = r->inputs, p = 0;
  double *a = malloc(sizeof(double) * (size_t)r->n * 4096),
         *z = malloc(sizeof(double) * (size_t)r->n * 4096);
  memcpy(a, r->x, sizeof(double) * (size_t)r->n * (size_t)width);
  for (int l = 0; l < r->spec->n_layers; l++) {
    const tsr_layer_spec_t *s = &r->spec->layers[l];
    if (s->kind == TSR_LAYER_RELU) {
      for (int i = 0; i < r->n * width; i++)
        a[i] = a[i] > 0 ? a[i] : 0;
      continue;
    }
    const double *w = r->params[p], *b = r->params[p + 1];
    p += 2;
    for (int i = 0; i < r->n; i++)
      for (int j = 0; j < s->units; j++) {
        double acc = b[j];
        for (int k = 0; k < width; k++)
          acc += a[i * width + k] * w[k * s->units + j];
        z[i * s->units + j] = acc;
      }
    width = s->units;
    memcpy(a, z, sizeof(double) * (size_t)r->n * (size_t)width);
  }
  double loss = 0;
  for (int i = 0; i < r->n; i++) {
    double m = a[i * width];
    for (int j = 1; j < width; j++)
      m = fmax(m, a[i * width + j]);
    double s = 0;
    for (int j = 0; j < width; j++)
      s += exp(a[i * width + j] - m);
    loss += log(s) + m - a[i * width + (int)r->labels[i]];
  }
  free(a), free(z);
  return loss / r->n;
}

static void check_close(const char *what, int idx, double got, double want) {
  cr_assert(fabs(got - want) <= 2e-4 + 2e-3 * fabs(want),
            "%s[%d]: engine %.7g, finite difference %.7g", what, idx, got, want);
}

/* Builds the net, runs one step without update on the first n of `batch`
 * samples, and compares every parameter gradient and the input gradient. */
static void gradient_check(const tsr_model_spec_t *spec, int inputs, int classes, int batch, int n,
                           int tile_rows, int tile_cols) {
  tsr_rng_t rng = {42};
  tsr_dataset_t ds = {.n = batch, .features = inputs, .classes = classes};
  ds.x = malloc(sizeof(float) * (size_t)batch * (size_t)inputs);
  ds.y = malloc(sizeof(float) * (size_t)batch);
  for (int i = 0; i < batch * inputs; i++)
    ds.x[i] = (float)(2 * tsr__rng_uniform(&rng) - 1);
  for (int i = 0; i < batch; i++)
    ds.y[i] = (float)(i % classes);
  int32_t rows[64];
  for (int i = 0; i < batch; i++)
    rows[i] = batch - 1 - i; /* a non-trivial order */

  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = batch, o.tile_rows = tile_rows, o.tile_cols = tile_cols, o.seed = 5;
  tsr_net_t *net;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, spec, inputs, classes, &o, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_net_keep_input_grad(net), 0);
  /* Non-zero biases: with zero biases a sample whose hidden units are all
   * off puts the next pre-activation exactly on ReLU's kink, where finite
   * differences and the gradient legitimately disagree. */
  for (int p = 1; p < tsr_net_n_params(net); p += 2) {
    int64_t pr, pc;
    cr_assert_eq(tsr_net_param_info(net, p, &pr, &pc), 0);
    float bias[64];
    for (int64_t k = 0; k < pc; k++)
      bias[k] = (float)(tsr__rng_uniform(&rng) - 0.5);
    cr_assert_eq(tsr_net_param_set(net, p, bias), 0);
  }
  cr_assert_eq(tsr_net_train_step(net, &ds, rows, n, false), 0);
  cr_assert_eq(tsr_net_wait(net, 0), 0);

  /* The reference sees the same samples in the same order, in double. */
  double *x = malloc(sizeof(double) * (size_t)n * (size_t)inputs);
  float labels[64];
  for (int i = 0; i < n; i++) {
    labels[i] = ds.y[rows[i]];
    for (int k = 0; k < inputs; k++)
      x[i * inputs + k] = ds.x[rows[i] * inputs + k];
  }
  ref_t r = {spec, inputs, classes, n, x, labels, {0}};
  int np = tsr_net_n_params(net);
  cr_assert(np > 0);
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
  const double h = 1e-6;
  for (int p = 0; p < np; p++)
    for (int64_t k = 0; k < sizes[p]; k++) {
      double keep = r.params[p][k];
      r.params[p][k] = keep + h;
      double up = ref_loss(&r);
      r.params[p][k] = keep - h;
      double down = ref_loss(&r);
      r.params[p][k] = keep;
      check_close(p % 2 ? "db" : "dW", (int)k, grads[p][k], (up - down) / (2 * h));
    }
  /* The input gradient covers the first layer's backward pass (and a leading ReLU). */
  float *dx = malloc(sizeof(float) * (size_t)batch * (size_t)inputs);
  cr_assert_eq(tsr_net_input_grad_get(net, dx), 0);
  for (int k = 0; k < n * inputs; k++) {
    double keep = x[k];
    x[k] = keep + h;
    double up = ref_loss(&r);
    x[k] = keep - h;
    double down = ref_loss(&r);
    x[k] = keep;
    check_close("dX", k, dx[k], (up - down) / (2 * h));
  }
  for (int k = n * inputs; k < batch * inputs; k++)
    cr_assert_float_eq(dx[k], 0.0f, 0, "padding row gradient must be 0");
  for (int p = 0; p < np; p++)
    free(grads[p]), free(r.params[p]);
  free(dx), free(x), free(ds.x), free(ds.y);
  tsr_net_destroy(&net);
}

Test(grad, dense_softmax_xent_over_edge_tiles) {
  tsr_model_spec_t spec = {1, {{.kind = TSR_LAYER_DENSE, .units = 4}}};
  gradient_check(&spec, 7, 4, 5, 5, 2, 3);
}

Test(grad, standalone_relu_on_the_input) {
  tsr_model_spec_t spec = {
      2, {{.kind = TSR_LAYER_RELU, .units = 0}, {.kind = TSR_LAYER_DENSE, .units = 3}}};
  gradient_check(&spec, 6, 3, 4, 4, 3, 4);
}

Test(grad, mlp_with_fused_relu) {
  tsr_model_spec_t spec = {5,
                           {{.kind = TSR_LAYER_DENSE, .units = 6},
                            {.kind = TSR_LAYER_RELU, .units = 0},
                            {.kind = TSR_LAYER_DENSE, .units = 5},
                            {.kind = TSR_LAYER_RELU, .units = 0},
                            {.kind = TSR_LAYER_DENSE, .units = 3}}};
  gradient_check(&spec, 5, 3, 7, 7, 3, 4);
}

Test(grad, short_batch_averages_over_valid_rows_only) {
  tsr_model_spec_t spec = {3,
                           {{.kind = TSR_LAYER_DENSE, .units = 5},
                            {.kind = TSR_LAYER_RELU, .units = 0},
                            {.kind = TSR_LAYER_DENSE, .units = 3}}};
  gradient_check(&spec, 4, 3, 8, 5, 3, 2);
}
