/* A wish agreed by every rank a step late, without a barrier (src/runtime/mpi.c): the trainer's
 * stop on request inside an epoch. Each call completes the agreement the previous call started
 * (a non-blocking allreduce on a communicator of its own, so StarPU-MPI's traffic and the other
 * collectives never meet it) and starts the next; a rank waits only for the slowest rank to have
 * made the previous call, which ranks that train in step have made long before. */
#ifndef TSR_RUNTIME_AGREE_H
#define TSR_RUNTIME_AGREE_H

#include <stdbool.h>

/* *any = whether any rank passed true to the previous call (false at the first), then, unless
 * *any, starts the agreement over mine. Collective: every rank calls it at the same points, from
 * the main thread. Without MPI or on one rank *any = mine. 0, or TSR_ERUNTIME. */
int tsr__dist_any_lagged(bool mine, bool *any);
/* Completes a started agreement (if any) and returns whether any rank passed true to it or
 * passes true now (a blocking allreduce). Collective: every rank calls it at the same point. */
bool tsr__dist_any_settle(bool mine);

#endif
