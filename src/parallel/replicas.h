/* Replicas of a network on every MPI rank and the synchronization policies
 * that keep them in agreement (DESIGN.md, "Distribution over MPI ranks").
 * The trainer calls these at fixed points of every rank's loop, so every
 * rank submits the same StarPU-MPI tasks in the same order. */
#ifndef TSR_REPLICAS_H
#define TSR_REPLICAS_H

#include <stdint.h>

#include "tessera/dist.h"
#include "tessera/net.h"

typedef struct tsr_replicas tsr_replicas_t;

typedef struct {
  double seconds;          /* main-thread time in synchronization, waits included */
  uint64_t bytes_sent;     /* tile bytes this rank sent */
  uint64_t bytes_received; /* tile bytes this rank received */
  int64_t messages_sent;   /* tiles (or chunks) sent, one message each */
  int64_t messages_received;
  int64_t averages;       /* averages over all ranks (async-epoch: fold rounds) */
  int64_t group_averages; /* hier: averages inside this rank's group */
} tsr_sync_stats_t;

/* Registers every parameter tile of every rank's replica with StarPU-MPI and
 * makes every replica equal to rank 0's. In `batch` mode it takes over the
 * net's gradient hook. share (NULL: equal) is each rank's part of the work
 * (--shares, summing to 1): the chunks each rank homes, and so its part of
 * the reductions and of batch mode's sharded updates, follow it (without a
 * grid). net is borrowed and must outlive *r. The run's combination (grid and policy) must
 * have passed tsr_run_check. */
int tsr__replicas_create(tsr_replicas_t **r, tsr_net_t *net, const tsr_sync_t *sync,
                         const double *share, tsr_errbuf_t *err);
void tsr__replicas_destroy(tsr_replicas_t **r);

/* Samples every rank takes in the coming step (batch mode weighs gradients
 * by them) or since the last averaging (weight averaging by samples); a rank
 * with samples takes a local step (--weighting steps counts them). */
void tsr__replicas_count(tsr_replicas_t *r, const int *samples_per_rank);
/* Called before each epoch's first step (epoch from 1) with the steps taken
 * in the run so far: post-local switches to local SGD here. */
int tsr__replicas_epoch_begin(tsr_replicas_t *r, int epoch, int64_t steps_done);
/* Called after every step has been submitted; step counts from 1. */
int tsr__replicas_after_step(tsr_replicas_t *r, int64_t step);
/* Called at every epoch end; last marks the final epoch. */
int tsr__replicas_epoch_end(tsr_replicas_t *r, int epoch, bool last);
/* Sums every rank's training loss and correct counts onto rank 0 and clears
 * them. Every rank calls it; the sums are returned on rank 0 (0 elsewhere). */
int tsr__replicas_reduce_stats(tsr_replicas_t *r, double *loss, double *correct);
/* Whether every replica holds the same weights now (batch: always; every=K,
 * epoch=n: right after an average; async-epoch: after its final average). */
bool tsr__replicas_agree(const tsr_replicas_t *r);
/* batch: copies each chunk's optimizer state from its home to every rank,
 * so that each rank holds the whole state (sharded during training), e.g.
 * for a checkpoint. Other policies: nothing to do. */
int tsr__replicas_share_state(tsr_replicas_t *r);
/* Checkpoints (src/train/checkpoint.c). Whether an outer optimizer runs. The outer momentum
 * of the net's parameter index (tsr_param_t.index) into all (its (m, n), row-major) on rank
 * 0, gathered from the ranks that home its tiles: collective, every rank calling with the same
 * index (all is ignored elsewhere). The same momentum from all (m, n), which every rank gives:
 * each keeps the tiles it homes. TSR_EINVAL without an outer optimizer
 * or for a parameter it does not know. */
bool tsr__replicas_has_outer(const tsr_replicas_t *r);
/* Whether the last average was the end's, off the schedule (tsr__replicas_mark_final). */
bool tsr__replicas_final_extra(const tsr_replicas_t *r);
int tsr__replicas_outer_read(tsr_replicas_t *r, int index, float *all);
int tsr__replicas_outer_write(tsr_replicas_t *r, int index, const float *all);
/* The step from which the policy's local SGD counts its averages (post-local's switch; 0 for
 * the others), for a checkpoint written while the replicas train alone. */
int64_t tsr__replicas_local_since(const tsr_replicas_t *r);
/* A run resumed from such a checkpoint written under the same policy, with that step: post-local
 * past its switch trains locally from the start, counted from it, each rank keeping the
 * optimizer state it was given. Nothing for the other policies. */
int tsr__replicas_resume_local(tsr_replicas_t *r, int64_t since);
/* Statistics since the last call, then reset. */
void tsr__replicas_take_stats(tsr_replicas_t *r, tsr_sync_stats_t *st);

#endif
