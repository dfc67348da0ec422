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
#ifdef TSR_HAVE_OPENCL
#include <clblast_c.h>
#include <starpu_opencl.h>
#include <time.h>
#endif

#include "kernels/kernels.h"
#include "tessera/dist.h"
#include "tessera/runtime.h"
#include "version_git.h"

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
  const char *wanted = opts && opts->sched ? opts->sched : tsr_runtime_sched();
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

#ifdef TSR_HAVE_OPENCL
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* GFLOP/s of n x n x n SGEMMs on an OpenCL device through CLBlast, on a
 * queue of its own in StarPU's context for the device, after one call that
 * builds CLBlast's kernels; reps repeat until a quarter of a second passed.
 * Negative: an OpenCL status that stopped the measurement. */
static double device_gemm_rate(int devid, int n) {
  cl_context ctx;
  cl_device_id dev;
  starpu_opencl_get_context(devid, &ctx);
  starpu_opencl_get_device(devid, &dev);
  cl_int st = CL_SUCCESS;
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &st);
  if (st != CL_SUCCESS) return st < 0 ? st : -1;
  size_t bytes = sizeof(float) * (size_t)n * (size_t)n;
  cl_mem m[3] = {NULL, NULL, NULL};
  double rate = -1;
  for (int i = 0; i < 3 && st == CL_SUCCESS; i++) {
    m[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &st);
    float v = 0.5f / (float)(i + 1);
    if (st == CL_SUCCESS) st = clEnqueueFillBuffer(q, m[i], &v, sizeof v, 0, bytes, 0, NULL, NULL);
  }
  int reps = 0;
  double t0 = 0, t = 0;
  while (st == CL_SUCCESS) {
    st = (cl_int)CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                              (size_t)n, (size_t)n, (size_t)n, 1.0f, m[0], 0, (size_t)n, m[1], 0,
                              (size_t)n, 0.0f, m[2], 0, (size_t)n, &q, NULL);
    if (st == CL_SUCCESS) st = clFinish(q);
    t = now_s();
    if (reps++ == 0) t0 = t; /* the first call built the kernels: not timed */
    if (reps > 1 && t - t0 > 0.25) break;
  }
  if (st == CL_SUCCESS) rate = 2.0 * n * (double)n * n * (reps - 1) / (t - t0) * 1e-9;
  for (int i = 0; i < 3; i++)
    if (m[i]) clReleaseMemObject(m[i]);
  clReleaseCommandQueue(q);
  return st == CL_SUCCESS ? rate : (st < 0 ? st : -1);
}

/* The same product with BLIS on this thread: one CPU worker's rate. */
static double blis_gemm_rate(int n) {
  size_t nn = (size_t)n * (size_t)n;
  float *a = calloc(3 * nn, sizeof(float));
  if (!a) return -1;
  float one = 1, zero = 0;
  int reps = 0;
  double t0 = now_s(), t = t0;
  while (t - t0 < 0.25 || reps == 0) {
    bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, n, n, n, &one, a, n, 1, a + nn, n, 1, &zero,
              a + 2 * nn, n, 1);
    reps++;
    t = now_s();
  }
  free(a);
  return 2.0 * n * (double)n * n * reps / (t - t0) * 1e-9;
}
#endif

/* The OpenCL devices StarPU runs (one worker each), with a measured GEMM rate. */
static void print_opencl(FILE *out) {
  unsigned n = starpu_opencl_worker_get_count();
#ifdef TSR_HAVE_OPENCL
  fprintf(out, "\nOpenCL devices  %u (OpenCL codelets built in%s)\n", n,
          n ? "" : "; --devices opencl, and STARPU_OPENCL_ON_CPUS=1 for CPU devices such as PoCL");
  if (n == 0) return;
  enum { N = 512 };
  double cpu = blis_gemm_rate(N);
  int ids[STARPU_NMAXWORKERS];
  int k = starpu_worker_get_ids_by_type(STARPU_OPENCL_WORKER, ids, STARPU_NMAXWORKERS);
  for (int i = 0; i < k; i++) {
    int devid = starpu_worker_get_devid(ids[i]);
    cl_device_id dev;
    starpu_opencl_get_device(devid, &dev);
    char name[128] = "?", version[128] = "?";
    cl_uint units = 0;
    cl_ulong mem = 0;
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_VERSION, sizeof version, version, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    fprintf(out, "    %-3d %s\n", ids[i], name);
    fprintf(out, "        %s, %u compute units, %.1f GiB, memory node %u\n", version, units,
            (double)mem / (1024.0 * 1024 * 1024), starpu_worker_get_memory_node((unsigned)ids[i]));
    double rate = device_gemm_rate(devid, N);
    if (rate < 0)
      fprintf(out, "        GEMM %dx%dx%d (CLBlast): failed with OpenCL status %d\n", N, N, N,
              (int)rate);
    else
      fprintf(out,
              "        GEMM %dx%dx%d (CLBlast): %.1f GFLOP/s; one CPU worker (BLIS): %.1f "
              "GFLOP/s\n",
              N, N, N, rate, cpu);
  }
#else
  fprintf(out,
          "\nOpenCL devices  %u (this build has no OpenCL codelets: install "
          "ocl-icd-opencl-dev and libclblast-dev, meson -Dopencl=enabled)\n",
          n);
#endif
}

