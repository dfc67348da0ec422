/* Runtime start-up: the one place outside codelets/ and src/tile/ that talks
 * to StarPU's lifecycle. */
#include <hwloc.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include <starpu.h>
#include <starpu_heteroprio.h>
#include <starpu_mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "runtime/observe.h"
#include "runtime/progress.h"
#include "runtime/tags.h"
#include "runtime/task_opts.h"
#include "tessera/dist.h"
#include "tessera/runtime.h"

static bool started, with_mpi, priorities = true;
static tsr_kernels_t kernels_in_use = TSR_KERNELS_AUTO;
static char sched_in_use[64];
static const tsr_device_hooks_t *device_hooks; /* codelets/opencl.c's, when built with OpenCL */

void tsr__runtime_device_hooks(const tsr_device_hooks_t *hooks) {
  device_hooks = hooks;
}

static tsr_impl_name_fn impl_names; /* codelets/impls.c's */

void tsr__runtime_impl_names(tsr_impl_name_fn fn) {
  impl_names = fn;
}

const char *tsr__runtime_impl_name(const void *codelet, unsigned nimpl) {
  return impl_names ? impl_names(codelet, nimpl) : NULL;
}

bool tsr_runtime_opencl_built(void) {
#ifdef TSR_HAVE_OPENCL
  return true;
#else
  return false;
#endif
}

int tsr_runtime_parse_devices(const char *s, int *opencl) {
  if (!s) return TSR_EINVAL;
  if (strcmp(s, "none") == 0) return *opencl = 0, 0;
  if (strcmp(s, "opencl") == 0) return *opencl = TSR_OPENCL_ALL, 0;
  if (strncmp(s, "opencl:", 7) != 0) return TSR_EINVAL;
  char *end;
  long n = strtol(s + 7, &end, 10);
  if (end == s + 7 || *end || n < 1 || n > 64) return TSR_EINVAL;
  *opencl = (int)n;
  return 0;
}

bool tsr_runtime_onednn_built(void) {
  return tsr__k_dnnl_built();
}

const char *tsr_runtime_onednn_version(void) {
  return tsr__k_dnnl_version();
}

static const char *const kernel_names[] = {"auto", "onednn", "blis", "tuned"};

int tsr_runtime_parse_kernels(const char *s, tsr_kernels_t *kernels) {
  for (int k = 0; s && k < (int)(sizeof kernel_names / sizeof *kernel_names); k++)
    if (strcmp(s, kernel_names[k]) == 0) return *kernels = (tsr_kernels_t)k, 0;
  return TSR_EINVAL;
}

const char *tsr_runtime_kernels_name(tsr_kernels_t kernels) {
  return (unsigned)kernels < sizeof kernel_names / sizeof *kernel_names ? kernel_names[kernels]
                                                                        : "?";
}

tsr_kernels_t tsr_runtime_kernels(void) {
  return kernels_in_use;
}

tsr_task_opts_t tsr__task_opts_default(void) {
  return (tsr_task_opts_t){.observer = tsr__observe_observer(), .kernels = (int)kernels_in_use};
}

bool tsr__runtime_mpi(void) {
  return started && with_mpi;
}

int tsr__task_priority(int p) {
  return priorities ? p : 0;
}

void tsr_runtime_opts_init(tsr_runtime_opts_t *opts) {
  opts->sched = NULL;
  opts->ncpus = -1;
  opts->priorities = true;
  opts->stats = false;
  opts->trace = false;
  opts->trace_from = opts->trace_to = 0;
  opts->mpi_progress = TSR_MPI_PROGRESS_AUTO;
  opts->opencl = TSR_OPENCL_AUTO;
  opts->kernels = TSR_KERNELS_AUTO;
  opts->verbose = false;
}

/* OpenCL devices asked for (opts.opencl) as StarPU's nopencl, or an error:
 * a build without OpenCL, or STARPU_NOPENCL saying otherwise (StarPU lets
 * the environment win over its configuration). */
static int opencl_conf(int opencl, int *nopencl, tsr_errbuf_t *err) {
  if (opencl == 0 || opencl == TSR_OPENCL_AUTO) {
    *nopencl = tsr_runtime_opencl_built() ? (opencl == 0 ? 0 : -1) : 0;
  } else if (opencl == TSR_OPENCL_ALL || opencl > 0) {
    if (!tsr_runtime_opencl_built())
      return tsr_error_set(err, TSR_EINVAL,
                           "--devices opencl: this tessera is built without OpenCL; install "
                           "ocl-icd-opencl-dev and libclblast-dev and rebuild (meson -Dopencl="
                           "enabled), or use --devices none");
    *nopencl = opencl > 0 ? opencl : -1;
  } else {
    return tsr_error_set(err, TSR_EINVAL, "opts.opencl = %d is not a device count", opencl);
  }
  const char *env = getenv("STARPU_NOPENCL");
  if (env && opencl != TSR_OPENCL_AUTO && *nopencl >= 0 && atoi(env) != *nopencl)
    return tsr_error_set(err, TSR_EINVAL,
                         "STARPU_NOPENCL=%s is set and would override --devices (%d OpenCL "
                         "device(s) asked for); unset it",
                         env, *nopencl);
  return 0;
}

