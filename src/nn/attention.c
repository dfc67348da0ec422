/* Causal multi-head self-attention layers: a sequence of T positions (a sample T x 1 x 3D, or
 * any h x w x 3D taken as T = h w positions in row-major order) of [q | k | v] per position ->
 * T x 1 x D, per head softmax(q k^T / sqrt(D / H) + causal mask) v (GPT-2's split of c_attn; the
 * projections before and after are kernel-1 conv layers). No parameters. Whole samples, one
 * task per batch-row tile and pass with all heads inside (src/tile/attention.c); the kernel
 * (src/kernels/attention.c) tiles each sequence FlashAttention's way, so no task holds more
 * than one block of scores, and keeps the log-sum-exp of every row, head and position in the
 * layer's scratch for the backward pass. With the attention type's registry descriptor
 * (layers.h). */
#include <stdio.h>

#include "nn/layers.h"
#include "tile/ops.h"
#include "try.h"

/* The kernel's view of a layer laid out as l: the heads ride in the window's kh (attn_shape),
 * since the layout and cost hooks see no spec. */
static tsr_attn_geom_t attn_geom(const tsr_conv_geom_t *g) {
  return (tsr_attn_geom_t){.t = g->h * g->w, .d = g->oc, .heads = g->kh};
}

/* The input's c must be 3D with D divisible by heads; the output keeps the positions, D
 * channels each. g->kh = heads (attn_geom). */
static int attn_shape(const tsr_layer_spec_t *s, tsr_conv_geom_t *g, const tsr_layer_site_t *at) {
  if (s->heads <= 0)
    return tsr_error_set(at->err, TSR_EINVAL,
                         "layer %d (attention): needs heads >= 1 (got %d); set heads = H, a "
                         "divisor of the width D",
                         at->index, s->heads);
  if (g->c % 3 != 0)
    return tsr_error_set(at->err, TSR_ESHAPE,
                         "layer %d (attention, %d heads): its input %dx%dx%d (h x w x c) must "
                         "hold [q | k | v] per position, 3 D channels, but %d is not a multiple "
                         "of 3; make the layer before it a conv with filters = 3 D, kernel = 1",
                         at->index, s->heads, at->shown.h, at->shown.w, at->shown.c, g->c);
  int d = g->c / 3;
  if (d % s->heads != 0)
    return tsr_error_set(at->err, TSR_ESHAPE,
                         "layer %d (attention): the width D = %d (its input's %d channels are 3 "
                         "D) is not divisible by heads = %d; choose heads dividing %d, or a "
                         "width that is a multiple of %d",
                         at->index, d, g->c, s->heads, d, s->heads);
  g->oc = d, g->oh = g->h, g->ow = g->w;
  g->kh = s->heads, g->kw = 1, g->sh = g->sw = 1, g->ph = g->pw = 0;
  return 0;
}

/* Scratch: the log-sum-exp (batch, H T), its rows tiled as the batch's; workspace: one task's
 * block scores (tsr__k_attention_work, whatever the tile's rows). */
static void attn_layout(tsr_net_layout_t *lay, tsr_layout_layer_t *l) {
  tsr_attn_geom_t g = attn_geom(&l->geom);
  l->nscratch = 1;
  l->scratch[0] =
      (tsr_layout_matrix_t){lay->batch, (int64_t)g.heads * g.t, lay->mb, g.heads * g.t, false};
  l->workspace = (int64_t)tsr__k_attention_work(&g);
}

/* Per batch-row tile one forward task (the block products at the rate of a block x block GEMM
 * of dh inner; it reads qkv, writes y and the lse) and, when the input gradient is computed,
 * one backward task (FlashAttention-2's: the scores recomputed, and four more products, about
 * 2.5 times the forward's flops; it reads qkv, y, dy and the lse and writes dqkv). The chain:
 * tile 0's forward, then its backward. */
static double attn_cost(const tsr_net_layout_t *lay, const tsr_layout_layer_t *l,
                        tsr_cost_sink_t *c, double *bwd) {
  (void)lay;
  tsr_attn_geom_t g = attn_geom(&l->geom);
  int mb = c->mb, mt = tsr__cost_ntiles(c->batch, mb), dh = g.d / g.heads;
  int blk = g.t < TSR_ATTN_BLOCK ? g.t : TSR_ATTN_BLOCK;
  double per_sample = tsr__k_attention_flops(&g), lse = (double)g.heads * g.t;
  double rate = c->gemm_rate(c, false, true, blk, blk, dh);
  double chain = 0, before = c->work(c);
  for (int i = 0; i < mt; i++) {
    int m = tsr__cost_tsize(c->batch, mb, i);
    double t = c->task(c, per_sample * m, rate, 4.0 * m * ((double)l->fin + l->fout + lse));
    if (i == 0) chain = t;
  }
  before = c->work(c);
  for (int i = 0; l->has_dx && i < mt; i++) {
    int m = tsr__cost_tsize(c->batch, mb, i);
    double bytes = 4.0 * m * (2.0 * l->fin + 2.0 * l->fout + lse);
    double t = c->task(c, 2.5 * per_sample * m, rate, bytes);
    if (i == 0) chain += t;
  }
  *bwd = c->work(c) - before;
  return chain;
}

static double attn_flops(const tsr_layout_layer_t *l) {
  tsr_attn_geom_t g = attn_geom(&l->geom);
  return tsr__k_attention_flops(&g);
}

static int attn_forward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *x, bool train,
                        const tsr_task_opts_t *o) {
  (void)net, (void)train;
  tsr_attn_geom_t g = attn_geom(&l->geom);
  return tsr__tiles_attention_fwd(o, l->y, l->scratch[0], x[0], &g);
}

/* Only the input gradient (no parameters), at the highest priority. */
static int attn_backward(tsr_net_t *net, tsr_layer_t *l, const tsr_tiles_t *const *xs,
                         tsr_tiles_t *const *dxs, const tsr_task_opts_t *o) {
  (void)net;
  if (!dxs[0]) return 0;
  tsr_attn_geom_t g = attn_geom(&l->geom);
  tsr_task_opts_t critical = tsr__net_critical(o);
  return tsr__tiles_attention_bwd(&critical, dxs[0], l->dy, xs[0], l->y, l->scratch[0], &g);
}

static const tsr_layer_ops_t attn_ops = {"attention", attn_forward, attn_backward};

/* "attention/h4". */
static int attn_describe(const tsr_layer_spec_t *s, char *buf, size_t size) {
  return snprintf(buf, size, "attention/h%d", s->heads);
}

static const tsr_layer_key_t attn_keys[] = {
    {"heads", NULL, TSR_KEY_COUNT, TSR_SPEC_FIELD(heads), 0,
     "is an attention layer without 'heads'; add heads = H (H must divide the width D)"},
    {0},
};

const tsr_layer_type_t tsr__attention_type = {
    .kind = TSR_LAYER_ATTENTION,
    .name = "attention",
    .no_grid = true,
    .keys = attn_keys,
    .whole_samples = true,
    .shape = attn_shape,
    .layout = attn_layout,
    .cost = attn_cost,
    .flops = attn_flops,
    .ops = &attn_ops,
    .describe = attn_describe,
};
