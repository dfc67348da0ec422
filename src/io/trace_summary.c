/* tessera trace-summary: reads back a trace that tsr_runtime_trace_write wrote (trace.c) and
 * says where the time went: busy time per codelet and kind of worker, busy and idle time per
 * worker, the main thread's longest waits, and the critical path of one training step, as
 * tables or as one JSON object. The file is parsed whole with cJSON (a trace limited with
 * --trace-steps stays small); anything that is not a tessera trace, or an event without the
 * fields tessera writes, is refused with the file and the event named. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/runtime.h"

#define MAIN_THREAD_TID 1000 /* trace.c's track for the main thread */

typedef struct {
  int pid, tid;
  const char *name; /* StarPU's worker name, e.g. "CPU 0" (in the cJSON tree) */
  char kind[16];    /* its first word: CPU, OpenCL */
  int64_t tasks;
  double busy; /* us */
} worker_t;

typedef struct {
  int pid, worker, layer, ti, tj;
  int64_t step, id;
  double ts, dur; /* us */
  const char *codelet;
  const char *impl;  /* the implementation that ran, where the codelet has several; "" else */
  const cJSON *deps; /* array of ids on the same rank, or NULL */
} task_t;

typedef struct {
  int pid;
  const char *name;
  double ts, dur;
} span_t;

typedef struct {
  int64_t id, task; /* flow id; the task (index) it leaves or reaches */
  int pid;
  int64_t task_id;
} flow_end_t;

typedef struct {
  cJSON *root;
  const char *path;
  int ranks;
  bool has_deps; /* format 2: tasks carry id and deps, transfers are flows */
  worker_t *workers;
  int nworkers;
  task_t *tasks;
  int64_t ntasks;
  span_t *spans;
  int64_t nspans;
  int64_t nflows, *flow_from, *flow_to; /* task indices */
  flow_end_t *starts, *finishes;        /* the flow events read */
  int64_t nstarts, nfinishes;
  double *rank_t0, *rank_t1; /* each rank's first and last event (us) */
} trace_t;

typedef struct {
  const char *codelet, *impl, *kind;
  int64_t tasks;
  double busy;
} busy_t;

static void trace_free(trace_t *t) {
  cJSON_Delete(t->root);
  free(t->workers), free(t->tasks), free(t->spans), free(t->flow_from), free(t->flow_to);
  free(t->rank_t0), free(t->rank_t1), free(t->starts), free(t->finishes);
  memset(t, 0, sizeof *t);
}

/* The whole file, NUL-terminated, into *buf. */
static int read_file(const char *path, char **buf, size_t *len, tsr_errbuf_t *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return tsr_error_set(err, TSR_EIO, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  while (b) {
    n += fread(b + n, 1, cap - n - 1, f);
    if (n < cap - 1) break;
    char *bigger = realloc(b, 2 * cap);
    if (!bigger) free(b);
    b = bigger, cap *= 2;
  }
  bool failed = ferror(f);
  fclose(f);
  if (!b) return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory reading it", path);
  if (failed) {
    free(b);
    return tsr_error_set(err, TSR_EIO, "%s: cannot read", path);
  }
  b[n] = '\0';
  *buf = b, *len = n;
  return 0;
}

static bool num(const cJSON *o, const char *key, double *v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(x)) return false;
  *v = x->valuedouble;
  return true;
}

/* A JSON number as a whole number, saturated at +-2^62 (a cast of a larger double, or of
 * 1e999's infinity, is undefined behaviour); what is out of range then fails the range checks. */
static int64_t whole(double v) {
  if (v != v) return 0;
  return v >= 0x1p62 ? INT64_C(1) << 62 : v <= -0x1p62 ? -(INT64_C(1) << 62) : (int64_t)v;
}

static int64_t int_or(const cJSON *o, const char *key, int64_t dflt) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(x) ? whole(x->valuedouble) : dflt;
}

static int cmp_worker(const void *a, const void *b) {
  const worker_t *x = a, *y = b;
  return x->pid != y->pid ? (x->pid < y->pid ? -1 : 1) : (x->tid > y->tid) - (x->tid < y->tid);
}

static int find_worker(const trace_t *t, int pid, int tid) {
  int lo = 0, hi = t->nworkers - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    worker_t key = {.pid = pid, .tid = tid};
    int c = cmp_worker(&key, &t->workers[mid]);
    if (c == 0) return mid;
    if (c < 0)
      hi = mid - 1;
    else
      lo = mid + 1;
  }
  return -1;
}

