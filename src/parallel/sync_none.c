/* --sync none: independent replicas, never averaged (and the policy of a run with one replica,
 * such as a grid of one column). Each epoch end waits for the epoch's tasks. */
#include <stdio.h>
#include <string.h>

#include "parallel/average.h"
#include "parallel/policy.h"

static int parse(tsr_sync_schedule_t *s, const char *text) {
  (void)s;
  return strcmp(text, "none") == 0 ? 0 : -1;
}

static int describe(const tsr_sync_schedule_t *s, char *buf, int size) {
  (void)s;
  return snprintf(buf, (size_t)size, "none");
}

static int epoch_end(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                     bool last) {
  (void)s, (void)state, (void)epoch, (void)last;
  return tsr__replicas_wait(r);
}

const tsr__sync_policy_t tsr__sync_none = {
    .kind = TSR_SYNC_NONE,
    .traits = {.name = "none", .synopsis = "none", .grid_columns = true},
    .forms = (const char *const[]){"none", NULL},
    .parse = parse,
    .describe = describe,
    .epoch_end = epoch_end,
};
