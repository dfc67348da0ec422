/* Gradient averaging (gradients.h): the gradient hook and its end (--clip-grad's norm over the
 * averaged gradient), the updated optimizer state shared for checkpoints, and the way from
 * gradient averaging to local SGD (post-local). Because it works tile by tile as the backward
 * pass hands over each layer, a layer's averaging overlaps the backward pass of the layers
 * below. */
#include <stdlib.h>

#include "parallel/buckets.h"
#include "parallel/collective.h"
#include "parallel/gradients.h"
#include "parallel/home.h"
#include "runtime/progress.h"
#include "tile/ops.h"
#include "try.h"

struct tsr__grad {
  tsr_grad_hook_t previous; /* the net's hook this one replaced, restored at the end */
  /* Under --clip-grad: [size] replica views of each rank's part of the sum of squares (the
   * net's grad_sq), and of each rank's total, this rank's own (total, local); NULL: none. */
  tsr_tiles_t **sq, **totals, *total;
};

/* batch with buckets, once bucket b's sums are in acc: on the home each chunk updated and the
 * updated band packed, then sent back in one message (tsr__bucket_finish). */
static int update_packed(tsr_replicas_t *r, bucket_t *b, int t, const tsr_task_opts_t *local,
                         void *ctx) {
  (void)ctx;
  rparam_t *rp = &r->params[b->param[t]];
  int i, r0;
  tsr__chunk_tile(rp, b->I[t], &i, &r0);
  TSR_TRY(tsr__home_update(r, rp, r->grad->total, local, i, b->j[t], b->I[t], r0));
  return tsr__bucket_pack_result(local, b, t, rp, rp->p->w, i, r0);
}

/* Under --clip-grad, on a full bucket's home: chunk t's squares added to this rank's part of the
 * norm (the update waits for grad_end). */
static int squares(tsr_replicas_t *r, bucket_t *b, int t, const tsr_task_opts_t *local, void *ctx) {
  (void)ctx;
  rparam_t *bp = &r->params[b->param[t]];
  return tsr__tile_sumsq_add(local, bp->acc, b->I[t], b->j[t], r->net->grad_sq);
}

/* batch: the optimizer on chunk (I, j)'s home (update_home) and the updated band sent to every
 * other rank. */
static int update_chunk(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer, int i, int j,
                        int I, int r0) {
  tsr_param_t *p = rp->p;
  tsr_task_opts_t local = tsr__with_mpi(layer, false);
  int home = tsr__chunk_home(I, j, rp);
  bool at_home = r->m.rank == home;
  if (at_home) TSR_TRY(tsr__home_update(r, rp, r->grad->total, &local, i, j, I, r0));
  /* A band travels from a chunk-tiled copy; a whole tile straight from the home's. */
  if (rp->k > 1 && at_home) TSR_TRY(tsr__tile_band_get(&local, rp->updated, I, j, p->w, i, j, r0));
  return rp->k > 1 ? tsr__gather_chunk(layer, r, rp, NULL, rp->updated, I, j, rp->w, false, I, j)
                   : tsr__gather_chunk(layer, r, rp, NULL, rp->w[home], i, j, rp->w, false, I, j);
}

/* Calls fn for each chunk (I, j) of rp: rows r0 .. of tile (i, j). */
static int each_chunk(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer,
                      int (*fn)(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer,
                                int i, int j, int I, int r0)) {
  for (int i = 0; i < tsr_tiles_mt(rp->p->w); i++)
    for (int j = 0; j < rp->nt; j++) {
      int I0, I1;
      tsr__chunks_of_tile(rp, i, &I0, &I1);
      for (int I = I0; I < I1; I++)
        TSR_TRY(fn(r, rp, layer, i, j, I, (I - I0) * rp->cr));
    }
  return 0;
}

/* The reduce-scatter of chunk (I, j)'s gradient; then its update, or under --clip-grad its
 * squares added to this rank's part of the norm (the update waits for grad_end). */
static int reduce_and_update(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer, int i,
                             int j, int I, int r0) {
  TSR_TRY(tsr__reduce_chunk(layer, r, rp, NULL, rp->p->g, rp->g, I, j));
  if (!r->grad->total) return update_chunk(r, rp, layer, i, j, I, r0);
  tsr_task_opts_t local = tsr__with_mpi(layer, false);
  return r->m.rank == tsr__chunk_home(I, j, rp)
             ? tsr__tile_sumsq_add(&local, rp->acc, I, j, r->net->grad_sq)
             : 0;
}

/* batch with buckets: chunk (I, j)'s gradient handed over (tsr__bucket_offer); a full bucket is
 * updated on its home, or under --clip-grad its squares added to the norm. */
static int pack_and_update(tsr_replicas_t *r, rparam_t *rp, const tsr_task_opts_t *layer, int i,
                           int j, int I, int r0) {
  (void)i, (void)r0;
  tsr__bucket_pass_t p = r->grad->total
                             ? (tsr__bucket_pass_t){layer, -1, squares, NULL, false, 0, false}
                             : (tsr__bucket_pass_t){layer, -1, update_packed, NULL, true, 0, false};
  return tsr__bucket_offer(r, rp, I, j, &p);
}

/* batch: replaces the optimizer step of a parameter whose gradient was just
 * submitted: per chunk, the reduce-scatter of the gradient, the optimizer on
 * the chunk's home and the updated band sent to every other rank (update_chunk; under
 * --clip-grad in grad_end, once the norm is known). */
