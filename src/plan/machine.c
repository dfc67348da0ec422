/* Machines for the planner: described in an INI file, or this one, whose
 * kernel rates are measured on demand by timing the kernels themselves
 * (src/kernels) on the tile shapes a plan needs, cached in a file so that
 * later plans are fast, and whose alpha and beta come from a StarPU-MPI
 * ping-pong (tsr_plan_calibrate_save) or documented defaults. */
#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plan/plan_impl.h"
#include "tessera/dist.h"
#include "tessera/runtime.h"

/* Loopback through StarPU-MPI in worker mode on this project's 2-core machine
 * (README, bench_pingpong): a 4 KB round trip 0.026 ms and a 1 MB one
 * 0.271 ms give one-way alpha 12.5 us and beta 0.117 ns per byte (8.5 GB/s). */
#define HERE_ALPHA 12.5e-6
#define HERE_BETA 0.117e-9
/* StarPU's cost per task besides the kernel: about 0.7 us of bookkeeping
 * measured with --stats plus scheduling and data management; "several
 * microseconds" (DESIGN). */
#define TASK_OVERHEAD 5e-6

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- Measured rates, cached ------------------------------------------- */

typedef struct {
  char key[128];
  double value;
} rate_t;

static rate_t *rates;
static int nrates, caprates;
static char loaded[512]; /* the cache file read into rates */

static void load_cache(const char *path) {
  if (!path || !*path || strcmp(loaded, path) == 0) return;
  snprintf(loaded, sizeof loaded, "%s", path);
  nrates = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[128 + 32];
  while (fgets(line, sizeof line, f)) {
    char *eq = strrchr(line, ' ');
    if (!eq) continue;
    *eq = '\0';
    double v = strtod(eq + 1, NULL);
    if (!(v > 0)) continue;
    if (nrates == caprates) {
      rate_t *more =
          realloc(rates, sizeof *more * (size_t)(caprates = caprates ? 2 * caprates : 64));
      if (!more) break;
      rates = more;
    }
    if (strlen(line) >= sizeof rates[nrates].key) continue;
    memcpy(rates[nrates].key, line, strlen(line) + 1);
    rates[nrates++].value = v;
  }
  fclose(f);
}

static bool cached(const tsr_machine_t *m, const char *key, double *v) {
  load_cache(m->cache);
  for (int i = 0; i < nrates; i++)
    if (strcmp(rates[i].key, key) == 0) return *v = rates[i].value, true;
  return false;
}

static void remember(const tsr_machine_t *m, const char *key, double v) {
  if (nrates == caprates) {
    rate_t *more = realloc(rates, sizeof *more * (size_t)(caprates = caprates ? 2 * caprates : 64));
    if (!more) return;
    rates = more;
  }
  snprintf(rates[nrates].key, sizeof rates[nrates].key, "%s", key);
  rates[nrates++].value = v;
  if (!*m->cache) return;
  FILE *f = fopen(m->cache, "a"); /* a cache that cannot be written only costs time */
  if (f) fprintf(f, "%s %.6g\n", key, v), fclose(f);
}

/* Seconds per call: the best of 5 rounds of at least 5 ms each, after one
 * warm-up call, so that time the OS gives other processes on a shared
 * machine counts as little as it can. */
#define TIME_IT(seconds, call)                                                                     \
  do {                                                                                             \
    call;                                                                                          \
    double best_ = 1e30;                                                                           \
    for (int round_ = 0; round_ < 5; round_++) {                                                   \
      int reps_ = 0;                                                                               \
      double t0_ = now(), t_;                                                                      \
      do {                                                                                         \
        call;                                                                                      \
        reps_++;                                                                                   \
      } while ((t_ = now() - t0_) < 0.005);                                                        \
      if (t_ / reps_ < best_) best_ = t_ / reps_;                                                  \
    }                                                                                              \
    (seconds) = best_;                                                                             \
  } while (0)

static float *buffer(size_t n) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; p && i < n; i++)
    p[i] = (float)(i % 7) * 0.1f;
  return p;
}

double tsr__plan_gemm_rate(const tsr_machine_t *m, bool ta, bool tb, int rows, int cols,
                           int inner) {
  if (!m->measure_kernels) return m->gemm_gflops * 1e9;
  char key[128];
  snprintf(key, sizeof key, "gemm %d %d %d %d %d", ta, tb, rows, cols, inner);
  double v;
  if (cached(m, key, &v)) return v;
  float *a = buffer((size_t)rows * inner), *b = buffer((size_t)inner * cols),
        *c = buffer((size_t)rows * cols);
  double s = 0;
  if (a && b && c) {
    tsr__k_init();
    TIME_IT(s, tsr__k_gemm(ta, tb, rows, cols, inner, 1.0f, a, ta ? rows : inner, b,
                           tb ? inner : cols, 0.0f, c, cols));
  }
  free(a), free(b), free(c);
  v = s > 0 ? tsr__plan_gemm_flops(rows, cols, inner) / s : m->gemm_gflops * 1e9;
  remember(m, key, v);
  return v;
}

