/* --sync epoch and epoch=n: every rank trains its replica through n epochs, then all ranks
 * average their weights together (through the outer optimizer, if any), and at the end. The
 * epoch end waits for the average: it is a point users see. */
#include <stdio.h>
#include <string.h>

#include "parallel/average.h"
#include "parallel/policy.h"

static int parse(tsr_sync_schedule_t *s, const char *text) {
  if (strcmp(text, "epoch") == 0) return 0; /* every 1 */
  return tsr__sync_counts(text, "epoch=", 1, 0, &s->every);
}

static int describe(const tsr_sync_schedule_t *s, char *buf, int size) {
  return snprintf(buf, (size_t)size, s->every > 1 ? "epoch=%d" : "epoch", s->every);
}

static int epoch_end(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                     bool last) {
  (void)state;
  int rc = epoch % s->every == 0 || last ? tsr__replicas_average_all(r) : 0;
  if (epoch % s->every != 0 && last) tsr__replicas_mark_final(r);
  return rc ? rc : tsr__replicas_wait(r);
}

static double plan_averages(const tsr_sync_schedule_t *s, double steps) {
  (void)steps;
  return 1.0 / s->every;
}

const tsr__sync_policy_t tsr__sync_epoch = {
    .kind = TSR_SYNC_EPOCH,
    .traits = {.name = "epoch",
               .synopsis = "epoch[=n]",
               .averages_weights = true,
               .counts_steps = true,
               .grid_columns = true,
               .needs_ranks = true,
               .plannable = true},
    .forms = (const char *const[]){"epoch", "epoch=n", NULL},
    .counts = "a whole number >= 1",
    .parse = parse,
    .describe = describe,
    .epoch_end = epoch_end,
    .plan_averages = plan_averages,
};
