/* Buckets (buckets.h): laying them out, their rows of floats, packing chunks in, the sum on the
 * home and the result back, flat or through the nodes. */
#include <stdlib.h>
#include <string.h>

#include "parallel/buckets.h"
#include "parallel/collective.h"
#include "tile/ops.h"
#include "try.h"

struct tsr__bucket_set {
  int n;           /* buckets of averages over every rank (this rank's grid row's) */
  bucket_t *b;     /* [n] */
  int ntb;         /* two levels: node buckets of whole tiles, this rank's node's; 0: none */
  bucket_t *tb;    /* [ntb] */
  int *send_ranks; /* [size] a bucket's senders and their weights (senders) */
  float *send_w;
  int **tdone; /* two levels: [nparams] (mt, nt) the chunks of each tile gathered so far */
};

static int bucket_home(int i, int j, void *ctx) {
  (void)i, (void)j;
  return ((const bucket_t *)ctx)->home;
}

/* Packs chunk (I, j) of rp into its bucket: flat, this rank's band of x; with two levels, at the
 * tile's first chunk its sum over the node (node_sum_tile, from xs, every rank's views of x),
 * then on the local home the node's band of it (a lone rank's own band). *full: the bucket when
 * that was the last of its chunks in this pass (the next pass packs it from the start), else
 * NULL; every rank counts, whether it packs or not. */
static int pack_chunk(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, tsr_tiles_t *x,
                      tsr_tiles_t **xs, int I, int j, bucket_t **full) {
  tsr_task_opts_t local = tsr__with_mpi(o, false);
  int i, r0, I0, I1, c = I * rp->nt + j;
  tsr__chunk_tile(rp, I, &i, &r0);
  bucket_t *b = &r->bk->b[rp->cbucket[c]];
  const tsr_tiles_t *src = x;
  bool packs = true;
  if (r->m.two_level) {
    int lh = tsr__local_home(rp, r->m.my_node, I, j);
    tsr__chunks_of_tile(rp, i, &I0, &I1);
    if (r->m.nodes[r->m.my_node].n > 1) { /* with node buckets the node's sum is there already */
      if (I == I0 && !r->bk->ntb) TSR_TRY(tsr__node_sum_tile(o, r, rp, xs, i, j, lh));
      src = rp->ntile[r->m.my_node];
    }
    packs = r->m.rank == lh;
  }
  if (packs)
    TSR_TRY(tsr__tile_pack(&local, b->mine, rp->coff[c], src, i, j, r0,
                           tsr_tiles_tile_rows(rp->acc, I)));
  *full = ++b->packed == b->nchunks ? b : NULL;
  if (*full) b->packed = 0;
  return 0;
}

/* Bucket b's senders, in the order its home adds them: flat every rank (under a grid every rank
 * of this rank's grid row), with two levels each node's local home of b's index; their ranks and
 * weights in the sum (a node's sum is weighted already, a lone rank's band is not), and how
 * many. */
static int senders(const tsr_replicas_t *r, const bucket_t *b, int *ranks, float *w) {
  const tsr__group_t *row = r->m.grid_rows > 1 ? &r->m.rows[r->m.rank % r->m.grid_rows] : &r->m.all;
  int n = r->m.two_level ? r->m.nnodes : row->n;
  for (int t = 0; t < n; t++) {
    ranks[t] = r->m.two_level ? r->m.nodes[t].ranks[b->lidx % r->m.nodes[t].n] : row->ranks[t];
    w[t] = r->m.two_level && r->m.nodes[t].n > 1 ? 1.0f : (float)r->weights[ranks[t]];
  }
  return n;
}

static int reduce_bucket(const tsr_task_opts_t *o, tsr_replicas_t *r, bucket_t *b) {
  tsr_task_opts_t local = tsr__with_mpi(o, false);
  int *ranks = r->bk->send_ranks, n = senders(r, b, ranks, r->bk->send_w);
  TSR_TRY(tsr__sum_on_home(o, r, b->home, n, ranks, r->bk->send_w, b->mines, b->sum, 0, 0,
                           (uint64_t)b->floats * sizeof(float)));
  if (r->m.rank != b->home) return 0;
  for (int t = 0; t < b->nchunks; t++) {
    rparam_t *rp = &r->params[b->param[t]];
    int I = b->I[t], j = b->j[t];
    TSR_TRY(tsr__tile_unpack(&local, rp->acc, I, j, 0, tsr_tiles_tile_rows(rp->acc, I), b->sum,
                             rp->coff[I * rp->nt + j]));
  }
  return 0;
}