/* After start-up: the devices asked for are there, and the OpenCL programs
 * are built for them. On error StarPU is still running. */
static int opencl_start(int opencl, tsr_errbuf_t *err) {
  int n = (int)starpu_opencl_worker_get_count();
  if ((opencl == TSR_OPENCL_ALL && n == 0) || (opencl > 0 && n != opencl)) {
    char asked[24] = "opencl";
    if (opencl > 0) snprintf(asked, sizeof asked, "opencl:%d", opencl);
    return tsr_error_set(
        err, TSR_ERUNTIME,
        "--devices %s: StarPU started %d OpenCL device(s); `clinfo -l` lists what the OpenCL "
        "loader finds, and devices that are CPUs (PoCL) need STARPU_OPENCL_ON_CPUS=1",
        asked, n);
  }
  if (n == 0 || !device_hooks) return 0;
  char msg[256] = "";
  if (device_hooks->prepare(msg, sizeof msg) != 0)
    return tsr_error_set(err, TSR_ERUNTIME, "%s", msg);
  return 0;
}

/* Releases what prepare built, also after a prepare that failed half-way (a no-op when
 * nothing was built). */
static void opencl_stop(void) {
  if (device_hooks) device_hooks->release();
}

/* Policies programs registered (tsr_sched_register), borrowed. */
static struct starpu_sched_policy *registered[8];
static int nregistered;

static struct starpu_sched_policy *find_registered(const char *name) {
  for (int i = 0; i < nregistered; i++)
    if (strcmp(registered[i]->policy_name, name) == 0) return registered[i];
  return NULL;
}

static bool predefined(const char *name) {
  struct starpu_sched_policy **p = starpu_sched_get_predefined_policies();
  for (; *p; p++)
    if (strcmp((*p)->policy_name, name) == 0) return true;
  return false;
}

int tsr_sched_register(const void *policy) {
  struct starpu_sched_policy *p = (struct starpu_sched_policy *)policy;
  if (!p || !p->policy_name || !p->init_sched || !p->push_task || !p->pop_task) return TSR_EINVAL;
  if (predefined(p->policy_name)) return TSR_EINVAL;
  if (find_registered(p->policy_name)) return 0;
  if (nregistered == (int)(sizeof registered / sizeof *registered)) return TSR_EINVAL;
  registered[nregistered++] = p;
  return 0;
}

const char *tsr_sched_broken(const char *name) {
  if (STARPU_MAJOR_VERSION == 1 && STARPU_MINOR_VERSION == 3 &&
      strcmp(name, "modular-heteroprio-heft") == 0)
    return "deadlocks inside StarPU 1.3's scheduler component (a worker waits on a scheduler "
           "mutex forever after the first epoch)";
  return NULL;
}

bool tsr_sched_known(const char *name) {
  return predefined(name) || find_registered(name);
}

void tsr_sched_list(FILE *out) {
  struct starpu_sched_policy **p = starpu_sched_get_predefined_policies();
  for (; *p; p++)
    fprintf(out, "  %-16s %s%s\n", (*p)->policy_name, (*p)->policy_description,
            tsr_sched_broken((*p)->policy_name) ? " (does not work with this StarPU)" : "");
  for (int i = 0; i < nregistered; i++)
    fprintf(out, "  %-16s %s (registered by this program)\n", registered[i]->policy_name,
            registered[i]->policy_description ? registered[i]->policy_description : "");
}

/* heteroprio needs the application to map task priorities to buckets before
 * it can run anything (without this StarPU 1.3 aborts). tessera's tasks use
 * priorities 0..TSR_PRIO_MAX, higher on the critical path (src/nn/net.c):
 * priority p goes to bucket TSR_PRIO_MAX - p, and bucket 0 is looked at first. */
static void heteroprio_init(unsigned ctx) {
  starpu_heteroprio_set_nb_prios(ctx, STARPU_CPU_IDX, TSR_PRIO_MAX + 1);
  for (unsigned p = 0; p <= TSR_PRIO_MAX; p++) {
    starpu_heteroprio_set_mapping(ctx, STARPU_CPU_IDX, p, TSR_PRIO_MAX - p);
    starpu_heteroprio_set_faster_arch(ctx, STARPU_CPU_IDX, p);
  }
}

