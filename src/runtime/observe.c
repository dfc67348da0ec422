/* Statistics and timelines from StarPU's profiling interface. While on,
 * every task carries a callback (the observer its options carry, from
 * tsr__task_opts_default) that counts the task per worker and codelet and, when tracing, fills
 * the task's record in a buffer allocated once per run: the record is reserved at submission,
 * in submission order, with the task's label and the data it accesses (handle or StarPU-MPI
 * tag, access mode: what src/io/trace_graph.c rebuilds the dependencies and transfers from),
 * and the callback adds StarPU's profiling times (start, end, worker). With a step window
 * (--trace-steps) only the window's tasks are recorded, and the main thread's spans that may
 * overlap them; the snapshot keeps the spans that do. Per-worker times come from
 * starpu_profiling_worker_get_info, bytes between memory nodes from the bus counters. At shutdown
 * each rank keeps a snapshot; under MPI rank 0 gathers the snapshots with plain MPI (start-up and
 * shutdown are where plain MPI belongs) and merges them. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>
#include <starpu_mpi.h>

#include "runtime/observe.h"
#include "runtime/task_opts.h"
#include "tessera/dist.h"
#include "tessera/runtime.h"

#define MAX_WORKERS 32
#define MAX_NAMES TSR_STATS_MAX_CODELETS
#define MAX_SPAN_NAMES 16
#define MAX_BUSES 16
/* A codelet's CPU implementations told apart (codelets/impls.c), and one more slot that counts
 * its tasks on other workers (OpenCL), whose functions the CPU implementations' names do not
 * describe. */
#define MAX_IMPLS 3
#define NOT_CPU (MAX_IMPLS - 1)
#define DEFAULT_CAPACITY (1 << 21) /* records; 272 MiB reserved, touched only as used */

static bool observing;
/* Every buffer of a task is recorded, or the trace's dependencies would miss some. */
_Static_assert(TSR__TRACE_MAX_DATA >= STARPU_NMAXBUFS, "a trace record holds every buffer");

typedef struct {
  double start, end;                  /* us, StarPU's clock */
  uint64_t label;                     /* packed label_t; for spans the span name index */
  uint64_t submitted;                 /* the slot: the rank's submission order */
  uint64_t data[TSR__TRACE_MAX_DATA]; /* tag (mode has TSR__ACCESS_TAGGED) or handle address */
  int32_t worker;                     /* StarPU worker id; -1: a span of the main thread */
  int16_t ti, tj;                     /* tile written (-1: unknown) */
  int16_t owner[TSR__TRACE_MAX_DATA]; /* tagged data's rank (< TSR_MAX_RANKS = 2^15) */
  uint8_t mode[TSR__TRACE_MAX_DATA];  /* TSR__ACCESS_* */
  uint8_t ndata;
  uint8_t impl; /* the implementation that ran (starpu_task_get_implementation) */
} rec_t;

/* One rank's observations, as sent to rank 0. */
typedef struct {
  int rank, ncodelets, nspans, nworkers, nbuses;
  int64_t nrecs, ntasks, dropped; /* records, of which task records, and tasks not recorded */
  double clock_offset;            /* added to this rank's times to put them on rank 0's clock */
  int64_t trace_from, trace_to;   /* the step window; 0, 0: none */
  int64_t last_step;              /* the last step a task was labelled with */
  char codelets[MAX_NAMES][32];
  char impls[MAX_NAMES][MAX_IMPLS][16]; /* "" where a codelet has one implementation */
  char spans[MAX_SPAN_NAMES][32];
  char wname[MAX_WORKERS][48];
  double total[MAX_WORKERS], exec[MAX_WORKERS], sleep[MAX_WORKERS];
  int64_t executed[MAX_WORKERS];
  int64_t counts[MAX_WORKERS][MAX_NAMES][MAX_IMPLS];
  tsr_bus_stats_t bus[MAX_BUSES];
} snap_t;

