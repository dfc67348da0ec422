/* What the C benchmarks share: a clock, synthetic data of Fashion-MNIST's
 * shape, and running a PyTorch peer script from the source tree's
 * benchmarks/ folder and reading its result line. */
#ifndef TSR_BENCH_COMMON_H
#define TSR_BENCH_COMMON_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rng.h"
#include "tessera/tessera.h"

static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 8192 samples of 784 features in [-0.5, 0.5) and labels i mod 10 (owned:
 * free x and y); images declares them 1x28x28. The content does not change
 * the work. */
static inline tsr_dataset_t synthetic_fashion(bool images) {
  tsr_dataset_t ds = {.n = 8192, .features = 784, .classes = 10};
  if (images) ds.channels = 1, ds.height = 28, ds.width = 28;
  ds.x = malloc(sizeof(float) * (size_t)(ds.n * ds.features));
  ds.y = malloc(sizeof(float) * (size_t)ds.n);
  tsr_rng_t rng = {9};
  for (int64_t i = 0; i < ds.n * ds.features; i++)
    ds.x[i] = (float)(tsr__rng_uniform(&rng) - 0.5);
  for (int64_t i = 0; i < ds.n; i++)
    ds.y[i] = (float)(i % 10);
  return ds;
}

/* Builds *net for ds as tessera train sets a run up (tsr_run_build, one process): refused with
 * the memory estimate and a --batch that fits when it cannot fit. */
static inline int bench_build(tsr_net_t **net, const tsr_model_spec_t *spec,
                              const tsr_dataset_t *ds, const tsr_net_opts_t *opts,
                              tsr_errbuf_t *err) {
  tsr_run_config_t c;
  tsr_run_config_init(&c);
  c.spec = spec, c.inputs = (int)ds->features, c.classes = ds->classes;
  c.samples = ds->n, c.net = *opts;
  tsr_run_setup_t setup = {0};
  int rc = tsr_run_build(&setup, net, &c, ds, err);
  tsr_run_setup_fini(&setup);
  return rc;
}

/* The folder of the peer scripts: $TSR_BENCH_DIR (meson passes it), else
 * benchmarks/ when run from the repository root (script is there), else the
 * program's own folder, written into dir. */
static inline const char *peer_dir(char *dir, size_t size, const char *argv0, const char *script) {
  const char *src = getenv("TSR_BENCH_DIR");
  if (src) return src;
  char path[256];
  snprintf(path, sizeof path, "benchmarks/%s", script);
  if (access(path, R_OK) == 0) return "benchmarks";
  snprintf(dir, size, "%s", argv0);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  return dir;
}

/* The version the last peer run printed ("1.13.1", "2.15.0+cu132"), and its peak resident
 * memory in MB where it says (0 where not). */
static char bench_peer_version[32];
static double bench_peer_peak_mb;

/* Runs cmd (a peer with --best-threads) and reads samples/s and the thread
 * count from its first line that has both, and its PyTorch version; false when it cannot run. */
static inline bool run_peer(const char *cmd, double *samples_per_s, int *threads) {
  FILE *p = popen(cmd, "r");
  if (!p) return false;
  char line[8192];
  bool found = false;
  while (fgets(line, sizeof line, p)) {
    const char *s = strstr(line, "\"samples_per_s\":");
    const char *th = strstr(line, "\"threads\":");
    const char *v = strstr(line, "\"version\": \"");
    const char *mb = strstr(line, "\"peak_rss_mb\":");
    if (s && th && !found) {
      *samples_per_s = atof(s + 16), *threads = atoi(th + 10), found = true;
      if (v) sscanf(v + 12, "%31[^\"]", bench_peer_version);
      bench_peer_peak_mb = mb ? atof(mb + 14) : 0;
    }
  }
  pclose(p);
  return found;
}

