/* --sync every=K: local SGD, each rank stepping on its own batch, the weights averaged over all
 * ranks every K steps (through the outer optimizer, if any), and once more at the end unless
 * the last step averaged. */
#include <stdio.h>

#include "parallel/average.h"
#include "parallel/policy.h"

static int parse(tsr_sync_schedule_t *s, const char *text) {
  return tsr__sync_counts(text, "every=", 1, 0, &s->every);
}

static int describe(const tsr_sync_schedule_t *s, char *buf, int size) {
  return snprintf(buf, (size_t)size, "every=%d", s->every);
}

static int after_step(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int64_t step) {
  (void)state;
  if (step % s->every == 0) return tsr__replicas_average_all(r);
  return 0;
}

static int epoch_end(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                     bool last) {
  (void)s, (void)state, (void)epoch;
  return tsr__replicas_end_local(r, last);
}

static double plan_averages(const tsr_sync_schedule_t *s, double steps) {
  return steps / s->every;
}

const tsr__sync_policy_t tsr__sync_every = {
    .kind = TSR_SYNC_EVERY,
    .traits = {.name = "every",
               .synopsis = "every=K",
               .averages_weights = true,
               .counts_steps = true,
               .grid_columns = true,
               .needs_ranks = true,
               .plannable = true},
    .forms = (const char *const[]){"every=K", NULL},
    .counts = "a whole number >= 1",
    .parse = parse,
    .describe = describe,
    .after_step = after_step,
    .epoch_end = epoch_end,
    .plan_averages = plan_averages,
};