double tsr__plan_conv_rate(const tsr_machine_t *m, const tsr_conv_geom_t *g, int n, int which) {
  double described = (m->conv_gflops > 0 ? m->conv_gflops : m->gemm_gflops) * 1e9;
  if (!m->measure_kernels) return described;
  char key[128];
  snprintf(key, sizeof key, "conv%d %d %d %d %d %d %d %d %d %d %d %d %d %d", which, g->c, g->h,
           g->w, g->oc, g->oh, g->ow, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, n);
  double v;
  if (cached(m, key, &v)) return v;
  int fin = g->h * g->w * g->c, fout = g->oh * g->ow * g->oc, fan = g->kh * g->kw * g->c;
  float *x = buffer((size_t)n * fin), *y = buffer((size_t)n * fout),
        *w = buffer((size_t)fan * g->oc), *b = buffer((size_t)g->oc),
        *work = buffer(tsr__k_conv_work(g, n));
  double s = 0;
  if (x && y && w && b && work) {
    tsr__k_init();
    if (which == 0)
      TIME_IT(s, tsr__k_conv_fwd(g, n, y, fout, x, fin, w, g->oc, b, true, work));
    else if (which == 1)
      TIME_IT(s, tsr__k_conv_bwd_data(g, n, x, fin, y, fout, w, g->oc, work));
    else
      TIME_IT(s, tsr__k_conv_bwd_filter(g, n, w, g->oc, b, x, fin, y, fout, 0.0f, work));
  }
  free(x), free(y), free(w), free(b), free(work);
  v = s > 0 ? tsr__plan_gemm_flops((int64_t)n * g->oh * g->ow, g->oc, fan) / s : described;
  remember(m, key, v);
  return v;
}

/* One worker's bandwidth copying 32 MB (read and write counted). */
static double measure_membw(const tsr_machine_t *m) {
  double v;
  if (cached(m, "membw", &v)) return v;
  int rows = 2048, cols = 2048;
  float *a = buffer((size_t)rows * cols), *b = buffer((size_t)rows * cols);
  double s = 0;
  if (a && b) TIME_IT(s, tsr__k_copy(rows, cols, b, cols, a, cols));
  free(a), free(b);
  v = s > 0 ? 2.0 * 4.0 * rows * cols / s : 5e9;
  remember(m, "membw", v);
  return v;
}

/* ---- INI files ---------------------------------------------------------- */

typedef struct {
  tsr_machine_t *m;
  const char *path;
  tsr_errbuf_t *err;
  int rc;
} ini_ctx_t;

static int on_key(void *user, const char *section, const char *name, const char *value) {
  ini_ctx_t *c = user;
  if (c->rc) return 0;
  if (strcmp(section, "cluster") != 0 && strcmp(section, "machine") != 0) {
    c->rc = tsr_error_set(c->err, TSR_EFORMAT, "%s: section [%s]: expected [cluster]", c->path,
                          section);
    return 0;
  }
  tsr_machine_t *m = c->m;
  if (strcmp(name, "name") == 0) {
    snprintf(m->name, sizeof m->name, "%s", value);
    return 1;
  }
  char *end;
  errno = 0;
  double v = strtod(value, &end);
  while (*end == ' ' || *end == '\t')
    end++;
  if (end == value || *end || errno || !(v >= 0)) {
    c->rc = tsr_error_set(c->err, TSR_EFORMAT, "%s: %s = '%s' is not a non-negative number",
                          c->path, name, value);
    return 0;
  }
  if (strcmp(name, "nodes") == 0)
    m->nodes = (int)v;
  else if (strcmp(name, "cores_per_node") == 0)
    m->cores_per_node = (int)v;
  else if (strcmp(name, "ranks_per_node") == 0)
    m->ranks_per_node = (int)v;
  else if (strcmp(name, "workers") == 0)
    m->workers = (int)v;
  else if (strcmp(name, "gflops_per_core") == 0)
    m->gemm_gflops = v;
  else if (strcmp(name, "conv_gflops") == 0)
    m->conv_gflops = v;
  else if (strcmp(name, "mem_gbs") == 0)
    m->mem_gbs = v;
  else if (strcmp(name, "latency_us") == 0)
    m->alpha = v * 1e-6;
  else if (strcmp(name, "bandwidth_gbits") == 0)
    m->beta = v > 0 ? 8.0 / (v * 1e9) : 0;
  else if (strcmp(name, "gamma_gbs") == 0)
    m->gamma = v > 0 ? 1.0 / (v * 1e9) : 0;
  else if (strcmp(name, "task_overhead_us") == 0)
    m->task_overhead = v * 1e-6;
  else {
    c->rc = tsr_error_set(c->err, TSR_EFORMAT,
                          "%s: unknown key '%s' (nodes, cores_per_node, ranks_per_node, "
                          "workers, gflops_per_core, conv_gflops, mem_gbs, latency_us, "
                          "bandwidth_gbits, gamma_gbs, task_overhead_us)",
                          c->path, name);
    return 0;
  }
  return 1;
}

