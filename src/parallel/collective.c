/* The collective of the averaging engine (collective.h): chunk homes as rank_of functions, the
 * scopes that average, the replica views, and the reduce-scatter and all-gather of one chunk,
 * flat or through the nodes.
 *
 * Flat: each rank copies its band of a chunk into its staging matrix (chunk-tiled, local)
 * where the band is smaller than its tile, the home accumulates every rank's copy into acc
 * (StarPU-MPI sends them), and every rank's matrix gets the result back band by band. A rank
 * then sends and receives about 2 (P - 1) / P |X| per averaging, the ring's optimum.
 *
 * Two levels (--allreduce, --node-size): the reduce-scatter of chunk (I, j), rows r0 .. of
 * tile (i, j), over every rank (x: this rank's matrix, xs: every rank's views of it). At the
 * tile's first chunk each node's ranks add their weighted copies of the whole tile into the
 * node's partial on the tile's local home there, ntile[n] (i, j): one message per tile and
 * rank. The local home then cuts the chunk's band out of it (nband[n] (I, j)) and the home adds
 * the nodes' bands into acc (I, j); a node of one rank adds its own weighted band straight into
 * acc. Deterministic mode: s_n = w_a x_a, then s_n = w_q x_q + s_n for node n's ranks in rank
 * order; acc = s_0, then acc = s_n + acc for n = 1 .. N-1 (nodes numbered by their lowest rank).
 * That is flat's float32 sum in rank order, task for task, when every node holds one rank, and
 * bit for bit when one node holds them all. The result returns the same way. */
#include <stdlib.h>

#include "parallel/collective.h"
#include "tile/ops.h"
#include "tile/tiles_impl.h"
#include "try.h"

int tsr__chunk_home(int i, int j, void *ctx) {
  const rparam_t *rp = ctx;
  int home = rp->chome[i * rp->nt + j];
  if (rp->r->m.grid_rows == 1) return home;
  const tsr__group_t *g = tsr__scope(rp->r, rp, NULL, j);
  return g->ranks[home % g->n];
}

int tsr__group_chunk_home(int i, int j, void *ctx) {
  const tsr__group_home_t *h = ctx;
  return tsr__home_in(h->g, h->rp, i, j);
}

int tsr__node_chunk_home(int i, int j, void *ctx) {
  const tsr__group_home_t *h = ctx;
  return h->g->ranks[h->rp->local[i * h->rp->nt + j] % h->g->n];
}

int tsr__node_tile_home(int i, int j, void *ctx) {
  const tsr__group_home_t *h = ctx;
  return tsr__node_chunk_home(i * h->rp->k, j, ctx);
}

const tsr__group_t *tsr__scope(const tsr_replicas_t *r, const rparam_t *rp, const tsr__scope_t *sc,
                               int j) {
  if (r->m.grid_rows == 1) return sc ? sc->group : &r->m.all;
  int row = tsr_tiles_rank_of(rp->p->w, 0, j) % r->m.grid_rows;
  /* hier under a grid: this rank's group holds its row's ranks of the group's columns */
  if (sc) return row == r->m.rank % r->m.grid_rows ? sc->group : NULL;
  return &r->m.rows[row];
}

int tsr__home_in(const tsr__group_t *g, const rparam_t *rp, int I, int j) {
  return g->ranks[rp->chome[I * rp->nt + j] % g->n];
}

int tsr__local_home(const rparam_t *rp, int node, int I, int j) {
  return tsr__node_chunk_home(I, j, &rp->nctx[node]);
}

tsr_tiles_t *tsr__acc(const rparam_t *rp, const tsr__scope_t *sc) {
  return sc ? sc->acc[rp->index] : rp->acc;
}

uint64_t tsr__chunk_bytes(const rparam_t *rp, int I, int j) {
  return (uint64_t)tsr_tiles_tile_rows(rp->acc, I) * (uint64_t)tsr_tiles_tile_cols(rp->acc, j) *
         sizeof(float);
}

