/* The run set up by the library (tessera/train.h, "The run's setup"): from what a run is asked
 * to be, each rank's batch, batch-row tiles and shard, or one error naming the option and the
 * fix. Every refusal of a combination lives here (tsr_run_check), the memory check with its
 * suggestion of a --batch that fits, and the cutting of batches and shards by --shares, which
 * tsr_train reads instead of working them out again. Nothing here prints: what rank 0 should
 * say goes into the setup's warnings. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/net_impl.h"
#include "parallel/placement.h"
#include "parallel/policy.h"
#include "tessera/runtime.h"
#include "tessera/train.h"
#include "train/setup_impl.h"
#include "try.h"

/* How long --shares auto times each rank's forward passes before training. */
#define CALIBRATION_SECONDS 0.5

void tsr_run_config_init(tsr_run_config_t *c) {
  memset(c, 0, sizeof *c);
  tsr_net_opts_init(&c->net);
}

void tsr_run_config_from_net(tsr_run_config_t *c, const tsr_net_t *net, int64_t samples) {
  tsr_run_config_init(c);
  c->net = net->opts;
  c->net.batch = tsr_net_batch(net), c->net.grid_rows = tsr_net_grid_rows(net);
  c->samples = samples;
  c->memory = -1; /* the net is built */
}

static int ranks_of(const tsr_run_config_t *c) {
  return c->ranks > 0 ? c->ranks : tsr_dist_size();
}

static int grid_rows(const tsr_run_config_t *c) {
  return c->net.grid_rows > 1 ? c->net.grid_rows : 1;
}

static bool grid_columns(const tsr_sync_traits_t *t) {
  return t->grid_columns;
}

/* "--grid PrxPc: WHAT not supported under a grid yet[: WHY]; use --sync ... without them, or
 * --grid 1xP" (why: NULL, none said). */
static int refuse_under_grid(const tsr_run_config_t *c, const char *what, const char *why,
                             tsr_errbuf_t *err) {
  int ranks = ranks_of(c), pr = grid_rows(c);
  char ok[128];
  tsr__sync_list(ok, sizeof ok, grid_columns, true);
  return tsr_error_set(err, TSR_EINVAL,
                       "--grid %dx%d: %s not supported under a grid yet%s%s; use --sync %s "
                       "without them, or --grid 1x%d",
                       pr, c->grid_cols > 0 ? c->grid_cols : ranks / pr, what, why ? ": " : "",
                       why ? why : "", ok, ranks);
}

/* What the model's layers refuse of the run (a batch a layer cannot take, --sync-bn without a
 * batchnorm), once its layout is known; a model that does not lay out is left to the build,
 * which says why. */
static int check_layers(const tsr_run_config_t *c, const tsr_sync_t *sync, tsr_errbuf_t *err) {
  tsr_net_layout_t lay;
  if (tsr__net_layout(&lay, c->spec, c->inputs, c->classes, &c->net, 1, NULL)) return 0;
  int rc = 0, stats = 0;
  for (int i = 0; i < lay.n_layers && rc == 0; i++) {
    const tsr_layer_type_t *t = lay.layers[i].type;
    stats += t->batch_stats;
    if (t->check_batch) rc = t->check_batch(&lay.layers[i], c->net.batch, err);
  }
  tsr__net_layout_fini(&lay);
  if (rc == 0 && sync->sync_bn && stats == 0) {
    char model[200];
    tsr_model_describe(c->spec, c->inputs, model, sizeof model);
    rc = tsr_error_set(err, TSR_EINVAL,
                       "--sync-bn: model %s has no batchnorm layer, so there are no statistics "
                       "to reduce; leave --sync-bn out or add batchnorm layers",
                       model);
  }
  return rc;
}

