/* Tiled-matrix descriptors. A local matrix is one row-major allocation and
 * each tile a StarPU matrix handle viewing its block (leading dimension n, or a little more:
 * tsr__tiles_row_stride), so a whole matrix can be read or written in one pass and the GEMMs read
 * tiles in place through their strides. A distributed matrix allocates each of this rank's tiles on
 * its own and registers another rank's tile, without memory, only when a task first names it (as
 * Chameleon's descriptors do): memory per rank follows the tiles it owns. Views (replica, pick) own
 * no memory: see tiles_impl.h. */
#include <assert.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <starpu_mpi.h>

#include "runtime/tags.h"
#include "tessera/dist.h"
#include "tile/tiles_impl.h"
#include "try.h"

static int ceil_div(int64_t a, int b) {
  return (int)((a + b - 1) / b);
}

/* The shape fields and handle arrays of a descriptor of kind. */
static int alloc_descriptor(tsr_tiles_t **out, tsr_tiles_kind_t kind, int64_t m, int64_t n, int mb,
                            int nb) {
  *out = NULL;
  if (m <= 0 || n <= 0 || mb <= 0 || nb <= 0 || n > INT32_MAX) return TSR_EINVAL;
  tsr_tiles_t *t = calloc(1, sizeof *t);
  if (!t) return TSR_ENOMEM;
  t->kind = kind;
  t->m = m, t->n = n;
  t->mb = mb < m ? mb : (int)m;
  t->nb = nb < n ? nb : (int)n;
  t->mt = ceil_div(m, t->mb), t->nt = ceil_div(n, t->nb);
  t->rank = tsr_dist_rank(), t->owner = t->rank;
  size_t count = (size_t)t->mt * (size_t)t->nt;
  t->handles = calloc(count, sizeof *t->handles);
  t->owned = calloc(count, sizeof *t->owned);
  if (!t->handles || !t->owned) {
    free(t->handles), free(t->owned), free(t);
    return TSR_ENOMEM;
  }
  *out = t;
  return 0;
}

/* Registers a tile's memory p (ld floats between rows) as tile (i, j). */
static void register_block(tsr_tiles_t *t, int i, int j, float *p, int ld) {
  long k = (long)i * t->nt + j;
  starpu_matrix_data_register(&t->handles[k], STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)ld,
                              (uint32_t)tsr_tiles_tile_cols(t, j),
                              (uint32_t)tsr_tiles_tile_rows(t, i), sizeof(float));
  /* Names the tile in traces (src/runtime/observe.c). */
  starpu_data_set_coordinates(t->handles[k], 2, i, j);
  t->owned[k] = true;
}

/* Registers tile (i, j) of t, owned by rank (or STARPU_MPI_PER_NODE), with StarPU-MPI. A third
 * coordinate marks it so: traces may then ask StarPU-MPI its tag (src/runtime/observe.c). */
static void register_mpi(const tsr_tiles_t *t, starpu_data_handle_t h, int i, int j, int rank) {
  if (!t->tag_space || !tsr__runtime_mpi()) return;
  starpu_mpi_data_register(h, tsr__tag(t->tag_space, (int64_t)i * t->nt + j), rank);
  starpu_data_set_coordinates(h, 3, i, j, 1);
}

/* The floats from one row of a local matrix of n columns to the next. Rows whose length is an
 * even number of 64-byte cache lines put the same column of successive rows into a few of the
 * L1 cache's 64 sets (every row in one set at 1024 floats, two at 512: a tile's rows 4 KiB
 * apart), where the GEMM kernels that stream a tile's rows evict each other. A matrix cut into
 * several column tiles (whose tiles' rows are never contiguous anyway) then gets one more line
 * a row, an odd number: on one core of the Zen 3 EPYC, idle, oneDNN's GEMM ran the forward and
 * weight-gradient tiles of VGG-11's classifier and the MLPs at 36-84 GFLOP/s with rows 512, 1024
 * or 4096 floats apart and at 88-96 with 528, 1040 and 4112 (BLIS: 50-81 against 76-92;
 * benchmarks/bench_gemm). One tile wide (a convolution's activations, whose
 * kernels want whole samples back to back), rows stay n floats. */
