/* --sync grow=K: local SGD whose period doubles, each rank stepping on its own batch, the weights
 * averaged over all ranks after steps K, 3K, 7K, 15K ... of the run (periods K, 2K, 4K ...;
 * through the outer optimizer, if any), and once more at the end unless the last step averaged:
 * the replicas meet often while the weights move fast, and ever more rarely as training
 * settles. The schedule is the step count's alone (step s averages when K divides it and
 * s / K + 1 is a power of two), so a resumed run averages where the uninterrupted one does. */
#include <stdio.h>

#include "parallel/average.h"
#include "parallel/policy.h"

static int parse(tsr_sync_schedule_t *s, const char *text) {
  return tsr__sync_counts(text, "grow=", 1, 0, &s->every);
}

static int describe(const tsr_sync_schedule_t *s, char *buf, int size) {
  return snprintf(buf, (size_t)size, "grow=%d", s->every);
}

/* Whether step (from 1) ends a period: K (2^i - 1) for some i >= 1. */
static bool due(const tsr_sync_schedule_t *s, int64_t step) {
  if (step % s->every != 0) return false;
  int64_t m = step / s->every + 1;
  return (m & (m - 1)) == 0;
}

static int after_step(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int64_t step) {
  (void)state;
  return due(s, step) ? tsr__replicas_average_all(r) : 0;
}

static int epoch_end(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                     bool last) {
  (void)s, (void)state, (void)epoch;
  return tsr__replicas_end_local(r, last);
}

const tsr__sync_policy_t tsr__sync_grow = {
    .kind = TSR_SYNC_GROW,
    .traits = {.name = "grow",
               .synopsis = "grow=K",
               .averages_weights = true,
               .counts_steps = true,
               .grid_columns = true,
               .needs_ranks = true},
    .forms = (const char *const[]){"grow=K", NULL},
    .counts = "a whole number >= 1",
    .parse = parse,
    .describe = describe,
    .after_step = after_step,
    .epoch_end = epoch_end,
};
