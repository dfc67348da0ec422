/* --sync hier:K1,K2[,G] (hierarchical averaging, as Horovod and NCCL do it): the ranks of a
 * node, or of each group of G consecutive ranks, average their weights every K1 steps, over
 * the same mechanism restricted to the group; all ranks average every K2 steps (through the
 * outer optimizer, if any), and at the end. Under --grid PrxPc a group is of whole grid columns
 * (replicas): G consecutive columns, or those whose first rank is on one node. Its state: the
 * groups and each one's accumulators (average.h, tsr__groups_t). A group average weighs a rank
 * by its samples since the last average of all ranks, as that average does. */
#include <stdio.h>

#include "parallel/average.h"
#include "parallel/policy.h"
#include "tessera/dist.h"

static int parse(tsr_sync_schedule_t *s, const char *text) {
  int v[3] = {0, 0, 0}; /* G optional: 0, a node's ranks */
  int rc = tsr__sync_counts(text, "hier:", 3, 1, v);
  if (rc == 0) s->group_every = v[0], s->every = v[1], s->group_size = v[2];
  return rc;
}

static int describe(const tsr_sync_schedule_t *s, char *buf, int size) {
  return s->group_size
             ? snprintf(buf, (size_t)size, "hier:%d,%d,%d", s->group_every, s->every, s->group_size)
             : snprintf(buf, (size_t)size, "hier:%d,%d", s->group_every, s->every);
}

static int create(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void **state) {
  return tsr__groups_create(r, s->group_size, (tsr__groups_t **)state);
}

static void destroy(tsr_replicas_t *r, void *state) {
  tsr__groups_t *g = state;
  tsr__groups_destroy(r, &g);
}

static int after_step(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int64_t step) {
  if (step % s->every == 0) return tsr__replicas_average_all(r);
  if (step % s->group_every == 0) return tsr__replicas_average_group(r, state);
  return 0;
}

static int epoch_end(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                     bool last) {
  (void)s, (void)state, (void)epoch;
  return tsr__replicas_end_local(r, last);
}

const tsr__sync_policy_t tsr__sync_hier = {
    .kind = TSR_SYNC_HIER,
    .traits = {.name = "hier",
               .synopsis = "hier:K1,K2",
               .averages_weights = true,
               .counts_steps = true,
               .grid_columns = true,
               .needs_ranks = true},
    .forms = (const char *const[]){"hier:K1,K2", NULL},
    .counts = "K1,K2[,G]: steps between averages inside a node, steps between averages over all "
              "ranks, and optionally G consecutive ranks per group instead of nodes (whole "
              "numbers >= 1; under --grid, G grid columns)",
    .parse = parse,
    .describe = describe,
    .create = create,
    .destroy = destroy,
    .after_step = after_step,
    .epoch_end = epoch_end,
};