int tsr_run_check(const tsr_run_config_t *c, tsr_errbuf_t *err) {
  tsr_sync_t none;
  tsr_sync_parse(&none, "none", NULL);
  const tsr_sync_t *sync = c->sync ? c->sync : &none;
  if (tsr_sync_check(sync, err)) return TSR_EINVAL;
  int ranks = ranks_of(c), pr = grid_rows(c);
  if (ranks > TSR_MAX_RANKS)
    return tsr_error_set(err, TSR_EINVAL, "at most %d ranks (got %d)", TSR_MAX_RANKS, ranks);
  long long cells = (long long)pr * c->grid_cols; /* both may be up to INT_MAX here */
  if (c->grid_cols > 0 && cells != ranks)
    return tsr_error_set(err, TSR_EINVAL,
                         "--grid %dx%d: Pr x Pc = %lld must equal the MPI ranks (%d); start mpirun "
                         "-np %lld, or pick Pr and Pc whose product is %d",
                         pr, c->grid_cols, cells, ranks, cells, ranks);
  if (ranks % pr)
    return tsr_error_set(err, TSR_EINVAL,
                         "--grid with %d rows needs a multiple of %d ranks (got %d): start mpirun "
                         "-np %d, or pick another Pr",
                         pr, pr, ranks, (ranks / pr + 1) * pr);
  bool grid = pr > 1, across = grid && ranks > pr; /* several grid columns */
  bool uneven = c->shares && c->shares->kind != TSR_SHARES_UNIFORM;
  char what[160];
  const tsr_sync_traits_t *traits = tsr_sync_traits(&sync->schedule);
  if (across && !traits->grid_columns) {
    char policy[64];
    tsr_sync_schedule_describe(&sync->schedule, policy, sizeof policy);
    snprintf(what, sizeof what, "--sync %s (averaged across several grid columns) is", policy);
    return refuse_under_grid(c, what, tsr__sync_policy(&sync->schedule)->grid_refusal, err);
  }
  const char *no_buckets = tsr__placement_no_buckets(sync);
  if (sync->bucket_mb > 0 && no_buckets)
    return tsr_error_set(err, TSR_EINVAL, "--bucket-mb: %s; leave --bucket-mb out", no_buckets);
  /* Under a grid a column is one replica: its ranks take its batch and shard together. */
  if (grid && c->shares && c->shares->kind == TSR_SHARES_FIXED && c->shares->n != ranks / pr)
    return tsr_error_set(err, TSR_EINVAL,
                         "--shares: %d value%s for the %d grid column%s of --grid %dx%d; give one "
                         "share per grid column (its %d ranks take its batch together)",
                         c->shares->n, c->shares->n == 1 ? "" : "s", ranks / pr,
                         ranks / pr == 1 ? "" : "s", pr, ranks / pr, pr);
  if (!grid && c->shares && tsr_shares_check(c->shares, ranks, err)) return TSR_EINVAL;
  /* Under a grid shares weigh the columns' samples; the homes stay where the rows put them. */
  const char *flat_only = tsr__members_flat_only(sync, uneven && !grid);
  /* With --node-size the nodes are known before the run: each grid row must lie on them alike
   * (the nodes MPI sees are checked when the replicas are made). */
  if (!flat_only && grid && sync->node_size > 0) {
    int *node_of = malloc(sizeof(int) * (size_t)ranks), nodes, per_node;
    if (!node_of)
      return tsr_error_set(err, TSR_ENOMEM, "checking the nodes of %d ranks: out of memory", ranks);
    for (int q = 0; q < ranks; q++)
      node_of[q] = q / sync->node_size;
    flat_only = tsr__members_row_nodes(node_of, ranks, pr, &nodes, &per_node);
    free(node_of);
  }
  if (sync->allreduce == TSR_ALLREDUCE_TWO_LEVEL && flat_only)
    return tsr_error_set(err, TSR_EINVAL, "--allreduce two-level: %s; use --allreduce flat or auto",
                         flat_only);
  if (sync->sync_bn && ranks < 2)
    return tsr_error_set(err, TSR_EINVAL,
                         "--sync-bn reduces batchnorm statistics across MPI ranks, and this run "
                         "has one: start it under mpirun -np P (P >= 2), or leave --sync-bn out");
  if (sync->sync_bn && grid && ranks / pr == 1)
    return tsr_error_set(err, TSR_EINVAL,
                         "--sync-bn --grid %dx1: one grid column, whose batchnorm statistics are "
                         "already the whole batch's; leave --sync-bn out, or use a grid of several "
                         "columns (e.g. --grid 1x%d)",
                         pr, ranks);
  if (c->spec && c->spec->n_layers > 0) return check_layers(c, sync, err);
  return 0;
}

/* One more thing for rank 0 to say. */
static void warn(tsr_run_setup_t *s, const char *fmt, ...) {
  if (s->n_warnings == TSR_RUN_WARNINGS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->warnings[s->n_warnings++], sizeof s->warnings[0], fmt, ap);
  va_end(ap);
}

/* bytes as "12.3 GB", "45.6 MB", "7.8 kB" (powers of 1000) or "0 bytes". */
static const char *show_bytes(char *buf, size_t size, int64_t bytes) {
  double b = (double)bytes;
  if (b >= 1e9)
    snprintf(buf, size, "%.1f GB", b / 1e9);
  else if (b >= 1e6)
    snprintf(buf, size, "%.1f MB", b / 1e6);
  else if (b >= 1e3)
    snprintf(buf, size, "%.1f kB", b / 1e3);
  else
    snprintf(buf, size, "%lld bytes", (long long)bytes);
  return buf;
}

