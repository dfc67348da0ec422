/* Starting and stopping the task runtime (StarPU) for a tessera process. */
#ifndef TESSERA_RUNTIME_H
#define TESSERA_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tessera/error.h"

TSR_EXTERN_C_BEGIN

/* Who polls StarPU-MPI's transfers under mpirun (src/runtime/progress.h). */
typedef enum {
  TSR_MPI_PROGRESS_AUTO,   /* WORKER wherever MPI allows it (MPI_THREAD_MULTIPLE), else
                              THREAD */
  TSR_MPI_PROGRESS_THREAD, /* StarPU-MPI's own thread, polling beside the workers */
  TSR_MPI_PROGRESS_WORKER, /* that thread runs the rank's first worker between polls */
} tsr_mpi_progress_t;

/* Which CPU implementation runs the operations that have several (the convolutions' three
 * passes): AUTO registers both and lets StarPU choose (the model-based policies, dmda and dmdas,
 * per task from each one's measured history; the others take oneDNN's first), ONEDNN and BLIS
 * force one (oneDNN's primitives, or the input lowered to BLIS GEMMs), TUNED times both on each
 * shape's first tasks (three of each) and keeps the faster for
 * the rest of the process, under any policy: the fastest, but which one a shape gets depends on
 * the timings, so two runs may differ in the last digits. */
typedef enum {
  TSR_KERNELS_AUTO,
  TSR_KERNELS_ONEDNN,
  TSR_KERNELS_BLIS,
  TSR_KERNELS_TUNED,
} tsr_kernels_t;

typedef struct {
  const char *sched; /* StarPU scheduling policy name (predefined or registered with
                        tsr_sched_register); NULL: TSR_DEFAULT_SCHED */
  int ncpus;         /* CPU workers; -1: every core StarPU may use */
  bool priorities;   /* critical-path tasks get higher priorities (default true); false:
                        every task priority 0, for comparison */
  bool stats;        /* per-worker statistics from StarPU's profiling (tsr_runtime_stats) */
  bool trace;        /* record every task for a timeline (tsr_runtime_trace_write) */
  int64_t trace_from, trace_to;    /* with trace: record only the tasks of training steps
                                      trace_from .. trace_to (1-based over the run, inclusive;
                                      --trace-steps A-B) and the main thread's spans that overlap
                                      them; 0, 0 (default): every task. Otherwise both >= 1 and
                                      trace_from <= trace_to, and trace must be on */
  tsr_mpi_progress_t mpi_progress; /* under MPI only; default AUTO */
  int opencl; /* OpenCL devices (--devices): TSR_OPENCL_AUTO (default) whatever StarPU finds,
                 0 none, TSR_OPENCL_ALL every one StarPU finds and at least one, N > 0 exactly
                 N; asking for any in a build without OpenCL is an error */
  tsr_kernels_t kernels; /* default AUTO; ONEDNN in a build without oneDNN is an error */
  bool verbose;          /* StarPU's own messages (calibration, warnings) on stderr; default false:
                            StarPU is silenced (STARPU_SILENT=1) unless the environment sets
                            STARPU_SILENT itself, which wins either way */
} tsr_runtime_opts_t;

#define TSR_OPENCL_AUTO (-1)
#define TSR_OPENCL_ALL (-2)

/* The policy that measured fastest for training on small nodes (README). */
#define TSR_DEFAULT_SCHED "lws"
/* The default with OpenCL devices asked for (opts.opencl): it places each task where the
 * performance models predict it finishes first, transfers counted. */
#define TSR_DEVICES_SCHED "dmda"

TSR_API void tsr_runtime_opts_init(tsr_runtime_opts_t *opts);

/* Validates the options and starts StarPU; BLIS is made single-threaded so
 * that StarPU is the only source of parallelism. An unknown policy is
 * rejected with the list of known ones in err. */
TSR_API int tsr_runtime_init(const tsr_runtime_opts_t *opts, tsr_errbuf_t *err);
/* Waits for all tasks and stops StarPU. Safe to call when not started. */
TSR_API void tsr_runtime_fini(void);

TSR_API int tsr_runtime_ncpus(void);   /* CPU workers StarPU runs */
TSR_API int tsr_runtime_nopencl(void); /* OpenCL workers (one per device) StarPU runs */
/* Whether this build has the OpenCL codelets (meson -Dopencl). */
TSR_API bool tsr_runtime_opencl_built(void);
/* Parses --devices' value: "none", "opencl" or "opencl:N" (N from 1 to 64) into *opencl
 * (tsr_runtime_opts_t.opencl); returns 0, or TSR_EINVAL for anything else. */
