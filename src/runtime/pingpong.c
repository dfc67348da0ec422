/* A StarPU-MPI ping-pong between ranks 0 and 1, for the planner's
 * calibration of alpha and beta (tessera plan --calibrate): the transfers
 * training makes go through StarPU-MPI, so that is what is timed. */
#include <starpu.h>
#include <starpu_mpi.h>
#include <stdlib.h>
#include <time.h>

#include "tessera/dist.h"
#include "tessera/runtime.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tsr_runtime_pingpong(int bytes, int rounds, double *seconds, tsr_errbuf_t *err) {
  *seconds = 0;
  if (!tsr_dist_active() || tsr_dist_size() != 2)
    return tsr_error_set(err, TSR_EINVAL,
                         "the ping-pong needs exactly 2 ranks: run it under mpirun -np 2");
  if (bytes < (int)sizeof(float) || rounds < 1)
    return tsr_error_set(err, TSR_EINVAL, "ping-pong: bytes and rounds must be positive");
  int n = bytes / (int)sizeof(float), rank = tsr_dist_rank(), peer = 1 - rank;
  float *buf = calloc((size_t)n, sizeof *buf);
  if (!buf) return TSR_ENOMEM;
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)buf, (uint32_t)n, sizeof(float));
  int tag = 0x7e55 + (bytes & 0xffff), rc = 0;
  double t0 = 0;
  for (int i = -3; i < rounds && rc == 0; i++) { /* 3 warm-up rounds */
    if (i == 0) t0 = now();
    if (rank == 0) {
      rc = starpu_mpi_send(h, peer, tag, MPI_COMM_WORLD);
      if (rc == 0) rc = starpu_mpi_recv(h, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      rc = starpu_mpi_recv(h, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (rc == 0) rc = starpu_mpi_send(h, peer, tag, MPI_COMM_WORLD);
    }
  }
  *seconds = (now() - t0) / rounds;
  starpu_data_unregister(h);
  free(buf);
  return rc ? tsr_error_set(err, TSR_ERUNTIME, "ping-pong: StarPU-MPI transfer failed (%d)", rc)
            : 0;
}
