/* --sync batch: the gradient is averaged every step, as the backward pass hands over each layer,
 * and the optimizer updates each chunk on its home (gradients.c's gradient hook, which the replicas
 * install for every policy that meets at every step): one process's mathematics with the
 * global batch. Nothing to do after a step or at an epoch end. */
#include <stdio.h>
#include <string.h>

#include "parallel/policy.h"

static int parse(tsr_sync_schedule_t *s, const char *text) {
  (void)s;
  return strcmp(text, "batch") == 0 ? 0 : -1;
}

static int describe(const tsr_sync_schedule_t *s, char *buf, int size) {
  (void)s;
  return snprintf(buf, (size_t)size, "batch");
}

/* One average of the gradients a step. */
static double plan_averages(const tsr_sync_schedule_t *s, double steps) {
  (void)s;
  return steps;
}

const tsr__sync_policy_t tsr__sync_batch = {
    .kind = TSR_SYNC_BATCH,
    .traits = {.name = "batch",
               .synopsis = "batch",
               .meets_every_step = true,
               .grid_columns = true,
               .plannable = true},
    .forms = (const char *const[]){"batch", NULL},
    .parse = parse,
    .describe = describe,
    .plan_averages = plan_averages,
};