/* The net's memory, estimated before it is built, against what this rank has left: more is
 * refused with the estimate's parts and the largest --batch that fits (activations grow with
 * the batch; a wide input with a CNN can need more than any batch allows); more than half is
 * said aloud. A CSV of 10^6 columns with --model cnn used to grow until the kernel killed it. */
static int check_memory(tsr_run_setup_t *s, const tsr_run_config_t *c, tsr_errbuf_t *err) {
  if (!c->spec || c->memory < 0) return 0;
  tsr_net_memory_t *m = &s->memory;
  int rc = tsr_net_estimate(m, c->spec, c->inputs, c->classes, &c->net, err);
  const char *source = c->memory_source ? c->memory_source : "given";
  int64_t avail = c->memory > 0 ? c->memory : tsr_runtime_memory_available(&source);
  if (rc || avail < 0 || m->total <= avail / 2) return rc;
  char total[32], free_[32], act[32], params[32], opt[32], work[32];
  show_bytes(total, sizeof total, m->total);
  show_bytes(free_, sizeof free_, avail);
  if (m->total <= avail) {
    warn(s,
         "the network will take about %s of memory, more than half of the %s available (%s); a "
         "lower --batch takes less",
         total, free_, source);
    return 0;
  }
  tsr_net_opts_t o = c->net;
  tsr_net_memory_t fit = *m;
  while (o.batch > 1 && fit.total > avail) {
    o.batch /= 2;
    if (tsr_net_estimate(&fit, c->spec, c->inputs, c->classes, &o, NULL)) break;
  }
  char way[160], fit_total[32];
  if (fit.total <= avail)
    snprintf(way, sizeof way, "lower --batch (--batch %d needs about %s) or choose a smaller model",
             o.batch, show_bytes(fit_total, sizeof fit_total, fit.total));
  else
    snprintf(way, sizeof way,
             "even --batch 1 needs about %s: choose a smaller model, or fewer input features",
             show_bytes(fit_total, sizeof fit_total, fit.total));
  return tsr_error_set(err, TSR_ENOMEM,
                       "the network needs about %s of memory (parameters and gradients %s, "
                       "optimizer state %s, activations %s for a batch of %d, workspace %s), more "
                       "than the %s available (%s); %s",
                       total, show_bytes(params, sizeof params, m->params + m->grads),
                       show_bytes(opt, sizeof opt, m->optimizer),
                       show_bytes(act, sizeof act, m->activations), c->net.batch,
                       show_bytes(work, sizeof work, m->workspace), free_, source, way);
}

/* The per-replica arrays of s (NULL before), for s->replicas. */
static int alloc_per_replica(tsr_run_setup_t *s, tsr_errbuf_t *err) {
  size_t n = (size_t)s->replicas;
  s->share = calloc(n, sizeof *s->share), s->batch = calloc(n, sizeof *s->batch);
  s->lo = calloc(n + 1, sizeof *s->lo);
  if (s->share && s->batch && s->lo) return 0;
  free(s->share), free(s->batch), free(s->lo);
  s->share = NULL, s->batch = NULL, s->lo = NULL;
  return tsr_error_set(err, TSR_ENOMEM, "the run's setup: out of memory for %d replicas",
                       s->replicas);
}

void tsr_run_setup_fini(tsr_run_setup_t *s) {
  if (!s) return;
  free(s->share), free(s->batch), free(s->lo);
  tsr_shares_fini(&s->shares);
  memset(s, 0, sizeof *s);
}

int tsr__run_setup_copy(tsr_run_setup_t *dst, const tsr_run_setup_t *src, tsr_errbuf_t *err) {
  tsr_run_setup_fini(dst);
  *dst = *src;
  dst->share = NULL, dst->batch = NULL, dst->lo = NULL;
  if (tsr_shares_copy(&dst->shares, &src->shares))
    return tsr_error_set(err, TSR_ENOMEM, "the run's setup: out of memory for %d shares",
                         src->shares.n);
  TSR_TRY(alloc_per_replica(dst, err));
  size_t n = (size_t)src->replicas;
  if (src->share) memcpy(dst->share, src->share, n * sizeof *dst->share);
  if (src->batch) memcpy(dst->batch, src->batch, n * sizeof *dst->batch);
  if (src->lo) memcpy(dst->lo, src->lo, (n + 1) * sizeof *dst->lo);
  return 0;
}

