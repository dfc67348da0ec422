/* Observation of a run: per-task records for timelines and per-worker
 * counters for statistics, filled by a task callback that task options
 * carry only while statistics or tracing are on, so a run without them
 * pays one untaken branch per task. No StarPU types here: the training loop
 * records its own waits (spans) through this header. */
#ifndef TSR_RUNTIME_OBSERVE_H
#define TSR_RUNTIME_OBSERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/task_opts.h"

/* The observer tasks carry while statistics or tracing are on, else NULL
 * (tsr__task_opts_default installs it). */
const tsr_task_observer_t *tsr__observe_observer(void);

/* Starts and stops observing (runtime start-up and shutdown). */
int tsr__observe_start(bool stats, bool trace);
void tsr__observe_snapshot(void); /* this rank's data, before StarPU stops */

/* Microseconds on StarPU's clock (the one task profiling uses). */
double tsr__observe_now(void);
/* A span of the main thread (name: a string literal), e.g. a wait. No-op
 * unless tracing. */
void tsr__observe_span(const char *name, double t0, double t1);

#endif
