/* A trace's dependencies and transfers, rebuilt from the tasks' recorded data accesses (what
 * is rebuilt and what is not: trace_graph.h). Each rank's tasks are replayed in submission order
 * through a table of the data they touched; the transfers are matched through a table of each
 * rank's writers of each StarPU-MPI tag. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "io/trace_graph.h"
#include "tessera/error.h"

/* Clocks of different ranks agree to within the skew of a barrier's exit (observe.c): a
 * writer that ended up to this long after the reader started still counts as before it. */
#define SKEW_US 50.0

typedef struct {
  int64_t *v, n, cap;
} vec_t;

static bool push(vec_t *a, int64_t x) {
  if (a->n == a->cap) {
    int64_t cap = a->cap ? 2 * a->cap : 4;
    int64_t *v = realloc(a->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    a->v = v, a->cap = cap;
  }
  a->v[a->n++] = x;
  return true;
}

static bool push_all(vec_t *a, const vec_t *from) {
  for (int64_t i = 0; i < from->n; i++)
    if (!push(a, from->v[i])) return false;
  return true;
}

/* Keys to value indices, open addressing; the values live in the caller's array. */
typedef struct {
  uint64_t *keys;
  int64_t *vals; /* -1: empty */
  int64_t cap, n;
} map_t;

static uint64_t mix(uint64_t k) {
  k ^= k >> 33, k *= 0xff51afd7ed558ccdULL, k ^= k >> 33;
  return k;
}

static bool map_grow(map_t *m) {
  int64_t cap = m->cap ? 2 * m->cap : 1024;
  uint64_t *keys = malloc((size_t)cap * sizeof *keys);
  int64_t *vals = malloc((size_t)cap * sizeof *vals);
  if (!keys || !vals) {
    free(keys), free(vals);
    return false;
  }
  for (int64_t i = 0; i < cap; i++)
    vals[i] = -1;
  for (int64_t i = 0; i < m->cap; i++) {
    if (m->vals[i] < 0) continue;
    int64_t s = (int64_t)(mix(m->keys[i]) & (uint64_t)(cap - 1));
    while (vals[s] >= 0)
      s = (s + 1) & (cap - 1);
    keys[s] = m->keys[i], vals[s] = m->vals[i];
  }
  free(m->keys), free(m->vals);
  m->keys = keys, m->vals = vals, m->cap = cap;
  return true;
}

/* The value index of key, or -1; with add, a new key gets index m->n (the caller appends). */
static int64_t map_find(map_t *m, uint64_t key, bool add, bool *oom) {
  if (add && 2 * (m->n + 1) > m->cap && !map_grow(m)) {
    *oom = true;
    return -1;
  }
  if (m->cap == 0) return -1;
  int64_t s = (int64_t)(mix(key) & (uint64_t)(m->cap - 1));
  while (m->vals[s] >= 0) {
    if (m->keys[s] == key) return m->vals[s];
    s = (s + 1) & (m->cap - 1);
  }
  if (!add) return -1;
  m->keys[s] = key, m->vals[s] = m->n;
  return m->n++;
}

static void map_free(map_t *m) {
  free(m->keys), free(m->vals);
  *m = (map_t){0};
}

/* What sequential consistency remembers of one datum. */
typedef struct {
  vec_t last;       /* the last write: one task, or a run of commutative ones */
  vec_t readers;    /* since the last write */
  vec_t before_run; /* what the open commutative run waits for */
  bool in_run;
} datum_t;

/* The dependencies of task t's access to d, into out (event indices); then d remembers it. */
static bool record_access(datum_t *d, int mode, int64_t t, vec_t *out) {
  if (!(mode & TSR__ACCESS_W)) {
    d->in_run = false;
    return push_all(out, &d->last) && push(&d->readers, t);
  }
  const vec_t *before = d->readers.n ? &d->readers : &d->last;
  if ((mode & TSR__ACCESS_COMMUTE) && d->in_run)
    return push_all(out, &d->before_run) && push(&d->last, t);
  if (!push_all(out, before)) return false;
  if (mode & TSR__ACCESS_COMMUTE) {
    d->before_run.n = 0;
    if (!push_all(&d->before_run, before)) return false;
  }
  d->in_run = (mode & TSR__ACCESS_COMMUTE) != 0;
  d->last.n = d->readers.n = 0;
  return push(&d->last, t);
}

static uint64_t data_key(const tsr_trace_event_t *e, int d) {
  return e->data[d] | (e->mode[d] & TSR__ACCESS_TAGGED ? 1ULL << 63 : 0);
}

typedef struct {
  const tsr_trace_t *tr;
  tsr_trace_event_t *ev; /* every event, fetched once */
  int64_t n;
} events_t;

static const events_t *sort_ctx;

static int by_rank_job(const void *a, const void *b) {
  const tsr_trace_event_t *x = &sort_ctx->ev[*(const int64_t *)a],
                          *y = &sort_ctx->ev[*(const int64_t *)b];
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return x->submitted < y->submitted ? -1 : x->submitted > y->submitted;
}

static int by_end(const void *a, const void *b) {
  const tsr_trace_event_t *x = &sort_ctx->ev[*(const int64_t *)a],
                          *y = &sort_ctx->ev[*(const int64_t *)b];
  double ex = x->ts + x->dur, ey = y->ts + y->dur;
  return ex < ey ? -1 : ex > ey;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Each rank's tasks replayed in submission order: the pairs (task, dependency). */
static bool local_deps(const events_t *E, const int64_t *order, int64_t ntasks, vec_t *task,
                       vec_t *dep) {
  map_t map = {0};
  datum_t *data = NULL;
  int64_t ndata = 0, cap = 0;
  bool ok = true, oom = false;
  vec_t mine = {0};
  for (int64_t i = 0; i < ntasks && ok; i++) {
    const tsr_trace_event_t *e = &E->ev[order[i]];
    if (i > 0 && e->rank != E->ev[order[i - 1]].rank) { /* a new rank: forget the data */
      for (int64_t k = 0; k < ndata; k++)
        data[k].last.n = data[k].readers.n = data[k].before_run.n = 0, data[k].in_run = false;
      for (int64_t s = 0; s < map.cap; s++)
        map.vals[s] = -1;
      map.n = 0;
    }
    mine.n = 0;
    for (int d = 0; d < e->ndata && ok; d++) {
      int64_t k = map_find(&map, data_key(e, d), true, &oom);
      if (k < 0) {
        ok = false;
        break;
      }
      if (k >= cap) {
        int64_t c = cap ? 2 * cap : 256;
        datum_t *p = realloc(data, (size_t)c * sizeof *p);
        if (!p) {
          ok = false;
          break;
        }
        memset(p + cap, 0, (size_t)(c - cap) * sizeof *p);
        data = p, cap = c;
      }
      if (k >= ndata) ndata = k + 1;
      ok = record_access(&data[k], e->mode[d], order[i], &mine);
    }
    qsort(mine.v, (size_t)mine.n, sizeof *mine.v, cmp_i64);
    for (int64_t j = 0; j < mine.n && ok; j++)
      if (mine.v[j] != order[i] && (j == 0 || mine.v[j] != mine.v[j - 1]))
        ok = push(task, order[i]) && push(dep, mine.v[j]);
  }
  for (int64_t k = 0; k < cap; k++)
    free(data[k].last.v), free(data[k].readers.v), free(data[k].before_run.v);
  free(data), free(mine.v), map_free(&map);
  return ok;
}

/* The writer of the tile consumer c read as data d from its owner (trace_graph.h), or -1. */
static int64_t producer(const events_t *E, const vec_t *writers, int64_t c) {
  const tsr_trace_event_t *e = &E->ev[c];
  int64_t lo = 0, hi = writers->n; /* the first writer that ended after c started */
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    const tsr_trace_event_t *w = &E->ev[writers->v[mid]];
    if (w->ts + w->dur <= e->ts + SKEW_US)
      lo = mid + 1;
    else
      hi = mid;
  }
  int64_t k = lo - 1;
  while (e->batch > 0 && k > 0 && E->ev[writers->v[k]].batch > e->batch)
    k--;
  if (k >= 0 && e->batch > 0 && E->ev[writers->v[k]].batch > e->batch) return -1;
  return k >= 0 ? writers->v[k] : -1;
}

/* Writers of each (rank, tag), by end; then one flow per tile a task read from another rank. */
static bool transfers(const events_t *E, tsr_trace_graph_t *g) {
  map_t map = {0};
  vec_t *writers = NULL, from = {0}, to = {0}, tags = {0};
  int64_t nw = 0;
  bool ok = true, oom = false;
  for (int64_t k = 0; k < E->n && ok; k++) {
    const tsr_trace_event_t *e = &E->ev[k];
    for (int d = 0; d < (e->span ? 0 : e->ndata) && ok; d++) {
      if (!(e->mode[d] & TSR__ACCESS_TAGGED) || !(e->mode[d] & TSR__ACCESS_W)) continue;
      int64_t w = map_find(&map, e->data[d] << 11 | (uint64_t)e->rank, true, &oom);
      if (w < 0) ok = false;
      if (ok && w >= nw) {
        vec_t *p = realloc(writers, (size_t)(w + 1) * sizeof *p);
        if (!p) ok = false;
        if (ok) writers = p, writers[w] = (vec_t){0}, nw = w + 1;
      }
      if (ok) ok = push(&writers[w], k);
    }
  }
  for (int64_t w = 0; w < nw && ok; w++)
    qsort(writers[w].v, (size_t)writers[w].n, sizeof(int64_t), by_end);
  for (int64_t k = 0; k < E->n && ok; k++) {
    const tsr_trace_event_t *e = &E->ev[k];
    for (int d = 0; d < (e->span ? 0 : e->ndata) && ok; d++) {
      int owner = e->owner[d];
      if (!(e->mode[d] & TSR__ACCESS_TAGGED) || !(e->mode[d] & TSR__ACCESS_R) || owner < 0 ||
          owner == e->rank)
        continue;
      int64_t w = map_find(&map, e->data[d] << 11 | (uint64_t)owner, false, &oom);
      int64_t p = w >= 0 ? producer(E, &writers[w], k) : -1;
      if (p >= 0) ok = push(&from, p) && push(&to, k) && push(&tags, (int64_t)e->data[d]);
    }
  }
  for (int64_t w = 0; w < nw; w++)
    free(writers[w].v);
  free(writers), map_free(&map);
  g->nflows = from.n, g->flow_from = from.v, g->flow_to = to.v, g->flow_tag = (uint64_t *)tags.v;
  return ok;
}

int tsr__trace_graph_build(tsr_trace_graph_t *g, const tsr_trace_t *tr) {
  *g = (tsr_trace_graph_t){.n = tsr__trace_count(tr)};
  events_t E = {.tr = tr, .n = g->n, .ev = malloc((size_t)(g->n ? g->n : 1) * sizeof *E.ev)};
  int64_t *order = malloc((size_t)(g->n ? g->n : 1) * sizeof *order);
  g->dep_start = calloc((size_t)g->n + 1, sizeof *g->dep_start);
  vec_t task = {0}, dep = {0};
  bool ok = E.ev && order && g->dep_start;
  int64_t ntasks = 0;
  for (int64_t k = 0; k < g->n && ok; k++) {
    tsr__trace_event(tr, k, &E.ev[k]);
    if (!E.ev[k].span) order[ntasks++] = k;
  }
  sort_ctx = &E;
  if (ok) qsort(order, (size_t)ntasks, sizeof *order, by_rank_job);
  ok = ok && local_deps(&E, order, ntasks, &task, &dep) && transfers(&E, g);
  sort_ctx = NULL;
  g->id = calloc((size_t)(g->n ? g->n : 1), sizeof *g->id);
  ok = ok && g->id;
  for (int64_t i = 0; i < ntasks && ok; i++)
    g->id[order[i]] =
        i > 0 && E.ev[order[i]].rank == E.ev[order[i - 1]].rank ? g->id[order[i - 1]] + 1 : 1;
  if (ok) {
    /* Pairs to rows: counts, prefix sums, then each task's dependencies in place. */
    g->deps = malloc((size_t)(dep.n ? dep.n : 1) * sizeof *g->deps);
    ok = g->deps != NULL;
    for (int64_t i = 0; i < task.n && ok; i++)
      g->dep_start[task.v[i] + 1]++;
    for (int64_t k = 0; k < g->n && ok; k++)
      g->dep_start[k + 1] += g->dep_start[k];
    int64_t *fill = ok ? calloc((size_t)(g->n ? g->n : 1), sizeof *fill) : NULL;
    ok = ok && fill;
    for (int64_t i = 0; i < task.n && ok; i++)
      g->deps[g->dep_start[task.v[i]] + fill[task.v[i]]++] = dep.v[i];
    free(fill);
  }
  free(E.ev), free(order), free(task.v), free(dep.v);
  if (!ok) {
    tsr__trace_graph_fini(g);
    return TSR_ENOMEM;
  }
  return 0;
}

void tsr__trace_graph_fini(tsr_trace_graph_t *g) {
  free(g->id), free(g->dep_start), free(g->deps), free(g->flow_from), free(g->flow_to),
      free(g->flow_tag);
  *g = (tsr_trace_graph_t){0};
}
