/* The checks of the tests that run under mpirun (tests/mpi/, test_mpi_checkpoint.c): CHECK
 * counts a condition as passed or failed on this rank and says which rank failed where; the
 * test sets rank (tsr_dist_rank) and reports the counts at its end. */
#ifndef TSR_TEST_MPI_CHECK_H
#define TSR_TEST_MPI_CHECK_H

#include <stdio.h>

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
    }                                                                                              \
  } while (0)

#endif