static bool stats_on, trace_on;
static const void *codelets[MAX_NAMES];
static _Atomic int ncodelets;
static const char *span_names[MAX_SPAN_NAMES];
static int nspans;
static rec_t *recs;
static int64_t capacity;
static _Atomic int64_t nrecs;
static _Atomic int64_t counts[MAX_WORKERS][MAX_NAMES][MAX_IMPLS];
static snap_t *snap; /* taken at shutdown */

/* The step window (--trace-steps). The main thread, submitting, counts the window's tasks and
 * notes when it submitted the first and went past the last; the workers count those done and
 * the latest end. A span that ends before the window's first task was submitted, or starts
 * after all of them ended, cannot overlap them and is not recorded. */
static int64_t win_from, win_to; /* 0: no window */
static int64_t last_step;        /* main thread */
static bool win_opened, win_passed;
static int64_t win_submitted;
static _Atomic int64_t win_done;
static _Atomic int64_t win_last_end; /* ns on StarPU's clock */
/* What a task is, packed into its callback argument so that labelling
 * needs no allocation: codelet (interned), layer, batch, priority, and
 * whether StarPU-MPI inserted it. The tile comes from the coordinates of the
 * handle it writes (set in src/tile/tiles.c). */
typedef struct {
  int codelet;   /* intern() */
  int layer;     /* 1-based; 0: input (batch assembly) */
  int64_t batch; /* training step (1-based, over the run); 0: evaluation or none */
  int priority;
  bool mpi;
} label_t;

static uint64_t pack(const label_t *l) {
  uint64_t batch = l->batch > 0 ? (uint64_t)l->batch & ((1ULL << 39) - 1) : 0; /* bit 63: SLOT */
  return (uint64_t)(l->codelet & 0xff) | (uint64_t)(l->layer & 0xff) << 8 |
         (uint64_t)(l->priority & 0xf) << 16 | (uint64_t)(l->mpi ? 1 : 0) << 20 | batch << 24;
}

static label_t unpack(uint64_t v) {
  return (label_t){.codelet = (int)(v & 0xff),
                   .layer = (int)(v >> 8 & 0xff),
                   .priority = (int)(v >> 16 & 0xf),
                   .mpi = (v >> 20 & 1) != 0,
                   .batch = (int64_t)(v >> 24)};
}

/* Only the main thread submits, so interning needs no lock; workers read
 * entries that were published before the task that names them. */
static int intern(const void *cl) {
  int n = atomic_load(&ncodelets);
  for (int i = 0; i < n; i++)
    if (codelets[i] == cl) return i;
  if (n == MAX_NAMES) return MAX_NAMES - 1; /* shares the last slot's name; never hit today */
  codelets[n] = cl;
  atomic_store(&ncodelets, n + 1);
  return n;
}

double tsr__observe_now(void) {
  return starpu_timing_now();
}

/* A record's slot, reserved in the order records are made (by the main thread: a task's at its
 * submission, a span at its end), or -1 when the buffer is full (counted as dropped). */
static int64_t reserve(void) {
  int64_t k = atomic_fetch_add_explicit(&nrecs, 1, memory_order_relaxed);
  return k < capacity ? k : -1;
}

static bool in_window(int64_t step) {
  return step >= win_from && step <= win_to;
}

/* The window's tasks done so far, and the latest end among them. */
static void window_done(double end_us) {
  int64_t end = (int64_t)(end_us * 1e3), seen = atomic_load(&win_last_end);
  while (end > seen && !atomic_compare_exchange_weak(&win_last_end, &seen, end)) {
  }
  atomic_fetch_add(&win_done, 1);
}

/* The task's data: identity and access mode of each buffer, read at submission (by the time
 * the callback runs, StarPU may have unregistered a handle the task released). A tile
 * registered with StarPU-MPI carries a third coordinate (src/tile/tiles.c), and only then may
 * StarPU-MPI be asked its tag and owner (it asserts otherwise). The tile named is the first
 * written buffer's. */
