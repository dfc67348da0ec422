/* Runtime start-up: the one place outside codelets/ and src/tile/ that talks
 * to StarPU's lifecycle. */
#include <stdio.h>
#include <string.h>

#include <starpu.h>
#include <starpu_heteroprio.h>

#include "kernels/kernels.h"
#include "tessera/runtime.h"

static bool started;
static char sched_in_use[64];

void tsr_runtime_opts_init(tsr_runtime_opts_t *opts) {
  opts->sched = NULL;
  opts->ncpus = -1;
}

/* Policies this StarPU offers that cannot train here, and why. */
static const char *broken_reason(const char *name) {
  if (STARPU_MAJOR_VERSION == 1 && STARPU_MINOR_VERSION == 3 &&
      strcmp(name, "modular-heteroprio-heft") == 0)
    return "deadlocks inside StarPU 1.3's scheduler component (a worker waits on a scheduler "
           "mutex forever after the first epoch)";
  return NULL;
}

bool tsr_sched_known(const char *name) {
  struct starpu_sched_policy **p = starpu_sched_get_predefined_policies();
  for (; *p; p++)
    if (strcmp((*p)->policy_name, name) == 0) return true;
  return false;
}

void tsr_sched_list(FILE *out) {
  struct starpu_sched_policy **p = starpu_sched_get_predefined_policies();
  for (; *p; p++)
    fprintf(out, "  %-16s %s%s\n", (*p)->policy_name, (*p)->policy_description,
            broken_reason((*p)->policy_name) ? " (does not work with this StarPU)" : "");
}

/* heteroprio needs the application to map task priorities to buckets before
 * it can run anything (without this StarPU 1.3 aborts). tessera's tasks use
 * priority 1 for critical-path work and 0 for the rest: bucket 1 is looked
 * at first. */
static void heteroprio_init(unsigned ctx) {
  starpu_heteroprio_set_nb_prios(ctx, STARPU_CPU_IDX, 2);
  starpu_heteroprio_set_mapping(ctx, STARPU_CPU_IDX, 0, 1);
  starpu_heteroprio_set_mapping(ctx, STARPU_CPU_IDX, 1, 0);
  starpu_heteroprio_set_faster_arch(ctx, STARPU_CPU_IDX, 0);
  starpu_heteroprio_set_faster_arch(ctx, STARPU_CPU_IDX, 1);
}

int tsr_runtime_init(const tsr_runtime_opts_t *opts, tsr_errbuf_t *err) {
  if (started) return tsr_error_set(err, TSR_EINVAL, "the runtime is already started");
  const char *sched = opts && opts->sched ? opts->sched : TSR_DEFAULT_SCHED;
  if (!tsr_sched_known(sched))
    return tsr_error_set(err, TSR_EINVAL,
                         "unknown scheduling policy '%s'; `tessera info --sched-list` lists the "
                         "policies this StarPU offers (e.g. lws, eager, dmda, ws, prio)",
                         sched);
  const char *broken = broken_reason(sched);
  if (broken)
    return tsr_error_set(err, TSR_EINVAL,
                         "scheduling policy '%s' %s; choose another (lws is the default)", sched,
                         broken);
  int ncpus = opts ? opts->ncpus : -1;
  if (ncpus == 0 || ncpus < -1)
    return tsr_error_set(err, TSR_EINVAL, "--workers must be at least 1 (got %d)", ncpus);

  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.sched_policy_name = sched;
  if (strcmp(sched, "heteroprio") == 0) conf.sched_policy_init = heteroprio_init;
  conf.ncpus = ncpus;
  conf.ncuda = 0;
  /* No OpenCL codelets yet: probing OpenCL platforms would only cost start-up time. */
  conf.nopencl = 0;
  int ret = starpu_init(&conf);
  if (ret == -ENODEV)
    return tsr_error_set(err, TSR_ERUNTIME, "StarPU found no worker to run on");
  if (ret != 0) return tsr_error_set(err, TSR_ERUNTIME, "starpu_init failed (%d)", ret);
  if (starpu_cpu_worker_get_count() == 0) {
    starpu_shutdown();
    return tsr_error_set(err, TSR_ERUNTIME, "StarPU started without any CPU worker");
  }
  tsr__k_init();
  snprintf(sched_in_use, sizeof sched_in_use, "%s", sched);
  started = true;
  return 0;
}

void tsr_runtime_fini(void) {
  if (!started) return;
  starpu_task_wait_for_all();
  starpu_shutdown();
  started = false;
}

int tsr_runtime_ncpus(void) {
  return started ? (int)starpu_cpu_worker_get_count() : 0;
}

const char *tsr_runtime_sched(void) {
  return sched_in_use;
}
