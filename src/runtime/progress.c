/* StarPU-MPI progression, see progress.h.
 *
 * In the worker mode StarPU-MPI's thread runs one task of worker 0 each time
 * it polls and finds nothing new (STARPU_MPI_DRIVER_CALL_FREQUENCY=1 and
 * STARPU_MPI_DRIVER_TASK_FREQUENCY=1; the latter defaults to 0, which never
 * runs a task). But that thread sleeps whenever no request is outstanding,
 * and a sleeping thread runs no task: a rank whose next task only produces
 * data to send would stop for good. So one receive stays posted while the
 * runtime runs, the keep-alive: a receive from this rank itself, which
 * tsr__progress_stop satisfies. starpu_mpi_wait_for_all in turn waits for the
 * thread to go to sleep, so tsr__progress_wait_all satisfies the keep-alive
 * first and posts it again afterwards. */
#include "runtime/progress.h"

#include <starpu.h>
#include <starpu_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tessera/dist.h"
#include "tessera/error.h"

#include "runtime/tags.h"

static bool in_worker, posted;
/* Separate handles: the posted receive holds its handle until it completes. */
static int keepalive_value, wakeup_value;
static starpu_data_handle_t keepalive, wakeup;
static starpu_mpi_req keepalive_req;
static starpu_mpi_tag_t keepalive_tag; /* from the tag allocator, at start */

int tsr__progress_configure(tsr_mpi_progress_t mode, const struct starpu_conf *conf,
                            tsr_errbuf_t *err) {
  /* The thread then never stops calling MPI while the main thread's plain
   * MPI (tsr_dist_agree) may run. */
  bool can = tsr_dist_thread_multiple();
  if (mode == TSR_MPI_PROGRESS_WORKER && !can)
    return tsr_error_set(err, TSR_EINVAL,
                         "MPI progress in a worker needs an MPI with MPI_THREAD_MULTIPLE, which "
                         "this one does not provide; use --mpi-progress thread");
  /* auto: the worker mode wherever MPI allows it. StarPU-MPI 1.3's own thread
   * stalls rendezvous transfers even beside idle cores: on a 16-core node,
   * 2 ranks x 3 workers trained at 1,537 samples/s in thread mode against
   * 23,252 in worker mode (issue 11), and a 256 KB round trip took 1.8-6.5
   * ms against 0.083 (bench_pingpong, 2 ranks here). */
  in_worker = mode == TSR_MPI_PROGRESS_WORKER || (mode == TSR_MPI_PROGRESS_AUTO && can);
  if (conf->use_explicit_workers_bindid) {
    /* Polling only, the thread shares its rank's last core; running worker
     * 0, it takes that worker's core. Left to StarPU, it landed on another
     * rank's core, where a 4 KB round trip between two ranks took 15 ms
     * instead of 0.03 (benchmarks/bench_pingpong.c, README). */
    char core[16];
    snprintf(core, sizeof core, "%u", conf->workers_bindid[in_worker ? 0 : conf->ncpus - 1]);
    setenv("STARPU_MPI_THREAD_CPUID", core, 0);
  }
  setenv("STARPU_MPI_DRIVER_CALL_FREQUENCY", in_worker ? "1" : "0", 1);
  setenv("STARPU_MPI_DRIVER_TASK_FREQUENCY", "1", 1);
  return 0;
}

bool tsr__progress_in_worker(void) {
  return in_worker;
}

static void post(void) {
  int ret =
      starpu_mpi_irecv(keepalive, &keepalive_req, tsr_dist_rank(), keepalive_tag, MPI_COMM_WORLD);
  STARPU_ASSERT_MSG(ret == 0, "starpu_mpi_irecv failed (%d)", ret);
  posted = true;
}

/* Sends this rank the message its keep-alive waits for. (From another rank,
 * it could arrive while this rank still has tasks to run.) */
static void satisfy(void) {
  int ret = starpu_mpi_send(wakeup, tsr_dist_rank(), keepalive_tag, MPI_COMM_WORLD);
  STARPU_ASSERT_MSG(ret == 0, "starpu_mpi_send failed (%d)", ret);
  MPI_Status status;
  ret = starpu_mpi_wait(&keepalive_req, &status);
  STARPU_ASSERT_MSG(ret == 0, "starpu_mpi_wait failed (%d)", ret);
  posted = false;
}

void tsr__progress_start(void) {
  /* Taken in either mode: ranks must take the same tag spaces in the same order. */
  keepalive_tag = tsr__tag(tsr__tag_space(), 0);
  if (!in_worker || posted) return;
  starpu_variable_data_register(&keepalive, STARPU_MAIN_RAM, (uintptr_t)&keepalive_value,
                                sizeof keepalive_value);
  starpu_variable_data_register(&wakeup, STARPU_MAIN_RAM, (uintptr_t)&wakeup_value,
                                sizeof wakeup_value);
  post();
}

void tsr__progress_stop(void) {
  if (!in_worker || !posted) return;
  satisfy();
  starpu_data_unregister(keepalive);
  starpu_data_unregister(wakeup);
}

int tsr__progress_wait_all(void) {
  if (!in_worker || !posted) return starpu_mpi_wait_for_all(MPI_COMM_WORLD) == 0 ? 0 : TSR_ERUNTIME;
  /* Tasks first, while the thread still runs them; then no task is left to
   * need it awake. */
  starpu_task_wait_for_all();
  satisfy();
  int ret = starpu_mpi_wait_for_all(MPI_COMM_WORLD);
  post();
  return ret == 0 ? 0 : TSR_ERUNTIME;
}
