/* Who makes StarPU-MPI's transfers progress: its own polling thread, or that
 * thread running the rank's first worker between polls (StarPU-MPI's "driver"
 * mode). The second is for nodes where every core already has a worker:
 * there a polling thread takes half of a busy core's time from the worker
 * beside it (StarPU 1.3 never lets it sleep while a receive is posted), and
 * per-batch averaging ran 5.5x slower (README, "Distributed training"). */
#ifndef TSR_RUNTIME_PROGRESS_H
#define TSR_RUNTIME_PROGRESS_H

#include <stdbool.h>

#include "tessera/error.h"
#include "tessera/runtime.h"

struct starpu_conf;

/* Before starpu_mpi_init_conf: picks the mode (auto: the worker mode
 * wherever MPI_THREAD_MULTIPLE allows it) for a rank whose workers conf
 * places, and sets StarPU-MPI's environment. Fails only when the worker mode
 * is asked for and MPI cannot serve it. */
int tsr__progress_configure(tsr_mpi_progress_t mode, const struct starpu_conf *conf,
                            tsr_errbuf_t *err);
/* After starpu_mpi_init_conf: the keep-alive receive of the worker mode. */
void tsr__progress_start(void);
/* Before starpu_mpi_shutdown, once every task has run. */
void tsr__progress_stop(void);
/* starpu_mpi_wait_for_all, in either mode: every task and transfer of this
 * rank done, and every rank there. */
int tsr__progress_wait_all(void);
/* Whether the progression thread runs a worker (for `tessera info` and logs). */
bool tsr__progress_in_worker(void);

#endif