/* Two levels, node bucket nb full: its home (the local home) sums the rows of this rank's node's
 * ranks, weights[q] each, in rank order in deterministic mode (node_sum_tile's order), and
 * unpacks the sums into the node's partial tiles, ntile. */
static int reduce_node_bucket(const tsr_task_opts_t *o, tsr_replicas_t *r, bucket_t *nb) {
  tsr_task_opts_t local = tsr__with_mpi(o, false);
  const tsr__group_t *node = &r->m.nodes[r->m.my_node];
  TSR_TRY(tsr__sum_on_home(o, r, nb->home, node->n, node->ranks, NULL, nb->mines, nb->sum, 0, 0,
                           (uint64_t)nb->floats * sizeof(float)));
  if (r->m.rank != nb->home) return 0;
  for (int t = 0; t < nb->nchunks; t++) {
    rparam_t *rp = &r->params[nb->param[t]];
    int i = nb->I[t], j = nb->j[t];
    TSR_TRY(tsr__tile_unpack(&local, rp->ntile[r->m.my_node], i, j, 0,
                             tsr_tiles_tile_rows(rp->p->w, i), nb->sum, rp->toff[i * rp->nt + j]));
  }
  return 0;
}

/* Two levels with node buckets: tile (i, j) of set `set` is whole on its local home; packed into
 * its node bucket's row there, and once every tile of the bucket is, the row goes to the node's
 * other ranks in one message each, which unpack it (node_spread_tile's, bucket by bucket). */
static int tile_back(const tsr_task_opts_t *o, tsr_replicas_t *r, rparam_t *rp, int i, int j,
                     int set) {
  tsr_task_opts_t local = tsr__with_mpi(o, false);
  bucket_t *nb = &r->bk->tb[rp->tbucket[i * rp->nt + j]];
  bool at_home = r->m.rank == nb->home;
  if (at_home)
    TSR_TRY(tsr__tile_pack(&local, nb->sum, rp->toff[i * rp->nt + j], tsr__set_of(r, rp, set), i, j,
                           0, tsr_tiles_tile_rows(rp->p->w, i)));
  if (++nb->back < nb->nchunks) return 0;
  nb->back = 0;
  const tsr__group_t *node = &r->m.nodes[r->m.my_node];
  TSR_TRY(tsr__copy_from_home(o, r, nb->home, node->n, node->ranks, nb->sum, nb->mines, 0, 0,
                              (uint64_t)nb->floats * sizeof(float)));
  if (at_home) return 0;
  for (int t = 0; t < nb->nchunks; t++) {
    rparam_t *tp = &r->params[nb->param[t]];
    int ti = nb->I[t], tj = nb->j[t];
    TSR_TRY(tsr__tile_unpack(&local, tsr__set_of(r, tp, set), ti, tj, 0,
                             tsr_tiles_tile_rows(tp->p->w, ti), nb->mine,
                             tp->toff[ti * tp->nt + tj]));
  }
  return 0;
}

int tsr__bucket_pack_result(const tsr_task_opts_t *local, const bucket_t *b, int t, rparam_t *rp,
                            const tsr_tiles_t *src, int i, int r0) {
  int I = b->I[t], j = b->j[t];
  return tsr__tile_pack(local, b->sum, rp->coff[I * rp->nt + j], src, i, j, r0,
                        tsr_tiles_tile_rows(rp->acc, I));
}

/* The all-gather of bucket b, whose home packed the results into its sum: every other sender
 * gets the sum in one message and unpacks it into set `set` of each chunk's parameter (set_of);
 * the home too with with_home (an average's result), else it has it already (batch). With two
 * levels, once every chunk of a tile is back, its local home sends the whole tile to its node's
 * other ranks (node_spread_tile), as gather_two_level does at a tile's last chunk. */
