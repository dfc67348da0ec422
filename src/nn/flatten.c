/* Flatten: (h, w, c) -> (1, 1, h w c). Samples are already stored as rows of
 * h w c features, so no layer is built: only the shape the next layers see
 * changes (a dense layer after it reads the features, a convolution would
 * see h w c channels of a 1 x 1 image). */
#include "nn/layers.h"

static int flatten_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g,
                         const tsr_layer_site_t *at) {
  (void)s, (void)at;
  g->oc = g->c * g->h * g->w, g->oh = 1, g->ow = 1;
  return 0;
}

const tsr_layer_type_t tsr__flatten_type = {
    .kind = TSR_LAYER_FLATTEN,
    .name = "flatten",
    .elementwise = true,
    .shape = flatten_shape,
};
