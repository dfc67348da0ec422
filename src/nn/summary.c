/* A model's layer table (tsr_model_summarize, net.h): the layout's layers with their output
 * shapes, parameter counts and per-sample forward FLOPs, each type counting its own (the flops
 * hook of its registry entry, layers.h). Nothing is built and no runtime is needed. */
#include <stdio.h>
#include <stdlib.h>

#include "nn/layers.h"
#include "nn/layout.h"
#include "tessera/net.h"
#include "try.h"

void tsr_model_summary_fini(tsr_model_summary_t *s) {
  free(s->layers);
  *s = (tsr_model_summary_t){0};
}

int tsr_model_summarize(tsr_model_summary_t *out, const tsr_model_spec_t *spec, int inputs,
                        int classes, const tsr_net_opts_t *opts, tsr_errbuf_t *err) {
  *out = (tsr_model_summary_t){0};
  tsr_net_layout_t lay;
  TSR_TRY(tsr__net_layout(&lay, spec, inputs, classes, opts, 1, err));
  out->layers = calloc((size_t)(lay.n_layers > 0 ? lay.n_layers : 1), sizeof *out->layers);
  if (!out->layers) {
    tsr__net_layout_fini(&lay);
    return tsr_error_set(err, TSR_ENOMEM, "summary: out of memory for %d layers", lay.n_layers);
  }
  out->n_layers = lay.n_layers;
  out->in_c = lay.in_geom.c, out->in_h = lay.in_geom.h, out->in_w = lay.in_geom.w;
  const tsr_layer_type_t *relu = tsr__layer_type(TSR_LAYER_RELU);
  for (int i = 0; i < lay.n_layers; i++) {
    const tsr_layout_layer_t *l = &lay.layers[i];
    tsr_layer_summary_t *r = &out->layers[i];
    snprintf(r->name, sizeof r->name, "%s", l->name);
    snprintf(r->type, sizeof r->type, "%s%s", l->type->name, l->relu ? "+relu" : "");
    r->c = l->geom.oc, r->h = l->geom.oh, r->w = l->geom.ow;
    for (int p = 0; p < l->nparams; p++)
      r->params += l->params[p].rows * l->params[p].cols;
    r->flops = l->type->flops ? l->type->flops(l) : 0;
    if (l->relu && relu->flops) r->flops += relu->flops(l); /* the fused ReLU's, on its output */
    r->act_bytes = 4 * (int64_t)l->fout;
    out->params += r->params, out->flops += r->flops, out->act_bytes += r->act_bytes;
  }
  tsr__net_layout_fini(&lay);
  return 0;
}