/* The PyTorch peers a benchmark measures beside tessera: Debian's (python3-torch, PyTorch 1.13,
 * /usr/bin/python3) and, where $TSR_PEER_PYTHON names another interpreter, that one too (a
 * virtual environment with the newest PyTorch pip gives, which TSR_WITH_PEERS=1
 * scripts/setup.sh makes). The targets hold against the faster of them. */
#define BENCH_MAX_PEERS 2

typedef struct {
  int n;
  const char *python[BENCH_MAX_PEERS];
} bench_peers_t;

static inline bench_peers_t bench_peers(void) {
  bench_peers_t p = {1, {"/usr/bin/python3"}};
  const char *other = getenv("TSR_PEER_PYTHON");
  if (other && *other && strcmp(other, p.python[0]) != 0) p.python[p.n++] = other;
  return p;
}

/* The machine, for every benchmark's report: the CPU's model name, its widest vector unit the
 * kernels can use, and the load average when the benchmark started (other processes slow
 * StarPU's workers far more than they slow PyTorch: say it). */
static inline void bench_print_machine(FILE *out) {
  char model[128] = "unknown CPU", line[512];
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "model name", 10) == 0) {
      const char *c = strchr(line, ':');
      if (c) snprintf(model, sizeof model, "%.*s", (int)strcspn(c + 2, "\n"), c + 2);
      break;
    }
  if (f) fclose(f);
  double load[3] = {0};
  f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    fclose(f);
  }
  const char *isa = "SSE";
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  isa = __builtin_cpu_supports("avx512f") ? "AVX-512"
        : __builtin_cpu_supports("avx2")  ? "AVX2 (no AVX-512)"
                                          : "SSE";
#endif
  fprintf(out, "# cpu: %s, %ld cores, %s; load average %.2f %.2f %.2f at the start\n", model,
          sysconf(_SC_NPROCESSORS_ONLN), isa, load[0], load[1], load[2]);
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* --kernels ARG of program `prog` into *k: 0, or 2 (the exit status) after saying what it takes. */
static inline int bench_parse_kernels(const char *prog, const char *arg, tsr_kernels_t *k) {
  if (tsr_runtime_parse_kernels(arg, k) == 0) return 0;
  fprintf(stderr, "%s: --kernels %s: expected auto, onednn, blis or tuned\n", prog, arg);
  return 2;
}

/* The median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Trains net on ds's samples cyclically, `warmup` steps untimed, then for about `seconds` with
 * at most `window` steps in flight; returns samples/s, 0 on an error (rc in *rc). */
static inline double bench_time_steps(tsr_net_t *net, const tsr_dataset_t *ds, int batch,
                                      int warmup, double seconds, int window, int *rc) {
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)ds->n);
  if (!rows) return *rc = TSR_ENOMEM, 0;
  for (int64_t i = 0; i < ds->n; i++)
    rows[i] = (int32_t)i;
  int64_t per_pass = ds->n / batch, step = 0, timed = 0;
  *rc = 0;
  for (int w = 0; w < warmup && *rc == 0; w++, step++)
    *rc = tsr_net_train_step(net, ds, rows + (step % per_pass) * batch, batch, true);
  if (*rc == 0) *rc = tsr_net_wait(net, 0);
  double t0 = now();
  while (*rc == 0 && now() - t0 < seconds) {
    *rc = tsr_net_train_step(net, ds, rows + (step % per_pass) * batch, batch, true);
    step++, timed++;
    if (*rc == 0 && timed >= window) *rc = tsr_net_wait(net, window);
  }
  if (*rc == 0) *rc = tsr_net_wait(net, 0);
  double t = now() - t0;
  free(rows);
  return *rc ? 0 : (double)timed * batch / t;
}

/* tessera's side of a round: samples/s of round r (0 on an error). */
typedef double (*bench_ours_fn)(void *ctx, int r);
/* A peer's side: samples/s of round r with the PyTorch of interpreter `python` at its best
 * thread count (in *threads), 0 when it cannot run. */
typedef double (*bench_theirs_fn)(void *ctx, int r, const char *python, int *threads);