int64_t tsr__tiles_row_stride(int64_t n, int nb) {
  bool several_tiles = nb < n, even_lines = n % 16 == 0 && (n / 16) % 2 == 0;
  return several_tiles && even_lines ? n + 16 : n;
}

int tsr_tiles_create(tsr_tiles_t **out, int64_t m, int64_t n, int mb, int nb) {
  tsr_tiles_t *t;
  int rc = alloc_descriptor(&t, TSR_TILES_LOCAL, m, n, mb, nb);
  if (rc) return rc;
  int64_t ld = tsr__tiles_row_stride(n, t->nb);
  if (ld > INT32_MAX) {
    tsr_tiles_destroy(&t);
    return TSR_EINVAL;
  }
  size_t bytes = ((size_t)m * (size_t)ld * sizeof(float) + 63) / 64 * 64;
  t->data = aligned_alloc(64, bytes);
  if (!t->data) {
    tsr_tiles_destroy(&t);
    return TSR_ENOMEM;
  }
  memset(t->data, 0, bytes);
  t->local_bytes = (int64_t)m * n * (int64_t)sizeof(float);
  for (int i = 0; i < t->mt; i++)
    for (int j = 0; j < t->nt; j++)
      register_block(t, i, j, t->data + (int64_t)i * t->mb * ld + (int64_t)j * t->nb, (int)ld);
  *out = t;
  return 0;
}

int tsr_tiles_create_per_node(tsr_tiles_t **out, int64_t m, int64_t n, int mb, int nb) {
  TSR_TRY(tsr_tiles_create(out, m, n, mb, nb));
  tsr_tiles_t *t = *out;
  if (!tsr__runtime_mpi()) return 0;
  t->tag_space = tsr__tag_space(), t->per_node = true;
  for (int i = 0; i < t->mt; i++)
    for (int j = 0; j < t->nt; j++)
      register_mpi(t, t->handles[(long)i * t->nt + j], i, j, STARPU_MPI_PER_NODE);
  return 0;
}

int tsr_tiles_create_like(tsr_tiles_t **out, const tsr_tiles_t *src) {
  if (src->kind == TSR_TILES_DISTRIBUTED)
    return tsr_tiles_create_distributed(out, src->m, src->n, src->mb, src->nb, src->rank_of,
                                        src->rank_ctx);
  if (src->kind == TSR_TILES_LOCAL && src->per_node)
    return tsr_tiles_create_per_node(out, src->m, src->n, src->mb, src->nb);
  return tsr_tiles_create(out, src->m, src->n, src->mb, src->nb);
}

int tsr_tiles_create_distributed(tsr_tiles_t **out, int64_t m, int64_t n, int mb, int nb,
                                 tsr_rank_of_fn rank_of, void *ctx) {
  if (!rank_of) return TSR_EINVAL;
  tsr_tiles_t *t;
  int rc = alloc_descriptor(&t, TSR_TILES_DISTRIBUTED, m, n, mb, nb);
  if (rc) return rc;
  t->rank_of = rank_of, t->rank_ctx = ctx;
  t->tag_space = tsr__tag_space();
  t->blocks = calloc((size_t)t->mt * (size_t)t->nt, sizeof *t->blocks);
  if (!t->blocks) rc = TSR_ENOMEM;
  for (int i = 0; i < t->mt && rc == 0; i++)
    for (int j = 0; j < t->nt && rc == 0; j++) {
      int owner = rank_of(i, j, ctx);
      if (owner < 0 || owner >= tsr_dist_size()) {
        rc = TSR_EINVAL;
        break;
      }
      if (owner != t->rank) continue;
      int rows = tsr_tiles_tile_rows(t, i), cols = tsr_tiles_tile_cols(t, j);
      size_t bytes = ((size_t)rows * (size_t)cols * sizeof(float) + 63) / 64 * 64;
      float *p = aligned_alloc(64, bytes);
      if (!p) {
        rc = TSR_ENOMEM;
        break;
      }
      memset(p, 0, bytes);
      t->blocks[(long)i * t->nt + j] = p;
      t->local_bytes += (int64_t)rows * cols * (int64_t)sizeof(float);
      register_block(t, i, j, p, cols);
      register_mpi(t, t->handles[(long)i * t->nt + j], i, j, t->rank);
    }
  if (rc) {
    tsr_tiles_destroy(&t);
    return rc;
  }
  *out = t;
  return 0;
}

