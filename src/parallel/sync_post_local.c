/* --sync post-local:E,K (post-local SGD, Lin et al. 2020): batch averaging of the gradients for
 * the first E epochs, then local SGD with the weights averaged every K steps, counted from the
 * switch, and at the end. */
#include <stdio.h>

#include "parallel/average.h"
#include "parallel/gradients.h"
#include "parallel/policy.h"

static int parse(tsr_sync_schedule_t *s, const char *text) {
  int v[2];
  int rc = tsr__sync_counts(text, "post-local:", 2, 0, v);
  if (rc == 0) s->post_epochs = v[0], s->every = v[1];
  return rc;
}

static int describe(const tsr_sync_schedule_t *s, char *buf, int size) {
  return snprintf(buf, (size_t)size, "post-local:%d,%d", s->post_epochs, s->every);
}

static int epoch_begin(tsr_replicas_t *r, const tsr_sync_schedule_t *s, int epoch,
                       int64_t steps_done) {
  if (!tsr__replicas_averaging_gradients(r) || epoch <= s->post_epochs) return 0;
  return tsr__replicas_go_local(r, steps_done);
}

static int after_step(tsr_replicas_t *r, const tsr_sync_schedule_t *s, int64_t step) {
  if (!tsr__replicas_averaging_gradients(r) && (step - tsr__replicas_local_from(r)) % s->every == 0)
    return tsr__replicas_average_all(r);
  return 0;
}

static int epoch_end(tsr_replicas_t *r, const tsr_sync_schedule_t *s, int epoch, bool last) {
  (void)s, (void)epoch;
  return tsr__replicas_end_local(r, last);
}

const tsr__sync_policy_t tsr__sync_post_local = {
    .kind = TSR_SYNC_POST_LOCAL,
    .traits = {.name = "post-local",
               .synopsis = "post-local:E,K",
               .meets_every_step = true,
               .averages_weights = true,
               .counts_steps = true,
               .grid_columns = true,
               .needs_ranks = true},
    .forms = (const char *const[]){"post-local:E,K", NULL},
    .counts = "E,K: epochs of batch averaging, then steps between averages (whole numbers >= 1)",
    .parse = parse,
    .describe = describe,
    .epoch_begin = epoch_begin,
    .after_step = after_step,
    .epoch_end = epoch_end,
};
