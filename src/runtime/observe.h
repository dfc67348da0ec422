/* Observation of a run: per-task records for timelines and per-worker
 * counters for statistics, filled by a task callback that tsr__submit
 * attaches only while statistics or tracing are on, so a run without them
 * pays one untaken branch per task. No StarPU types here: the training loop
 * records its own waits (spans) through this header. */
#ifndef TSR_RUNTIME_OBSERVE_H
#define TSR_RUNTIME_OBSERVE_H

#include <stdbool.h>
#include <stdint.h>

/* Set while statistics or tracing are on (read by tsr__submit). */
extern bool tsr__observing;

/* What a task is, packed into its callback argument so that labelling
 * needs no allocation: codelet (interned), layer, batch, priority, and
 * whether StarPU-MPI inserted it. The tile comes from the coordinates of the
 * handle it writes (set in src/tile/tiles.c). */
typedef struct {
  int codelet;   /* tsr__observe_codelet() */
  int layer;     /* 1-based; 0: input (batch assembly) */
  int64_t batch; /* training step (1-based, over the run); 0: evaluation or none */
  int priority;
  bool mpi;
} tsr_task_label_t;

uint64_t tsr__observe_pack(const tsr_task_label_t *l);
/* Index of the codelet (a `struct starpu_codelet *`), interned on first use. */
int tsr__observe_codelet(const void *cl);
/* The task callback; arg is a packed label. */
void tsr__observe_task_done(void *arg);

/* Starts and stops observing (runtime start-up and shutdown). */
int tsr__observe_start(bool stats, bool trace);
void tsr__observe_snapshot(void); /* this rank's data, before StarPU stops */

/* Microseconds on StarPU's clock (the one task profiling uses). */
double tsr__observe_now(void);
/* A span of the main thread (name: a string literal), e.g. a wait. No-op
 * unless tracing. */
void tsr__observe_span(const char *name, double t0, double t1);

#endif
