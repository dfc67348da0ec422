/* The checks of the tests that run under mpirun (tests/mpi/, test_mpi_checkpoint.c): CHECK
 * counts a condition that holds as passed; one that fails is said with the rank and the place,
 * and ends every rank at once (tsr_dist_abort_status: MPI_Abort, status 1; exit(1) before MPI
 * started), since the other ranks would otherwise wait, in a collective or for a transfer the
 * failed rank never submits, until meson's timeout. The test sets rank (tsr_dist_rank) and
 * reports the counts at its end. */
#ifndef TSR_TEST_MPI_CHECK_H
#define TSR_TEST_MPI_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "tessera/dist.h"

#ifdef TSR_MPI_CHECK_SHARED /* several files (tests/mpi/): the counts are common.c's */
extern int passed, failed, rank;
#else
static int passed, failed, rank;
#endif

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (cond) {                                                                                    \
      passed++;                                                                                    \
    } else {                                                                                       \
      failed++;                                                                                    \
      fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__);                          \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      fflush(stderr);                                                                              \
      tsr_dist_abort_status("a check failed", 1);                                                  \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

#endif
