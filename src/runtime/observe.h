/* Observation of a run, the collection side: per-task records for timelines
 * and per-worker counters for statistics, filled by a task callback that
 * task options carry only while statistics or tracing are on, so a run
 * without them pays one untaken branch per task; then gathered from every
 * rank. The writers (the statistics table, the trace file) are in src/io/.
 * No StarPU types here: the training loop records its own waits (spans)
 * through this header. */
#ifndef TSR_RUNTIME_OBSERVE_H
#define TSR_RUNTIME_OBSERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/task_opts.h"
#include "tessera/error.h"
#include "tessera/runtime.h"

/* The observer tasks carry while statistics or tracing are on, else NULL
 * (tsr__task_opts_default installs it). */
const tsr_task_observer_t *tsr__observe_observer(void);

/* Starts and stops observing (runtime start-up and shutdown). With trace_from > 0 only the
 * tasks of training steps trace_from .. trace_to are recorded, and the spans that overlap them
 * (tsr_runtime_opts_t.trace_from, checked by the runtime). */
int tsr__observe_start(bool stats, bool trace, int64_t trace_from, int64_t trace_to);
void tsr__observe_snapshot(void); /* this rank's data, before StarPU stops */

/* A run's recorded tasks and spans, collected from every rank on rank 0
 * (tsr__trace_collect is collective under MPI, like tsr_runtime_stats, and
 * leaves *tr NULL on other ranks). Writers live in src/io/trace.c. */
typedef struct tsr_trace tsr_trace_t;

/* A task's data, as recorded (all of its buffers: StarPU's STARPU_NMAXBUFS, 8 in Debian's
 * build, which conv_bn_fwd and gemm_sgd take): its access mode and identity. */
#define TSR__TRACE_MAX_DATA 8
enum {
  TSR__ACCESS_R = 1,       /* the task reads it */
  TSR__ACCESS_W = 2,       /* writes it (R and W: reads and writes) */
  TSR__ACCESS_COMMUTE = 4, /* STARPU_COMMUTE: such writes may run in either order */
  TSR__ACCESS_TAGGED = 8,  /* registered with StarPU-MPI: data is its tag, else its handle */
};

typedef struct {
  bool span;        /* a span of the main thread (a wait), else a task */
  const char *name; /* the span's name or the task's codelet, owned by the trace */
  const char *impl; /* tasks: the implementation that ran ("onednn", "blis") where the codelet
                       has several, else NULL */
  int rank, worker; /* StarPU worker id (tasks) */
  double ts, dur;   /* microseconds since the run's first event, on rank 0's clock */
  int layer;        /* tasks: 1-based layer, 0 batch assembly */
  int64_t batch;    /* tasks: training step, 0 none */
  int ti, tj;       /* tasks: the tile written, -1 unknown */
  int priority;
  bool mpi;           /* inserted by StarPU-MPI */
  uint64_t submitted; /* tasks: a number growing in the order the rank's main thread submitted
                         its tasks (StarPU 1.3 numbers jobs only in FxT builds) */
  int ndata;          /* tasks: entries in the arrays below */
  int mode[TSR__TRACE_MAX_DATA];      /* TSR__ACCESS_* */
  uint64_t data[TSR__TRACE_MAX_DATA]; /* tagged: the StarPU-MPI tag (the same tile on every
                                         rank), else the handle's address (this rank only) */
  int owner[TSR__TRACE_MAX_DATA];     /* tagged: the rank owning it (-2: each rank its own
                                         copy), else -1 */
} tsr_trace_event_t;

int tsr__trace_collect(tsr_trace_t **tr, tsr_errbuf_t *err);
void tsr__trace_free(tsr_trace_t **tr);
int tsr__trace_ranks(const tsr_trace_t *tr);
int tsr__trace_workers(const tsr_trace_t *tr, int rank);
const char *tsr__trace_worker_name(const tsr_trace_t *tr, int rank, int worker);
/* Events rank by rank, each rank's in record order (tasks as submitted, spans as they ended);
 * tasks not recorded. */
int64_t tsr__trace_count(const tsr_trace_t *tr);
void tsr__trace_event(const tsr_trace_t *tr, int64_t k, tsr_trace_event_t *e);
int64_t tsr__trace_dropped(const tsr_trace_t *tr);
/* The steps recorded (tsr_runtime_opts_t.trace_from, trace_to; 0, 0: all) and the last
 * training step any task of the run was labelled with, rank 0's. */
void tsr__trace_steps(const tsr_trace_t *tr, int64_t *from, int64_t *to, int64_t *last);
/* A rank's transfers between its memory nodes over the run (CPU RAM and each OpenCL device's
 * memory): *buses points into tr. */
int tsr__trace_buses(const tsr_trace_t *tr, int rank, const tsr_bus_stats_t **buses);

/* Microseconds on StarPU's clock (the one task profiling uses). */
double tsr__observe_now(void);
/* A span of the main thread (name: a string literal), e.g. a wait. No-op
 * unless tracing. */
void tsr__observe_span(const char *name, double t0, double t1);

#endif
