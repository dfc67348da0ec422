/* A network's layers and tiles as tsr_net_create would build them, without
 * building anything: for the planner (src/plan/), which counts tasks and
 * transfers tile by tile and must see the same tiles a run uses. */
#ifndef TSR_NN_LAYOUT_H
#define TSR_NN_LAYOUT_H

#include <stdbool.h>

#include "kernels/kernels.h"
#include "tessera/net.h"

typedef struct {
  tsr_layer_kind_t kind; /* dense, conv, maxpool, avgpool, dropout, relu (one not fused) */
  int fin, fout;         /* features of a sample in and out */
  int in_nb, out_nb;     /* column tile of the input and of the output (whole samples: fin, fout) */
  bool relu;             /* a following ReLU is fused into it */
  bool whole_samples;    /* works on whole samples (conv, pooling): one task per batch-row tile */
  bool has_dx;           /* its input gradient is computed (every layer but the first) */
  tsr_conv_geom_t geom;  /* conv and pooling: the window; dense: c h w in, oc out */
} tsr_layout_layer_t;

typedef struct {
  int mb, nb; /* the batch-row and feature tiles chosen for `workers` workers */
  int n_layers;
  tsr_layout_layer_t layers[TSR_MAX_LAYERS];
} tsr_net_layout_t;

/* The layers tsr_net_create(spec, inputs, classes, opts) would build in a
 * process with `workers` CPU workers, with the same shape checks and messages. */
int tsr__net_layout(tsr_net_layout_t *out, const tsr_model_spec_t *spec, int inputs, int classes,
                    const tsr_net_opts_t *opts, int workers, tsr_errbuf_t *err);

#endif