TSR_API int tsr_runtime_parse_devices(const char *s, int *opencl);
/* Whether this build has oneDNN's convolutions (meson -Ddnnl), and its version ("oneDNN
 * 2.6.3 (OpenMP)") or why not. */
TSR_API bool tsr_runtime_onednn_built(void);
TSR_API const char *tsr_runtime_onednn_version(void);
/* Parses --kernels' value: "auto", "onednn", "blis" or "tuned"; returns 0, or TSR_EINVAL. */
TSR_API int tsr_runtime_parse_kernels(const char *s, tsr_kernels_t *kernels);
TSR_API const char *tsr_runtime_kernels_name(tsr_kernels_t kernels);
TSR_API tsr_kernels_t tsr_runtime_kernels(void); /* the choice in use */
TSR_API int tsr_runtime_max_ncpus(void); /* at most this many per process (STARPU_MAXCPUS) */
/* Bytes this process can still allocate as far as the system says: the smallest of the
 * kernel's MemAvailable and the cgroup's memory.max less memory.current, shared by the ranks
 * mpirun started on this node (OMPI_COMM_WORLD_LOCAL_SIZE), and the address-space limit
 * (ulimit -v) less what is mapped; *source names which one it is. -1 when nothing says. Needs
 * no runtime. */
TSR_API int64_t tsr_runtime_memory_available(const char **source);
TSR_API const char *tsr_runtime_sched(void); /* policy in use */
/* "thread" or "worker" under MPI once started, else "none". */
TSR_API const char *tsr_runtime_mpi_progress(void);
/* The bytes StarPU-MPI has sent from this rank to each rank q so far, into to_rank[q]
 * (tsr_dist_size() entries): its own count, kept when STARPU_COMM_STATS=1 was set before the
 * runtime started; false (and zeros) otherwise. */
TSR_API bool tsr_runtime_bytes_sent(uint64_t *to_rank);

/* Whether name is a scheduling policy the installed StarPU offers or a
 * program registered. */
TSR_API bool tsr_sched_known(const char *name);
/* Why policy name cannot train with this StarPU (modular-heteroprio-heft deadlocks in 1.3), or
 * NULL when it can; tsr_runtime_init refuses such a policy with this reason. */
TSR_API const char *tsr_sched_broken(const char *name);
/* Writes the installed and registered policies, one "name  description" per line. */
TSR_API void tsr_sched_list(FILE *out);
/* Makes a program's own policy selectable by its name (opts.sched, --sched).
 * policy is a `struct starpu_sched_policy *` (typed void here so that this
 * header needs no StarPU), borrowed: it must outlive the runtime. Its
 * policy_name must not be a predefined policy's name. At most 8. */
TSR_API int tsr_sched_register(const void *policy);

/* Under mpirun with exactly 2 ranks, after tsr_runtime_init: the mean round
 * trip in seconds of `bytes` between ranks 0 and 1 through StarPU-MPI over
 * `rounds` exchanges (after 3 warm-up ones). Both ranks call it. */
TSR_API int tsr_runtime_pingpong(int bytes, int rounds, double *seconds, tsr_errbuf_t *err);

/* Observation of a run (opts.stats, opts.trace). Counters start at
 * tsr_runtime_init; tsr_runtime_fini keeps a snapshot of this rank's. Under
 * MPI both calls below are collective and use plain MPI: call them on every
 * rank after tsr_runtime_fini (before tsr_dist_stop); rank 0 gets every
 * rank's workers and writes the merged file. Without MPI they may also be
 * called while the runtime runs (they wait for all tasks), but the first such
 * call takes the snapshot and ends the observation: tasks after it are not
 * counted, and later calls return the same figures. */
#define TSR_STATS_MAX_CODELETS 48

typedef struct {
  int rank, worker; /* MPI rank, StarPU worker id */
  char name[48];    /* StarPU's worker name, e.g. "CPU 0" */
  double seconds;   /* wall time profiled */
  double executing; /* running task bodies */
  double idle;      /* finding no task (StarPU 1.3 workers poll while idle) */
  double overhead;  /* the rest: scheduling, data management, callbacks */
  int64_t tasks;    /* tasks StarPU counted as executed by this worker */
  int64_t codelet_tasks[TSR_STATS_MAX_CODELETS]; /* by index into tsr_run_stats_t.codelets */
} tsr_worker_stats_t;