static int gather_bucket(const tsr_task_opts_t *o, tsr_replicas_t *r, bucket_t *b, int set,
                         bool with_home) {
  tsr_task_opts_t local = tsr__with_mpi(o, false);
  int *ranks = r->bk->send_ranks, n = senders(r, b, ranks, r->bk->send_w);
  bool at_home = r->m.rank == b->home, gets = false;
  for (int t = 0; t < n; t++)
    gets = gets || ranks[t] == r->m.rank;
  TSR_TRY(tsr__copy_from_home(o, r, b->home, n, ranks, b->sum, b->mines, 0, 0,
                              (uint64_t)b->floats * sizeof(float)));
  bool unpacks = gets && (!at_home || with_home);
  const tsr_tiles_t *src = at_home ? b->sum : b->mine;
  for (int t = 0; t < b->nchunks; t++) {
    rparam_t *rp = &r->params[b->param[t]];
    int I = b->I[t], j = b->j[t], i, r0, I0, I1;
    tsr__chunk_tile(rp, I, &i, &r0);
    if (unpacks)
      TSR_TRY(tsr__tile_unpack(&local, tsr__set_of(r, rp, set), i, j, r0,
                               tsr_tiles_tile_rows(rp->acc, I), src, rp->coff[I * rp->nt + j]));
    if (!r->m.two_level || r->m.nodes[r->m.my_node].n == 1) continue;
    tsr__chunks_of_tile(rp, i, &I0, &I1);
    if (++r->bk->tdone[rp->index][i * rp->nt + j] < I1 - I0) continue;
    r->bk->tdone[rp->index][i * rp->nt + j] = 0;
    if (r->bk->ntb)
      TSR_TRY(tile_back(o, r, rp, i, j, set));
    else
      TSR_TRY(tsr__node_spread_tile(o, r, tsr__set_views(rp, set), i, j,
                                    tsr__local_home(rp, r->m.my_node, I, j)));
  }
  return 0;
}

int tsr__bucket_finish(tsr_replicas_t *r, bucket_t *b, const tsr__bucket_pass_t *p) {
  tsr_task_opts_t local = tsr__with_mpi(p->o, false);
  for (int t = 0; t < b->nchunks && r->m.rank == b->home && p->at_home; t++)
    TSR_TRY(p->at_home(r, b, t, &local, p->ctx));
  return p->gather ? gather_bucket(p->o, r, b, p->gather_set, p->with_home) : 0;
}

/* Chunk (I, j) of rp into its bucket (pack_chunk), and the bucket on once full. */
static int chunk_on(tsr_replicas_t *r, rparam_t *rp, int I, int j, const tsr__bucket_pass_t *p) {
  bucket_t *b;
  tsr_tiles_t *x = p->set < 0 ? rp->p->g : tsr__set_of(r, rp, p->set);
  TSR_TRY(pack_chunk(p->o, r, rp, x, p->set < 0 ? rp->g : tsr__set_views(rp, p->set), I, j, &b));
  if (!b) return 0;
  TSR_TRY(reduce_bucket(p->o, r, b));
  return tsr__bucket_finish(r, b, p);
}

/* Chunk (I, j) of rp handed over in pass p. With node buckets (two levels, a node of several
 * ranks), at its tile's first chunk every rank packs the whole tile into the tile's node
 * bucket; once that is full, the local home sums it (reduce_node_bucket) and every chunk of its
 * tiles goes on (chunk_on). Otherwise chunk_on straight away. */
int tsr__bucket_offer(tsr_replicas_t *r, rparam_t *rp, int I, int j, const tsr__bucket_pass_t *p) {
  if (!tsr__group_has(tsr__scope(r, rp, NULL, j), r->m.rank))
    return 0; /* grid: another row's column */
  if (!r->bk->ntb || r->m.nodes[r->m.my_node].n == 1) return chunk_on(r, rp, I, j, p);
  tsr_task_opts_t local = tsr__with_mpi(p->o, false);
  int i, r0, I0, I1;
  tsr__chunk_tile(rp, I, &i, &r0);
  tsr__chunks_of_tile(rp, i, &I0, &I1);
  if (I != I0) return 0;
  bucket_t *nb = &r->bk->tb[rp->tbucket[i * rp->nt + j]];
  tsr_tiles_t *x = p->set < 0 ? rp->p->g : tsr__set_of(r, rp, p->set);
  TSR_TRY(tsr__tile_pack(&local, nb->mine, rp->toff[i * rp->nt + j], x, i, j, 0,
                         tsr_tiles_tile_rows(x, i)));
  if (++nb->packed < nb->nchunks) return 0;
  nb->packed = 0;
  TSR_TRY(reduce_node_bucket(p->o, r, nb));
  for (int t = 0; t < nb->nchunks; t++) {
    rparam_t *tp = &r->params[nb->param[t]];
    int a, e;
    tsr__chunks_of_tile(tp, nb->I[t], &a, &e);
    for (int c = a; c < e; c++)
      TSR_TRY(chunk_on(r, tp, c, nb->j[t], p));
  }
  return 0;
}

/* --bucket-mb: the buckets of bk (none when it has none) and the chunks each holds, in
 * parameter and chunk order; their descriptors come later (tsr__buckets_create). */
