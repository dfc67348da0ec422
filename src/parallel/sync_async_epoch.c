/* --sync async-epoch (dislib's partially asynchronous variant): at its epoch end each rank
 * folds its weights into a global copy, global = (global + w) / 2 (or an outer step with its
 * share of the pseudo-gradient), and continues from its own fold's result, without waiting for
 * the others; after the last epoch a uniform average gives one model. Under --grid PrxPc a
 * replica is a grid column, and each tile is folded by its grid row, one rank per column. Its
 * state: the global copy and each rank's fold (average.h, tsr__fold_t). */
#include <stdio.h>
#include <string.h>

#include "parallel/average.h"
#include "parallel/policy.h"

static int parse(tsr_sync_schedule_t *s, const char *text) {
  (void)s;
  return strcmp(text, "async-epoch") == 0 ? 0 : -1;
}

static int describe(const tsr_sync_schedule_t *s, char *buf, int size) {
  (void)s;
  return snprintf(buf, (size_t)size, "async-epoch");
}

static int create(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void **state) {
  (void)s;
  return tsr__fold_create(r, (tsr__fold_t **)state);
}

static void destroy(tsr_replicas_t *r, void *state) {
  tsr__fold_t *f = state;
  tsr__fold_destroy(r, &f);
}

static int epoch_end(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                     bool last) {
  (void)s, (void)epoch;
  int rc = tsr__replicas_fold(r, state);
  if (rc == 0 && last) { /* a final uniform average */
    rc = tsr__replicas_average_plain(r);
    tsr__replicas_mark_final(r);
  }
  return rc;
}

const tsr__sync_policy_t tsr__sync_async_epoch = {
    .kind = TSR_SYNC_ASYNC_EPOCH,
    .traits = {.name = "async-epoch",
               .synopsis = "async-epoch",
               .averages_weights = true,
               .needs_ranks = true,
               .grid_columns = true},
    .forms = (const char *const[]){"async-epoch", NULL},
    .parse = parse,
    .describe = describe,
    .folds = true,
    .create = create,
    .destroy = destroy,
    .epoch_end = epoch_end,
};
