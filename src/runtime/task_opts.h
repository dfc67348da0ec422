/* How a task is submitted: the options every tile operation and insert
 * helper takes, so that no submission state hides in file-scope variables.
 * Whoever submits builds them (a network for its layers, the synchronization
 * code for its averaging) from tsr__task_opts_default(), which installs the
 * runtime's observation hook while statistics or tracing are on. No StarPU
 * types here: layers pass these through without knowing StarPU. */
#ifndef TSR_RUNTIME_TASK_OPTS_H
#define TSR_RUNTIME_TASK_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Task priorities run 0 .. TSR_PRIO_MAX, higher first under the policies that use them. */
#define TSR_PRIO_MAX 3

typedef struct tsr_task_opts tsr_task_opts_t;

/* Observation of tasks (src/runtime/observe.c): each task gets done as its
 * callback, with the argument arg() makes from the task (a `struct starpu_task *` about to be
 * submitted, its handles set: they are valid here, while by the time done runs StarPU may
 * already have unregistered them), its codelet (a `struct starpu_codelet *`) and options. */
typedef struct {
  void (*done)(void *arg);
  void *(*arg)(void *task, const void *codelet, const tsr_task_opts_t *o);
} tsr_task_observer_t;

struct tsr_task_opts {
  int priority;  /* 0 .. TSR_PRIO_MAX */
  bool mpi;      /* through StarPU-MPI: every rank submits the task, it runs on the rank owning
                    the data it writes, and StarPU-MPI sends it what it reads */
  int layer;     /* label: 1-based layer; 0 batch assembly */
  int64_t batch; /* label: training step, 1-based over the run; 0 none (evaluation) */
  const tsr_task_observer_t *observer; /* NULL: tasks carry no callback */
  uint64_t *submitted;                 /* counts the tasks submitted, when not NULL */
  int on_worker; /* 1 + the StarPU worker that must run the task (tests compare a codelet's
                    implementations this way); 0: the scheduler chooses. Local tasks only */
  int kernels;   /* tsr_kernels_t (tessera/runtime.h): which CPU implementation a codelet with
                    several may run; the runtime's choice by default */
};

/* Start-up and shutdown work of accelerator codelets, which codelets/opencl.c
 * registers when the library loads (the runtime may not call into codelets/):
 * the runtime calls prepare once StarPU runs OpenCL workers (it builds the
 * OpenCL programs; on failure it writes why into msg and returns nonzero)
 * and release before StarPU stops, also after a failed prepare (release of
 * nothing built does nothing). hooks is borrowed and must stay valid. */
typedef struct {
  int (*prepare)(char *msg, size_t len);
  void (*release)(void);
} tsr_device_hooks_t;
void tsr__runtime_device_hooks(const tsr_device_hooks_t *hooks);

/* The names of a codelet's implementations, for statistics and traces: codelets/impls.c
 * registers its function when the library loads (the runtime may not call into codelets/); it
 * returns NULL for a codelet with one implementation. codelet is a `struct starpu_codelet *`. */
typedef const char *(*tsr_impl_name_fn)(const void *codelet, unsigned nimpl);
void tsr__runtime_impl_names(tsr_impl_name_fn fn);
/* The name of implementation nimpl of codelet, or NULL (one implementation, or none
 * registered). */
const char *tsr__runtime_impl_name(const void *codelet, unsigned nimpl);

/* Priority 0, local, unlabelled, no counter, and the runtime's observer
 * while statistics or tracing are on. */
tsr_task_opts_t tsr__task_opts_default(void);
/* p, or 0 when the runtime runs with priorities off (for comparison). */
int tsr__task_priority(int p);

#endif