/* What bench_rounds measured: each round's figures, and the runtime and peers they came from. */
typedef struct {
  int rounds;
  double ours[32];
  bench_peers_t peers;
  double theirs[BENCH_MAX_PEERS][32];
  int threads[BENCH_MAX_PEERS][32];
  char version[BENCH_MAX_PEERS][32];
  double peak_mb[BENCH_MAX_PEERS]; /* each peer's largest peak resident memory over the rounds */
  double our_peak_mb;              /* this process's, once tessera's rounds ran (the peers run
                                    * in child processes: not counted) */
  int workers;
  char sched[64];
} bench_result_t;

/* Rounds alternating tessera (ours, on a runtime started with ro for the round and stopped
 * after it: idle StarPU workers spin) and each peer (theirs, NULL: none), each round's figures
 * printed as they come, into res. Returns 1 (said on stderr, prefixed by name) when tessera
 * cannot run, else 0. */
static inline int bench_rounds(const char *name, tsr_runtime_opts_t *ro, int rounds,
                               bench_ours_fn our_side, bench_theirs_fn their_side, void *ctx,
                               bench_result_t *res) {
  memset(res, 0, sizeof *res);
  res->rounds = rounds;
  res->peers = bench_peers();
  if (!their_side) res->peers.n = 0;
  for (int r = 0; r < rounds; r++) {
    tsr_errbuf_t err = {""};
    if (tsr_runtime_init(ro, &err)) {
      fprintf(stderr, "%s: %s\n", name, err.msg);
      return 1;
    }
    res->workers = tsr_runtime_ncpus();
    snprintf(res->sched, sizeof res->sched, "%s", tsr_runtime_sched());
    res->ours[r] = our_side(ctx, r);
    tsr_runtime_fini();
    if (res->ours[r] == 0) return 1;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) res->our_peak_mb = (double)ru.ru_maxrss / 1024.0;
    printf("round %d: tessera %.1f samples/s", r + 1, res->ours[r]);
    for (int p = 0; p < res->peers.n; p++) {
      bench_peer_version[0] = '\0';
      res->theirs[p][r] = their_side(ctx, r, res->peers.python[p], &res->threads[p][r]);
      if (bench_peer_version[0])
        snprintf(res->version[p], sizeof res->version[p], "%s", bench_peer_version);
      if (bench_peer_peak_mb > res->peak_mb[p]) res->peak_mb[p] = bench_peer_peak_mb;
      if (res->theirs[p][r] > 0)
        printf("; PyTorch %s %.1f samples/s (%d threads), ratio %.2fx", res->version[p],
               res->theirs[p][r], res->threads[p][r], res->ours[r] / res->theirs[p][r]);
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}

/* The medians: "tessera X unit (median)", then per peer "PyTorch V Y (median, best of 1 and 2
 * threads), tessera / PyTorch Z" and the ratio against the faster peer; scale turns samples
 * into the unit (tokens per sample for a language model). */
static inline void bench_report(bench_result_t *res, const char *unit, double scale) {
  double mo = bench_median(res->ours, res->rounds), fastest = 0;
  printf("tessera %.1f %s (median); peak memory %.0f MB\n", mo * scale, unit, res->our_peak_mb);
  for (int p = 0; p < res->peers.n; p++) {
    double mt = bench_median(res->theirs[p], res->rounds);
    if (mt <= 0) {
      printf("PyTorch of %s: did not run\n", res->peers.python[p]);
      continue;
    }
    printf("PyTorch %s (%s) %.1f %s (median, best of 1 and 2 threads), tessera / PyTorch %.2fx",
           res->version[p], res->peers.python[p], mt * scale, unit, mo / mt);
    if (res->peak_mb[p] > 0) printf("; peak memory %.0f MB", res->peak_mb[p]);
    printf("\n");
    fastest = mt > fastest ? mt : fastest;
  }
  if (res->peers.n > 1 && fastest > 0) printf("against the faster PyTorch: %.2fx\n", mo / fastest);
}

#endif