/* Tasks sorted by (rank, id) for looking ids up. */
static const trace_t *sort_trace;
static int cmp_task_id(const void *a, const void *b) {
  const task_t *x = &sort_trace->tasks[*(const int64_t *)a],
               *y = &sort_trace->tasks[*(const int64_t *)b];
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

static int64_t find_task(const trace_t *t, const int64_t *by_id, int pid, int64_t id) {
  int64_t lo = 0, hi = t->ntasks - 1;
  while (lo <= hi) {
    int64_t mid = (lo + hi) / 2;
    const task_t *m = &t->tasks[by_id[mid]];
    int c = pid != m->pid ? (pid < m->pid ? -1 : 1) : (id > m->id) - (id < m->id);
    if (c == 0) return by_id[mid];
    if (c < 0)
      hi = mid - 1;
    else
      lo = mid + 1;
  }
  return -1;
}

static int cmp_flow_end(const void *a, const void *b) {
  const flow_end_t *x = a, *y = b;
  return (x->id > y->id) - (x->id < y->id);
}

static int link_tasks(trace_t *t, tsr_errbuf_t *err);

/* Phase 1: the file into t, every event checked. */
static int load(trace_t *t, const char *path, tsr_errbuf_t *err) {
  memset(t, 0, sizeof *t);
  t->path = path;
  char *buf = NULL;
  size_t len = 0;
  int rc = read_file(path, &buf, &len, err);
  if (rc) return rc;
  const char *end = NULL;
  t->root = cJSON_ParseWithLengthOpts(buf, len, &end, false);
  if (!t->root) {
    long line = 1;
    for (const char *p = buf; end && p < end; p++)
      line += *p == '\n';
    free(buf);
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: not JSON (line %ld); tessera trace-summary reads the files "
                         "`tessera train --trace FILE.json` writes",
                         path, line);
  }
  free(buf);
  const cJSON *other = cJSON_GetObjectItemCaseSensitive(t->root, "otherData");
  const cJSON *source = cJSON_GetObjectItemCaseSensitive(other, "source");
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(t->root, "traceEvents");
  if (!cJSON_IsString(source) || strncmp(source->valuestring, "tessera", 7) != 0 ||
      !cJSON_IsArray(events))
    return tsr_error_set(err, TSR_EFORMAT,
                         "%s: not a tessera trace (no otherData.source naming tessera, or no "
                         "traceEvents); `tessera train --trace FILE.json` writes one",
                         path);
  int64_t ranks = int_or(other, "ranks", 1);
  t->has_deps = int_or(other, "format", 1) >= 2;
  if (ranks < 1 || ranks > 1 << 20)
    return tsr_error_set(err, TSR_EFORMAT, "%s: otherData.ranks %lld is not a rank count", path,
                         (long long)ranks);
  t->ranks = (int)ranks;
  int64_t n = cJSON_GetArraySize(events);
  t->workers = calloc((size_t)n + 1, sizeof *t->workers);
  t->tasks = calloc((size_t)n + 1, sizeof *t->tasks);
  t->spans = calloc((size_t)n + 1, sizeof *t->spans);
  flow_end_t *starts = t->starts = calloc((size_t)n + 1, sizeof *starts),
             *finishes = t->finishes = calloc((size_t)n + 1, sizeof *finishes);
  int64_t nstarts = 0, nfinishes = 0;
  t->rank_t0 = malloc((size_t)t->ranks * sizeof *t->rank_t0);
  t->rank_t1 = malloc((size_t)t->ranks * sizeof *t->rank_t1);
  if (!t->workers || !t->tasks || !t->spans || !starts || !finishes || !t->rank_t0 || !t->rank_t1)
    return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", path);
  for (int r = 0; r < t->ranks; r++)
    t->rank_t0[r] = INFINITY, t->rank_t1[r] = -INFINITY;
  /* Workers first (their names come in metadata events), then tasks need them. */
  int64_t k = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    k++;
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph"),
                *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    const cJSON *tname = cJSON_GetObjectItemCaseSensitive(args, "name");
    int64_t pid = int_or(e, "pid", -1), tid = int_or(e, "tid", -1);
    if (cJSON_IsString(ph) && strcmp(ph->valuestring, "M") == 0 && cJSON_IsString(name) &&
        strcmp(name->valuestring, "thread_name") == 0 && tid != MAIN_THREAD_TID &&
        cJSON_IsString(tname)) {
      /* The report indexes each rank's times by the worker's rank. */
      if (pid < 0 || pid >= t->ranks || tid < 0 || tid > INT_MAX)
        return tsr_error_set(err, TSR_EFORMAT,
                             "%s: event %lld: a worker track (thread_name) needs pid, a rank below "
                             "%d, and tid, a worker number",
                             path, (long long)k, t->ranks);
      worker_t *w = &t->workers[t->nworkers++];
      w->pid = (int)pid, w->tid = (int)tid, w->name = tname->valuestring;
      snprintf(w->kind, sizeof w->kind, "%.*s", (int)strcspn(w->name, " "), w->name);
    }
  }
  qsort(t->workers, (size_t)t->nworkers, sizeof *t->workers, cmp_worker);
  k = 0;
  cJSON_ArrayForEach(e, events) {
    k++;
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph"),
                *name = cJSON_GetObjectItemCaseSensitive(e, "name"),
                *cat = cJSON_GetObjectItemCaseSensitive(e, "cat"),
                *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    if (!cJSON_IsString(ph))
      return tsr_error_set(err, TSR_EFORMAT, "%s: event %lld has no \"ph\"", path, (long long)k);
    double pid = -1, tid = -1, ts, dur;
    bool placed = num(e, "pid", &pid) && pid >= 0 && pid < t->ranks;
    if (strcmp(ph->valuestring, "s") == 0 || strcmp(ph->valuestring, "f") == 0) {
      double id;
      if (!placed || !num(e, "id", &id) || !cJSON_IsNumber(cJSON_GetObjectItem(args, "task")))
        return tsr_error_set(err, TSR_EFORMAT,
                             "%s: event %lld: a flow event without pid, id or args.task", path,
                             (long long)k);
      flow_end_t *f = ph->valuestring[0] == 's' ? &starts[nstarts++] : &finishes[nfinishes++];
      *f = (flow_end_t){.id = whole(id), .pid = (int)pid, .task_id = int_or(args, "task", -1)};
      continue;
    }
    if (strcmp(ph->valuestring, "X") != 0) continue;
    if (!placed || !cJSON_IsString(name) || !cJSON_IsString(cat) || !num(e, "ts", &ts) ||
        !num(e, "dur", &dur) || !isfinite(ts) || !(dur >= 0) || !isfinite(dur))
      return tsr_error_set(err, TSR_EFORMAT,
                           "%s: event %lld: a complete event (ph X) needs name, cat, pid (a rank "
                           "below %d), ts and dur >= 0",
                           path, (long long)k, t->ranks);
    int r = (int)pid;
    if (strcmp(cat->valuestring, "sync") == 0) {
      t->spans[t->nspans++] = (span_t){.pid = r, .name = name->valuestring, .ts = ts, .dur = dur};
      continue;
    }
    int w = num(e, "tid", &tid) && tid >= 0 && tid <= INT_MAX ? find_worker(t, r, (int)tid) : -1;
    if (w < 0 || !cJSON_IsObject(args))
      return tsr_error_set(err, TSR_EFORMAT,
                           "%s: event %lld: a task on no named worker track, or without args", path,
                           (long long)k);
    /* Format 1 (before codelet names): the codelet in args, the step as "batch". */
    const cJSON *codelet = cJSON_GetObjectItemCaseSensitive(args, "codelet");
    const cJSON *tile = cJSON_GetObjectItemCaseSensitive(args, "tile");
    const cJSON *impl = cJSON_GetObjectItemCaseSensitive(args, "impl");
    task_t *tk = &t->tasks[t->ntasks++];
    *tk = (task_t){.pid = r,
                   .worker = w,
                   .layer = (int)int_or(args, "layer", -1),
                   .ti = cJSON_GetArraySize(tile) == 2 ? cJSON_GetArrayItem(tile, 0)->valueint : -1,
                   .tj = cJSON_GetArraySize(tile) == 2 ? cJSON_GetArrayItem(tile, 1)->valueint : -1,
                   .step = int_or(args, "step", int_or(args, "batch", 0)),
                   .id = int_or(args, "id", -1),
                   .ts = ts,
                   .dur = dur,
                   .codelet = cJSON_IsString(codelet) ? codelet->valuestring : name->valuestring,
                   .impl = cJSON_IsString(impl) ? impl->valuestring : "",
                   .deps = cJSON_GetObjectItemCaseSensitive(args, "deps")};
    if (t->has_deps && (tk->id < 1 || !cJSON_IsArray(tk->deps)))
      return tsr_error_set(err, TSR_EFORMAT, "%s: event %lld: a task without args.id or args.deps",
                           path, (long long)k);
    t->workers[w].tasks++, t->workers[w].busy += dur;
    t->rank_t0[r] = fmin(t->rank_t0[r], ts), t->rank_t1[r] = fmax(t->rank_t1[r], ts + dur);
  }
  t->nstarts = nstarts, t->nfinishes = nfinishes;
  return link_tasks(t, err);
}