static void record_data(rec_t *r, struct starpu_task *task) {
  unsigned n = STARPU_TASK_GET_NBUFFERS(task);
  bool named = false;
  for (unsigned i = 0; i < n && i < TSR__TRACE_MAX_DATA; i++) {
    starpu_data_handle_t h = STARPU_TASK_GET_HANDLE(task, i);
    enum starpu_data_access_mode m = STARPU_TASK_GET_MODE(task, i);
    int dims[3];
    unsigned nd = starpu_data_get_coordinates_array(h, 3, dims);
    if ((m & STARPU_W) && !named) {
      if (nd >= 2) r->ti = (int16_t)dims[0], r->tj = (int16_t)dims[1];
      named = true;
    }
    int mode = (m & STARPU_R ? TSR__ACCESS_R : 0) | (m & STARPU_W ? TSR__ACCESS_W : 0) |
               (m & STARPU_COMMUTE ? TSR__ACCESS_COMMUTE : 0);
    r->owner[i] = -1;
    if (nd == 3) {
      r->data[i] = (uint64_t)starpu_mpi_data_get_tag(h);
      r->owner[i] = (int16_t)starpu_mpi_data_get_rank(h);
      mode |= TSR__ACCESS_TAGGED;
    } else {
      r->data[i] = (uint64_t)(uintptr_t)h;
    }
    r->mode[i] = (uint8_t)mode;
    r->ndata = (uint8_t)(i + 1);
  }
}

/* A callback argument: a traced task's record slot (SLOT set), else its packed label. */
#define SLOT (1ULL << 63)
#define UNRUN (-2) /* a reserved task record whose task has not run (yet) */

static void task_done(void *arg) {
  struct starpu_task *task = starpu_task_get_current();
  if (!task) return;
  struct starpu_profiling_task_info *pi = task->profiling_info;
  int w = pi ? pi->workerid : starpu_worker_get_id();
  uint64_t v = (uint64_t)(uintptr_t)arg;
  rec_t *r = v & SLOT ? &recs[v & ~SLOT] : NULL;
  uint64_t label = r ? r->label : v;
  unsigned impl = task->cl ? starpu_task_get_implementation(task) : 0;
  if (impl >= NOT_CPU) impl = 0;
  if (w >= 0 && starpu_worker_get_type(w) != STARPU_CPU_WORKER) impl = NOT_CPU;
  if (stats_on && w >= 0 && w < MAX_WORKERS)
    atomic_fetch_add_explicit(&counts[w][label & 0xff][impl], 1, memory_order_relaxed);
  if (!r) return;
  r->impl = (uint8_t)impl;
  double end = pi ? starpu_timing_timespec_to_us(&pi->end_time) : starpu_timing_now();
  if (win_from > 0) window_done(end);
  if (!pi) return; /* stays UNRUN: dropped */
  r->start = starpu_timing_timespec_to_us(&pi->start_time), r->end = end, r->worker = w;
}

/* At submission, on the main thread: the label, and with tracing the record, but for the tasks
 * outside the step window. */
static void *task_arg(void *task, const void *cl, const tsr_task_opts_t *o) {
  if (o->batch > last_step) last_step = o->batch;
  if (win_from > 0 && o->batch > win_to) win_passed = true;
  label_t l = {.codelet = intern(cl),
               .layer = o->layer,
               .batch = o->batch,
               .priority = o->priority,
               .mpi = o->mpi};
  uint64_t label = pack(&l);
  int64_t k = trace_on && (win_from == 0 || in_window(o->batch)) ? reserve() : -1;
  if (k < 0) return (void *)(uintptr_t)label;
  if (win_from > 0) win_opened = true, win_submitted++;
  recs[k] = (rec_t){.label = label, .submitted = (uint64_t)k, .worker = UNRUN, .ti = -1, .tj = -1};
  record_data(&recs[k], task);
  return (void *)(uintptr_t)(SLOT | (uint64_t)k);
}

static const tsr_task_observer_t observer = {task_done, task_arg};

const tsr_task_observer_t *tsr__observe_observer(void) {
  return observing ? &observer : NULL;
}