int tsr__run_shard(tsr_run_setup_t *s, tsr_errbuf_t *err) {
  int ranks = s->replicas;
  int64_t n = s->samples, *part = malloc(sizeof *part * (size_t)ranks);
  double *of_batch = malloc(sizeof *of_batch * (size_t)ranks);
  if (!part || !of_batch) {
    free(part), free(of_batch);
    return tsr_error_set(err, TSR_ENOMEM, "the run's shards: out of memory for %d replicas", ranks);
  }
  tsr_shares_get(&s->shares, ranks, s->share);
  bool uniform = s->shares.kind == TSR_SHARES_UNIFORM || ranks == 1 ||
                 (s->shares.kind == TSR_SHARES_AUTO && s->shares.n != ranks);
  for (int q = 0; q < ranks; q++)
    s->batch[q] = s->uniform_batch;
  if (uniform) {
    for (int q = 0; q <= ranks; q++)
      s->lo[q] = n * q / ranks;
  } else {
    if (s->step_sync) {
      int64_t g = s->global_batch;
      tsr_shares_split(s->share, ranks, g, 1, s->batch);
      for (int q = 0; q < ranks; q++)
        of_batch[q] = (double)s->batch[q] / (double)g;
      tsr_shares_split(of_batch, ranks, n, 1, part);
    } else {
      tsr_shares_split(s->share, ranks, n, 1, part);
    }
    s->lo[0] = 0;
    for (int q = 0; q < ranks; q++)
      s->lo[q + 1] = s->lo[q] + part[q];
  }
  s->steps = 0;
  for (int q = 0; q < ranks; q++) {
    int64_t size = s->lo[q + 1] - s->lo[q];
    int64_t steps = (size + s->batch[q] - 1) / s->batch[q];
    s->steps = steps > s->steps ? steps : s->steps;
  }
  free(part), free(of_batch);
  return 0;
}

int tsr_run_setup(tsr_run_setup_t *s, const tsr_run_config_t *c, tsr_errbuf_t *err) {
  tsr_run_setup_fini(s);
  s->ranks = ranks_of(c), s->rank = c->ranks > 0 ? c->rank : tsr_dist_rank();
  s->net = c->net;
  s->samples = c->samples;
  if (c->sync)
    s->sync = *c->sync;
  else
    tsr_sync_parse(&s->sync, "none", NULL);
  if (c->shares && tsr_shares_copy(&s->shares, c->shares)) /* else zero: uniform */
    return tsr_error_set(err, TSR_ENOMEM, "the run's setup: out of memory for %d shares",
                         c->shares->n);
  const tsr_sync_traits_t *t = tsr_sync_traits(&s->sync.schedule);
  if (s->ranks == 1 && t->needs_ranks) {
    char policy[64];
    tsr_sync_schedule_describe(&s->sync.schedule, policy, sizeof policy);
    warn(s,
         "--sync %s averages the replicas of several MPI ranks, but this is one process, so it "
         "trains alone and averages nothing; start ranks with mpirun -np N",
         policy);
  }
  TSR_TRY(tsr_run_check(c, err));
  if (c->samples <= 0 || c->samples > INT32_MAX)
    return tsr_error_set(err, TSR_EINVAL, "the training set is empty or too large (%lld samples)",
                         (long long)c->samples);
  if (c->net.batch < 1)
    return tsr_error_set(err, TSR_EINVAL, "--batch %d: the batch must be 1 or more", c->net.batch);
  s->replicas = s->ranks / grid_rows(c), s->replica = s->rank / grid_rows(c);
  s->uniform_batch = c->net.batch;
  s->global_batch = c->global_batch > 0 ? c->global_batch : c->net.batch * s->replicas;
  s->calibration = c->calibration > 0 ? c->calibration : CALIBRATION_SECONDS;
  /* --sync-bn's statistics meet at every step too, whatever averages the weights. */
  s->step_sync = t->meets_every_step || (s->sync.sync_bn && s->ranks > 1);
  s->measure = s->shares.kind == TSR_SHARES_AUTO && s->ranks > 1;
  /* Each replica's step takes --batch of its shard; a larger batch only pads every step. */
  int64_t shard = (c->samples + s->replicas - 1) / s->replicas;
  if (c->net.batch > shard)
    warn(s,
         "--batch %d is more than the %lld training samples of %s: every step is padded to %d "
         "rows; --batch %lld takes the same steps in less memory",
         c->net.batch, (long long)shard, s->ranks > 1 ? "a rank" : "the run", c->net.batch,
         (long long)shard);
  TSR_TRY(check_memory(s, c, err));
  TSR_TRY(alloc_per_replica(s, err));
  return tsr__run_shard(s, err);
}

