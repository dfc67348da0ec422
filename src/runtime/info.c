/* `tessera info`: what the engine will run on. It prints the node as hwloc
 * sees it, the StarPU workers and memory nodes a tessera process gets, the
 * BLIS and MPI builds, and warns when one StarPU process cannot use every
 * core (Debian's StarPU caps a process at STARPU_MAXCPUS CPU workers), with
 * the command line that uses them all. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <blis.h>
#include <hwloc.h>
#include <mpi.h>
#include <starpu.h>

#include "tessera/runtime.h"

/* What the checks after the listing need from the topology. */
typedef struct {
  int cores;           /* cores on the node */
  int bound_cores;     /* cores the process is bound to; equal to cores when unbound */
  hwloc_bitmap_t bind; /* owned; the process binding (OS PU indexes), NULL when unbound */
} node_cores_t;

static const char *yes_no(long v) {
  return v ? "yes" : "no";
}

static int print_topology(FILE *out, node_cores_t *nc, tsr_errbuf_t *err) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0)
    return tsr_error_set(err, TSR_ERUNTIME, "hwloc could not read this node's topology");
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return tsr_error_set(err, TSR_ERUNTIME, "hwloc could not read this node's topology");
  }

  int packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
  const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;

  fprintf(out, "Node (as hwloc sees it)\n");
  if (model) fprintf(out, "  CPU model       %s\n", model);
  fprintf(out, "  packages        %d\n", packages);
  fprintf(out, "  NUMA nodes      %d\n", numa);
  fprintf(out, "  cores           %d\n", cores);
  fprintf(out, "  PUs             %d (hardware threads)\n", pus);
  fprintf(out, "  memory          %.1f GiB\n", (double)root->total_memory / (1024.0 * 1024 * 1024));

  nc->cores = cores;
  nc->bound_cores = cores;
  nc->bind = NULL;
  /* mpirun and job schedulers bind processes; a bound process should count
   * only its own cores. */
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (set && hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0) {
    char *list = NULL;
    hwloc_bitmap_list_asprintf(&list, set);
    if (hwloc_bitmap_isincluded(hwloc_topology_get_topology_cpuset(topo), set)) {
      fprintf(out, "  binding         none (every PU)\n");
    } else {
      /* A core counts when the binding holds any of its PUs. */
      nc->bound_cores = 0;
      for (hwloc_obj_t c = NULL; (c = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, c));)
        if (hwloc_bitmap_intersects(c->cpuset, set)) nc->bound_cores++;
      fprintf(out, "  binding         PUs %s (%d cores)\n", list ? list : "?", nc->bound_cores);
      nc->bind = set;
      set = NULL;
    }
    free(list);
  }
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
  return 0;
}

static const char *node_kind(enum starpu_node_kind kind) {
  switch (kind) {
  case STARPU_CPU_RAM: return "CPU RAM";
  case STARPU_CUDA_RAM: return "CUDA device memory";
  case STARPU_OPENCL_RAM: return "OpenCL device memory";
  case STARPU_DISK_RAM: return "disk";
  default: return "other";
  }
}

/* StarPU reads these at start-up, and most of them override what tessera asks for. */
static void print_starpu_env(FILE *out) {
  static const char *const vars[] = {
      "STARPU_SCHED",
      "STARPU_NCPU",
      "STARPU_NCPUS",
      "STARPU_NOPENCL",
      "STARPU_OPENCL_ON_CPUS",
      "STARPU_WORKERS_CPUID",
      "STARPU_WORKERS_GETBIND",
      "STARPU_MPI_THREAD_CPUID", /* STARPU_MPI_DRIVER_*: set by --mpi-progress */
      "STARPU_HOME",
  };
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v) fprintf(out, "  env             %s=%s\n", vars[i], v);
  }
}

static const char *worker_kind(enum starpu_worker_archtype type) {
  switch (type) {
  case STARPU_CPU_WORKER: return "CPU";
  case STARPU_CUDA_WORKER: return "CUDA";
  case STARPU_OPENCL_WORKER: return "OpenCL";
  default: return "other";
  }
}

/* Prints StarPU's configuration; returns how many workers run on PUs outside
 * the process binding (StarPU 1.3 ignores the binding unless told). */