tsr_tiles_t *tsr__set_of(const tsr_replicas_t *r, rparam_t *rp, int s) {
  return s == 0 ? rp->p->w : tsr__optim_state(r->net->optim, rp->p->index, s - 1);
}

tsr_tiles_t **tsr__set_views(rparam_t *rp, int s) {
  return s == 0 ? rp->w : rp->s[s - 1];
}

tsr_tiles_t **tsr__views_of(tsr_replicas_t *r, tsr_tiles_t *base) {
  tsr_tiles_t **v = calloc((size_t)r->m.size, sizeof *v);
  for (int q = 0; v && q < r->m.size; q++)
    if (tsr__tiles_replica(&v[q], base, q)) {
      while (q-- > 0)
        tsr_tiles_destroy(&v[q]);
      free(v);
      return NULL;
    }
  return v;
}

void tsr__views_destroy(tsr_replicas_t *r, tsr_tiles_t ***v) {
  for (int q = 0; *v && q < r->m.size; q++)
    tsr_tiles_destroy(&(*v)[q]);
  free(*v), *v = NULL;
}

int tsr__sum_on_home(const tsr_task_opts_t *o, tsr_replicas_t *r, int home, int n, const int *ranks,
                     const float *w, tsr_tiles_t **xs, tsr_tiles_t *dst, int i, int j,
                     uint64_t bytes) {
  tsr_task_opts_t local = tsr__with_mpi(o, false), mpi = tsr__with_mpi(o, true);
  bool det = r->sync.deterministic, at_home = r->m.rank == home, in = false;
  if (!det && at_home) TSR_TRY(tsr__tile_fill(&local, dst, i, j, 0.0f));
  for (int t = 0; t < n; t++) {
    int q = ranks[t];
    in = in || q == r->m.rank;
    if (at_home || q == r->m.rank)
      TSR_TRY(tsr__tile_axpby(&mpi, w ? w[t] : (float)r->weights[q], xs[q],
                              det && t == 0 ? 0.0f : 1.0f, dst, i, j, !det));
  }
  if (at_home)
    r->st.bytes_received += bytes * (uint64_t)(n - 1), r->st.messages_received += n - 1;
  else if (in)
    r->st.bytes_sent += bytes, r->st.messages_sent++;
  return 0;
}

int tsr__copy_from_home(const tsr_task_opts_t *o, tsr_replicas_t *r, int home, int n,
                        const int *ranks, const tsr_tiles_t *src, tsr_tiles_t **ys, int i, int j,
                        uint64_t bytes) {
  tsr_task_opts_t mpi = tsr__with_mpi(o, true);
  bool at_home = r->m.rank == home, in = false;
  for (int t = 0; t < n; t++) {
    int q = ranks[t];
    in = in || q == r->m.rank;
    if (q != home && (at_home || q == r->m.rank)) TSR_TRY(tsr__tile_copy(&mpi, ys[q], src, i, j));
  }
  if (at_home)
    r->st.bytes_sent += bytes * (uint64_t)(n - 1), r->st.messages_sent += n - 1;
  else if (in)
    r->st.bytes_received += bytes, r->st.messages_received++;
  return 0;
}

int tsr__node_sum_tile(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, tsr_tiles_t **xs,
                       int i, int j, int lh) {
  const tsr__group_t *node = &r->m.nodes[r->m.my_node];
  tsr_tiles_t *part = rp->ntile[r->m.my_node];
  uint64_t tile = (uint64_t)tsr_tiles_tile_rows(part, i) * (uint64_t)tsr_tiles_tile_cols(part, j) *
                  sizeof(float);
  return tsr__sum_on_home(o, r, lh, node->n, node->ranks, NULL, xs, part, i, j, tile);
}

