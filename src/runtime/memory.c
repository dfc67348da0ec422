/* How much memory this process may still take, as the system says (tsr_run_setup's memory
 * check): /proc/meminfo, the cgroup's limit, and the address-space limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tessera/dist.h"
#include "tessera/runtime.h"

/* A number from a "Key:   N kB" line of a /proc file, in bytes; -1 when missing. */
static int64_t proc_kb(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  size_t n = strlen(key);
  while (kb < 0 && fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0 && sscanf(line + n, " %lld", &kb) != 1) kb = -1;
  fclose(f);
  return kb < 0 ? -1 : (int64_t)kb * 1024;
}

/* The first number in a file (a cgroup's memory.max, memory.current); -1 when none ("max"). */
static int64_t file_number(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long long v;
  int ok = fscanf(f, "%lld", &v) == 1;
  fclose(f);
  return ok ? (int64_t)v : -1;
}

int64_t tsr_runtime_memory_available(const char **source) {
  int64_t avail = proc_kb("/proc/meminfo", "MemAvailable:");
  *source = "MemAvailable in /proc/meminfo";
  int64_t max = file_number("/sys/fs/cgroup/memory.max");
  int64_t used = file_number("/sys/fs/cgroup/memory.current");
  if (max > 0 && used >= 0 && (avail < 0 || max - used < avail))
    avail = max - used, *source = "the cgroup's memory.max";
  /* Shared by the ranks on this node (from MPI whatever launched them; before MPI starts, only
   * Open MPI's mpirun says). */
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int ranks = tsr_dist_active() ? tsr_dist_local_size() : local ? atoi(local) : 1;
  if (avail > 0 && ranks > 1) avail /= ranks;
  struct rlimit rl;
  int64_t mapped = proc_kb("/proc/self/status", "VmSize:");
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && mapped >= 0 &&
      (avail < 0 || (int64_t)rl.rlim_cur - mapped < avail)) {
    avail = (int64_t)rl.rlim_cur - mapped, *source = "the address-space limit, ulimit -v";
    if (avail < 0) avail = 0;
  }
  return avail;
}
