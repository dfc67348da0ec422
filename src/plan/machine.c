/* Machines for the planner: described in an INI file, or this one, whose
 * kernel rates are measured on demand by timing the kernels themselves
 * (src/kernels) on the tile shapes a plan needs, cached in a file so that
 * later plans are fast, and whose alpha and beta come from a StarPU-MPI
 * ping-pong (tsr_plan_calibrate_save) or documented defaults. */
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/datafile.h"
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

/* n floats, 64-byte aligned as the tiles and the workspace are (oneDNN's kernels ran 25% slower
 * on malloc's 16-byte alignment). */
static float *buffer(size_t n) {
  float *p = aligned_alloc(64, (n * sizeof *p + 63) / 64 * 64);
  for (size_t i = 0; p && i < n; i++)
    p[i] = (float)(i % 7) * 0.1f;
  return p;
}

double tsr__plan_gemm_rate(const tsr_machine_t *m, bool ta, bool tb, int rows, int cols,
                           int inner) {
  if (!m->measure_kernels) return m->gemm_gflops * 1e9;
  /* The implementation a training task runs by default: oneDNN's where built, else BLIS. */
  bool dnnl = tsr__k_dnnl_built();
  char key[128];
  snprintf(key, sizeof key, "gemm/%s %d %d %d %d %d", dnnl ? "onednn" : tsr__k_blis_kernels(), ta,
           tb, rows, cols, inner);
  double v;
  if (cached(m, key, &v)) return v;
  float *a = buffer((size_t)rows * inner), *b = buffer((size_t)inner * cols),
        *c = buffer((size_t)rows * cols);
  double s = 0;
  if (a && b && c) {
    tsr__k_init();
    TIME_IT(s, tsr__k_gemm_by(dnnl, ta, tb, rows, cols, inner, 1.0f, a, ta ? rows : inner, b,
                              tb ? inner : cols, 0.0f, c, cols));
  }
  free(a), free(b), free(c);
  v = s > 0 ? tsr__plan_gemm_flops(rows, cols, inner) / s : m->gemm_gflops * 1e9;
  remember(m, key, v);
  return v;
}

/* One pass of the kernel a training task runs by default: oneDNN's where this build has it and
 * it serves the shape (the first implementation, which every policy but dmda and dmdas runs;
 * its weights reordered once a step beforehand, wb), else the lowered one. */
static void conv_pass(const tsr_conv_geom_t *g, int n, int which, bool dnnl, float *x, float *y,
                      float *w, float *b, const tsr_dnnl_blocked_t *wb, float *work) {
  int fin = g->h * g->w * g->c, fout = g->oh * g->ow * g->oc;
  if (which == 0 &&
      !(dnnl && tsr__k_dnnl_conv_fwd(g, n, y, fout, x, fin, w, g->oc, b, true, wb, work)))
    tsr__k_conv_fwd(g, n, y, fout, x, fin, w, g->oc, b, true, work);
  if (which == 1 && !(dnnl && tsr__k_dnnl_conv_bwd_data(g, n, x, fin, y, fout, w, g->oc, wb, work)))
    tsr__k_conv_bwd_data(g, n, x, fin, y, fout, w, g->oc, work);
  if (which == 2 &&
      !(dnnl && tsr__k_dnnl_conv_bwd_filter(g, n, w, g->oc, b, x, fin, y, fout, 0.0f, work)))
    tsr__k_conv_bwd_filter(g, n, w, g->oc, b, x, fin, y, fout, 0.0f, work);
}