/* Ranks sharing a node get disjoint cores: StarPU 1.3 ignores the binding
 * mpirun gives a process, so without this every rank's first worker lands on
 * core 0. With several ranks per node and no --workers, each rank takes its
 * share of the cores. */
/* When the process may run on fewer CPUs than the node has (taskset, cgroups, Slurm, mpirun
 * --bind-to), its workers go inside that set, in its order, several to a CPU when asked for more
 * workers than it has: StarPU 1.3 would spread them over the whole node. Returns whether it
 * placed them. workers_bindid takes hwloc's logical PU numbers; the mask has the OS's. */
static bool bind_inside_mask(struct starpu_conf *conf, int ncpus) {
  cpu_set_t set;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) >= online) return false;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return false;
  unsigned pus[STARPU_NMAXWORKERS];
  int n = 0;
  if (hwloc_topology_load(topo) == 0)
    for (int c = 0; c < CPU_SETSIZE && n < STARPU_NMAXWORKERS; c++) {
      hwloc_obj_t pu = CPU_ISSET(c, &set) ? hwloc_get_pu_obj_by_os_index(topo, (unsigned)c) : NULL;
      if (pu) pus[n++] = pu->logical_index;
    }
  hwloc_topology_destroy(topo);
  if (n == 0) return false;
  int workers = ncpus > 0 ? ncpus : n;
  conf->ncpus = workers;
  conf->use_explicit_workers_bindid = 1;
  for (int i = 0; i < workers && i < STARPU_NMAXWORKERS; i++)
    conf->workers_bindid[i] = pus[i % n];
  return true;
}

static void place_workers(struct starpu_conf *conf, int ncpus) {
  /* Replicas are updated by plain tasks between transfers, which StarPU-MPI's
   * cache would not see: every transfer must carry the current tile. */
  setenv("STARPU_MPI_CACHE", "0", 0);
  if (bind_inside_mask(conf, ncpus)) return;
  int local = tsr_dist_local_size();
  if (local <= 1) return;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int per_rank = ncpus > 0 ? ncpus : (int)(cores / local > 0 ? cores / local : 1);
  conf->ncpus = per_rank;
  conf->use_explicit_workers_bindid = 1;
  for (int i = 0; i < per_rank && i < STARPU_NMAXWORKERS; i++)
    conf->workers_bindid[i] = (unsigned)((tsr_dist_local_rank() * per_rank + i) % cores);
  /* The progression thread's core: tsr__progress_configure. */
}