static int replica_rank(int i, int j, void *ctx) {
  (void)i, (void)j;
  return ((const tsr_tiles_t *)ctx)->owner;
}

int tsr__tiles_replica(tsr_tiles_t **out, tsr_tiles_t *base, int rank) {
  bool distributed = base->kind == TSR_TILES_DISTRIBUTED;
  if ((base->kind != TSR_TILES_LOCAL && !distributed) || base->per_node || rank < 0 ||
      rank >= tsr_dist_size())
    return TSR_EINVAL;
  tsr_tiles_t *t;
  int rc = alloc_descriptor(&t, TSR_TILES_REPLICA, base->m, base->n, base->mb, base->nb);
  if (rc) return rc;
  t->owner = rank;
  t->rank_of = replica_rank, t->rank_ctx = t;
  t->tag_space = tsr__tag_space();
  if (rank == t->rank)
    for (int i = 0; i < t->mt; i++)
      for (int j = 0; j < t->nt; j++) {
        if (distributed && !tsr_tiles_is_local(base, i, j)) continue;
        starpu_data_handle_t h = base->handles[(long)i * t->nt + j];
        t->handles[(long)i * t->nt + j] = h; /* borrowed */
        register_mpi(t, h, i, j, rank);
      }
  *out = t;
  return 0;
}

int tsr__tiles_pick(tsr_tiles_t **out, tsr_tiles_t *const *sources, tsr_rank_of_fn rank_of,
                    void *ctx) {
  const tsr_tiles_t *s = sources[0];
  tsr_tiles_t *t;
  int rc = alloc_descriptor(&t, TSR_TILES_PICK, s->m, s->n, s->mb, s->nb);
  if (rc) return rc;
  for (int q = 1; q < tsr_dist_size(); q++)
    if (sources[q]->m != s->m || sources[q]->n != s->n || sources[q]->mb != s->mb ||
        sources[q]->nb != s->nb)
      rc = TSR_ESHAPE;
  if (rc) {
    tsr_tiles_destroy(&t);
    return rc;
  }
  t->sources = sources, t->rank_of = rank_of, t->rank_ctx = ctx;
  *out = t;
  return 0;
}

starpu_data_handle_t tsr__tile_register(const tsr_tiles_t *ct, int i, int j) {
  tsr_tiles_t *t = (tsr_tiles_t *)ct; /* the handle cache is not the matrix's value */
  long k = (long)i * t->nt + j;
  int owner = tsr_tiles_rank_of(t, i, j);
  if (t->kind == TSR_TILES_PICK) {
    t->handles[k] = tsr__tile(t->sources[owner], i, j); /* borrowed */
    return t->handles[k];
  }
  /* LOCAL tiles are registered at creation: here only another rank's. */
  assert(t->kind != TSR_TILES_LOCAL && owner != t->rank);
  starpu_matrix_data_register(&t->handles[k], -1, 0, (uint32_t)tsr_tiles_tile_cols(t, j),
                              (uint32_t)tsr_tiles_tile_cols(t, j),
                              (uint32_t)tsr_tiles_tile_rows(t, i), sizeof(float));
  starpu_data_set_coordinates(t->handles[k], 2, i, j);
  register_mpi(t, t->handles[k], i, j, owner);
  t->owned[k] = true;
  t->remote_handles++;
  return t->handles[k];
}