double tsr__plan_conv_rate(const tsr_machine_t *m, const tsr_conv_geom_t *g, int n, int which) {
  double described = (m->conv_gflops > 0 ? m->conv_gflops : m->gemm_gflops) * 1e9;
  if (!m->measure_kernels) return described;
  size_t dnnl_work = tsr__k_dnnl_conv_work(g, n, which, which == 0);
  char key[160];
  snprintf(key, sizeof key, "conv%d/%s%s %d %d %d %d %d %d %d %d %d %d %d %d %d", which,
           tsr__k_blis_kernels(), dnnl_work ? "+onednn" : "", g->c, g->h, g->w, g->oc, g->oh, g->ow,
           g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, n);
  double v;
  if (cached(m, key, &v)) return v;
  int fin = g->h * g->w * g->c, fout = g->oh * g->ow * g->oc, fan = g->kh * g->kw * g->c;
  size_t lowered = tsr__k_conv_work(g, n);
  float *x = buffer((size_t)n * fin), *y = buffer((size_t)n * fout),
        *w = buffer((size_t)fan * g->oc), *b = buffer((size_t)g->oc),
        *work = buffer(dnnl_work > lowered ? dnnl_work : lowered);
  size_t blocked = tsr__k_dnnl_conv_wfloats(g, n, which, which == 0);
  float *wbuf = blocked ? buffer(blocked) : NULL;
  tsr_dnnl_blocked_t wb = {NULL, n};
  if (wbuf && w && tsr__k_dnnl_conv_wreorder(g, n, which, which == 0, w, g->oc, wbuf)) wb.w = wbuf;
  double s = 0;
  if (x && y && w && b && work) {
    tsr__k_init();
    TIME_IT(s, conv_pass(g, n, which, dnnl_work > 0, x, y, w, b, &wb, work));
  }
  free(x), free(y), free(w), free(b), free(work), free(wbuf);
  v = s > 0 ? tsr__plan_gemm_flops((int64_t)n * g->oh * g->ow, g->oc, fan) / s : described;
  remember(m, key, v);
  return v;
}

