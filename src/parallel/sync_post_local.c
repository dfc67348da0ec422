/* --sync post-local:E,K (post-local SGD, Lin et al. 2020): batch averaging of the gradients for
 * the first E epochs, then local SGD with the weights averaged every K steps, counted from the
 * switch (its state), and at the end. */
#include <stdio.h>
#include <stdlib.h>

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

/* Its state: where local SGD began. */
typedef struct {
  int64_t local_from; /* the step of the run at which local SGD began (0 before) */
} post_local_t;

static int create(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void **state) {
  (void)r, (void)s;
  return (*state = calloc(1, sizeof(post_local_t))) ? 0 : TSR_ENOMEM;
}

static void destroy(tsr_replicas_t *r, void *state) {
  (void)r;
  free(state);
}

static int epoch_begin(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                       int64_t steps_done) {
  post_local_t *p = state;
  if (!tsr__replicas_averaging_gradients(r) || epoch <= s->post_epochs) return 0;
  p->local_from = steps_done;
  return tsr__replicas_go_local(r, true);
}

static int after_step(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int64_t step) {
  const post_local_t *p = state;
  if (!tsr__replicas_averaging_gradients(r) && (step - p->local_from) % s->every == 0)
    return tsr__replicas_average_all(r);
  return 0;
}

static int epoch_end(tsr_replicas_t *r, const tsr_sync_schedule_t *s, void *state, int epoch,
                     bool last) {
  (void)s, (void)state, (void)epoch;
  return tsr__replicas_end_local(r, last);
}

static int64_t local_since(const void *state) {
  return ((const post_local_t *)state)->local_from;
}

/* Resumed past its switch: local SGD from the start, each rank keeping the optimizer state the
 * checkpoint gave it. */
static int resume_local(tsr_replicas_t *r, void *state, int64_t since) {
  post_local_t *p = state;
  if (!tsr__replicas_averaging_gradients(r)) return 0;
  p->local_from = since;
  return tsr__replicas_go_local(r, false);
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
    .create = create,
    .destroy = destroy,
    .epoch_begin = epoch_begin,
    .after_step = after_step,
    .epoch_end = epoch_end,
    .local_since = local_since,
    .resume_local = resume_local,
};
