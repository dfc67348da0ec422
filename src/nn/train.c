/* The training loop. The main thread only submits: each epoch's batches go
 * to the runtime as tasks, with at most `window` steps in flight so memory
 * stays flat, and the thread waits only where a user sees a result (the
 * epoch's evaluation and log line). */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "rng.h"
#include "tessera/train.h"

void tsr_train_opts_init(tsr_train_opts_t *o) {
  *o = (tsr_train_opts_t){
      .epochs = 10, .seed = 1, .lr_schedule = TSR_LR_COSINE, .window = 8, .shuffle = true};
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Fisher-Yates with the epoch's own stream, so epoch e's order depends only on (seed, e). */
static void shuffle(int32_t *idx, int64_t n, uint64_t seed, int epoch) {
  tsr_rng_t rng = {seed * 0x100000001b3ULL + (uint64_t)epoch};
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)tsr__rng_below(&rng, (uint64_t)i + 1);
    int32_t t = idx[i];
    idx[i] = idx[j], idx[j] = t;
  }
}

int tsr_evaluate(tsr_net_t *net, const tsr_dataset_t *ds, double *loss, double *accuracy) {
  int32_t *idx = malloc(sizeof(int32_t) * (size_t)ds->n);
  if (!idx) return TSR_ENOMEM;
  for (int64_t i = 0; i < ds->n; i++)
    idx[i] = (int32_t)i;
  int rc = 0;
  int b = tsr_net_batch(net);
  for (int64_t s = 0; s < ds->n && rc == 0; s += b)
    rc = tsr_net_eval_step(net, ds, idx + s, (int)(ds->n - s < b ? ds->n - s : b));
  double loss_sum = 0, correct = 0;
  int rc2 = tsr_net_take_stats(net, true, &loss_sum, &correct);
  free(idx);
  if (rc || rc2) return rc ? rc : rc2;
  *loss = loss_sum / (double)ds->n;
  *accuracy = correct / (double)ds->n;
  return 0;
}

int tsr_train(tsr_net_t *net, const tsr_dataset_t *train, const tsr_dataset_t *test,
              const tsr_train_opts_t *o, tsr_errbuf_t *err) {
  if (o->epochs < 0 || o->window < 1)
    return tsr_error_set(err, TSR_EINVAL, "epochs must be >= 0 and the window >= 1");
  if (train->n <= 0 || train->n > INT32_MAX)
    return tsr_error_set(err, TSR_EINVAL, "the training set is empty or too large (%lld samples)",
                         (long long)train->n);
  int32_t *idx = malloc(sizeof(int32_t) * (size_t)train->n);
  if (!idx) return tsr_error_set(err, TSR_ENOMEM, "out of memory for the sample order");
  for (int64_t i = 0; i < train->n; i++)
    idx[i] = (int32_t)i;

  int b = tsr_net_batch(net);
  int64_t batches = (train->n + b - 1) / b;
  int rc = 0;
  double base_lr = tsr_net_base_lr(net), total_steps = (double)batches * o->epochs;
  for (int e = 1; e <= o->epochs && rc == 0; e++) {
    if (o->shuffle) shuffle(idx, train->n, o->seed, e);
    double t0 = now(), last_progress = t0;
    for (int64_t k = 0; k < batches && rc == 0; k++) {
      int64_t s = k * b;
      int n = (int)(train->n - s < b ? train->n - s : b);
      if (o->lr_schedule == TSR_LR_COSINE) {
        double t = (double)((e - 1) * batches + k) / total_steps;
        tsr_net_set_lr(net, (float)(base_lr * 0.5 * (1.0 + cos(M_PI * t))));
      }
      rc = tsr_net_train_step(net, train, idx + s, n, true);
      if (rc == 0 && k >= o->window) rc = tsr_net_wait(net, o->window);
      if (o->on_progress && now() - last_progress > 0.5) {
        last_progress = now();
        o->on_progress(e, k + 1, batches, last_progress - t0, o->ctx);
      }
    }
    if (rc) break;
    double loss_sum, correct;
    rc = tsr_net_take_stats(net, false, &loss_sum, &correct); /* waits for the epoch */
    double t1 = now();
    tsr_epoch_stats_t st = {.epoch = e,
                            .epochs = o->epochs,
                            .loss = loss_sum / (double)train->n,
                            .train_accuracy = correct / (double)train->n,
                            .test_loss = NAN,
                            .test_accuracy = NAN,
                            .seconds = t1 - t0,
                            .samples = train->n,
                            .samples_per_s = (double)train->n / (t1 - t0)};
    if (rc == 0 && test && test->n > 0)
      rc = tsr_evaluate(net, test, &st.test_loss, &st.test_accuracy);
    st.eval_seconds = now() - t1;
    if (rc == 0 && o->on_epoch && o->on_epoch(&st, o->ctx) != 0) break;
  }
  free(idx);
  if (rc) return tsr_error_set(err, rc, "training stopped: %s", tsr_strerror(rc));
  return 0;
}
