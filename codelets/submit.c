/* The one place tasks are created and submitted. Insert helpers fill an
 * argument struct and call tsr__submit with the caller's options; building
 * the task by hand rather than through starpu_task_insert's varargs keeps
 * per-task overhead low, which matters when a batch of 64 samples is a few
 * dozen small tasks. Nothing here is state: everything a task needs besides
 * its data comes in the options. */
#include <stdlib.h>
#include <string.h>

#include <starpu_mpi.h>

#include "codelets.h"
#include "tessera/error.h"

int tsr__handle_rows(starpu_data_handle_t h) {
  return (int)starpu_matrix_get_ny(h);
}

int tsr__handle_cols(starpu_data_handle_t h) {
  return (int)starpu_matrix_get_nx(h);
}

/* StarPU-MPI's owner-computes submission in its two halves: build posts the
 * transfers the task needs and makes the task only on the rank that runs it
 * (NULL on the others); post_build posts what goes back. The argument struct
 * is copied only once the task exists, for StarPU to free with it. Copied
 * before and handed over with STARPU_CL_ARGS, the copy would leak on every
 * rank that does not run the task (StarPU-MPI never builds a task there, so
 * nothing frees it): one copy per task and rank, growing with the steps.
 * Both halves get the same arguments, as StarPU-MPI requires; the priority is
 * among them because it also orders the transfers. */
static int submit_mpi(const tsr_task_opts_t *o, struct starpu_codelet *cl, const void *args,
                      size_t args_size, int nhandles, const starpu_data_handle_t *handles) {
  int rc = 0;
  struct starpu_task *task = starpu_mpi_task_build(MPI_COMM_WORLD, cl, STARPU_DATA_ARRAY, handles,
                                                   nhandles, STARPU_PRIORITY, o->priority, 0);
  if (task) {
    if (args_size > 0) {
      void *copy = malloc(args_size);
      if (copy) {
        memcpy(copy, args, args_size);
        task->cl_arg = copy;
        task->cl_arg_size = args_size;
        task->cl_arg_free = 1;
      } else {
        rc = TSR_ENOMEM;
      }
    }
    if (o->observer) {
      task->callback_func = o->observer->done;
      task->callback_arg = o->observer->arg(task, cl, o);
    }
    task->callback_arg_free = 0; /* build sets it; ours is a label, not memory */
    /* -ENODEV: no worker can run this codelet; the task was not taken. */
    if (rc == 0 && starpu_task_submit(task) != 0) rc = TSR_ERUNTIME;
    if (rc != 0) {
      task->destroy = 0;
      starpu_task_destroy(task);
    }
  }
  int post = starpu_mpi_task_post_build(MPI_COMM_WORLD, cl, STARPU_DATA_ARRAY, handles, nhandles,
                                        STARPU_PRIORITY, o->priority, 0);
  if (o->submitted) (*o->submitted)++;
  if (rc == 0 && post != 0) rc = TSR_ERUNTIME;
  return rc;
}

static int submit_local(const tsr_task_opts_t *o, struct starpu_codelet *cl, const void *args,
                        size_t args_size, int nhandles, const starpu_data_handle_t *handles,
                        const enum starpu_data_access_mode *modes) {
  if (nhandles > STARPU_NMAXBUFS) return TSR_EINVAL;
  struct starpu_task *task = starpu_task_create();
  if (!task) return TSR_ENOMEM;
  task->cl = cl;
  for (int i = 0; i < nhandles; i++)
    task->handles[i] = handles[i];
  if (modes) {
    task->nbuffers = nhandles;
    for (int i = 0; i < nhandles; i++)
      task->modes[i] = modes[i];
  }
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
  task->priority = o->priority;
  if (o->on_worker > 0) {
    task->execute_on_a_specific_worker = 1;
    task->workerid = (unsigned)(o->on_worker - 1);
  }
  if (o->observer) {
    task->callback_func = o->observer->done;
    task->callback_arg = o->observer->arg(task, cl, o);
  }
  int ret = starpu_task_submit(task);
  if (o->submitted) (*o->submitted)++;
  if (ret != 0) {
    /* -ENODEV: no worker can run this codelet; the task was not taken. */
    starpu_task_destroy(task);
    return TSR_ERUNTIME;
  }
  return 0;
}

int tsr__submit(const tsr_task_opts_t *o, struct starpu_codelet *cl, const void *args,
                size_t args_size, int nhandles, const starpu_data_handle_t *handles) {
  if (o->mpi) return submit_mpi(o, cl, args, args_size, nhandles, handles);
  return submit_local(o, cl, args, args_size, nhandles, handles, NULL);
}

int tsr__submit_modes(const tsr_task_opts_t *o, struct starpu_codelet *cl, const void *args,
                      size_t args_size, int nhandles, const starpu_data_handle_t *handles,
                      const enum starpu_data_access_mode *modes) {
  if (o->mpi || cl->nbuffers != STARPU_VARIABLE_NBUFFERS) return TSR_EINVAL;
  return submit_local(o, cl, args, args_size, nhandles, handles, modes);
}
