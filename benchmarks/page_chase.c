/* Whether this machine's memory is as fast in every process: issue 38's slow mode.
 *
 * Each of --processes children (fork, so that each gets physical pages of its own) allocates
 * --mb MiB, links one cache line of every 4 KiB page into a cycle in a fixed random order, and
 * follows it (a pointer chase: one dependent load a step, each on another page), twice: on the
 * kernel's 4 KiB pages, then on a buffer advised to transparent huge pages (MADV_HUGEPAGE;
 * `huge` says how many of its 2 MiB were backed so). The order, the buffer's virtual layout and
 * the work are the same in every child: only where its pages land differs. A machine whose
 * 4 KiB column spreads while the huge-page column does not makes a process's speed depend on
 * its physical pages (page walks, or caches indexed by physical address).
 *
 *   build/benchmarks/page_chase [--mb 8] [--processes 8] [--steps 20000000]
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096
#define HUGE (2u << 20)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t next_random(uint64_t *s) { /* xorshift64 */
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* Nanoseconds a step of the chase over `bytes` at `a` (2 MiB aligned), its pages visited in
 * one fixed random order, a line offset that varies from page to page. */
static double chase(char *a, size_t bytes, long steps) {
  size_t pages = bytes / PAGE;
  size_t *order = malloc(pages * sizeof *order);
  if (!order) return -1;
  for (size_t i = 0; i < pages; i++)
    order[i] = i;
  uint64_t s = 88172645463325252ull;
  for (size_t i = pages - 1; i > 0; i--) {
    size_t j = next_random(&s) % (i + 1), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  for (size_t i = 0; i < pages; i++) {
    size_t from = order[i] * PAGE + (i % 64) * 64;
    size_t to = order[(i + 1) % pages] * PAGE + ((i + 1) % 64) * 64;
    memcpy(a + from, &to, sizeof to);
  }
  size_t p = order[0] * PAGE;
  free(order);
  for (long k = 0; k < steps / 10; k++) /* warm the caches and the TLB */
    memcpy(&p, a + p, sizeof p);
  double t0 = now();
  for (long k = 0; k < steps; k++)
    memcpy(&p, a + p, sizeof p);
  double ns = (now() - t0) / (double)steps * 1e9;
  return p == (size_t)-1 ? -1 : ns; /* p used: the loop is not dead */
}

/* How many KiB of [a, a + bytes) the kernel backs with huge pages (from /proc/self/smaps). */
static long huge_kib(const char *a) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  int inside = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
      inside = (uintptr_t)a >= lo && (uintptr_t)a < hi;
    else if (inside && sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
      break;
  }
  fclose(f);
  return kib;
}

/* One child's measurement, both page sizes: prints its line, returns 0. */
static int measure(int index, size_t bytes, long steps) {
  char *small = aligned_alloc(HUGE, bytes), *huge = aligned_alloc(HUGE, bytes);
  if (!small || !huge) return fprintf(stderr, "page_chase: out of memory\n"), 1;
  madvise(small, bytes, MADV_NOHUGEPAGE);
  madvise(huge, bytes, MADV_HUGEPAGE);
  memset(small, 1, bytes), memset(huge, 1, bytes);
  double ns_small = chase(small, bytes, steps), ns_huge = chase(huge, bytes, steps);
  long kib = huge_kib(huge);
  printf("%7d %14.1f %14.1f %10ld\n", index, ns_small, ns_huge, kib < 0 ? 0 : kib / 2048);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  long mb = 8, processes = 8, steps = 20000000;
  static const struct option opts[] = {{"mb", required_argument, 0, 'm'},
                                       {"processes", required_argument, 0, 'p'},
                                       {"steps", required_argument, 0, 's'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    char *end = NULL;
    long v = c == 'h' ? 0 : strtol(optarg, &end, 10);
    if (c == 'h' || (end && *end) || v < 1) {
      fprintf(stderr, "usage: page_chase [--mb N] [--processes N] [--steps N] (each >= 1)\n");
      return c == 'h' ? 0 : 2;
    }
    *(c == 'm' ? &mb : c == 'p' ? &processes : &steps) = v;
  }
  size_t bytes = ((size_t)mb << 20) / HUGE * HUGE;
  if (bytes == 0) bytes = HUGE;
  printf("# a pointer chase over %zu MiB, one load a step on another 4 KiB page; each row a new "
         "process with physical pages of its own\n",
         bytes >> 20);
  printf("process  ns/step 4 KiB  ns/step huge  huge (2 MiB pages)\n");
  fflush(stdout); /* not once more in every child */
  for (long i = 0; i < processes; i++) {
    pid_t pid = fork();
    if (pid < 0) return perror("page_chase: fork"), 1;
    if (pid == 0) _exit(measure((int)i + 1, bytes, steps));
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) return 1;
  }
  return 0;
}