int tsr_runtime_init(const tsr_runtime_opts_t *opts, tsr_errbuf_t *err) {
  if (started) return tsr_error_set(err, TSR_EINVAL, "the runtime is already started");
  /* With OpenCL devices asked for by name, a policy that uses the performance models to
   * split work between CPU workers and devices (lws ignores them). */
  int opencl = opts ? opts->opencl : TSR_OPENCL_AUTO;
  const char *sched = opts && opts->sched                      ? opts->sched
                      : opencl > 0 || opencl == TSR_OPENCL_ALL ? TSR_DEVICES_SCHED
                                                               : TSR_DEFAULT_SCHED;
  if (!tsr_sched_known(sched))
    return tsr_error_set(err, TSR_EINVAL,
                         "unknown scheduling policy '%s'; `tessera info --sched-list` lists the "
                         "policies this StarPU offers (e.g. lws, eager, dmda, ws, prio)",
                         sched);
  /* StarPU reads STARPU_SCHED before the configuration: a stale one would
   * silently replace the policy asked for. */
  if (getenv("STARPU_SCHED") && strcmp(getenv("STARPU_SCHED"), sched) != 0)
    return tsr_error_set(err, TSR_EINVAL,
                         "STARPU_SCHED=%s is set and would override policy '%s'; unset it",
                         getenv("STARPU_SCHED"), sched);
  const char *broken = tsr_sched_broken(sched);
  if (broken)
    return tsr_error_set(err, TSR_EINVAL,
                         "scheduling policy '%s' %s; choose another (lws is the default)", sched,
                         broken);
  int ncpus = opts ? opts->ncpus : -1;
  if (ncpus == 0 || ncpus < -1)
    return tsr_error_set(err, TSR_EINVAL, "--workers must be at least 1 (got %d)", ncpus);
  tsr_kernels_t kernels = opts ? opts->kernels : TSR_KERNELS_AUTO;
  if ((unsigned)kernels > TSR_KERNELS_TUNED)
    return tsr_error_set(err, TSR_EINVAL, "unknown kernel choice %d (opts.kernels)", (int)kernels);
  if (kernels == TSR_KERNELS_ONEDNN && !tsr__k_dnnl_built())
    return tsr_error_set(err, TSR_EINVAL,
                         "--kernels onednn: this build has no oneDNN; install libdnnl-dev and "
                         "reconfigure (meson setup --reconfigure build -Ddnnl=enabled), or use "
                         "--kernels blis");
  int64_t from = opts ? opts->trace_from : 0, to = opts ? opts->trace_to : 0;
  if ((from || to) && (from < 1 || to < from || !opts->trace))
    return tsr_error_set(err, TSR_EINVAL,
                         "trace steps %lld-%lld (opts.trace_from, trace_to; --trace-steps): "
                         "expected 1 <= from <= to, with tracing on",
                         (long long)from, (long long)to);

  /* StarPU speaks for itself on stderr: performance-model calibration ("Too big deviation",
   * dozens of lines on a fresh STARPU_HOME) and warnings about settings tessera chose on
   * purpose (StarPU-MPI's cache off, the progression mode). A user's own STARPU_SILENT wins. */
  if (!(opts && opts->verbose)) setenv("STARPU_SILENT", "1", 0);
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.sched_policy_name = sched;
  struct starpu_sched_policy *own = find_registered(sched);
  if (own) conf.sched_policy_name = NULL, conf.sched_policy = own;
  if (strcmp(sched, "heteroprio") == 0) conf.sched_policy_init = heteroprio_init;
  conf.ncpus = ncpus;
  conf.ncuda = 0;
  int rc_cl = opencl_conf(opencl, &conf.nopencl, err);
  if (rc_cl) return rc_cl;
  with_mpi = tsr_dist_active();
  if (!with_mpi) bind_inside_mask(&conf, ncpus);
  if (with_mpi) {
    place_workers(&conf, ncpus);
    int rc = tsr__progress_configure(opts ? opts->mpi_progress : TSR_MPI_PROGRESS_AUTO, &conf, err);
    if (rc) return rc;
  }
  kernels_in_use = kernels;
  int ret =
      with_mpi ? starpu_mpi_init_conf(NULL, NULL, 0, MPI_COMM_WORLD, &conf) : starpu_init(&conf);
  if (ret == -ENODEV) return tsr_error_set(err, TSR_ERUNTIME, "StarPU found no worker to run on");
  if (ret != 0) return tsr_error_set(err, TSR_ERUNTIME, "starpu_init failed (%d)", ret);
  if (starpu_cpu_worker_get_count() == 0) {
    if (with_mpi)
      starpu_mpi_shutdown();
    else
      starpu_shutdown();
    return tsr_error_set(err, TSR_ERUNTIME, "StarPU started without any CPU worker");
  }
  rc_cl = opencl_start(opencl, err);
  if (rc_cl) {
    opencl_stop();
    if (with_mpi)
      starpu_mpi_shutdown();
    else
      starpu_shutdown();
    return rc_cl;
  }
  if (with_mpi) tsr__progress_start();
  tsr__k_init();
  snprintf(sched_in_use, sizeof sched_in_use, "%s", sched);
  started = true;
  priorities = opts ? opts->priorities : true;
  if (tsr__observe_start(opts && opts->stats, opts && opts->trace, from, to) != 0) {
    tsr_runtime_fini();
    return tsr_error_set(err, TSR_ENOMEM, "out of memory for the trace buffer");
  }
  return 0;
}

void tsr_runtime_fini(void) {
  if (!started) return;
  starpu_task_wait_for_all();
  tsr__observe_snapshot();
  opencl_stop();
  if (with_mpi) tsr__progress_stop();
  if (with_mpi)
    starpu_mpi_shutdown(); /* stops StarPU too, since starpu_mpi_init_conf started it */
  else
    starpu_shutdown();
  started = false;
}

int tsr_runtime_ncpus(void) {
  return started ? (int)starpu_cpu_worker_get_count() : 0;
}

int tsr_runtime_nopencl(void) {
  return started ? (int)starpu_opencl_worker_get_count() : 0;
}

int tsr_runtime_max_ncpus(void) {
  return STARPU_MAXCPUS;
}

const char *tsr_runtime_sched(void) {
  return sched_in_use;
}

bool tsr_runtime_bytes_sent(uint64_t *to_rank) {
  int n = tsr_dist_size();
  for (int q = 0; q < n; q++)
    to_rank[q] = 0;
  const char *on = getenv("STARPU_COMM_STATS");
  if (!started || !with_mpi || !on || atoi(on) == 0) return false;
  size_t *amounts = calloc((size_t)n, sizeof *amounts);
  if (!amounts) return false;
  starpu_mpi_comm_amounts_retrieve(amounts);
  for (int q = 0; q < n; q++)
    to_rank[q] = amounts[q];
  free(amounts);
  return true;
}

const char *tsr_runtime_mpi_progress(void) {
  if (!started || !with_mpi) return "none";
  return tsr__progress_in_worker() ? "worker" : "thread";
}