void tsr_tiles_destroy(tsr_tiles_t **tp) {
  tsr_tiles_t *t = *tp;
  if (!t) return;
  for (long k = 0; k < (long)t->mt * t->nt; k++) {
    if (!t->handles[k] || !t->owned[k]) continue;
    int i = (int)(k / t->nt), j = (int)(k % t->nt);
    /* Another rank's tile has no value here to bring back. */
    if (tsr_tiles_rank_of(t, i, j) == t->rank)
      starpu_data_unregister(t->handles[k]);
    else
      starpu_data_unregister_no_coherency(t->handles[k]);
  }
  for (long k = 0; t->blocks && k < (long)t->mt * t->nt; k++)
    free(t->blocks[k]);
  free(t->blocks), free(t->handles), free(t->owned), free(t->data);
  free(t);
  *tp = NULL;
}

int64_t tsr_tiles_rows(const tsr_tiles_t *t) {
  return t->m;
}
int64_t tsr_tiles_cols(const tsr_tiles_t *t) {
  return t->n;
}
int tsr_tiles_mb(const tsr_tiles_t *t) {
  return t->mb;
}
int tsr_tiles_nb(const tsr_tiles_t *t) {
  return t->nb;
}
int tsr_tiles_mt(const tsr_tiles_t *t) {
  return t->mt;
}
int tsr_tiles_nt(const tsr_tiles_t *t) {
  return t->nt;
}

int tsr_tiles_tile_rows(const tsr_tiles_t *t, int i) {
  assert(i >= 0 && i < t->mt);
  return i < t->mt - 1 ? t->mb : (int)(t->m - (int64_t)i * t->mb);
}

int tsr_tiles_tile_cols(const tsr_tiles_t *t, int j) {
  assert(j >= 0 && j < t->nt);
  return j < t->nt - 1 ? t->nb : (int)(t->n - (int64_t)j * t->nb);
}

int tsr_tiles_rank_of(const tsr_tiles_t *t, int i, int j) {
  return t->rank_of ? t->rank_of(i, j, t->rank_ctx) : t->owner;
}

bool tsr_tiles_is_local(const tsr_tiles_t *t, int i, int j) {
  return tsr_tiles_rank_of(t, i, j) == t->rank;
}

int64_t tsr_tiles_tag(const tsr_tiles_t *t, int i, int j) {
  if (t->kind == TSR_TILES_PICK) return tsr_tiles_tag(t->sources[tsr_tiles_rank_of(t, i, j)], i, j);
  return t->tag_space ? tsr__tag(t->tag_space, (int64_t)i * t->nt + j) : -1;
}

int64_t tsr_tiles_local_bytes(const tsr_tiles_t *t) {
  return t->local_bytes;
}

int tsr_tiles_remote_handles(const tsr_tiles_t *t) {
  return t->remote_handles;
}

/* Copies tile (i, j) to or from host (ldh floats between rows), holding it
 * through starpu_data_acquire so pending tasks finish first and a copy on
 * another memory node is brought back. */
static int transfer_tile(const tsr_tiles_t *t, int i, int j, float *host, int64_t ldh,
                         bool to_host) {
  starpu_data_handle_t h = tsr__tile(t, i, j);
  if (starpu_data_acquire(h, to_host ? STARPU_R : STARPU_W) != 0) return TSR_ERUNTIME;
  int rows = tsr_tiles_tile_rows(t, i), cols = tsr_tiles_tile_cols(t, j);
  float *tile = (float *)starpu_matrix_get_local_ptr(h);
  int ld = (int)starpu_matrix_get_local_ld(h);
  for (int r = 0; r < rows; r++) {
    if (to_host)
      memcpy(host + r * ldh, tile + (int64_t)r * ld, sizeof(float) * (size_t)cols);
    else
      memcpy(tile + (int64_t)r * ld, host + r * ldh, sizeof(float) * (size_t)cols);
  }
  starpu_data_release(h);
  return 0;
}

/* Copies between the whole matrix, every tile of which is here, and a dense
 * (m, n) host array. */
