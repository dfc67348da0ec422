/* Concat layers: inputs side by side along channels (channels-last samples of one h x w; for
 * 1 x 1 samples, along features), in the order named, with the concat type's registry
 * descriptor (layers.h). With one pixel per sample its output is cut in feature tiles as any
 * layer's and each input's columns are copied into it tile by tile; with several, inputs and
 * output hold whole samples and each batch-row tile is one task per input, or under --domain
 * rows the same bands of image rows, one task per band on the band's rank. Backward, each
 * input's gradient is its block of the output's. */
#include <stdio.h>

#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

static int concat_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                          const tsr_task_opts_t *o) {
  (void)net, (void)train;
  const tsr_layout_layer_t *ll = l->lay;
  int pixels = l->geom.oh * l->geom.ow;
  for (int k = 0, off = 0; k < ll->n_inputs; off += ll->in[k].shape.c, k++)
    TSR_TRY(tsr__tiles_channels_copy(o, l->y, l->geom.oc, off, x[k], ll->in[k].shape.c, 0, pixels,
                                     ll->in[k].shape.c));
  return 0;
}

static int concat_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                           tsr_tiles_t *const *dx, const tsr_task_opts_t *o) {
  (void)net, (void)x;
  const tsr_layout_layer_t *ll = l->lay;
  tsr_task_opts_t critical = tsr__net_critical(o);
  int pixels = l->geom.oh * l->geom.ow;
  for (int k = 0, off = 0; k < ll->n_inputs; off += ll->in[k].shape.c, k++)
    if (dx[k])
      TSR_TRY(tsr__tiles_channels_copy(&critical, dx[k], ll->in[k].shape.c, 0, l->dy, l->geom.oc,
                                       off, pixels, ll->in[k].shape.c));
  return 0;
}

static const tsr_layer_ops_t concat_ops = {"concat", concat_forward, concat_backward};

/* A 1 x 1 x f input is f channels of one pixel, so features concatenate as channels do. */
static int concat_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  (void)s;
  int c = 0;
  for (int k = 0; k < at->n_in; k++) {
    const tsr_conv_geom_t *a = &at->in[0], *b = &at->in[k];
    if (a->h != b->h || a->w != b->w)
      return tsr_error_set(at->err, TSR_ESHAPE,
                           "layer %d [%s] (concat): its inputs %s (%dx%dx%d, h x w x c) and %s "
                           "(%dx%dx%d) differ in h x w; a concat joins the channels of inputs of "
                           "one h x w (flatten both to join their features)",
                           at->index, at->name, at->in_names[0], a->h, a->w, a->c, at->in_names[k],
                           b->h, b->w, b->c);
    c += b->c;
  }
  g->oc = c, g->oh = g->h, g->ow = g->w;
  return 0;
}

/* Several pixels per sample interleave the inputs' channels: whole samples on both sides. */
static bool concat_whole(const tsr_conv_geom_t *g) {
  return g->h * g->w > 1;
}

/* Per batch-row tile and input, a copy of its block forward and, when its gradient is
 * computed, back (a task per pair of overlapping tiles is counted as one of their bytes); over
 * bands of image rows, row 0's band. */
static double concat_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l,
                          tsr_cost_sink_t *k, double *bwd) {
  int mt = tsr__cost_ntiles(k->batch, k->mb);
  double pixels = tsr__cost_rows_share(lay, l) * l->geom.oh * l->geom.ow;
  double chain = 0, back = 0;
  for (int i = 0; i < mt; i++) {
    double rows = tsr__cost_tsize(k->batch, k->mb, i), t = 0, b = 0;
    for (int in = 0; in < l->n_inputs; in++)
      t = k->task(k, 0, 1, 4.0 * 2 * rows * pixels * l->in[in].shape.c);
    double before = k->work(k);
    for (int in = 0; in < l->n_inputs; in++)
      if (l->in[in].dx) b = k->task(k, 0, 1, 4.0 * 2 * rows * pixels * l->in[in].shape.c);
    back += k->work(k) - before;
    if (i == 0) chain = t + b;
  }
  *bwd = back;
  return chain;
}

const tsr_layer_type_t tsr__concat_type = {
    .kind = TSR_LAYER_CONCAT,
    .name = "concat",
    .min_inputs = 2,
    .max_inputs = TSR_MAX_INPUTS,
    .shape = concat_shape,
    .whole = concat_whole,
    .joins_bands = true,
    .cost = concat_cost,
    .ops = &concat_ops,
};
