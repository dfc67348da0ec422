/* The one place tasks are created and submitted. Insert helpers fill an
 * argument struct and call tsr__submit; building the task by hand rather than
 * through starpu_task_insert's varargs keeps per-task overhead low, which
 * matters when a batch of 64 samples is a few dozen small tasks. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <starpu_mpi.h>

#include "codelets.h"
#include "runtime/observe.h"
#include "tessera/error.h"

int tsr__handle_rows(starpu_data_handle_t h) {
  return (int)starpu_matrix_get_ny(h);
}

int tsr__handle_cols(starpu_data_handle_t h) {
  return (int)starpu_matrix_get_nx(h);
}

static _Atomic uint64_t submitted;
static bool via_mpi;

void tsr__submit_set_mpi(bool on) {
  via_mpi = on;
}

/* What the main thread is submitting for (labels, priorities). */
static struct {
  int layer, nlayers;
  bool backward;
  int64_t batch;
} ctx;
static bool priorities = true;

void tsr__submit_set_layer(int layer, int nlayers, bool backward) {
  ctx.layer = layer, ctx.nlayers = nlayers, ctx.backward = backward;
}

void tsr__submit_set_batch(int64_t batch) {
  ctx.batch = batch;
}

void tsr__submit_set_priorities(bool on) {
  priorities = on;
}

/* The next step's forward pass needs layer 1's updated weights first, and
 * the backward pass waits on each input gradient: those are the critical
 * path. An insert helper's priority > 0 marks an input gradient
 * (TSR_PRIO_MAX); the rest of the backward pass, the updates and the
 * averaging get 2 for the first layer and 1 for the others; the forward
 * pass, which every step does in order anyway, 0. */
static int effective_priority(int given) {
  if (!priorities) return 0;
  if (given > 0) return TSR_PRIO_MAX;
  if (!ctx.backward) return 0;
  return ctx.layer <= 1 ? 2 : 1;
}

static void *label(const struct starpu_codelet *cl, int priority) {
  tsr_task_label_t l = {.codelet = tsr__observe_codelet(cl),
                        .layer = ctx.layer,
                        .batch = ctx.batch,
                        .priority = priority,
                        .mpi = via_mpi};
  return (void *)(uintptr_t)tsr__observe_pack(&l);
}

/* StarPU-MPI's owner-computes insert; the args copy is freed by StarPU. */
static int submit_mpi(struct starpu_codelet *cl, const void *args, size_t args_size, int nhandles,
                      const starpu_data_handle_t *handles, int priority) {
  void *copy = NULL;
  if (args_size > 0) {
    copy = malloc(args_size);
    if (!copy) return TSR_ENOMEM;
    memcpy(copy, args, args_size);
  }
  int ret =
      tsr__observing
          ? starpu_mpi_task_insert(MPI_COMM_WORLD, cl, STARPU_DATA_ARRAY, handles, nhandles,
                                   STARPU_CL_ARGS, copy, args_size, STARPU_PRIORITY, priority,
                                   STARPU_CALLBACK_WITH_ARG_NFREE, tsr__observe_task_done,
                                   label(cl, priority), 0)
          : starpu_mpi_task_insert(MPI_COMM_WORLD, cl, STARPU_DATA_ARRAY, handles, nhandles,
                                   STARPU_CL_ARGS, copy, args_size, STARPU_PRIORITY, priority, 0);
  submitted++;
  return ret == 0 ? 0 : TSR_ERUNTIME;
}

uint64_t tsr__submitted_count(void) {
  return submitted;
}

int tsr__submit(struct starpu_codelet *cl, const void *args, size_t args_size, int nhandles,
                const starpu_data_handle_t *handles, int priority) {
  priority = effective_priority(priority);
  if (via_mpi) return submit_mpi(cl, args, args_size, nhandles, handles, priority);
  struct starpu_task *task = starpu_task_create();
  if (!task) return TSR_ENOMEM;
  task->cl = cl;
  for (int i = 0; i < nhandles; i++)
    task->handles[i] = handles[i];
  if (args_size > 0) {
    void *copy = malloc(args_size);
    if (!copy) {
      starpu_task_destroy(task);
      return TSR_ENOMEM;
    }
    memcpy(copy, args, args_size);
    task->cl_arg = copy;
    task->cl_arg_size = args_size;
    task->cl_arg_free = 1;
  }
  task->priority = priority;
  if (tsr__observing) {
    task->callback_func = tsr__observe_task_done;
    task->callback_arg = label(cl, priority);
  }
  int ret = starpu_task_submit(task);
  submitted++;
  if (ret != 0) {
    /* -ENODEV: no worker can run this codelet; the task was not taken. */
    starpu_task_destroy(task);
    return TSR_ERUNTIME;
  }
  return 0;
}
