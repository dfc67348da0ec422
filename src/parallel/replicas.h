/* Replicas of a network on every MPI rank and the synchronization policies that keep them in
 * agreement (docs/design.md, "Synchronization"): the averaging engine as the trainer
 * (src/train) sees it, eleven calls at fixed points of every rank's loop, so every rank
 * submits the same StarPU-MPI tasks in the same order: start (create), before a step (count),
 * after a step, the epoch's beginning and end, the epoch's sums, the statistics, the
 * checkpoint's state (whether the replicas agree too, for an evaluation), a state matrix read
 * or written (the outer momentum, the anchor), the resume, and finish (destroy). No StarPU
 * types. */
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

/* Samples every rank takes in the coming step (batch mode weighs gradients by them) or since
 * the last averaging (weight averaging by samples); a rank with samples takes a local step
 * (--weighting steps counts them). Returns whether a rank's step updates its chunks even
 * without samples of its own (gradients averaged now: the homes update every step). */
bool tsr__replicas_count(tsr_replicas_t *r, const int *samples_per_rank);
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
/* Statistics since the last call, then reset. */
void tsr__replicas_take_stats(tsr_replicas_t *r, tsr_sync_stats_t *st);

/* ---- Checkpoints (src/train/checkpoint_state.c) ---- */

/* What a checkpoint of the replicas holds beyond the net. */
typedef struct {
  bool agreed; /* every replica holds the same weights: a checkpoint may be written now (batch:
                  always; every=K, epoch=n: right after an average; async-epoch: after its
                  final average) */
  bool
      per_replica; /* each replica keeps its own optimizer state (local SGD): every one's goes in */
  bool outer;      /* an outer optimizer runs: its momentum goes in (tsr__replicas_kept) */
  bool final_extra;    /* the last average was the end's, off the schedule */
  bool local;          /* the replicas train alone now: local_since goes in */
  int64_t local_since; /* the step the policy's local SGD counts from (post-local's switch; 0) */
  /* Between averages, what a checkpoint of every replica needs (a stop writes one): whether
   * the replicas can be saved one by one there (weight averaging by a policy that keeps nothing
   * of its own between averages, no grid), whether an anchor goes in (tsr__replicas_kept),
   * and each rank's samples and local steps since the last average ([size], borrowed). */
  bool between;
  bool anchor;
  const int64_t *samples, *steps;
} tsr__replicas_saved_t;

/* What a checkpoint of the replicas holds now, into *c. Without write, only what is (not
 * collective: whether the replicas agree for an evaluation, what a resume finds). With write (a
 * checkpoint is written now), where they agree every rank is first given the whole optimizer
 * state (batch shards it during training): collective, every rank calling at the same point. */
int tsr__replicas_checkpoint(tsr_replicas_t *r, bool write, tsr__replicas_saved_t *c);

/* The state matrices a checkpoint keeps of a parameter besides the optimizer's: the outer
 * optimizer's momentum, and the weights every rank restarted from at the last average (the
 * outer optimizer's anchor, or FedNova's). */
typedef enum { TSR__KEPT_OUTER_MOMENTUM, TSR__KEPT_ANCHOR } tsr__replicas_kept_t;

/* The kept matrix `which` of the net's parameter index (tsr_param_t.index), all its (m, n)
 * row-major: from NULL, read into `into` on rank 0, gathered from the ranks that home its tiles
 * (collective, every rank calling with the same index; into is ignored elsewhere); else written
 * from `from`, which every rank gives, each keeping the tiles it homes. TSR_EINVAL where none
 * is kept (no outer optimizer, no anchor) or for a parameter it does not know. */
int tsr__replicas_kept(tsr_replicas_t *r, tsr__replicas_kept_t which, int index, float *into,
                       const float *from);

/* What a resumed run takes back into the replicas besides the weights and the kept matrices. */
typedef struct {
  /* Written under the same policy while the replicas trained alone: post-local past its switch
   * trains locally from the start, counted from local_since, each rank keeping the optimizer
   * state it was given (nothing for the other policies). */
  bool local;
  int64_t local_since;
  /* Written with every replica between averages ([size] each, every rank's; NULL: not): each
   * rank's samples and local steps since the last average, and the replicas differ (each rank
   * loaded its own weights). */
  const int64_t *samples, *steps;
} tsr__replicas_resumed_t;

/* A run resumed from a checkpoint, as c says. Not collective. */
int tsr__replicas_resume(tsr_replicas_t *r, const tsr__replicas_resumed_t *c);

#endif