void tsr__observe_span(const char *name, double t0, double t1) {
  if (!trace_on) return;
  if (win_from > 0 && (!win_opened || (win_passed && atomic_load(&win_done) == win_submitted &&
                                       t0 * 1e3 >= (double)atomic_load(&win_last_end))))
    return;
  int k = 0;
  while (k < nspans && span_names[k] != name)
    k++;
  if (k == nspans) {
    if (nspans == MAX_SPAN_NAMES) return;
    span_names[nspans++] = name;
  }
  int64_t slot = reserve();
  if (slot >= 0)
    recs[slot] =
        (rec_t){.start = t0, .end = t1, .label = (uint64_t)k, .worker = -1, .ti = -1, .tj = -1};
}

int tsr__observe_start(bool stats, bool trace, int64_t trace_from, int64_t trace_to) {
  free(snap), snap = NULL;
  stats_on = stats, trace_on = trace;
  win_from = trace ? trace_from : 0, win_to = trace ? trace_to : 0;
  last_step = 0, win_opened = win_passed = false, win_submitted = 0;
  atomic_store(&win_done, 0), atomic_store(&win_last_end, 0);
  observing = stats || trace;
  atomic_store(&nrecs, 0);
  memset(counts, 0, sizeof counts);
  if (!observing) return 0;
  if (trace && !recs) {
    const char *env = getenv("TSR_TRACE_CAPACITY");
    capacity = env && atoll(env) > 0 ? atoll(env) : DEFAULT_CAPACITY;
    recs = malloc((size_t)capacity * sizeof *recs);
    if (!recs) return TSR_ENOMEM;
  }
  /* Resets the workers' and buses' counters: statistics start here. */
  starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
  for (int b = 0; b < starpu_bus_get_count(); b++) {
    struct starpu_profiling_bus_info bi;
    starpu_bus_get_profiling_info(b, &bi);
  }
  return 0;
}

static double ts_s(struct timespec *t) {
  return (double)t->tv_sec + 1e-9 * (double)t->tv_nsec;
}

/* With a step window: only the spans that overlap the window's tasks (recording kept those
 * that might). */
static void keep_overlapping_spans(snap_t *s) {
  double first = INFINITY, last = -INFINITY;
  for (int64_t i = 0; i < s->nrecs; i++)
    if (recs[i].worker >= 0) first = fmin(first, recs[i].start), last = fmax(last, recs[i].end);
  int64_t kept = 0;
  for (int64_t i = 0; i < s->nrecs; i++)
    if (recs[i].worker >= 0 || (recs[i].end > first && recs[i].start < last))
      recs[kept++] = recs[i];
  s->nrecs = kept;
}