const char *tsr_version(void) {
  return TSR_VERSION;
}

const char *tsr_version_git(void) {
  return TSR_GIT_DESCRIBE;
}

void tsr_versions(char *buf, size_t size) {
  int major, minor, release, version, subversion, len = 0;
  starpu_get_version(&major, &minor, &release);
  MPI_Get_version(&version, &subversion); /* both allowed before MPI_Init */
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Get_library_version(lib, &len);
  /* The library's first words ("Open MPI v4.1.4, package: ..." up to the first comma). */
  int first = 0;
  while (first < len && lib[first] != ',' && lib[first] != '\n')
    first++;
  snprintf(buf, size, "StarPU %d.%d.%d, BLIS %s, MPI %d.%d (%.*s), OpenCL codelets %s, %s", major,
           minor, release, bli_info_get_version_str(), version, subversion, first, lib,
           tsr_runtime_opencl_built() ? "yes (CLBlast)" : "no",
           tsr__k_dnnl_built() ? tsr__k_dnnl_version() : "no oneDNN");
}

static void print_blis(FILE *out) {
  tsr__k_init(); /* before BLIS's first query: it may choose the kernels */
  const char *chosen = tsr__k_blis_choice();
  fprintf(out, "\nBLIS %s\n", bli_info_get_version_str());
  fprintf(out, "  kernels         %s (%s)\n", bli_arch_string(bli_arch_query_id()),
          chosen[0] ? chosen : "chosen at run time for this CPU");
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

/* The implementations of the operations that have several (--kernels), and what oneDNN runs
 * on this CPU for a ResNet-20 convolution (3x3 over 16x16x32, 16 samples). */
static void print_kernels(FILE *out) {
  fprintf(out, "\nConvolution kernels (--kernels; auto: dmda and dmdas choose per task from the "
               "measured times,\n  the other policies take the first)\n");
  if (tsr__k_dnnl_built()) {
    tsr_conv_geom_t g = {32, 16, 16, 32, 16, 16, 3, 3, 1, 1, 1, 1};
    fprintf(out,
            "  onednn          %s, one thread per task; here: %s forward, %s input "
            "gradient, %s filter gradient\n",
            tsr__k_dnnl_version(), tsr__k_dnnl_conv_impl(&g, 16, 0),
            tsr__k_dnnl_conv_impl(&g, 16, 1), tsr__k_dnnl_conv_impl(&g, 16, 2));
  } else {
    fprintf(out, "  onednn          %s\n", tsr__k_dnnl_version());
  }
  fprintf(out,
          "  blis            the input lowered (im2col) into BLIS GEMMs with the %s kernels; "
          "loops of its own\n                  for fan-ins under 32\n",
          bli_arch_string(bli_arch_query_id()));
  fprintf(out, "  tuned           both, timed on each shape's first tasks, the faster kept\n");
  fprintf(out, "\nTile GEMM kernels (dense layers, the same --kernels)\n");
  fprintf(out, "  onednn          %s\n",
          tsr__k_dnnl_built() ? "dnnl_sgemm, one thread per task" : tsr__k_dnnl_version());
  fprintf(out, "  blis            bli_sgemm with the %s kernels\n",
          bli_arch_string(bli_arch_query_id()));
  fprintf(out, "\nElement-wise, normalization and optimizer kernels\n  %s\n", tsr__k_hot_level());
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
    int rank, size, hlen;
    char host[MPI_MAX_PROCESSOR_NAME] = "?"; /* MPI ends the name with a null (MPI 2.2) */
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &hlen);
    fprintf(out, "  this process    rank %d of %d on %s", rank, size, host);
    /* Where its workers go (src/runtime/runtime.c), so a launcher's placement can be checked. */
    if (tsr_dist_active())
      fprintf(out, ", node-local rank %d of %d", tsr_dist_local_rank(), tsr_dist_local_size());
    fputc('\n', out);
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
  /* With MPI started, tessera gives the ranks sharing a node disjoint cores itself
   * (src/runtime/runtime.c); a caller that did not start it (tsr_dist_start) gets StarPU's
   * placement, and only Open MPI's mpirun says how many ranks share the node. */
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char *world = getenv("OMPI_COMM_WORLD_SIZE");
  int local_ranks = !tsr_dist_active() && local ? atoi(local) : 1;
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
  print_opencl(out);
  if (started_here) tsr_runtime_fini();

  print_blis(out);
  print_kernels(out);
  print_mpi(out);
  print_core_warning(out, nc, ncpu_workers, outside);
  hwloc_bitmap_free(nc.bind);
  fflush(out);
  return 0;
}
