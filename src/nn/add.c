/* Add layers: y = x0 + x1 + ... of inputs of one shape (a residual connection), with the add
 * type's registry descriptor (layers.h). Element-wise, so tiled like its inputs (which are
 * tiled alike, and spread alike under a grid): one task per tile for the first two inputs, an
 * accumulation per further input. Backward, every input's gradient is the output's. A ReLU
 * after it (a ResNet block's) is fused: the first task applies it with two inputs (a ReLU task
 * after the accumulations with more), and backward each input's gradient is dy where y is
 * positive, written by the task that copied dy before: the ReLU costs no pass of its own. */
#include <stdio.h>

#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

static int add_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                       const tsr_task_opts_t *o) {
  (void)net, (void)train;
  int n = l->lay->n_inputs;
  TSR_TRY(tsr__tiles_add(o, l->y, x[0], x[1], l->relu && n == 2));
  for (int k = 2; k < n; k++)
    TSR_TRY(tsr__tiles_axpby(o, 1.0f, x[k], 1.0f, l->y));
  if (l->relu && n > 2) TSR_TRY(tsr__tiles_relu_fwd(o, l->y, l->y));
  return 0;
}

static int add_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                        tsr_tiles_t *const *dx, const tsr_task_opts_t *o) {
  (void)net, (void)x;
  tsr_task_opts_t critical = tsr__net_critical(o);
  for (int k = 0; k < l->lay->n_inputs; k++)
    if (dx[k] && l->relu)
      TSR_TRY(tsr__tiles_relu_bwd(&critical, dx[k], l->dy, l->y));
    else if (dx[k])
      TSR_TRY(tsr__tiles_copy(&critical, dx[k], l->dy));
  return 0;
}

static const tsr_layer_ops_t add_ops = {"add", add_forward, add_backward};

static int add_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  (void)s;
  for (int k = 1; k < at->n_in; k++) {
    const tsr_conv_geom_t *a = &at->in[0], *b = &at->in[k];
    if (a->c != b->c || a->h != b->h || a->w != b->w)
      return tsr_error_set(at->err, TSR_ESHAPE,
                           "layer %d [%s] (add): its inputs %s (%dx%dx%d, h x w x c) and %s "
                           "(%dx%dx%d) differ in shape; an add sums inputs of one shape",
                           at->index, at->name, at->in_names[0], a->h, a->w, a->c, at->in_names[k],
                           b->h, b->w, b->c);
  }
  g->oc = g->c, g->oh = g->h, g->ow = g->w;
  return 0;
}

/* Per output tile (row 0's under a grid): the add, an accumulation per further input; backward a
 * copy per input whose gradient is computed. The chain: tile (0, 0)'s forward and one copy. */
static double add_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l, tsr_cost_sink_t *k,
                       double *bwd) {
  (void)lay;
  int mt = tsr__cost_ntiles(k->batch, k->mb), nb = l->out_nb < l->fout ? l->out_nb : l->fout;
  int nt = tsr__cost_ntiles(l->fout, nb);
  double chain = 0, back = 0;
  for (int i = 0; i < mt; i++)
    for (int j = 0; j < nt; j++) {
      if (!tsr__cost_row0(l->place, j, k->pr)) continue; /* row 0's tile columns */
      double tile = 4.0 * tsr__cost_tsize(k->batch, k->mb, i) * tsr__cost_tsize(l->fout, nb, j);
      double t = 0, b = 0;
      for (int in = 1; in < l->n_inputs; in++)
        t += k->task(k, 0, 1, 3 * tile);
      double before = k->work(k);
      for (int in = 0; in < l->n_inputs; in++)
        if (l->in[in].dx) b = k->task(k, 0, 1, 2 * tile);
      back += k->work(k) - before;
      if (i == 0 && j == 0) chain = t + b;
    }
  *bwd = back;
  return chain;
}

/* An add per further input and feature. */
static double add_flops(const tsr_layout_layer_t *l) {
  return (double)(l->n_inputs - 1) * l->fout;
}

static const tsr_layer_key_t add_keys[] = {
    {"activation", NULL, TSR_KEY_ACTIVATION, 0, 0, NULL},
    {0},
};

const tsr_layer_type_t tsr__add_type = {
    .kind = TSR_LAYER_ADD,
    .name = "add",
    .keys = add_keys,
    .min_inputs = 2,
    .max_inputs = TSR_MAX_INPUTS,
    .elementwise = true,
    .residual = true,
    .fuses_relu = true,
    .shape = add_shape,
    .cost = add_cost,
    .flops = add_flops,
    .ops = &add_ops,
};