/* Phase 1, second half: flows (each start matched by the finish of the same id) and
 * dependencies, from ids to task indices (in place of the cJSON arrays' numbers). */
static int link_tasks(trace_t *t, tsr_errbuf_t *err) {
  const char *path = t->path;
  flow_end_t *starts = t->starts, *finishes = t->finishes;
  int64_t nstarts = t->nstarts, nfinishes = t->nfinishes;
  int64_t *by_id = malloc((size_t)(t->ntasks ? t->ntasks : 1) * sizeof *by_id);
  t->flow_from = malloc((size_t)(nstarts ? nstarts : 1) * sizeof *t->flow_from);
  t->flow_to = malloc((size_t)(nstarts ? nstarts : 1) * sizeof *t->flow_to);
  if (!by_id || !t->flow_from || !t->flow_to) {
    free(by_id);
    return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", path);
  }
  for (int64_t i = 0; i < t->ntasks; i++)
    by_id[i] = i;
  sort_trace = t;
  qsort(by_id, (size_t)t->ntasks, sizeof *by_id, cmp_task_id);
  sort_trace = NULL;
  qsort(starts, (size_t)nstarts, sizeof *starts, cmp_flow_end);
  qsort(finishes, (size_t)nfinishes, sizeof *finishes, cmp_flow_end);
  int rc = 0;
  for (int64_t i = 0; i < nstarts && rc == 0; i++) {
    int64_t from = find_task(t, by_id, starts[i].pid, starts[i].task_id);
    int64_t to = i < nfinishes && finishes[i].id == starts[i].id
                     ? find_task(t, by_id, finishes[i].pid, finishes[i].task_id)
                     : -1;
    if (from < 0 || to < 0)
      rc = tsr_error_set(err, TSR_EFORMAT,
                         "%s: flow %lld: its start and finish do not name two tasks of the trace",
                         path, (long long)starts[i].id);
    t->flow_from[t->nflows] = from, t->flow_to[t->nflows++] = to;
  }
  if (rc == 0 && nstarts != nfinishes)
    rc = tsr_error_set(err, TSR_EFORMAT, "%s: %lld flow starts but %lld finishes", path,
                       (long long)nstarts, (long long)nfinishes);
  for (int64_t i = 0; i < t->ntasks && rc == 0 && t->has_deps; i++) {
    cJSON *d;
    cJSON_ArrayForEach(d, (cJSON *)t->tasks[i].deps) {
      int64_t j =
          cJSON_IsNumber(d) ? find_task(t, by_id, t->tasks[i].pid, whole(d->valuedouble)) : -1;
      if (j < 0) {
        rc =
            tsr_error_set(err, TSR_EFORMAT,
                          "%s: task %lld of rank %d depends on %s, which is not a task of its rank",
                          path, (long long)t->tasks[i].id, t->tasks[i].pid,
                          cJSON_IsNumber(d) ? "an id" : "a non-number");
        break;
      }
      d->valuedouble = (double)j;
    }
  }
  free(by_id);
  return rc;
}