static int make_buckets(tsr_replicas_t *r, const tsr_buckets_t *bk, const tsr_chunking_t *ch) {
  if (bk->n == 0) return 0;
  if (!(r->bk->b = calloc((size_t)bk->n, sizeof *r->bk->b))) return TSR_ENOMEM;
  r->bk->n = bk->n;
  for (int b = 0; b < bk->n; b++) {
    bucket_t *t = &r->bk->b[b];
    t->home = bk->home[b], t->floats = bk->floats[b];
    t->param = malloc(sizeof(int) * (size_t)bk->chunks[b]);
    t->I = malloc(sizeof(int) * (size_t)bk->chunks[b]);
    t->j = malloc(sizeof(int) * (size_t)bk->chunks[b]);
    if (!t->param || !t->I || !t->j) return TSR_ENOMEM;
  }
  for (int k = 0; k < r->nparams; k++)
    for (int c = 0; c < ch[k].cmt * ch[k].nt; c++) {
      if (ch[k].bucket[c] < 0) continue; /* a grid: another row's chunk */
      bucket_t *t = &r->bk->b[ch[k].bucket[c]];
      if (ch[k].local) t->lidx = ch[k].local[c];
      t->param[t->nchunks] = k, t->I[t->nchunks] = c / ch[k].nt, t->j[t->nchunks++] = c % ch[k].nt;
    }
  return 0;
}

/* Two levels: the node buckets of tb and the tiles each holds; each rank keeps its own node's
 * (every node cuts the same, so every rank creates as many descriptors), homed on its local home
 * of the bucket's index. */
static int make_tile_buckets(tsr_replicas_t *r, const tsr_buckets_t *tb, const tsr_chunking_t *ch) {
  if (tb->n == 0) return 0;
  if (!(r->bk->tb = calloc((size_t)tb->n, sizeof *r->bk->tb))) return TSR_ENOMEM;
  r->bk->ntb = tb->n;
  const tsr__group_t *node = &r->m.nodes[r->m.my_node];
  for (int b = 0; b < tb->n; b++) {
    bucket_t *t = &r->bk->tb[b];
    t->lidx = tb->local[b], t->home = node->ranks[tb->local[b] % node->n];
    t->floats = tb->floats[b];
    t->param = malloc(sizeof(int) * (size_t)tb->chunks[b]);
    t->I = malloc(sizeof(int) * (size_t)tb->chunks[b]);
    t->j = malloc(sizeof(int) * (size_t)tb->chunks[b]);
    if (!t->param || !t->I || !t->j) return TSR_ENOMEM;
  }
  for (int k = 0; k < r->nparams; k++) {
    const tsr_tiles_t *w = r->params[k].p->w;
    for (int c = 0; c < tsr_tiles_mt(w) * ch[k].nt; c++) {
      if (ch[k].tbucket[c] < 0) continue; /* a grid: another row's tile */
      bucket_t *t = &r->bk->tb[ch[k].tbucket[c]];
      t->param[t->nchunks] = k, t->I[t->nchunks] = c / ch[k].nt, t->j[t->nchunks++] = c % ch[k].nt;
    }
  }
  return 0;
}

/* Under a grid each row packs its own chunks into its own buckets: every rank makes as many
 * buckets (and node buckets) as the row with the most, the others empty and never packed, so
 * that every rank creates the same descriptors in the same order (their MPI tags). An empty
 * bucket's sum is homed on each rank itself; nothing travels. Collective. */
static int pad_buckets(tsr_replicas_t *r) {
  int mine[2] = {r->bk->n, r->bk->ntb}, most[2] = {0, 0};
  int *all = malloc(sizeof mine * (size_t)r->m.size);
  if (!all) return TSR_ENOMEM;
  int rc = tsr_dist_allgather(mine, (int)sizeof mine, all);
  for (int q = 0; rc == 0 && q < r->m.size; q++)
    for (int a = 0; a < 2; a++)
      if (all[2 * q + a] > most[a]) most[a] = all[2 * q + a];
  free(all);
  bucket_t **sets[2] = {&r->bk->b, &r->bk->tb};
  int *counts[2] = {&r->bk->n, &r->bk->ntb};
  for (int a = 0; rc == 0 && a < 2; a++) {
    if (most[a] == *counts[a]) continue;
    bucket_t *more = realloc(*sets[a], sizeof *more * (size_t)most[a]);
    if (!more) return TSR_ENOMEM;
    memset(more + *counts[a], 0, sizeof *more * (size_t)(most[a] - *counts[a]));
    for (int b = *counts[a]; b < most[a]; b++)
      more[b].home = r->m.rank, more[b].floats = 1;
    *sets[a] = more, *counts[a] = most[a];
  }
  return rc;
}