void tsr__observe_snapshot(void) {
  if (!observing) return;
  starpu_task_wait_for_all();
  free(snap);
  snap = calloc(1, sizeof *snap);
  if (!snap) return;
  snap->rank = tsr_dist_rank();
  snap->ncodelets = atomic_load(&ncodelets);
  for (int i = 0; i < snap->ncodelets; i++) {
    snprintf(snap->codelets[i], sizeof snap->codelets[i], "%s",
             ((const struct starpu_codelet *)codelets[i])->name);
    for (unsigned m = 0; m < MAX_IMPLS; m++) {
      const char *impl = m == NOT_CPU ? NULL : tsr__runtime_impl_name(codelets[i], m);
      snprintf(snap->impls[i][m], sizeof snap->impls[i][m], "%s", impl ? impl : "");
    }
  }
  snap->nspans = nspans;
  for (int i = 0; i < nspans; i++)
    snprintf(snap->spans[i], sizeof snap->spans[i], "%s", span_names[i]);
  int nw = (int)starpu_worker_get_count();
  snap->nworkers = nw < MAX_WORKERS ? nw : MAX_WORKERS;
  for (int w = 0; w < snap->nworkers; w++) {
    starpu_worker_get_name(w, snap->wname[w], sizeof snap->wname[w]);
    struct starpu_profiling_worker_info wi;
    if (stats_on && starpu_profiling_worker_get_info(w, &wi) == 0) {
      snap->total[w] = ts_s(&wi.total_time);
      snap->exec[w] = ts_s(&wi.executing_time);
      snap->sleep[w] = ts_s(&wi.sleeping_time);
      snap->executed[w] = wi.executed_tasks;
    }
    for (int c = 0; c < MAX_NAMES; c++)
      for (int m = 0; m < MAX_IMPLS; m++)
        snap->counts[w][c][m] = atomic_load(&counts[w][c][m]);
  }
  /* Bus counters for statistics and for the trace's memory transfers alike. */
  for (int b = 0; b < starpu_bus_get_count() && snap->nbuses < MAX_BUSES; b++) {
    struct starpu_profiling_bus_info bi;
    if (starpu_bus_get_profiling_info(b, &bi) != 0) continue;
    tsr_bus_stats_t *bs = &snap->bus[snap->nbuses++];
    *bs = (tsr_bus_stats_t){.rank = snap->rank,
                            .src = starpu_bus_get_src(b),
                            .dst = starpu_bus_get_dst(b),
                            .bytes = bi.transferred_bytes,
                            .transfers = bi.transfer_count};
    if (starpu_memory_node_get_name((unsigned)bs->src, bs->src_name, sizeof bs->src_name) < 0)
      bs->src_name[0] = '\0';
    if (starpu_memory_node_get_name((unsigned)bs->dst, bs->dst_name, sizeof bs->dst_name) < 0)
      bs->dst_name[0] = '\0';
  }
  int64_t n = atomic_load(&nrecs);
  snap->nrecs = n < capacity ? n : capacity;
  snap->dropped = n - snap->nrecs;
  snap->trace_from = win_from, snap->trace_to = win_to, snap->last_step = last_step;
  int64_t kept = 0; /* tasks that never ran (a refused submission) are dropped */
  for (int64_t i = 0; i < snap->nrecs; i++)
    if (recs[i].worker != UNRUN) recs[kept++] = recs[i];
  snap->dropped += snap->nrecs - kept, snap->nrecs = kept;
  if (win_from > 0) keep_overlapping_spans(snap);
  for (int64_t i = 0; i < snap->nrecs; i++)
    snap->ntasks += recs[i].worker >= 0;
  starpu_profiling_status_set(STARPU_PROFILING_DISABLE);
  observing = false;
}

/* Every rank's snapshot on rank 0 (others get only their own). With
 * records, rank 0 also gets every rank's records, on rank 0's clock. */