/* Phase 2: busy time per (codelet, implementation, kind), largest first. */
static int cmp_busy(const void *a, const void *b) {
  const busy_t *x = a, *y = b;
  return (x->busy < y->busy) - (x->busy > y->busy);
}

static busy_t *busy_table(const trace_t *t, int *n) {
  busy_t *b = calloc((size_t)t->ntasks + 1, sizeof *b);
  *n = 0;
  for (int64_t i = 0; b && i < t->ntasks; i++) {
    const task_t *k = &t->tasks[i];
    const char *kind = t->workers[k->worker].kind;
    int j = 0;
    while (j < *n && (strcmp(b[j].codelet, k->codelet) != 0 || strcmp(b[j].impl, k->impl) != 0 ||
                      strcmp(b[j].kind, kind) != 0))
      j++;
    if (j == *n) b[(*n)++] = (busy_t){.codelet = k->codelet, .impl = k->impl, .kind = kind};
    b[j].tasks++, b[j].busy += k->dur;
  }
  if (b) qsort(b, (size_t)*n, sizeof *b, cmp_busy);
  return b;
}

static int cmp_span(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  return (x->dur < y->dur) - (x->dur > y->dur);
}

/* Phase 3: the critical path of a step: among the step's tasks, the chain of dependencies
 * (args.deps, and transfers from another rank) with the most task time. */