double tsr__plan_pool_seconds(const tsr_machine_t *m, const tsr_conv_geom_t *g, int n, bool max,
                              int which) {
  if (!m->measure_kernels) return 0;
  char key[160];
  snprintf(key, sizeof key, "pool%d/%s %d %d %d %d %d %d %d %d %d %d %d %d", which,
           max ? "max" : "mean", g->c, g->h, g->w, g->oh, g->ow, g->kh, g->kw, g->sh, g->sw, g->ph,
           g->pw, n);
  double v;
  if (cached(m, key, &v)) return v;
  size_t in = (size_t)n * g->h * g->w * g->c, out = (size_t)n * g->oh * g->ow * g->c;
  float *x = buffer(in), *y = buffer(out), *dx = buffer(in), *dy = buffer(out);
  double s = 0;
  if (x && y && dx && dy) {
    int fin = g->h * g->w * g->c, fout = g->oh * g->ow * g->c;
    tsr__k_pool_fwd(g, max, n, y, fout, x, fin); /* y as the backward pass of max looks for it */
    if (which == 0)
      TIME_IT(s, tsr__k_pool_fwd(g, max, n, y, fout, x, fin));
    else
      TIME_IT(s, tsr__k_pool_bwd(g, max, false, n, dx, fin, dy, fout, x, fin, y, fout));
  }
  free(x), free(y), free(dx), free(dy);
  remember(m, key, s);
  return s;
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

/* The keys of a cluster file, each with its accepted range: every value is checked against it
 * before it is converted, so that 1e20, inf, nan or a subnormal never reach an int or a
 * product (undefined behaviour, or a table of 300-digit cells). `scale` converts the value to
 * the machine's unit; `inverse` stores scale / value instead (bandwidths as seconds per byte). */
typedef struct {
  const char *name;
  bool whole;    /* a count: whole numbers only */
  double lo, hi; /* accepted values, both included */
  bool lo_open;  /* lo itself is refused (a rate of 0) */
  size_t field;  /* offsetof(tsr_machine_t, ...) */
  double scale;
  bool inverse;
  const char *means; /* for the message: what the number is */
} machine_key_t;

#define FIELD(f) offsetof(tsr_machine_t, f)
static const machine_key_t machine_keys[] = {
    {"nodes", true, 0, 1e6, false, FIELD(nodes), 1, false, "nodes (0: unbounded)"},
    {"cores_per_node", true, 1, 65536, false, FIELD(cores_per_node), 1, false, "cores per node"},
    {"ranks_per_node", true, 0, 65536, false, FIELD(ranks_per_node), 1, false,
     "ranks per node (0: cores / workers)"},
    {"workers", true, 0, 4096, false, FIELD(workers), 1, false, "CPU workers per rank (0: chosen)"},
    {"gflops_per_core", false, 0, 1e6, true, FIELD(gemm_gflops), 1, false, "GFLOP/s per core"},
    {"conv_gflops", false, 0, 1e6, false, FIELD(conv_gflops), 1, false,
     "convolution GFLOP/s per core (0: gflops_per_core)"},
    {"mem_gbs", false, 0, 1e5, true, FIELD(mem_gbs), 1, false, "GB/s per core"},
    {"latency_us", false, 0, 1e7, false, FIELD(alpha), 1e-6, false, "microseconds per message"},
    {"bandwidth_gbits", false, 0, 1e6, true, FIELD(beta), 8.0 / 1e9, true, "Gbit/s"},
    {"intra_latency_us", false, 0, 1e7, false, FIELD(intra_alpha), 1e-6, false,
     "microseconds per message inside a node (0: latency_us)"},
    {"intra_bandwidth_gbits", false, 0, 1e6, true, FIELD(intra_beta), 8.0 / 1e9, true,
     "Gbit/s inside a node (absent: bandwidth_gbits)"},
    {"gamma_gbs", false, 0, 1e6, false, FIELD(gamma), 1.0 / 1e9, true,
     "GB/s of reduction (0: from mem_gbs)"},
    {"task_overhead_us", false, 0, 1e6, false, FIELD(task_overhead), 1e-6, false,
     "microseconds per task"},
};
#undef FIELD
#define N_MACHINE_KEYS (sizeof machine_keys / sizeof *machine_keys)

typedef struct {
  tsr_machine_t *m;
  const char *path;
  tsr_errbuf_t *err;
  int rc;
} ini_ctx_t;

/* "nodes, cores_per_node, ...": the known keys, for messages. */
static void key_names(char *buf, size_t size) {
  int at = snprintf(buf, size, "name");
  for (size_t k = 0; k < N_MACHINE_KEYS && at >= 0 && (size_t)at < size; k++)
    at += snprintf(buf + at, size - (size_t)at, ", %s", machine_keys[k].name);
}

/* Sets key k from text, or says what is wrong with it: TSR_EFORMAT naming the file, the key,
 * its value and the accepted range. */
static int set_key(ini_ctx_t *c, const machine_key_t *k, const char *value) {
  char *end;
  errno = 0;
  double v = strtod(value, &end);
  bool underflow = errno == ERANGE && fabs(v) < 1.0; /* a subnormal or smaller */
  while (*end == ' ' || *end == '\t')
    end++;
  const char *why = end == value || *end                    ? "is not a number"
                    : !isfinite(v) || (errno && !underflow) ? "is not a finite number"
                    : k->whole && v != floor(v)             ? "is not a whole number"
                    : v < k->lo || v > k->hi || (k->lo_open && v <= k->lo) || (underflow && v != 0)
                        ? "is out of range"
                        : NULL;
  if (why) {
    char range[96];
    if (k->whole)
      snprintf(range, sizeof range, "a whole number from %.0f to %.0f", k->lo, k->hi);
    else
      snprintf(range, sizeof range, "a number %s %g and at most %g", k->lo_open ? "above" : "from",
               k->lo, k->hi);
    return tsr_error_set(c->err, TSR_EFORMAT, "%s: %s = %s %s: expected %s (%s)", c->path, k->name,
                         value, why, range, k->means);
  }
  char *at = (char *)c->m + k->field;
  if (k->whole)
    *(int *)at = (int)v;
  else
    *(double *)at = k->inverse ? (v > 0 ? k->scale / v : 0) : v * k->scale;
  return 0;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
  ini_ctx_t *c = user;
  if (c->rc) return 0;
  if (strcmp(section, "cluster") != 0 && strcmp(section, "machine") != 0) {
    c->rc = tsr_error_set(c->err, TSR_EFORMAT, "%s: section [%s]: expected [cluster]", c->path,
                          section);
    return 0;
  }
  if (strcmp(name, "name") == 0) {
    snprintf(c->m->name, sizeof c->m->name, "%s", value);
    return 1;
  }
  for (size_t k = 0; k < N_MACHINE_KEYS; k++)
    if (strcmp(name, machine_keys[k].name) == 0) {
      c->rc = set_key(c, &machine_keys[k], value);
      return c->rc == 0;
    }
  char known[512];
  key_names(known, sizeof known);
  c->rc =
      tsr_error_set(c->err, TSR_EFORMAT, "%s: unknown key '%s' (known: %s)", c->path, name, known);
  return 0;
}

/* Reads the INI text of f (borrowed) into m; path names it in messages. */
static int parse_ini(tsr_machine_t *m, FILE *f, const char *path, tsr_errbuf_t *err) {
  ini_ctx_t c = {m, path, err, 0};
  int line = ini_parse_file(f, on_key, &c);
  if (c.rc) return c.rc;
  if (line > 0) return tsr_error_set(err, TSR_EFORMAT, "%s:%d: not an INI line", path, line);
  return 0;
}

/* Reads the cluster file path means (io/datafile.h) into m; its path is written into found. */
static int load_ini(tsr_machine_t *m, const char *path, char *found, size_t found_size,
                    tsr_errbuf_t *err) {
  FILE *f;
  int rc = tsr__datafile_open(&tsr__datafile_clusters, path, &f, found, found_size, err);
  if (rc) return rc;
  rc = parse_ini(m, f, found, err);
  fclose(f);
  return rc;
}

/* What tsr_machine_load_ini checks and derives once the keys are read. */
static int finish_described(tsr_machine_t *m, const char *path, tsr_errbuf_t *err) {
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
    return tsr_error_set(err, TSR_EFORMAT, "%s: '%s' is missing; add %s = N under [cluster]", path,
                         missing, missing);
  if (m->ranks_per_node < 1) {
    int w = m->workers > 0 ? m->workers : m->cores_per_node < 4 ? m->cores_per_node : 4;
    m->ranks_per_node = m->cores_per_node / w > 0 ? m->cores_per_node / w : 1;
  }
  if (m->gamma == 0) m->gamma = 3.0 / (m->mem_gbs * 1e9); /* read two floats, write one */
  return 0;
}

int tsr__machine_parse_ini_mem(tsr_machine_t *m, const void *text, size_t len, const char *name,
                               tsr_errbuf_t *err) {
  memset(m, 0, sizeof *m);
  m->task_overhead = TASK_OVERHEAD;
  /* fmemopen refuses a size of 0: an empty text has no keys. */
  FILE *f = len ? fmemopen((void *)text, len, "r") : NULL;
  if (len && !f)
    return tsr_error_set(err, TSR_ENOMEM, "%s: cannot open the text as a stream: %s", name,
                         strerror(errno));
  int rc = f ? parse_ini(m, f, name, err) : 0;
  if (f) fclose(f);
  return rc ? rc : finish_described(m, name, err);
}

int tsr_machine_load_ini(tsr_machine_t *m, const char *path, tsr_errbuf_t *err) {
  memset(m, 0, sizeof *m);
  m->task_overhead = TASK_OVERHEAD;
  char found[PATH_MAX];
  int rc = load_ini(m, path, found, sizeof found, err);
  return rc ? rc : finish_described(m, found, err);
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
    char found[PATH_MAX];
    int rc = load_ini(&c, calibration, found, sizeof found, err);
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