static int gather(snap_t **all, int *nranks, rec_t **all_recs, bool with_recs) {
  if (!snap && tsr_runtime_ncpus() > 0) tsr__observe_snapshot();
  if (!snap) return TSR_EINVAL;
  int size = tsr_dist_active() ? tsr_dist_size() : 1, rank = tsr_dist_rank();
  /* Clocks: the same node's ranks share CLOCK_MONOTONIC; across nodes an
   * offset read right after a barrier aligns them to within its exit skew. */
  if (size > 1) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = starpu_timing_now(), t0 = t;
    MPI_Bcast(&t0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    snap->clock_offset = t0 - t;
  }
  *nranks = size;
  *all = calloc((size_t)size, sizeof **all);
  if (!*all) return TSR_ENOMEM;
  if (size == 1) {
    (*all)[0] = *snap;
  } else {
    MPI_Gather(snap, sizeof *snap, MPI_BYTE, *all, sizeof *snap, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank != 0) (*all)[0] = *snap;
  }
  *all_recs = NULL;
  if (!with_recs) return 0;
  int64_t total = 0;
  for (int r = 0; r < (rank == 0 ? size : 1); r++)
    total += (*all)[r].nrecs;
  *all_recs = malloc((size_t)(total > 0 ? total : 1) * sizeof(rec_t));
  if (!*all_recs) return TSR_ENOMEM;
  if (size == 1) {
    memcpy(*all_recs, recs, (size_t)total * sizeof(rec_t));
    return 0;
  }
  /* Rank by rank with point-to-point messages, since a run's records can
   * exceed an int count of bytes. */
  if (rank != 0) {
    const char *p = (const char *)recs;
    size_t left = (size_t)snap->nrecs * sizeof(rec_t);
    while (left > 0) {
      int chunk = left > (1u << 30) ? (1 << 30) : (int)left;
      MPI_Send(p, chunk, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
      p += chunk, left -= (size_t)chunk;
    }
    return 0;
  }
  memcpy(*all_recs, recs, (size_t)snap->nrecs * sizeof(rec_t));
  char *p = (char *)(*all_recs + snap->nrecs);
  for (int r = 1; r < size; r++) {
    size_t left = (size_t)(*all)[r].nrecs * sizeof(rec_t);
    while (left > 0) {
      int chunk = left > (1u << 30) ? (1 << 30) : (int)left;
      MPI_Recv(p, chunk, MPI_BYTE, r, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      p += chunk, left -= (size_t)chunk;
    }
  }
  return 0;
}

/* Index of name in st's codelet table, added when new. */
static int name_index(tsr_run_stats_t *st, const char *name) {
  for (int i = 0; i < st->ncodelets; i++)
    if (strcmp(st->codelets[i], name) == 0) return i;
  if (st->ncodelets == TSR_STATS_MAX_CODELETS) return TSR_STATS_MAX_CODELETS - 1;
  snprintf(st->codelets[st->ncodelets], sizeof st->codelets[0], "%s", name);
  return st->ncodelets++;
}

int tsr_runtime_stats(tsr_run_stats_t *st, tsr_errbuf_t *err) {
  memset(st, 0, sizeof *st);
  if (!stats_on)
    return tsr_error_set(err, TSR_EINVAL, "statistics were not turned on (opts.stats, --stats)");
  snap_t *all;
  rec_t *unused;
  int size, rc = gather(&all, &size, &unused, false);
  if (rc) return tsr_error_set(err, rc, "cannot collect statistics: %s", tsr_strerror(rc));
  if (tsr_dist_rank() != 0) size = 1; /* other ranks report only themselves */
  int nw = 0, nb = 0;
  for (int r = 0; r < size; r++)
    nw += all[r].nworkers, nb += all[r].nbuses;
  st->workers = calloc((size_t)(nw ? nw : 1), sizeof *st->workers);
  st->buses = calloc((size_t)(nb ? nb : 1), sizeof *st->buses);
  if (!st->workers || !st->buses) {
    free(all);
    tsr_run_stats_fini(st);
    return tsr_error_set(err, TSR_ENOMEM, "out of memory for statistics");
  }
  for (int r = 0; r < size; r++) {
    const snap_t *s = &all[r];
    for (int w = 0; w < s->nworkers; w++) {
      tsr_worker_stats_t *o = &st->workers[st->nworkers++];
      o->rank = s->rank, o->worker = w;
      snprintf(o->name, sizeof o->name, "%s", s->wname[w]);
      /* StarPU measures the three times separately, and under an
       * oversubscribed node executing + sleeping can exceed the total by a
       * few microseconds: clamp so that the parts add up to the total. */
      o->seconds = s->total[w];
      o->executing = fmin(s->exec[w], o->seconds);
      o->idle = fmin(s->sleep[w], o->seconds - o->executing);
      o->overhead = o->seconds - o->executing - o->idle;
      o->tasks = s->executed[w];
      for (int c = 0; c < s->ncodelets; c++)
        for (int m = 0; m < MAX_IMPLS; m++) {
          if (!s->counts[w][c][m]) continue;
          /* A codelet with several implementations counts each apart: "conv_fwd:onednn". */
          char name[sizeof st->codelets[0]];
          if (s->impls[c][m][0])
            snprintf(name, sizeof name, "%.*s:%s", (int)(sizeof name - 2 - strlen(s->impls[c][m])),
                     s->codelets[c], s->impls[c][m]);
          else
            snprintf(name, sizeof name, "%s", s->codelets[c]);
          o->codelet_tasks[name_index(st, name)] += s->counts[w][c][m];
        }
    }
    for (int b = 0; b < s->nbuses; b++)
      st->buses[st->nbuses++] = s->bus[b];
    st->trace_events += s->ntasks, st->trace_dropped += s->dropped;
  }
  free(all);
  return 0;
}

void tsr_run_stats_fini(tsr_run_stats_t *st) {
  free(st->workers), free(st->buses);
  st->workers = NULL, st->buses = NULL;
  st->nworkers = st->nbuses = 0;
}

struct tsr_trace {
  snap_t *all; /* every rank's snapshot */
  rec_t *recs; /* every rank's records, rank by rank */
  int ranks;
  double origin; /* the first event, on rank 0's clock */
};

int tsr__trace_collect(tsr_trace_t **out, tsr_errbuf_t *err) {
  *out = NULL;
  if (!trace_on)
    return tsr_error_set(err, TSR_EINVAL, "tracing was not turned on (opts.trace, --trace)");
  tsr_trace_t *tr = calloc(1, sizeof *tr);
  if (!tr) return tsr_error_set(err, TSR_ENOMEM, "out of memory for the trace");
  int rc = gather(&tr->all, &tr->ranks, &tr->recs, true);
  if (rc || tsr_dist_rank() != 0) {
    tsr__trace_free(&tr);
    return rc ? tsr_error_set(err, rc, "cannot collect the trace: %s", tsr_strerror(rc)) : 0;
  }
  tr->origin = INFINITY;
  int64_t k = 0;
  for (int r = 0; r < tr->ranks; r++)
    for (int64_t i = 0; i < tr->all[r].nrecs; i++, k++)
      tr->origin = fmin(tr->origin, tr->recs[k].start + tr->all[r].clock_offset);
  if (!isfinite(tr->origin)) tr->origin = 0;
  *out = tr;
  return 0;
}

void tsr__trace_free(tsr_trace_t **tp) {
  if (!*tp) return;
  free((*tp)->all), free((*tp)->recs), free(*tp);
  *tp = NULL;
}

int tsr__trace_ranks(const tsr_trace_t *tr) {
  return tr->ranks;
}

int tsr__trace_workers(const tsr_trace_t *tr, int rank) {
  return tr->all[rank].nworkers;
}

const char *tsr__trace_worker_name(const tsr_trace_t *tr, int rank, int worker) {
  return tr->all[rank].wname[worker];
}

int64_t tsr__trace_count(const tsr_trace_t *tr) {
  int64_t n = 0;
  for (int r = 0; r < tr->ranks; r++)
    n += tr->all[r].nrecs;
  return n;
}

int tsr__trace_buses(const tsr_trace_t *tr, int rank, const tsr_bus_stats_t **buses) {
  *buses = tr->all[rank].bus;
  return tr->all[rank].nbuses;
}

int64_t tsr__trace_dropped(const tsr_trace_t *tr) {
  int64_t n = 0;
  for (int r = 0; r < tr->ranks; r++)
    n += tr->all[r].dropped;
  return n;
}

void tsr__trace_event(const tsr_trace_t *tr, int64_t k, tsr_trace_event_t *e) {
  int r = 0;
  int64_t i = k;
  while (i >= tr->all[r].nrecs)
    i -= tr->all[r++].nrecs;
  const snap_t *s = &tr->all[r];
  const rec_t *rec = &tr->recs[k];
  *e = (tsr_trace_event_t){.rank = r,
                           .worker = rec->worker,
                           .ts = rec->start + s->clock_offset - tr->origin,
                           .dur = fmax(0.0, rec->end - rec->start),
                           .ti = rec->ti,
                           .tj = rec->tj};
  if (rec->worker < 0) {
    e->span = true;
    e->name = rec->label < (uint64_t)s->nspans ? s->spans[rec->label] : "?";
    return;
  }
  label_t l = unpack(rec->label);
  e->name = l.codelet < s->ncodelets ? s->codelets[l.codelet] : "?";
  e->impl = l.codelet < s->ncodelets && s->impls[l.codelet][rec->impl][0]
                ? s->impls[l.codelet][rec->impl]
                : NULL;
  e->layer = l.layer, e->batch = l.batch, e->priority = l.priority, e->mpi = l.mpi;
  e->submitted = rec->submitted, e->ndata = rec->ndata;
  for (int d = 0; d < rec->ndata; d++)
    e->mode[d] = rec->mode[d], e->data[d] = rec->data[d], e->owner[d] = rec->owner[d];
}

void tsr__trace_steps(const tsr_trace_t *tr, int64_t *from, int64_t *to, int64_t *last) {
  *from = tr->all[0].trace_from, *to = tr->all[0].trace_to, *last = tr->all[0].last_step;
}