/* Each bucket's row of floats on every rank (with every rank's views) and its sum on its home,
 * created on every rank in bucket order (descriptors take their MPI tags in creation order). */
static int create_bucket_rows(tsr_replicas_t *r, bucket_t *all, int n) {
  for (int b = 0; b < n; b++) {
    bucket_t *t = &all[b];
    TSR_TRY(tsr_tiles_create(&t->mine, 1, t->floats, 1, (int)t->floats));
    if (!(t->mines = tsr__views_of(r, t->mine))) return TSR_ENOMEM;
    TSR_TRY(tsr_tiles_create_distributed(&t->sum, 1, t->floats, 1, (int)t->floats, bucket_home, t));
  }
  return 0;
}

int tsr__buckets_create(tsr_replicas_t *r) {
  if (!r->bk) return 0;
  if (r->m.grid_rows > 1 && r->sync.bucket_mb > 0) TSR_TRY(pad_buckets(r));
  TSR_TRY(create_bucket_rows(r, r->bk->b, r->bk->n));
  return create_bucket_rows(r, r->bk->tb, r->bk->ntb);
}

static void destroy_bucket_rows(tsr_replicas_t *r, bucket_t **all, int *n) {
  for (int b = 0; b < *n; b++) {
    bucket_t *t = &(*all)[b];
    tsr__views_destroy(r, &t->mines);
    tsr_tiles_destroy(&t->mine), tsr_tiles_destroy(&t->sum);
    free(t->param), free(t->I), free(t->j);
  }
  free(*all), *all = NULL, *n = 0;
}

void tsr__buckets_destroy(tsr_replicas_t *r) {
  tsr__bucket_set_t *bk = r->bk;
  if (!bk) return;
  destroy_bucket_rows(r, &bk->b, &bk->n);
  destroy_bucket_rows(r, &bk->tb, &bk->ntb);
  for (int k = 0; bk->tdone && k < r->nparams; k++)
    free(bk->tdone[k]);
  free(bk->tdone), free(bk->send_ranks), free(bk->send_w), free(bk);
  r->bk = NULL;
}

int tsr__buckets_lay(tsr_replicas_t *r, const tsr_buckets_t *bk, const tsr_buckets_t *tb,
                     const tsr_chunking_t *ch) {
  if (!(r->sync.bucket_mb > 0)) return 0;
  if (!(r->bk = calloc(1, sizeof *r->bk))) return TSR_ENOMEM;
  r->bk->send_ranks = calloc((size_t)r->m.size, sizeof *r->bk->send_ranks);
  r->bk->send_w = calloc((size_t)r->m.size, sizeof *r->bk->send_w);
  if (!r->bk->send_ranks || !r->bk->send_w) return TSR_ENOMEM;
  TSR_TRY(make_buckets(r, bk, ch));
  TSR_TRY(make_tile_buckets(r, tb, ch));
  if (!r->m.two_level || r->bk->n == 0) return 0;
  if (!(r->bk->tdone = calloc((size_t)r->nparams + 1, sizeof *r->bk->tdone))) return TSR_ENOMEM;
  for (int k = 0; k < r->nparams; k++) {
    const rparam_t *rp = &r->params[k];
    size_t tiles = (size_t)tsr_tiles_mt(rp->p->w) * (size_t)ch[k].nt;
    if (!(r->bk->tdone[k] = calloc(tiles, sizeof *r->bk->tdone[k]))) return TSR_ENOMEM;
  }
  return 0;
}

bool tsr__buckets_on(const tsr_replicas_t *r) {
  return r->bk && r->bk->n > 0;
}

bool tsr__buckets_idle(const tsr_replicas_t *r) {
  for (int b = 0; r->bk && b < r->bk->n; b++)
    if (r->bk->b[b].packed) return false;
  for (int b = 0; r->bk && b < r->bk->ntb; b++)
    if (r->bk->tb[b].packed || r->bk->tb[b].back) return false;
  return true;
}

int tsr__buckets_finish_all(tsr_replicas_t *r, const tsr__bucket_pass_t *p) {
  for (int b = 0; tsr__buckets_on(r) && b < r->bk->n; b++)
    TSR_TRY(tsr__bucket_finish(r, &r->bk->b[b], p));
  return 0;
}