typedef struct {
  int64_t step, ntasks; /* ntasks: the step's */
  int nranks;
  double t0, t1;     /* the step's first start and last end */
  double work;       /* the chain's task time */
  int64_t *chain, n; /* task indices, first to last */
} path_t;

typedef struct {
  const trace_t *t;
  int64_t step;
  double *best;   /* the heaviest chain ending with task i */
  int64_t *prev;  /* its previous task, -1 */
  char *state;    /* 0 new, 1 on the stack, 2 done */
  int64_t *in0;   /* flows by destination: flows_in[in0[i] .. in0[i + 1]) */
  int64_t *flows; /* source task indices */
} walk_t;

static double heaviest(walk_t *w, int64_t i) {
  if (w->state[i] == 2) return w->best[i];
  w->state[i] = 1;
  const task_t *k = &w->t->tasks[i];
  double b = 0;
  int64_t arg = -1;
  const cJSON *d;
  cJSON_ArrayForEach(d, k->deps) {
    int64_t j = (int64_t)d->valuedouble;
    if (w->t->tasks[j].step != w->step || w->state[j] == 1) continue;
    double v = heaviest(w, j);
    if (v > b) b = v, arg = j;
  }
  for (int64_t f = w->in0[i]; f < w->in0[i + 1]; f++) {
    int64_t j = w->flows[f];
    if (w->t->tasks[j].step != w->step || w->state[j] == 1) continue;
    double v = heaviest(w, j);
    if (v > b) b = v, arg = j;
  }
  w->state[i] = 2, w->best[i] = b + k->dur, w->prev[i] = arg;
  return w->best[i];
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The step asked for, or the middle one of those recorded (0 when none is). */
static int64_t pick_step(const trace_t *t, int64_t want, int64_t *first, int64_t *last) {
  int64_t *steps = malloc((size_t)(t->ntasks ? t->ntasks : 1) * sizeof *steps), n = 0;
  if (!steps) return -1;
  for (int64_t i = 0; i < t->ntasks; i++)
    if (t->tasks[i].step > 0) steps[n++] = t->tasks[i].step;
  qsort(steps, (size_t)n, sizeof *steps, cmp_i64);
  int64_t m = 0; /* distinct */
  for (int64_t i = 0; i < n; i++)
    if (m == 0 || steps[i] != steps[m - 1]) steps[m++] = steps[i];
  *first = m ? steps[0] : 0, *last = m ? steps[m - 1] : 0;
  int64_t s = m == 0 ? 0 : want > 0 ? want : steps[m / 2];
  bool found = false;
  for (int64_t i = 0; i < m; i++)
    found |= steps[i] == s;
  free(steps);
  return found ? s : want > 0 ? -2 : 0;
}

static int critical_path(const trace_t *t, int64_t step, path_t *p) {
  memset(p, 0, sizeof *p);
  p->step = step;
  int64_t n = t->ntasks;
  walk_t w = {.t = t,
              .step = step,
              .best = calloc((size_t)n + 1, sizeof(double)),
              .prev = calloc((size_t)n + 1, sizeof(int64_t)),
              .state = calloc((size_t)n + 1, 1),
              .in0 = calloc((size_t)n + 2, sizeof(int64_t)),
              .flows = malloc((size_t)(t->nflows + 1) * sizeof(int64_t))};
  p->chain = malloc(((size_t)n + 1) * sizeof *p->chain);
  char *seen_rank = calloc((size_t)t->ranks, 1);
  int rc =
      w.best && w.prev && w.state && w.in0 && w.flows && p->chain && seen_rank ? 0 : TSR_ENOMEM;
  for (int64_t f = 0; f < t->nflows && rc == 0; f++)
    w.in0[t->flow_to[f] + 1]++;
  for (int64_t i = 0; i < n && rc == 0; i++)
    w.in0[i + 1] += w.in0[i];
  int64_t *fill = rc == 0 ? calloc((size_t)n + 1, sizeof *fill) : NULL;
  if (rc == 0 && !fill) rc = TSR_ENOMEM;
  for (int64_t f = 0; f < t->nflows && rc == 0; f++)
    w.flows[w.in0[t->flow_to[f]] + fill[t->flow_to[f]]++] = t->flow_from[f];
  free(fill);
  int64_t end = -1;
  p->t0 = INFINITY, p->t1 = -INFINITY;
  for (int64_t i = 0; i < n && rc == 0; i++) {
    const task_t *k = &t->tasks[i];
    if (k->step != step) continue;
    p->ntasks++;
    if (!seen_rank[k->pid]) seen_rank[k->pid] = 1, p->nranks++;
    p->t0 = fmin(p->t0, k->ts), p->t1 = fmax(p->t1, k->ts + k->dur);
    if (heaviest(&w, i) > (end >= 0 ? w.best[end] : -1)) end = i;
  }
  if (rc == 0 && end >= 0) {
    p->work = w.best[end];
    for (int64_t i = end; i >= 0; i = w.prev[i])
      p->chain[p->n++] = i;
    for (int64_t a = 0, b = p->n - 1; a < b; a++, b--) {
      int64_t x = p->chain[a];
      p->chain[a] = p->chain[b], p->chain[b] = x;
    }
  }
  free(w.best), free(w.prev), free(w.state), free(w.in0), free(w.flows), free(seen_rank);
  return rc;
}

/* Phase 4: the report. */
static void print_text(FILE *out, const trace_t *t, const busy_t *busy, int nbusy, int top,
                       const path_t *cp, int64_t first, int64_t last) {
  double total = 0;
  for (int i = 0; i < nbusy; i++)
    total += busy[i].busy;
  fprintf(out, "trace %s: %d rank%s, %lld tasks, %lld waits, %lld transfers", t->path, t->ranks,
          t->ranks == 1 ? "" : "s", (long long)t->ntasks, (long long)t->nspans,
          (long long)t->nflows);
  if (first > 0) fprintf(out, ", steps %lld-%lld", (long long)first, (long long)last);
  fprintf(out, "\n\nbusy time per codelet and worker kind\n  %-23s %-7s %9s %12s %7s\n",
          "codelet[:implementation]", "kind", "tasks", "busy ms", "share");
  for (int i = 0; i < nbusy; i++) {
    char name[80];
    snprintf(name, sizeof name, "%s%s%s", busy[i].codelet, busy[i].impl[0] ? ":" : "",
             busy[i].impl);
    fprintf(out, "  %-23s %-7s %9lld %12.3f %6.1f%%\n", name, busy[i].kind,
            (long long)busy[i].tasks, busy[i].busy / 1e3,
            total > 0 ? 100 * busy[i].busy / total : 0.0);
  }
  fprintf(out, "  %-23s %-7s %9lld %12.3f %6.1f%%\n", "all", "", (long long)t->ntasks, total / 1e3,
          total > 0 ? 100.0 : 0.0);
  fprintf(out,
          "\nworkers: busy, and idle from their rank's first task to its last\n  %-4s %-22s %9s "
          "%12s %12s %7s\n",
          "rank", "worker", "tasks", "busy ms", "idle ms", "busy");
  for (int i = 0; i < t->nworkers; i++) {
    const worker_t *w = &t->workers[i];
    double span =
        t->rank_t1[w->pid] > t->rank_t0[w->pid] ? t->rank_t1[w->pid] - t->rank_t0[w->pid] : 0;
    fprintf(out, "  %-4d %-22s %9lld %12.3f %12.3f %6.1f%%\n", w->pid, w->name, (long long)w->tasks,
            w->busy / 1e3, fmax(0, span - w->busy) / 1e3, span > 0 ? 100 * w->busy / span : 0.0);
  }
  fprintf(out, "\nlongest waits of the main thread\n  %-4s %-28s %12s %12s\n", "rank", "wait",
          "start ms", "ms");
  for (int64_t i = 0; i < t->nspans && i < top; i++)
    fprintf(out, "  %-4d %-28s %12.3f %12.3f\n", t->spans[i].pid, t->spans[i].name,
            t->spans[i].ts / 1e3, t->spans[i].dur / 1e3);
  if (t->nspans == 0) fprintf(out, "  none recorded\n");
  if (!t->has_deps) {
    fprintf(out, "\nno critical path: this trace records no dependencies (written by a tessera "
                 "before trace format 2)\n");
    return;
  }
  if (cp->step <= 0) {
    fprintf(out, "\nno critical path: the trace holds no training step\n");
    return;
  }
  fprintf(out,
          "\ncritical path of step %lld: %lld tasks on %d rank%s from %.3f to %.3f ms (%.3f ms); "
          "its heaviest chain of dependent tasks (args.deps, transfers) holds %lld tasks, %.3f "
          "ms of task time\n  %-4s %-22s %-16s %5s %9s %12s %10s\n",
          (long long)cp->step, (long long)cp->ntasks, cp->nranks, cp->nranks == 1 ? "" : "s",
          cp->t0 / 1e3, cp->t1 / 1e3, (cp->t1 - cp->t0) / 1e3, (long long)cp->n, cp->work / 1e3,
          "rank", "worker", "codelet", "layer", "tile", "start ms", "ms");
  for (int64_t i = 0; i < cp->n; i++) {
    const task_t *k = &t->tasks[cp->chain[i]];
    char tile[24] = "-";
    if (k->ti >= 0) snprintf(tile, sizeof tile, "%d,%d", k->ti, k->tj);
    fprintf(out, "  %-4d %-22s %-16s %5d %9s %12.3f %10.3f\n", k->pid, t->workers[k->worker].name,
            k->codelet, k->layer, tile, k->ts / 1e3, k->dur / 1e3);
  }
}

static bool print_json(FILE *out, const trace_t *t, const busy_t *busy, int nbusy, int top,
                       const path_t *cp, int64_t first, int64_t last) {
  cJSON *o = cJSON_CreateObject(), *a;
  cJSON_AddStringToObject(o, "file", t->path);
  cJSON_AddNumberToObject(o, "ranks", t->ranks);
  cJSON_AddNumberToObject(o, "tasks", (double)t->ntasks);
  cJSON_AddNumberToObject(o, "waits", (double)t->nspans);
  cJSON_AddNumberToObject(o, "transfers", (double)t->nflows);
  cJSON_AddNumberToObject(o, "first_step", (double)first);
  cJSON_AddNumberToObject(o, "last_step", (double)last);
  double total = 0;
  a = cJSON_AddArrayToObject(o, "busy");
  for (int i = 0; i < nbusy; i++) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "codelet", busy[i].codelet);
    if (busy[i].impl[0]) cJSON_AddStringToObject(b, "impl", busy[i].impl);
    cJSON_AddStringToObject(b, "kind", busy[i].kind);
    cJSON_AddNumberToObject(b, "tasks", (double)busy[i].tasks);
    cJSON_AddNumberToObject(b, "seconds", busy[i].busy / 1e6);
    cJSON_AddItemToArray(a, b);
    total += busy[i].busy;
  }
  cJSON_AddNumberToObject(o, "busy_seconds", total / 1e6);
  a = cJSON_AddArrayToObject(o, "workers");
  for (int i = 0; i < t->nworkers; i++) {
    const worker_t *w = &t->workers[i];
    double span =
        t->rank_t1[w->pid] > t->rank_t0[w->pid] ? t->rank_t1[w->pid] - t->rank_t0[w->pid] : 0;
    cJSON *b = cJSON_CreateObject();
    cJSON_AddNumberToObject(b, "rank", w->pid);
    cJSON_AddNumberToObject(b, "worker", w->tid);
    cJSON_AddStringToObject(b, "name", w->name);
    cJSON_AddStringToObject(b, "kind", w->kind);
    cJSON_AddNumberToObject(b, "tasks", (double)w->tasks);
    cJSON_AddNumberToObject(b, "seconds", span / 1e6);
    cJSON_AddNumberToObject(b, "busy_seconds", w->busy / 1e6);
    cJSON_AddNumberToObject(b, "idle_seconds", fmax(0, span - w->busy) / 1e6);
    cJSON_AddItemToArray(a, b);
  }
  a = cJSON_AddArrayToObject(o, "longest_waits");
  for (int64_t i = 0; i < t->nspans && i < top; i++) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddNumberToObject(b, "rank", t->spans[i].pid);
    cJSON_AddStringToObject(b, "name", t->spans[i].name);
    cJSON_AddNumberToObject(b, "start_seconds", t->spans[i].ts / 1e6);
    cJSON_AddNumberToObject(b, "seconds", t->spans[i].dur / 1e6);
    cJSON_AddItemToArray(a, b);
  }
  if (t->has_deps && cp->step > 0) {
    cJSON *c = cJSON_AddObjectToObject(o, "critical_path");
    cJSON_AddNumberToObject(c, "step", (double)cp->step);
    cJSON_AddNumberToObject(c, "tasks", (double)cp->ntasks);
    cJSON_AddNumberToObject(c, "ranks", cp->nranks);
    cJSON_AddNumberToObject(c, "start_seconds", cp->t0 / 1e6);
    cJSON_AddNumberToObject(c, "seconds", (cp->t1 - cp->t0) / 1e6);
    cJSON_AddNumberToObject(c, "chain_seconds", cp->work / 1e6);
    a = cJSON_AddArrayToObject(c, "chain");
    for (int64_t i = 0; i < cp->n; i++) {
      const task_t *k = &t->tasks[cp->chain[i]];
      cJSON *b = cJSON_CreateObject();
      cJSON_AddNumberToObject(b, "rank", k->pid);
      cJSON_AddStringToObject(b, "worker", t->workers[k->worker].name);
      cJSON_AddNumberToObject(b, "id", (double)k->id);
      cJSON_AddStringToObject(b, "codelet", k->codelet);
      cJSON_AddNumberToObject(b, "layer", k->layer);
      cJSON *tile = cJSON_AddArrayToObject(b, "tile");
      cJSON_AddItemToArray(tile, cJSON_CreateNumber(k->ti));
      cJSON_AddItemToArray(tile, cJSON_CreateNumber(k->tj));
      cJSON_AddNumberToObject(b, "start_seconds", k->ts / 1e6);
      cJSON_AddNumberToObject(b, "seconds", k->dur / 1e6);
      cJSON_AddItemToArray(a, b);
    }
  } else {
    cJSON_AddNullToObject(o, "critical_path");
  }
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!s) return false;
  fprintf(out, "%s\n", s);
  cJSON_free(s);
  return true;
}