static int transfer(const tsr_tiles_t *t, float *host, bool to_host) {
  for (int i = 0; i < t->mt; i++)
    for (int j = 0; j < t->nt; j++)
      if (!tsr_tiles_is_local(t, i, j)) return TSR_EINVAL;
  for (int i = 0; i < t->mt; i++)
    for (int j = 0; j < t->nt; j++) {
      float *corner = host + (int64_t)i * t->mb * t->n + (int64_t)j * t->nb;
      TSR_TRY(transfer_tile(t, i, j, corner, t->n, to_host));
    }
  return 0;
}

/* The tiles this process owns, to or from a dense (m, n) host array. */
static int transfer_owned(const tsr_tiles_t *t, float *host, bool to_host) {
  for (int i = 0; i < t->mt; i++)
    for (int j = 0; j < t->nt; j++) {
      if (!tsr_tiles_is_local(t, i, j)) continue;
      float *corner = host + (int64_t)i * t->mb * t->n + (int64_t)j * t->nb;
      TSR_TRY(transfer_tile(t, i, j, corner, t->n, to_host));
    }
  return 0;
}

int tsr_tiles_read_owned(const tsr_tiles_t *t, float *dst) {
  return transfer_owned(t, dst, true);
}

int tsr_tiles_write_owned(tsr_tiles_t *t, const float *src) {
  return transfer_owned(t, (float *)src, false);
}

int tsr_tiles_read(const tsr_tiles_t *t, float *dst) {
  return transfer(t, dst, true);
}

int tsr_tiles_write(tsr_tiles_t *t, const float *src) {
  return transfer(t, (float *)src, false);
}

/* Tile (i, j) of t between the (m, n) row-major buffers from and to. */
static void copy_tile(const tsr_tiles_t *t, int i, int j, const float *from, float *to) {
  int64_t i0 = (int64_t)i * t->mb, j0 = (int64_t)j * t->nb;
  int cols = tsr_tiles_tile_cols(t, j);
  for (int64_t a = i0; a < i0 + tsr_tiles_tile_rows(t, i); a++)
    memcpy(to + a * t->n + j0, from + a * t->n + j0, sizeof(float) * (size_t)cols);
}

/* Every rank's owned tiles of t, zeros elsewhere, gathered on rank 0 into *every ((size, m, n),
 * the caller's to free; NULL elsewhere). ready: rank 0 has where to put what it makes of them.
 * Collective, its result the same on every rank. */
static int gather_parts(const tsr_tiles_t *t, bool ready, float **every) {
  int rank = tsr_dist_rank(), size = tsr_dist_size();
  int64_t count = t->m * t->n;
  *every = NULL;
  if (count > INT_MAX / (int64_t)sizeof(float) / size) return TSR_EINVAL; /* MPI's int count */
  int bytes = (int)(sizeof(float) * (size_t)count);
  float *mine = calloc((size_t)count, sizeof(float));
  if (rank == 0) *every = malloc((size_t)bytes * (size_t)size);
  /* Every rank takes part in the gather or none does. */
  int rc = tsr_dist_any(!mine || (rank == 0 && (!*every || !ready))) ? TSR_ENOMEM : 0;
  if (rc == 0) {
    rc = tsr_tiles_read_owned(t, mine);
    int rc2 = tsr_dist_gather(mine, bytes, *every);
    rc = tsr_dist_any(rc || rc2) ? (rc ? rc : rc2 ? rc2 : TSR_ERUNTIME) : 0;
  }
  free(mine);
  if (rc) free(*every), *every = NULL;
  return rc;
}

/* Rank 0 takes each tile from its owner's part (gather_parts). */
static int gather_distributed(const tsr_tiles_t *t, float *dst) {
  float *every;
  int rc = gather_parts(t, dst != NULL, &every);
  int64_t count = t->m * t->n;
  for (int i = 0; rc == 0 && every && i < t->mt; i++)
    for (int j = 0; j < t->nt; j++)
      copy_tile(t, i, j, every + (size_t)tsr_tiles_rank_of(t, i, j) * (size_t)count, dst);
  free(every);
  return rc;
}