static int print_starpu(FILE *out, const tsr_runtime_opts_t *opts, hwloc_const_bitmap_t bind) {
  int major, minor, release;
  starpu_get_version(&major, &minor, &release);
  fprintf(out, "\nStarPU %d.%d.%d (headers %d.%d.%d, at most %d CPU workers per process)\n", major,
          minor, release, STARPU_MAJOR_VERSION, STARPU_MINOR_VERSION, STARPU_RELEASE_VERSION,
          STARPU_MAXCPUS);
  print_starpu_env(out);

  /* Context 0 is the one starpu_init creates; STARPU_SCHED in the
   * environment wins over the policy tessera asks for, so ask StarPU. */
  struct starpu_sched_policy *pol = starpu_sched_ctx_get_sched_policy(0);
  const char *wanted = opts && opts->sched ? opts->sched : TSR_DEFAULT_SCHED;
  if (pol && pol->policy_name) {
    fprintf(out, "  scheduler       %s (%s)\n", pol->policy_name,
            pol->policy_description ? pol->policy_description : "");
    if (strcmp(pol->policy_name, wanted) != 0)
      fprintf(out, "  note            '%s' was asked for%s\n", wanted,
              getenv("STARPU_SCHED") ? "; STARPU_SCHED overrides it" : "");
  }

  unsigned nworkers = starpu_worker_get_count();
  fprintf(out, "  workers         %u (%u CPU, %u OpenCL, %u CUDA)\n", nworkers,
          starpu_cpu_worker_get_count(), starpu_opencl_worker_get_count(),
          starpu_cuda_worker_get_count());
  int outside = 0;
  for (unsigned w = 0; w < nworkers; w++) {
    char name[64], pus[64] = "?";
    starpu_worker_get_name((int)w, name, sizeof name);
#ifdef STARPU_HAVE_HWLOC
    /* The cpuset has OS PU numbers; starpu_worker_get_bindid() is StarPU's own index. */
    hwloc_bitmap_t cpuset = starpu_worker_get_hwloc_cpuset((int)w);
    if (cpuset) {
      hwloc_bitmap_list_snprintf(pus, sizeof pus, cpuset);
      if (bind && !hwloc_bitmap_isincluded(cpuset, bind)) outside++;
      hwloc_bitmap_free(cpuset);
    }
#else
    (void)bind;
    snprintf(pus, sizeof pus, "#%d", starpu_worker_get_bindid((int)w));
#endif
    fprintf(out, "    %-3u %-16s %-7s on PU %-6s memory node %u\n", w, name,
            worker_kind(starpu_worker_get_type((int)w)), pus, starpu_worker_get_memory_node(w));
  }

  unsigned nnodes = starpu_memory_nodes_get_count();
  fprintf(out, "  memory nodes    %u\n", nnodes);
  for (unsigned n = 0; n < nnodes; n++) {
    char name[64];
    if (starpu_memory_node_get_name(n, name, sizeof name) < 0) snprintf(name, sizeof name, "?");
    fprintf(out, "    %-3u %-16s %s\n", n, name, node_kind(starpu_node_get_kind(n)));
  }
  return outside;
}

static void print_blis(FILE *out) {
  fprintf(out, "\nBLIS %s\n", bli_info_get_version_str());
  fprintf(out, "  kernels         %s (chosen at run time for this CPU)\n",
          bli_arch_string(bli_arch_query_id()));
  fprintf(out, "  threading       OpenMP %s, pthreads %s\n", yes_no(bli_info_get_enable_openmp()),
          yes_no(bli_info_get_enable_pthreads()));
  long nt = (long)bli_thread_get_num_threads();
  if (nt < 0)
    fprintf(out, "  threads/call    unset (BLIS_NUM_THREADS or OMP_NUM_THREADS decide)\n");
  else
    fprintf(out, "  threads/call    %ld%s\n", nt,
            nt == 1 ? " (StarPU is the only source of parallelism)"
                    : " -- warning: BLIS threads oversubscribe the StarPU workers' cores");
}

