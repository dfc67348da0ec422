/* Round-trip time of one tile between two ranks: StarPU-MPI (starpu_mpi_send
 * and starpu_mpi_recv on a registered vector, under tessera's runtime with
 * its worker placement and MPI progress mode) against plain MPI_Send and
 * MPI_Recv of the same bytes, measured in the same run before StarPU starts.
 * It shows what a transfer costs the data-parallel policies, and how the
 * progress mode and the progression thread's core change it.
 *
 * usage: mpirun -np 2 bench_pingpong [--mpi-progress auto|thread|worker]
 *                                     [--rounds N] [--workers N]
 * STARPU_MPI_THREAD_CPUID, when set, overrides the thread's core (e.g. 0 puts
 * rank 1's progression thread on rank 0's core). */
#include <getopt.h>
#include <mpi.h>
#include <starpu.h>
#include <starpu_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

static const int sizes[] = {4 << 10, 256 << 10, 1 << 20, 4 << 20}; /* bytes */
#define NSIZES ((int)(sizeof sizes / sizeof *sizes))

/* Mean round trip in seconds of `rounds` exchanges of n bytes, plain MPI. */
static double plain_mpi(int rank, float *buf, int n, int rounds) {
  int count = n / (int)sizeof(float), peer = 1 - rank;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now();
  for (int i = 0; i < rounds; i++) {
    if (rank == 0) {
      MPI_Send(buf, count, MPI_FLOAT, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(buf, count, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, count, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, count, MPI_FLOAT, peer, 1, MPI_COMM_WORLD);
    }
  }
  return (now() - t0) / rounds;
}

/* The same through StarPU-MPI; tags differ per size. */
static double starpu_mpi(int rank, float *buf, int n, int rounds, int tag) {
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)buf, (uint32_t)(n / sizeof(float)),
                              sizeof(float));
  int peer = 1 - rank;
  double t0 = 0;
  for (int i = -3; i < rounds; i++) { /* 3 warm-up rounds */
    if (i == 0) t0 = now();
    if (rank == 0) {
      starpu_mpi_send(h, peer, tag, MPI_COMM_WORLD);
      starpu_mpi_recv(h, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      starpu_mpi_recv(h, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      starpu_mpi_send(h, peer, tag, MPI_COMM_WORLD);
    }
  }
  double t = (now() - t0) / rounds;
  starpu_data_unregister(h);
  return t;
}

int main(int argc, char **argv) {
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  ro.ncpus = 1;
  int rounds = 50;
  static const struct option longopts[] = {{"mpi-progress", required_argument, 0, 'p'},
                                           {"rounds", required_argument, 0, 'r'},
                                           {"workers", required_argument, 0, 'w'},
                                           {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
    if (c == 'p' && strcmp(optarg, "auto") == 0)
      ro.mpi_progress = TSR_MPI_PROGRESS_AUTO;
    else if (c == 'p' && strcmp(optarg, "thread") == 0)
      ro.mpi_progress = TSR_MPI_PROGRESS_THREAD;
    else if (c == 'p' && strcmp(optarg, "worker") == 0)
      ro.mpi_progress = TSR_MPI_PROGRESS_WORKER;
    else if (c == 'r' && atoi(optarg) > 0)
      rounds = atoi(optarg);
    else if (c == 'w' && atoi(optarg) > 0)
      ro.ncpus = atoi(optarg);
    else {
      fprintf(stderr, "usage: mpirun -np 2 bench_pingpong [--mpi-progress auto|thread|worker] "
                      "[--rounds N] [--workers N]\n");
      return 2;
    }
  }
  if (tsr_dist_start(&argc, &argv, true)) return 1;
  int rank = tsr_dist_rank();
  if (tsr_dist_size() != 2) {
    if (rank == 0) fprintf(stderr, "bench_pingpong: run it with mpirun -np 2\n");
    tsr_dist_stop();
    return 2;
  }
  float *buf = calloc((size_t)sizes[NSIZES - 1], 1);
  double plain[NSIZES], ours[NSIZES];
  for (int s = 0; s < NSIZES; s++) {
    plain_mpi(rank, buf, sizes[s], 3); /* warm-up */
    plain[s] = plain_mpi(rank, buf, sizes[s], rounds);
  }
  tsr_errbuf_t err = {""};
  if (tsr_runtime_init(&ro, &err)) {
    fprintf(stderr, "bench_pingpong: %s\n", err.msg);
    tsr_dist_abort(err.msg);
    return 1;
  }
  for (int s = 0; s < NSIZES; s++)
    ours[s] = starpu_mpi(rank, buf, sizes[s], rounds, 100 + s);
  if (rank == 0) {
    printf("2 ranks x %d worker(s) on %ld cores, MPI progress: %s, %d round trips per size\n",
           tsr_runtime_ncpus(), sysconf(_SC_NPROCESSORS_ONLN), tsr_runtime_mpi_progress(), rounds);
    printf("%10s %16s %16s %8s\n", "bytes", "StarPU-MPI ms", "plain MPI ms", "ratio");
    for (int s = 0; s < NSIZES; s++)
      printf("%10d %16.3f %16.3f %7.1fx\n", sizes[s], ours[s] * 1e3, plain[s] * 1e3,
             ours[s] / plain[s]);
  }
  tsr_runtime_fini();
  free(buf);
  tsr_dist_stop();
  return 0;
}