int tsr__node_spread_tile(const tsr_task_opts_t *o, tsr_replicas_t *r, tsr_tiles_t **y, int i,
                          int j, int lh) {
  const tsr__group_t *node = &r->m.nodes[r->m.my_node];
  uint64_t tile = (uint64_t)tsr_tiles_tile_rows(y[r->m.rank], i) *
                  (uint64_t)tsr_tiles_tile_cols(y[r->m.rank], j) * sizeof(float);
  return tsr__copy_from_home(o, r, lh, node->n, node->ranks, y[lh], y, i, j, tile);
}

static int reduce_two_level(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp,
                            tsr_tiles_t *x, tsr_tiles_t **xs, int I, int j) {
  tsr_task_opts_t local = tsr__with_mpi(o, false), mpi = tsr__with_mpi(o, true);
  bool det = r->sync.deterministic;
  int i, r0, I0, I1, me = r->m.rank, home = tsr__chunk_home(I, j, rp);
  tsr__chunk_tile(rp, I, &i, &r0);
  tsr__chunks_of_tile(rp, i, &I0, &I1);
  int lh = tsr__local_home(rp, r->m.my_node, I, j);
  const tsr__group_t *node = &r->m.nodes[r->m.my_node];
  /* Where a lone rank's band of the chunk is (chunk-tiled: chunk (I, j) is tile (I, j)). */
  tsr_tiles_t **bands = rp->k > 1 ? rp->stages : xs;
  if (node->n == 1 && rp->k > 1) TSR_TRY(tsr__tile_band_get(&local, rp->stage, I, j, x, i, j, r0));
  if (node->n > 1 && I == I0) TSR_TRY(tsr__node_sum_tile(o, r, rp, xs, i, j, lh));
  if (node->n > 1 && me == lh)
    TSR_TRY(tsr__tile_band_get(&local, rp->nband[r->m.my_node], I, j, rp->ntile[r->m.my_node], i, j,
                               r0));
  if (!det && me == home) TSR_TRY(tsr__tile_fill(&local, rp->acc, I, j, 0.0f));
  for (int n = 0; n < r->m.nnodes; n++) {
    if (me != home && (n != r->m.my_node || me != lh)) continue;
    const tsr__group_t *g = &r->m.nodes[n];
    float beta = det && n == 0 ? 0.0f : 1.0f;
    if (g->n == 1)
      TSR_TRY(tsr__tile_axpby(&mpi, (float)r->weights[g->ranks[0]], bands[g->ranks[0]], beta,
                              rp->acc, I, j, !det));
    else
      TSR_TRY(tsr__tile_axpby(&mpi, 1.0f, rp->nband[n], beta, rp->acc, I, j, !det));
  }
  uint64_t bytes = tsr__chunk_bytes(rp, I, j);
  if (me == home)
    r->st.bytes_received += bytes * (uint64_t)(r->m.nnodes - 1),
        r->st.messages_received += r->m.nnodes - 1;
  else if (me == lh)
    r->st.bytes_sent += bytes, r->st.messages_sent++;
  return 0;
}

/* Two levels: the all-gather of chunk (I, j), rows r0 .. of tile (i, j): tile (si, sj) of src,
 * on the chunk's home, goes to the tile's local home in every other node (nband[n] (I, j); a
 * lone rank's y straight away) and into its y there; the home's own y too when with_home (in
 * the home's node the home is the tile's local home). At the tile's last chunk each local home
 * sends the whole tile of its y to its node's other ranks: one message per tile and rank. */