static int load_ini(tsr_machine_t *m, const char *path, tsr_errbuf_t *err) {
  FILE *f = fopen(path, "r");
  if (!f) return tsr_error_set(err, TSR_EIO, "%s: cannot open: %s", path, strerror(errno));
  ini_ctx_t c = {m, path, err, 0};
  int line = ini_parse_file(f, on_key, &c);
  fclose(f);
  if (c.rc) return c.rc;
  if (line > 0) return tsr_error_set(err, TSR_EFORMAT, "%s:%d: not an INI line", path, line);
  return 0;
}

int tsr_machine_load_ini(tsr_machine_t *m, const char *path, tsr_errbuf_t *err) {
  memset(m, 0, sizeof *m);
  m->task_overhead = TASK_OVERHEAD;
  int rc = load_ini(m, path, err);
  if (rc) return rc;
  if (!m->name[0]) {
    const char *base = strrchr(path, '/');
    snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
  }
  snprintf(m->source, sizeof m->source, "described in %s", path);
  const char *missing = m->cores_per_node < 1   ? "cores_per_node"
                        : !(m->gemm_gflops > 0) ? "gflops_per_core"
                        : !(m->mem_gbs > 0)     ? "mem_gbs"
                        : !(m->beta > 0)        ? "bandwidth_gbits"
                                                : NULL;
  if (missing)
    return tsr_error_set(err, TSR_EFORMAT, "%s: '%s' is missing or 0; add %s = N under [cluster]",
                         path, missing, missing);
  if (m->ranks_per_node < 1) {
    int w = m->workers > 0 ? m->workers : m->cores_per_node < 4 ? m->cores_per_node : 4;
    m->ranks_per_node = m->cores_per_node / w > 0 ? m->cores_per_node / w : 1;
  }
  if (m->gamma == 0) m->gamma = 3.0 / (m->mem_gbs * 1e9); /* read two floats, write one */
  return 0;
}

int tsr_machine_here(tsr_machine_t *m, const char *calibration, const char *cache, bool *calibrated,
                     tsr_errbuf_t *err) {
  memset(m, 0, sizeof *m);
  *calibrated = false;
  snprintf(m->name, sizeof m->name, "here");
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  m->cores_per_node = cores > 0 ? (int)cores : 1;
  m->nodes = 1;
  m->alpha = HERE_ALPHA, m->beta = HERE_BETA;
  m->task_overhead = TASK_OVERHEAD;
  if (calibration && access(calibration, F_OK) == 0) {
    tsr_machine_t c;
    memset(&c, 0, sizeof c);
    int rc = load_ini(&c, calibration, err);
    if (rc) return rc;
    if (c.alpha > 0) m->alpha = c.alpha;
    if (c.beta > 0) m->beta = c.beta;
    *calibrated = true;
  }
  m->measure_kernels = true;
  snprintf(m->cache, sizeof m->cache, "%s", cache ? cache : "");
  m->mem_gbs = measure_membw(m) / 1e9;
  m->gemm_gflops = tsr__plan_gemm_rate(m, false, false, 256, 256, 256) / 1e9;
  m->gamma = 3.0 / (m->mem_gbs * 1e9);
  char cached_in[600] = "";
  if (*m->cache) snprintf(cached_in, sizeof cached_in, " (cached in %s)", m->cache);
  snprintf(m->source, sizeof m->source, "%d cores here, kernels timed%s; alpha, beta %s",
           m->cores_per_node, cached_in,
           *calibrated ? "measured (calibration file)" : "defaults (no calibration)");
  return 0;
}

int tsr_plan_calibrate_save(const char *path, tsr_errbuf_t *err) {
  double small, large;
  int rc = tsr_runtime_pingpong(4096, 200, &small, err);
  if (rc == 0) rc = tsr_runtime_pingpong(1 << 20, 50, &large, err);
  if (rc) return rc;
  if (tsr_dist_rank() != 0) return 0;
  /* One way is half a round trip; the line through both sizes. */
  double beta = (large - small) / 2 / ((1 << 20) - 4096);
  double alpha = small / 2 - 4096 * beta;
  if (alpha < 0) alpha = 0;
  FILE *f = fopen(path, "w");
  if (!f) return tsr_error_set(err, TSR_EIO, "%s: cannot write: %s", path, strerror(errno));
  fprintf(f,
          "; tessera plan --calibrate: StarPU-MPI ping-pong between 2 ranks\n"
          "; round trips: 4 KB %.3f us, 1 MB %.3f us\n[cluster]\nname = here\n"
          "latency_us = %.4f\nbandwidth_gbits = %.4f\n",
          small * 1e6, large * 1e6, alpha * 1e6, 8.0 / beta / 1e9);
  if (fclose(f) != 0)
    return tsr_error_set(err, TSR_EIO, "%s: cannot write: %s", path, strerror(errno));
  return 0;
}
