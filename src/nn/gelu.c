/* GELU layers, the tanh approximation (GPT-2's; PyTorch's nn.GELU(approximate='tanh')):
 * y = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) element by element, any tiling (the
 * tiling of its input passes through it). The backward reads the forward's input. With the gelu
 * type's registry descriptor (layers.h). */
#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

static int gelu_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                        const tsr_task_opts_t *o) {
  (void)net, (void)train;
  return tsr__tiles_gelu_fwd(o, l->y, x[0]);
}

static int gelu_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x,
                         tsr_tiles_t *const *dx, const tsr_task_opts_t *o) {
  (void)net;
  if (!dx[0]) return 0;
  tsr_task_opts_t critical = tsr__net_critical(o);
  return tsr__tiles_gelu_bwd(&critical, dx[0], l->dy, x[0]);
}

static const tsr_layer_ops_t gelu_ops = {"gelu", gelu_forward, gelu_backward};

static int gelu_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  (void)s, (void)at;
  g->oc = g->c, g->oh = g->h, g->ow = g->w;
  return 0;
}

/* Per value: the cube (2), the polynomial (2), the tanh, the 1 +, the halving and the product. */
static double gelu_flops(const tsr_layout_layer_t *l) {
  return 8.0 * l->fout;
}

const tsr_layer_type_t tsr__gelu_type = {
    .kind = TSR_LAYER_GELU,
    .name = "gelu",
    .no_grid = true,
    .elementwise = true,
    .shape = gelu_shape,
    .cost = tsr__cost_pass,
    .flops = gelu_flops,
    .ops = &gelu_ops,
};
