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
  tsr_run_setup_t *setup = malloc(sizeof *setup);
  int rc = setup ? tsr_run_build(setup, net, &c, ds, err) : TSR_ENOMEM;
  free(setup);
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

/* Runs cmd (a peer with --best-threads) and reads samples/s and the thread
 * count from its first line that has both; false when it cannot run. */
static inline bool run_peer(const char *cmd, double *samples_per_s, int *threads) {
  FILE *p = popen(cmd, "r");
  if (!p) return false;
  char line[8192];
  bool found = false;
  while (fgets(line, sizeof line, p)) {
    const char *s = strstr(line, "\"samples_per_s\":");
    const char *th = strstr(line, "\"threads\":");
    if (s && th && !found) *samples_per_s = atof(s + 16), *threads = atoi(th + 10), found = true;
  }
  pclose(p);
  return found;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
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

/* One side of a round: samples/s of round r (0 on an error); *threads, where the side has
 * them, the thread count it ran best with. */
typedef double (*bench_side_fn)(void *ctx, int r, int *threads);

/* Rounds alternating tessera (ours, on a runtime started with ro for the round and stopped
 * after it: idle StarPU workers spin) and its peer (theirs, NULL: none), each round's figures
 * printed as they come; ours[r] and theirs[r] filled, and the workers and scheduler of the
 * runtime. Returns 1 (said on stderr, prefixed by name) when tessera cannot run, else 0. */
static inline int bench_rounds(const char *name, tsr_runtime_opts_t *ro, int rounds,
                               bench_side_fn our_side, bench_side_fn their_side, void *ctx,
                               double *ours, double *theirs, int *workers, char *sched,
                               size_t sched_size, int *threads) {
  for (int r = 0; r < rounds; r++) {
    tsr_errbuf_t err = {""};
    if (tsr_runtime_init(ro, &err)) {
      fprintf(stderr, "%s: %s\n", name, err.msg);
      return 1;
    }
    *workers = tsr_runtime_ncpus();
    snprintf(sched, sched_size, "%s", tsr_runtime_sched());
    ours[r] = our_side(ctx, r, NULL);
    tsr_runtime_fini();
    if (ours[r] == 0) return 1;
    theirs[r] = their_side ? their_side(ctx, r, threads) : 0;
    printf("round %d: tessera %.1f samples/s", r + 1, ours[r]);
    if (theirs[r] > 0)
      printf(", PyTorch %.1f samples/s (%d threads), ratio %.2fx", theirs[r], *threads,
             ours[r] / theirs[r]);
    printf("\n");
    fflush(stdout);
  }
  return 0;
}

#endif
