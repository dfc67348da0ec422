/* A worked example of plugging one's own StarPU scheduling policy into
 * tessera without rebuilding StarPU or tessera: `critical-first`, one
 * central queue per task priority, workers always taking the oldest task of
 * the highest non-empty priority. Every worker is a CPU worker and every
 * tessera codelet has a CPU implementation, so any worker may take any task. tessera gives
 * critical-path tasks (input gradients, then the first layer's backward pass and update) the higher
 * priorities, so this is the smallest policy that uses them; StarPU's own
 * `prio` does the same with more machinery.
 *
 * The program registers the policy with the library (tsr_sched_register)
 * and then runs the tessera command-line interface, so every option of
 * `tessera train` works:
 *
 *   build/benchmarks/custom_sched train --sched critical-first --epochs 1 --stats
 *   build/benchmarks/custom_sched info --sched-list
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>
#include <starpu_scheduler.h>

#include "cli/cli.h"
#include "tessera/tessera.h"

#define NPRIO 4 /* tessera's priorities are 0..3 (codelets/submit.c) */

typedef struct {
  struct starpu_task_list queue[NPRIO]; /* by priority */
  pthread_mutex_t lock;
  int ntasks;
} policy_data_t;

static void cf_init(unsigned ctx) {
  policy_data_t *d = calloc(1, sizeof *d);
  STARPU_ASSERT(d);
  for (int p = 0; p < NPRIO; p++)
    starpu_task_list_init(&d->queue[p]);
  pthread_mutex_init(&d->lock, NULL);
  starpu_sched_ctx_set_policy_data(ctx, d);
}

static void cf_deinit(unsigned ctx) {
  policy_data_t *d = starpu_sched_ctx_get_policy_data(ctx);
  pthread_mutex_destroy(&d->lock);
  free(d);
}

static int cf_push(struct starpu_task *task) {
  unsigned ctx = task->sched_ctx;
  policy_data_t *d = starpu_sched_ctx_get_policy_data(ctx);
  int p = task->priority < 0 ? 0 : task->priority >= NPRIO ? NPRIO - 1 : task->priority;
  pthread_mutex_lock(&d->lock);
  starpu_task_list_push_back(&d->queue[p], task);
  d->ntasks++;
  starpu_push_task_end(task);
  pthread_mutex_unlock(&d->lock);
  /* Idle workers may be asleep: tell them there is work (the pattern of
   * StarPU's own simple policies). */
  struct starpu_worker_collection *workers = starpu_sched_ctx_get_worker_collection(ctx);
  struct starpu_sched_ctx_iterator it;
  workers->init_iterator(workers, &it);
  while (workers->has_next(workers, &it)) {
    unsigned w = workers->get_next(workers, &it);
    if (starpu_wake_worker_relax_light((int)w)) break; /* one woken worker is enough */
  }
  return 0;
}

static struct starpu_task *cf_pop(unsigned ctx) {
  policy_data_t *d = starpu_sched_ctx_get_policy_data(ctx);
  /* Racy peek: an idle worker polls, and must not take the lock each time. */
  if (__atomic_load_n(&d->ntasks, __ATOMIC_RELAXED) == 0) return NULL;
  struct starpu_task *task = NULL;
  pthread_mutex_lock(&d->lock);
  for (int p = NPRIO - 1; p >= 0 && !task; p--)
    if (!starpu_task_list_empty(&d->queue[p])) task = starpu_task_list_pop_front(&d->queue[p]);
  if (task) d->ntasks--;
  pthread_mutex_unlock(&d->lock);
  return task;
}

static struct starpu_sched_policy critical_first = {
    .init_sched = cf_init,
    .deinit_sched = cf_deinit,
    .push_task = cf_push,
    .pop_task = cf_pop,
    .policy_name = "critical-first",
    .policy_description = "central queue per priority, highest first (benchmarks/custom_sched.c)",
    .worker_type = STARPU_WORKER_LIST,
};

int main(int argc, char **argv) {
  if (tsr_sched_register(&critical_first) != 0) {
    fprintf(stderr, "custom_sched: cannot register the policy\n");
    return 1;
  }
  if (argc >= 2 && strcmp(argv[1], "train") == 0) return tsr_cli_train(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "info") == 0) return tsr_cli_info(argc - 1, argv + 1);
  fprintf(stderr, "usage: custom_sched train|info [tessera options]\n"
                  "  runs `tessera train` / `tessera info` with the policy `critical-first` "
                  "registered\n  (e.g. custom_sched train --sched critical-first --epochs 1)\n");
  return 2;
}