typedef struct {
  int rank, src, dst; /* memory nodes of a rank */
  int64_t bytes;
  int transfers;
  char src_name[24], dst_name[24]; /* StarPU's names of the nodes, e.g. "NUMA 0", "OpenCL 0" */
} tsr_bus_stats_t;

typedef struct {
  int ncodelets;
  char codelets[TSR_STATS_MAX_CODELETS][32];
  int nworkers;
  tsr_worker_stats_t *workers; /* owned: every rank's workers, rank by rank */
  int nbuses;
  tsr_bus_stats_t *buses; /* owned */
  int64_t trace_events;   /* task events recorded, spans not counted (all ranks; 0
                             without opts.trace) */
  int64_t trace_dropped;  /* tasks not recorded because the buffer was full */
} tsr_run_stats_t;

/* Fills *st (caller-owned; release with tsr_run_stats_fini). Needs opts.stats. */
TSR_API int tsr_runtime_stats(tsr_run_stats_t *st, tsr_errbuf_t *err);
TSR_API void tsr_run_stats_fini(tsr_run_stats_t *st);
/* A table: per worker, time executing / idle / overhead and tasks; per
 * codelet, tasks; bytes moved between memory nodes. */
TSR_API void tsr_run_stats_print(FILE *out, const tsr_run_stats_t *st);
/* Writes the recorded tasks as a Chrome trace-event JSON file (Perfetto,
 * chrome://tracing): one track per worker per rank, a track per rank for
 * the main thread's waits and synchronization points. Needs opts.trace. A
 * file that cannot be written whole (a full disk) is removed, and err names
 * it with the system's reason. tsr_output_check (log.h) tells beforehand
 * whether path can be created. */
TSR_API int tsr_runtime_trace_write(const char *path, tsr_errbuf_t *err);

/* Reading a trace back (tessera trace-summary). */
typedef struct {
  bool json;    /* one JSON object instead of tables */
  int64_t step; /* the training step whose critical path is shown; 0: the middle one recorded */
  int top;      /* the longest waits listed (default 10) */
} tsr_trace_summary_opts_t;

TSR_API void tsr_trace_summary_opts_init(tsr_trace_summary_opts_t *opts);
/* Reads the trace at path (one tsr_runtime_trace_write wrote) and writes to out where the time
 * went: busy time per codelet and worker kind (CPU, OpenCL), busy and idle time per worker (idle:
 * from the rank's first recorded task to its last, the time the worker ran none), the main
 * thread's longest waits, and the critical path of one step: among the step's tasks, on every
 * rank, the chain of dependencies (each task's args.deps, and transfers between ranks) with the
 * most task time. opts NULL: defaults. Errors: TSR_EIO (cannot read), TSR_EFORMAT (not JSON,
 * not a tessera trace, an event without the fields tessera writes), TSR_EINVAL (a step the trace
 * does not hold), TSR_ENOMEM; err names the file and, where it can, the event. */
TSR_API int tsr_trace_summary(FILE *out, const char *path, const tsr_trace_summary_opts_t *opts,
                              tsr_errbuf_t *err);

/* tessera's version, e.g. "0.1.0", and the git description of the tree it was built from
 * (`git describe --always --dirty`, e.g. "fa3d36d-dirty"; "unknown" outside a git
 * checkout): static strings. */
TSR_API const char *tsr_version(void);
TSR_API const char *tsr_version_git(void);
/* One line of what this build runs on, without starting anything: "StarPU 1.3.10, BLIS 0.9.0,
 * MPI 3.1 (Open MPI v4.1.4), OpenCL codelets yes (CLBlast)", into buf (size bytes). */
TSR_API void tsr_versions(char *buf, size_t size);

/* Prints what the engine will run on: hwloc topology, StarPU workers and
 * memory nodes, BLIS configuration, StarPU and MPI versions, and a warning
 * with the fix when the node has more cores than one StarPU process may use.
 * Starts and stops the runtime itself when it is not running. */
TSR_API int tsr_info_print(FILE *out, const tsr_runtime_opts_t *opts, tsr_errbuf_t *err);

TSR_EXTERN_C_END

#endif