static void print_mpi(FILE *out) {
  /* All three calls are allowed before MPI_Init. */
  int version, subversion, initialized = 0, finalized = 0, len = 0;
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Get_version(&version, &subversion);
  MPI_Get_library_version(lib, &len);
  while (len > 0 && (lib[len - 1] == '\n' || lib[len - 1] == ' ' || lib[len - 1] == '\0'))
    len--;
  lib[len] = '\0';
  fprintf(out, "\nMPI %d.%d\n", version, subversion);
  fprintf(out, "  library         %s\n", lib);
#ifdef OPEN_MPI
  fprintf(out, "  headers         Open MPI %d.%d.%d\n", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
          OMPI_RELEASE_VERSION);
#endif
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    fprintf(out, "  this process    rank %d of %d\n", rank, size);
  } else {
    fprintf(out, "  this process    MPI not initialized\n");
  }
}

/* Cores StarPU leaves idle or piles several ranks onto, and the fix for each. */
static void print_core_warning(FILE *out, node_cores_t nc, unsigned ncpu_workers, int outside) {
  if (outside > 0)
    fprintf(
        out,
        "\nwarning: this process is bound to %d of %d cores, but %d StarPU workers run outside\n"
        "         that binding (StarPU 1.3 ignores it by default), so ranks sharing a node\n"
        "         pile onto the same cores.\n"
        "  fix:   export STARPU_WORKERS_GETBIND=1 (with mpirun: -x STARPU_WORKERS_GETBIND=1)\n",
        nc.bound_cores, nc.cores, outside);
  /* Open MPI tells every process how many ranks share its node, before MPI_Init. */
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char *world = getenv("OMPI_COMM_WORLD_SIZE");
  int local_ranks = local ? atoi(local) : 1;
  if (local_ranks > 1 && !nc.bind)
    fprintf(out,
            "\nwarning: %d ranks share this node but this one is not bound to cores; StarPU 1.3\n"
            "         then puts every rank's workers on the same first cores.\n"
            "  fix:   mpirun -np %d --map-by slot:PE=%d -x STARPU_WORKERS_GETBIND=1 ...\n",
            local_ranks, world ? atoi(world) : local_ranks,
            nc.cores / local_ranks > 0 ? nc.cores / local_ranks : 1);
  /* A bound process (one rank of several on the node) counts only its own cores. */
  int usable = nc.bound_cores;
  if (usable > STARPU_MAXCPUS) {
    int ranks = (usable + STARPU_MAXCPUS - 1) / STARPU_MAXCPUS;
    fprintf(out,
            "\nwarning: this process may use %d cores, but this StarPU is built with "
            "STARPU_MAXCPUS=%d,\n"
            "         so one process runs at most %d CPU workers and %d cores stay idle.\n"
            "  fix:   run several MPI ranks per node, each on its own cores, e.g.\n"
            "           mpirun -np %d --map-by slot:PE=%d -x STARPU_WORKERS_GETBIND=1 "
            "tessera train ...\n"
            "         (STARPU_WORKERS_GETBIND=1 makes StarPU keep the cores mpirun gave the "
            "rank;\n"
            "         check placement with STARPU_DISPLAY_BINDINGS=1)\n",
            usable, STARPU_MAXCPUS, STARPU_MAXCPUS, usable - STARPU_MAXCPUS, ranks, usable / ranks);
  } else if ((int)ncpu_workers < usable) {
    fprintf(out,
            "\nnote: %u CPU worker(s) for %d cores; --workers, STARPU_NCPU or a driver thread "
            "(OpenCL, MPI) takes the rest\n",
            ncpu_workers, usable);
  }
}

int tsr_info_print(FILE *out, const tsr_runtime_opts_t *opts, tsr_errbuf_t *err) {
  if (!out) return tsr_error_set(err, TSR_EINVAL, "tsr_info_print: out is NULL");
  node_cores_t nc = {0, 0, NULL};
  int rc = print_topology(out, &nc, err);
  if (rc) return rc;

  /* The caller may already run StarPU (e.g. through StarPU-MPI): report that
   * configuration rather than starting a second one. */
  bool started_here = false;
  if (!starpu_is_initialized()) {
    rc = tsr_runtime_init(opts, err);
    if (rc) {
      hwloc_bitmap_free(nc.bind);
      return rc;
    }
    started_here = true;
  }
  int outside = print_starpu(out, opts, nc.bind);
  unsigned ncpu_workers = starpu_cpu_worker_get_count();
  if (started_here) tsr_runtime_fini();

  print_blis(out);
  print_mpi(out);
  print_core_warning(out, nc, ncpu_workers, outside);
  hwloc_bitmap_free(nc.bind);
  fflush(out);
  return 0;
}