void tsr_trace_summary_opts_init(tsr_trace_summary_opts_t *opts) {
  *opts = (tsr_trace_summary_opts_t){.json = false, .step = 0, .top = 10};
}

int tsr_trace_summary(FILE *out, const char *path, const tsr_trace_summary_opts_t *opts,
                      tsr_errbuf_t *err) {
  tsr_trace_summary_opts_t dflt;
  tsr_trace_summary_opts_init(&dflt);
  if (!opts) opts = &dflt;
  if (opts->step < 0 || opts->top < 0)
    return tsr_error_set(err, TSR_EINVAL, "trace summary: step and top must be >= 0");
  trace_t t;
  int rc = load(&t, path, err);
  if (rc) {
    trace_free(&t);
    return rc;
  }
  qsort(t.spans, (size_t)t.nspans, sizeof *t.spans, cmp_span);
  int nbusy;
  busy_t *busy = busy_table(&t, &nbusy);
  int64_t first = 0, last = 0, step = pick_step(&t, opts->step, &first, &last);
  path_t cp = {0};
  if (!busy || step == -1 || (t.has_deps && step > 0 && critical_path(&t, step, &cp)))
    rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", path);
  else if (step == -2)
    rc = tsr_error_set(err, TSR_EINVAL, "%s: step %lld: the trace holds steps %lld-%lld only", path,
                       (long long)opts->step, (long long)first, (long long)last);
  if (rc == 0 && opts->json && !print_json(out, &t, busy, nbusy, opts->top, &cp, first, last))
    rc = tsr_error_set(err, TSR_ENOMEM, "%s: out of memory", path);
  if (rc == 0 && !opts->json) print_text(out, &t, busy, nbusy, opts->top, &cp, first, last);
  free(busy), free(cp.chain);
  trace_free(&t);
  return rc;
}