static int gather_two_level(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp,
                            const tsr_tiles_t *src, int si, int sj, tsr_tiles_t **y, bool with_home,
                            int I, int j) {
  tsr_task_opts_t local = tsr__with_mpi(o, false), mpi = tsr__with_mpi(o, true);
  int i, r0, I0, I1, me = r->m.rank, home = tsr__chunk_home(I, j, rp);
  tsr__chunk_tile(rp, I, &i, &r0);
  tsr__chunks_of_tile(rp, i, &I0, &I1);
  int hn = r->m.node_of[home], lh = tsr__local_home(rp, r->m.my_node, I, j);
  const tsr__group_t *node = &r->m.nodes[r->m.my_node];
  for (int n = 0; n < r->m.nnodes; n++) {
    if (n == hn) continue;
    int to = tsr__local_home(rp, n, I, j);
    if (me != home && me != to) continue;
    if (r->m.nodes[n].n == 1) /* a node of one rank: straight into its y */
      TSR_TRY(tsr__tile_band_put(&mpi, y[to], i, j, r0, src, si, sj));
    else
      TSR_TRY(tsr__tile_band_put(&mpi, rp->nband[n], I, j, 0, src, si, sj));
  }
  if (me == home && with_home) TSR_TRY(tsr__tile_band_put(&local, y[me], i, j, r0, src, si, sj));
  if (me == lh && r->m.my_node != hn && node->n > 1)
    TSR_TRY(tsr__tile_band_put(&local, y[me], i, j, r0, rp->nband[r->m.my_node], I, j));
  uint64_t bytes = tsr__chunk_bytes(rp, I, j);
  if (me == home)
    r->st.bytes_sent += bytes * (uint64_t)(r->m.nnodes - 1), r->st.messages_sent += r->m.nnodes - 1;
  else if (me == lh)
    r->st.bytes_received += bytes, r->st.messages_received++;
  if (I != I1 - 1 || node->n == 1) return 0;
  return tsr__node_spread_tile(o, r, y, i, j, lh);
}

int tsr__reduce_chunk(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp,
                      const tsr__scope_t *sc, tsr_tiles_t *x, tsr_tiles_t **xs, int I, int j) {
  tsr_task_opts_t local = tsr__with_mpi(o, false);
  const tsr__group_t *g = tsr__scope(r, rp, sc, j);
  if (!g || !tsr__group_has(g, r->m.rank)) return 0; /* grid: another row's column */
  if (!sc && r->m.two_level) return reduce_two_level(o, r, rp, x, xs, I, j);
  tsr_tiles_t *acc = tsr__acc(rp, sc);
  int i, r0, home = tsr__home_in(g, rp, I, j);
  tsr__chunk_tile(rp, I, &i, &r0);
  if (rp->k > 1) {
    TSR_TRY(tsr__tile_band_get(&local, rp->stage, I, j, x, i, j, r0));
    xs = rp->stages; /* chunk-tiled: chunk (I, j) is its tile (I, j) */
  }
  return tsr__sum_on_home(o, r, home, g->n, g->ranks, NULL, xs, acc, I, j,
                          tsr__chunk_bytes(rp, I, j));
}

int tsr__gather_chunk(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp,
                      const tsr__scope_t *sc, const tsr_tiles_t *src, int si, int sj,
                      tsr_tiles_t **y, bool with_home, int I, int j) {
  const tsr__group_t *g = tsr__scope(r, rp, sc, j);
  if (!g || !tsr__group_has(g, r->m.rank)) return 0; /* grid: another row's column */
  if (!sc && r->m.two_level) return gather_two_level(o, r, rp, src, si, sj, y, with_home, I, j);
  tsr_task_opts_t mpi = tsr__with_mpi(o, true);
  int i, r0, home = tsr__home_in(g, rp, I, j);
  tsr__chunk_tile(rp, I, &i, &r0);
  bool at_home = r->m.rank == home;
  for (int t = 0; t < g->n; t++) {
    int q = g->ranks[t];
    if ((q != home || with_home) && (at_home || q == r->m.rank))
      TSR_TRY(tsr__tile_band_put(&mpi, y[q], i, j, r0, src, si, sj));
  }
  uint64_t bytes = tsr__chunk_bytes(rp, I, j);
  if (at_home)
    r->st.bytes_sent += bytes * (uint64_t)(g->n - 1), r->st.messages_sent += g->n - 1;
  else
    r->st.bytes_received += bytes, r->st.messages_received++;
  return 0;
}