int tsr_tiles_gather(const tsr_tiles_t *t, float *dst) {
  if (!tsr_dist_active() || tsr_dist_size() == 1) return tsr_tiles_read(t, dst);
  int rc;
  if (t->kind == TSR_TILES_DISTRIBUTED)
    rc = gather_distributed(t, dst);
  else
    rc = tsr_dist_rank() != 0 ? 0 : dst ? tsr_tiles_read(t, dst) : TSR_EINVAL;
  return tsr_dist_any(rc != 0) ? (rc ? rc : TSR_ERUNTIME) : 0;
}

int tsr_tiles_gather_copies(const tsr_tiles_t *t, int stride, float *dst) {
  int size = tsr_dist_size();
  if (stride < 1 || size % stride) return TSR_EINVAL;
  float *every;
  int rc = gather_parts(t, dst != NULL, &every);
  int64_t count = t->m * t->n;
  /* Rank 0 is the first of copy 0: its rank_of names ranks 0 .. stride - 1. */
  for (int c = 0; rc == 0 && every && c < size / stride; c++)
    for (int i = 0; rc == 0 && i < t->mt; i++)
      for (int j = 0; j < t->nt; j++) {
        int owner = tsr_tiles_rank_of(t, i, j);
        if (owner < 0 || owner >= stride) {
          rc = TSR_EINVAL;
          break;
        }
        copy_tile(t, i, j, every + (size_t)(c * stride + owner) * (size_t)count,
                  dst + (size_t)c * (size_t)count);
      }
  free(every);
  return tsr_dist_any(rc != 0) ? (rc ? rc : TSR_ERUNTIME) : 0;
}

int tsr_tiles_gather_owned(const tsr_tiles_t *t, float *dst) {
  int rank = tsr_dist_rank(), size = tsr_dist_size();
  int64_t count = t->m * t->n;
  float *every;
  int rc = gather_parts(t, dst != NULL, &every);
  /* Which elements each rank's tiles hold, gathered alike (count fits an int: gather_parts). */
  unsigned char *owned = rc == 0 ? calloc((size_t)count, 1) : NULL, *owners = NULL;
  if (rc == 0 && rank == 0) owners = malloc((size_t)count * (size_t)size);
  if (rc == 0 && tsr_dist_any(!owned || (rank == 0 && !owners))) rc = TSR_ENOMEM;
  for (int i = 0; rc == 0 && i < t->mt; i++)
    for (int j = 0; j < t->nt; j++)
      if (tsr_tiles_is_local(t, i, j))
        for (int64_t a = (int64_t)i * t->mb; a < (int64_t)i * t->mb + tsr_tiles_tile_rows(t, i);
             a++)
          memset(owned + a * t->n + (int64_t)j * t->nb, 1, (size_t)tsr_tiles_tile_cols(t, j));
  if (rc == 0 && tsr_dist_any(tsr_dist_gather(owned, (int)count, owners) != 0)) rc = TSR_ERUNTIME;
  for (int64_t e = 0; rc == 0 && every && e < count; e++) {
    int q = 0;
    while (q < size && !owners[(size_t)q * (size_t)count + (size_t)e])
      q++;
    if (q == size) {
      rc = TSR_EINVAL; /* an element nobody owns */
      break;
    }
    dst[e] = every[(size_t)q * (size_t)count + (size_t)e];
  }
  free(owned), free(every), free(owners);
  return tsr_dist_any(rc != 0) ? (rc ? rc : TSR_ERUNTIME) : 0;
}

int tsr_tiles_read_tile(const tsr_tiles_t *t, int i, int j, float *dst) {
  if (i < 0 || i >= t->mt || j < 0 || j >= t->nt || !tsr_tiles_is_local(t, i, j)) return TSR_EINVAL;
  return transfer_tile(t, i, j, dst, tsr_tiles_tile_cols(t, j), true);
}
