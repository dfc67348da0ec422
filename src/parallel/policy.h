/* The synchronization policy registry: one descriptor per policy, each in its
 * own file (src/parallel/sync_<name>.c), listed once in src/parallel/policy.c.
 * A descriptor says how the policy is written (parse, describe), what it is
 * (tsr_sync_traits_t, public) and when the replicas meet: the hooks the
 * trainer's calls into the replicas (replicas.h) run, built from the
 * averaging engine's calls (average.h, gradients.h). The planner (src/plan)
 * reads the same descriptors. A policy owns what only it needs (its state, behind
 * create and destroy). Adding a policy: its kind in tessera/dist.h, its file
 * with its descriptor, and its line in policy.c. */
#ifndef TSR_POLICY_H
#define TSR_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "parallel/replicas.h"
#include "tessera/dist.h"

typedef struct {
  tsr_sync_kind_t kind;
  tsr_sync_traits_t traits;
  const char *const *forms; /* every form, for messages: {"epoch", "epoch=n", NULL} */
  const char *counts;       /* what its counts must be, for the bad-counts message (NULL: none) */
  /* text into *s (only the fields it uses; the registry zeroes the rest first): 0, -1 when the
   * text is not this policy's, -2 when it is but its counts are wrong. */
  int (*parse)(tsr_sync_schedule_t *s, const char *text);
  /* snprintf's result */
  int (*describe)(const tsr_sync_schedule_t *s, char *buf, int size);
  /* Each rank folds its whole tiles into a global copy (async-epoch), rank after rank: no node
   * sums first (two levels), no chunks (buckets), and the outer optimizer's state laid out like
   * the copy, by the policy (the engine lays it out by chunk home otherwise). */
  bool folds;
  /* Without traits.grid_columns: why several grid columns cannot take it, for the refusal. */
  const char *grid_refusal;
  /* Hooks (NULL: nothing to do), with the replicas' own copy of the schedule and the policy's
   * own state: what only it needs lives there, not in the replicas. Each returns 0 or a TSR_E*
   * code. create: once the replicas' chunks and matrices exist, before they start equal: its
   * state into *state (NULL: none); every rank creates the same descriptors in the same order.
   * destroy: before the replicas' matrices go. count: the samples every rank takes in the
   * coming step. epoch_begin: before each epoch's first step (epoch from 1), with the steps
   * taken so far. after_step: after every step has been submitted (step counts from 1).
   * epoch_end: at every epoch end, last marking the final one; a policy whose average users see
   * at the epoch end waits for it (tsr__replicas_wait). */
  int (*create)(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void **state);
  void (*destroy)(tsr_replicas_t *r, void *state);
  void (*count)(void *state, const int *samples_per_rank);
  int (*epoch_begin)(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                     int64_t steps_done);
  int (*after_step)(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int64_t step);
  int (*epoch_end)(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                   bool last);
  /* Checkpoints. local_since: the step local SGD counts its averages from (post-local's switch;
   * NULL: 0), written with a checkpoint taken while the replicas train alone. resume_local: a
   * run resumed from such a checkpoint of the same policy, with that step (post-local past its
   * switch: local SGD from the start). */
  int64_t (*local_since)(const void *state);
  int (*resume_local)(tsr_replicas_t *r, void *state, int64_t since);
  /* The planner: averages over all ranks in an epoch of `steps` steps (NULL: not modelled;
   * traits.plannable says the same). Averaging gradients (meets_every_step) overlaps the
   * backward pass; averaging weights is paid on top of the steps. */
  double (*plan_averages)(const tsr_sync_schedule_t *s, double steps);
} tsr__sync_policy_t;

/* The descriptor of s's kind (none's for an unknown kind). */
const tsr__sync_policy_t *tsr__sync_policy(const tsr_sync_schedule_t *s);
/* The descriptor whose parse claims text (its counts may still be wrong), or NULL. */
const tsr__sync_policy_t *tsr__sync_policy_claiming(const char *text);
/* The policy of a run with nothing to average (one replica). */
extern const tsr__sync_policy_t tsr__sync_none;
/* The forms (or with synopses, the synopses) of the policies whose traits pass `has` (NULL:
 * every policy), in registry order, as a message lists them: "batch, every=K, epoch or
 * epoch=n". */
void tsr__sync_list(char *buf, size_t size, bool (*has)(const tsr_sync_traits_t *), bool synopses);

/* Reads n comma-separated whole numbers in [1, 1000000] after prefix (the last `optional` may
 * be missing, left as they are): 0, -1 when text does not start with prefix, -2 when the
 * numbers are not right. For the policies' parse. */
int tsr__sync_counts(const char *text, const char *prefix, int n, int optional, int *out);

#endif
