/* What a trace's tasks waited for, rebuilt from what each task recorded (src/runtime/observe.c:
 * when it was submitted, the data it accessed and how):
 *
 * - dependencies on the same rank, as StarPU derives them: every handle is sequentially
 *   consistent, so in submission order a reader waits for the last writer, a writer
 *   for the readers since the last writer (or that writer), and a run of commutative writes
 *   (STARPU_COMMUTE) all wait for what came before the run, and what follows waits for the run;
 * - transfers between ranks (StarPU-MPI's sends, which are not tasks and are not seen): a task
 *   that read a tile another rank owns (its StarPU-MPI tag and owner recorded) got it from the
 *   owner's last task that wrote that tag and had ended when the reader started: the writer of
 *   the same training step when the latest one belongs to a later step (its writes are serialized,
 *   so on the owner they end in submission order).
 *
 * Not seen: StarPU-MPI's own requests (a send delays the next writer of its tile), and
 * dependencies on tasks that were not recorded (outside --trace-steps, or after a full
 * buffer). */
#ifndef TSR_IO_TRACE_GRAPH_H
#define TSR_IO_TRACE_GRAPH_H

#include <stdint.h>

#include "runtime/observe.h"

typedef struct {
  int64_t n;          /* events, as tsr__trace_count */
  int64_t *id;        /* n entries: a task's number on its rank, 1, 2, ... in submission order
                         among the recorded tasks; 0 for spans */
  int64_t *dep_start; /* n + 1 entries: event k's dependencies are deps[dep_start[k] ..
                         dep_start[k + 1]) */
  int64_t *deps;      /* event indices, on the same rank */
  int64_t nflows;
  int64_t *flow_from, *flow_to; /* nflows each: producer and consumer events, on other ranks */
  uint64_t *flow_tag;           /* the tile's StarPU-MPI tag */
} tsr_trace_graph_t;

/* Fills *g (caller-owned; release with tsr__trace_graph_fini) from tr's tasks: TSR_ENOMEM or
 * 0. */
int tsr__trace_graph_build(tsr_trace_graph_t *g, const tsr_trace_t *tr);
void tsr__trace_graph_fini(tsr_trace_graph_t *g);

#endif