static int grad_hook(tsr_net_t *net, tsr_param_t *p, const tsr_task_opts_t *layer, void *ctx) {
  (void)net;
  tsr_replicas_t *r = ctx;
  rparam_t *rp = NULL;
  for (int k = 0; k < r->nparams && !rp; k++)
    if (r->params[k].p == p) rp = &r->params[k];
  if (!rp) return TSR_EINVAL;
  double t0 = tsr__now();
  int rc = each_chunk(r, rp, layer, tsr__buckets_on(r) ? pack_and_update : reduce_and_update);
  r->st.seconds += tsr__now() - t0;
  return rc;
}

/* batch, once every gradient is handed over: with buckets, every bucket went (a parameter
 * without a gradient would leave its bucket waiting: an error, not a hang); under --clip-grad,
 * the sum of squares of the averaged gradient, each rank's part (its chunks') added on every
 * rank in rank order (all-reduce of one float), then each chunk clipped and updated on its home,
 * in backward order (with buckets bucket by bucket). */
static int grad_end(tsr_net_t *net, const tsr_task_opts_t *layer, void *ctx) {
  (void)net;
  tsr_replicas_t *r = ctx;
  tsr__grad_t *g = r->grad;
  tsr_task_opts_t mpi = tsr__with_mpi(layer, true);
  double t0 = tsr__now();
  int rc = 0;
  if (!tsr__buckets_idle(r)) return TSR_EINVAL;
  for (int q = 0; q < r->m.size && rc == 0 && g->total; q++)
    for (int t = 0; t < r->m.size && rc == 0; t++) {
      if (r->m.rank != q && r->m.rank != t) continue;
      rc = tsr__tile_axpby(&mpi, 1.0f, g->sq[t], t == 0 ? 0.0f : 1.0f, g->totals[q], 0, 0, false);
      if (t == q) continue;
      if (r->m.rank == q)
        r->st.bytes_received += sizeof(float), r->st.messages_received++;
      else
        r->st.bytes_sent += sizeof(float), r->st.messages_sent++;
    }
  tsr__bucket_pass_t p = {layer, -1, update_packed, NULL, true, 0, false};
  if (rc == 0 && g->total) rc = tsr__buckets_finish_all(r, &p);
  for (int k = r->nparams - 1; k >= 0 && rc == 0 && g->total && !tsr__buckets_on(r); k--)
    rc = each_chunk(r, &r->params[k], layer, update_chunk);
  r->st.seconds += tsr__now() - t0;
  return rc;
}

int tsr__gradients_start(tsr_replicas_t *r) {
  tsr__grad_t *g = calloc(1, sizeof *g);
  if (!g) return TSR_ENOMEM;
  r->grad = g;
  if (r->net->grad_sq) { /* --clip-grad: the views grad_end all-reduces the sum of squares with */
    TSR_TRY(tsr__net_tiles(&g->total, 1, 1, 1, 1));
    if (!(g->sq = tsr__views_of(r, r->net->grad_sq))) return TSR_ENOMEM;
    if (!(g->totals = tsr__views_of(r, g->total))) return TSR_ENOMEM;
  }
  g->previous = tsr__net_set_grad_hook(
      r->net, (tsr_grad_hook_t){grad_hook, r, g->total || tsr__buckets_on(r) ? grad_end : NULL});
  return 0;
}

void tsr__gradients_stop(tsr_replicas_t *r) {
  tsr__grad_t *g = r->grad;
  if (!g) return;
  if (g->previous.fn) tsr__net_set_grad_hook(r->net, g->previous);
  tsr__views_destroy(r, &g->sq), tsr__views_destroy(r, &g->totals);
  tsr_tiles_destroy(&g->total);
  free(g);
  r->grad = NULL;
}

int tsr__replicas_share_state(tsr_replicas_t *r) {
  if (!r->batch) return 0;
  tsr_task_opts_t o = tsr__layer_one_opts(r), local = tsr__with_mpi(&o, false);
  int rc = 0;
  for (int p = 0; p < r->nparams && rc == 0; p++) {
    rparam_t *rp = &r->params[p];
    for (int s = 0; s < rp->nstate && rc == 0; s++) {
      tsr_tiles_t *own = tsr__optim_state(r->net->optim, rp->p->index, s);
      for (int I = 0; I < rp->cmt && rc == 0; I++)
        for (int j = 0; j < rp->nt && rc == 0; j++) {
          int i, r0, home = tsr__chunk_home(I, j, rp);
          tsr__chunk_tile(rp, I, &i, &r0);
          /* A band travels from a chunk-tiled copy; a whole tile straight from the home's. */
          if (rp->k > 1 && r->m.rank == home)
            rc = tsr__tile_band_get(&local, rp->updated, I, j, own, i, j, r0);
          if (rc == 0)
            rc = rp->k > 1
                     ? tsr__gather_chunk(&o, r, rp, NULL, rp->updated, I, j, rp->s[s], false, I, j)
                     : tsr__gather_chunk(&o, r, rp, NULL, rp->s[s][home], i, j, rp->s[s], false, I,
                                         j);
        }
    }
  }
  return rc == 0 ? tsr__progress_wait_all() : rc;
}

int tsr__replicas_go_local(tsr_replicas_t *r, bool share) {
  if (!r->batch) return 0;
  /* Local SGD from here: every rank needs the whole optimizer state (sharded until now) and
   * updates its own weights again. */
  int rc = share ? tsr__replicas_share_state(r) : 0;
  tsr__gradients_stop(r);
  r->batch = false, r->agreed = true;
  tsr__home_clear(r);
  if (rc == 0) rc = tsr__home_anchors(r);
  return rc;
}

bool tsr__replicas_averaging_gradients(const tsr_replicas_t *r) {
  return r->batch;
}