int tsr_run_setup_net(tsr_run_setup_t *s, tsr_net_t *net, const tsr_dataset_t *train,
                      tsr_errbuf_t *err) {
  s->rebuild = false;
  if (s->ranks == 1 || s->shares.kind == TSR_SHARES_UNIFORM) return 0;
  if (s->measure) {
    TSR_TRY(tsr_train_calibrate(net, train, s->calibration, &s->shares, err));
    s->measure = false;
    TSR_TRY(tsr__run_shard(s, err));
  }
  if (!s->step_sync) return 0;
  /* Each replica's batch is its share of the global batch: batch-row tiles that give every
   * replica as many tiles as the others. */
  int *rows = malloc(sizeof(int) * (size_t)s->replicas), mb, nb, me = s->replica;
  if (!rows)
    return tsr_error_set(err, TSR_ENOMEM,
                         "the run's batch-row tiles: out of memory for %d replicas", s->replicas);
  tsr_net_tiles(net, &mb, &nb);
  tsr_shares_tile_rows(s->batch, s->replicas, s->uniform_batch, mb, rows);
  int mine = rows[me];
  free(rows);
  if (s->batch[me] == tsr_net_batch(net) && mine == mb) return 0;
  s->net.batch = (int)s->batch[me];
  s->net.tile_rows = mine, s->net.tile_cols = nb;
  s->rebuild = true;
  return 0;
}

/* How averages over every rank travel (tsr_run_setup_t.averaging), by the engine's rule on the
 * nodes it will use: --node-size's, or those MPI sees (collective, as is agreeing on a failed
 * allocation before it); under a grid a grid row's ranks on them. */
static int describe_averaging(tsr_run_setup_t *s, const tsr_run_config_t *c, tsr_errbuf_t *err) {
  int g = s->sync.node_size, pr = grid_rows(c), nodes = 1, per_node = s->ranks / pr;
  int *node_of = calloc((size_t)s->ranks, sizeof *node_of);
  int rc = tsr_dist_agree(
      node_of ? 0
              : tsr_error_set(err, TSR_ENOMEM, "the nodes of %d ranks: out of memory", s->ranks),
      err, err);
  if (rc) {
    free(node_of);
    return rc;
  }
  if (g > 0)
    for (int q = 0; q < s->ranks; q++)
      node_of[q] = q / g;
  else if (tsr_dist_active())
    tsr_dist_nodes(node_of);
  bool alike = !tsr__members_row_nodes(node_of, s->ranks, pr, &nodes, &per_node);
  free(node_of);
  const tsr_sync_traits_t *t = tsr_sync_traits(&s->sync.schedule);
  if (s->replicas < 2 || !(t->meets_every_step || t->averages_weights)) return 0; /* none */
  bool uneven = c->shares && c->shares->kind != TSR_SHARES_UNIFORM && pr == 1;
  char buckets[40] = "";
  if (s->sync.bucket_mb > 0)
    snprintf(buckets, sizeof buckets, ", buckets of %g MiB", (double)s->sync.bucket_mb);
  if (alike && tsr__members_two_level(&s->sync, uneven, nodes, per_node))
    snprintf(s->averaging, sizeof s->averaging, "two-level, %s%d nodes of %d ranks%s",
             pr > 1 ? "each grid row on " : "", nodes, per_node, buckets);
  else
    snprintf(s->averaging, sizeof s->averaging, "flat%s", buckets);
  return 0;
}

int tsr_run_build(tsr_run_setup_t *s, tsr_net_t **net, const tsr_run_config_t *c,
                  const tsr_dataset_t *train, tsr_errbuf_t *err) {
  *net = NULL;
  if (!c->spec)
    return tsr_dist_agree(tsr_error_set(err, TSR_EINVAL, "tsr_run_build needs the model's spec"),
                          err, err);
  int rc = tsr_dist_agree(tsr_run_setup(s, c, err), err, err);
  if (rc == 0) rc = describe_averaging(s, c, err);
  if (rc == 0)
    rc =
        tsr_dist_agree(tsr_net_create(net, c->spec, c->inputs, c->classes, &s->net, err), err, err);
  if (rc == 0) rc = tsr_dist_agree(tsr_run_setup_net(s, *net, train, err), err, err);
  if (rc == 0 && s->rebuild) {
    tsr_net_destroy(net);
    rc =
        tsr_dist_agree(tsr_net_create(net, c->spec, c->inputs, c->classes, &s->net, err), err, err);
  }
  if (rc) tsr_net_destroy(net);
  return rc;
}
