/* Training throughput benchmark: trains MLPs of several widths and batch
 * sizes on all StarPU workers and prints samples/s and effective training
 * GFLOP/s (6 x parameters x samples), next to two references measured in the
 * same run on the same cores:
 *   - BLIS SGEMM GFLOP/s on the configuration's dominant GEMM shape
 *     (batch x width x width) on as many cores as tessera has workers: the
 *     better of BLIS threaded over them and one single-threaded SGEMM per
 *     core at once; measured before StarPU starts, since idle workers spin;
 *   - PyTorch CPU samples/s for the same model and batch at its best thread
 *     count (benchmarks/torch_mlp.py), measured after StarPU stops, by each
 *     peer (Debian's PyTorch, and $TSR_PEER_PYTHON's: bench_common.h).
 * With --rounds N, N rounds alternate tessera (every configuration) and the peers; the table
 * has the medians, and each configuration's lowest ratio over the rounds is printed below it.
 * --unfused-steps: the dense layers' SGD steps as tasks of their own (tsr_net_opts_t
 * .unfused_steps); --compare-steps: each round also trains each configuration that way in the
 * same process, right after (or, every other round, before) the fused one, and prints the two
 * and their ratio (a process's memory speed varies from process to process on some machines).
 *
 * usage: bench_train [--config WIDTHS:BATCH]... [--seconds S] [--rounds N] [--workers N]
 *                    [--sched NAME] [--tile RxC] [--kernels auto|onednn|blis|tuned] [--no-torch]
 *                    [--unfused-steps | --compare-steps] [--csv FILE] */
#include <blis.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#define MAX_CONFIGS 16
#define MAX_ROUNDS 16

typedef struct {
  char widths[64];
  int batch;
  int max_width;
  double blis_gflops, samples_per_s, gflops, torch_samples_per_s; /* medians; torch: peer 0 */
  int torch_threads, tile_rows, tile_cols;
  int64_t params;
  double ours[MAX_ROUNDS], theirs[BENCH_MAX_PEERS][MAX_ROUNDS];
  double apart[MAX_ROUNDS]; /* --compare-steps: the steps as tasks of their own */
  int threads[BENCH_MAX_PEERS][MAX_ROUNDS];
} config_t;

static int max_width(const char *widths) {
  int m = 10;
  for (const char *p = widths; *p;) {
    int w = atoi(p);
    m = w > m ? w : m;
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  return m;
}

/* One BLIS SGEMM (m, n, k) repeated for about `seconds`; its GFLOP/s lands in gflops. */
typedef struct {
  int m, n, k;
  double seconds, gflops;
} gemm_job_t;

static void *gemm_loop(void *arg) {
  gemm_job_t *j = arg;
  float *a = malloc(sizeof(float) * (size_t)j->m * j->k);
  float *b = malloc(sizeof(float) * (size_t)j->k * j->n);
  float *c = malloc(sizeof(float) * (size_t)j->m * j->n);
  tsr_rng_t rng = {3};
  for (long i = 0; i < (long)j->m * j->k; i++)
    a[i] = (float)tsr__rng_uniform(&rng);
  for (long i = 0; i < (long)j->k * j->n; i++)
    b[i] = (float)tsr__rng_uniform(&rng);
  float one = 1.0f, zero = 0.0f;
  long reps = -1; /* the first call warms up */
  double t0 = 0, t = 0;
  do {
    bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, j->m, j->n, j->k, &one, a, j->k, 1, b, j->n, 1,
              &zero, c, j->n, 1);
    if (++reps == 0) t0 = now();
  } while (reps == 0 || (t = now() - t0) < j->seconds);
  j->gflops = 2.0 * j->m * j->n * (double)j->k * (double)reps / t / 1e9;
  free(a), free(b), free(c);
  return NULL;
}

/* The best BLIS rate for SGEMM (m, n, k) on `cores` cores: BLIS threaded over
 * them, or one single-threaded SGEMM per core at once (tessera's own model:
 * each worker calls single-threaded BLIS). */
static double blis_rate(int m, int n, int k, int cores, double seconds) {
  gemm_job_t threaded = {m, n, k, seconds, 0};
  bli_thread_set_num_threads(cores);
  gemm_loop(&threaded);
  bli_thread_set_num_threads(1);
  gemm_job_t jobs[64];
  pthread_t threads[64];
  int p = cores < 64 ? cores : 64;
  for (int i = 0; i < p; i++) {
    jobs[i] = (gemm_job_t){m, n, k, seconds, 0};
    pthread_create(&threads[i], NULL, gemm_loop, &jobs[i]);
  }
  double concurrent = 0;
  for (int i = 0; i < p; i++) {
    pthread_join(threads[i], NULL);
    concurrent += jobs[i].gflops;
  }
  return threaded.gflops > concurrent ? threaded.gflops : concurrent;
}

/* Trains for about `seconds` after a warm-up and fills round r's throughput (in c->apart with
 * the steps unfused under --compare-steps). */
static int run_tessera(config_t *c, int r, const tsr_dataset_t *ds, int tile_rows, int tile_cols,
                       double seconds, bool unfused, bool compared) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  char model[96];
  snprintf(model, sizeof model, "mlp:%.63s", c->widths);
  int rc = tsr_model_parse(&spec, model, ds->classes, &err);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = c->batch, o.tile_rows = tile_rows, o.tile_cols = tile_cols;
  o.unfused_steps = unfused;
  tsr_net_t *net = NULL;
  if (rc == 0) rc = bench_build(&net, &spec, ds, &o, &err);
  tsr_model_spec_fini(&spec); /* the net has its own copy */
  if (rc) {
    fprintf(stderr, "bench_train: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    return rc;
  }
  tsr_net_tiles(net, &c->tile_rows, &c->tile_cols);
  c->params = tsr_net_param_count(net);
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)ds->n);
  for (int64_t i = 0; i < ds->n; i++)
    rows[i] = (int32_t)i;
  int64_t per_pass = ds->n / c->batch, step = 0;
  const int window = 8;
  for (int w = 0; w < 10 && rc == 0; w++, step++)
    rc = tsr_net_train_step(net, ds, rows + (step % per_pass) * c->batch, c->batch, true);
  if (rc == 0) rc = tsr_net_wait(net, 0);
  int64_t timed = 0;
  double t0 = now(), t = 0;
  while (rc == 0 && (t = now() - t0) < seconds) {
    rc = tsr_net_train_step(net, ds, rows + (step % per_pass) * c->batch, c->batch, true);
    step++, timed++;
    if (rc == 0 && timed >= window) rc = tsr_net_wait(net, window);
  }
  if (rc == 0) rc = tsr_net_wait(net, 0);
  t = now() - t0;
  (compared && unfused ? c->apart : c->ours)[r] = (double)timed * c->batch / t;
  free(rows);
  tsr_net_destroy(&net);
  return rc;
}

/* Runs peer p (interpreter python) for round r; leaves its figure at 0 when it cannot. */
static void run_torch(config_t *c, int p, int r, const char *python, const char *dir,
                      double seconds) {
  if (strlen(dir) > 4000) return;
  char cmd[4096 + 512];
  snprintf(cmd, sizeof cmd,
           "%.200s %s/torch_mlp.py --widths %.63s --batch %d --best-threads 1,2 "
           "--seconds %g 2>/dev/null",
           python, dir, c->widths, c->batch, seconds);
  run_peer(cmd, &c->theirs[p][r], &c->threads[p][r]);
}

static void usage(void) {
  fprintf(stderr, "usage: bench_train [--config WIDTHS:BATCH]... [--seconds S] [--rounds N]\n"
                  "                   [--workers N] [--sched NAME] [--tile RxC]\n"
                  "                   [--kernels auto|onednn|blis|tuned] [--no-torch]\n"
                  "                   [--unfused-steps | --compare-steps] [--csv FILE]\n");
}

/* The median of v[0..n) without reordering v. */
static double median_of(const double *v, int n) {
  double copy[MAX_ROUNDS];
  memcpy(copy, v, sizeof(double) * (size_t)n);
  return bench_median(copy, n);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"config", required_argument, 0, 'c'},
                                           {"seconds", required_argument, 0, 's'},
                                           {"rounds", required_argument, 0, 'r'},
                                           {"workers", required_argument, 0, 'w'},
                                           {"sched", required_argument, 0, 'S'},
                                           {"tile", required_argument, 0, 't'},
                                           {"no-torch", no_argument, 0, 'n'},
                                           {"csv", required_argument, 0, 'o'},
                                           {"kernels", required_argument, 0, 'k'},
                                           {"unfused-steps", no_argument, 0, 'u'},
                                           {"compare-steps", no_argument, 0, 'C'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  config_t configs[MAX_CONFIGS];
  int nconfigs = 0, tile_rows = 0, tile_cols = 0, rounds = 1;
  double seconds = 5;
  bool torch = true, unfused = false, compare = false;
  const char *csv = NULL;
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  int opt;
  while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'c': {
      const char *colon = strchr(optarg, ':');
      if (!colon || nconfigs == MAX_CONFIGS || colon - optarg >= 64 || atoi(colon + 1) <= 0) {
        fprintf(stderr, "bench_train: --config %s: expected WIDTHS:BATCH, e.g. 512,512:64\n",
                optarg);
        return 2;
      }
      config_t *c = &configs[nconfigs++];
      memset(c, 0, sizeof *c);
      snprintf(c->widths, sizeof c->widths, "%.*s", (int)(colon - optarg), optarg);
      c->batch = atoi(colon + 1);
      break;
    }
    case 's': seconds = atof(optarg); break;
    case 'r': rounds = atoi(optarg); break;
    case 'w': ro.ncpus = atoi(optarg); break;
    case 'S': ro.sched = optarg; break;
    case 't':
      if (sscanf(optarg, "%dx%d", &tile_rows, &tile_cols) != 2) {
        fprintf(stderr, "bench_train: --tile %s: expected RxC\n", optarg);
        return 2;
      }
      break;
    case 'n': torch = false; break;
    case 'u': unfused = true; break;
    case 'C': compare = true; break;
    case 'o': csv = optarg; break;
    case 'k':
      if (bench_parse_kernels("bench_train", optarg, &ro.kernels)) return 2;
      break;
    default: usage(); return opt == 'h' ? 0 : 2;
    }
  }
  if (unfused && compare) {
    fprintf(stderr, "bench_train: --unfused-steps or --compare-steps, not both\n");
    return 2;
  }
  if (rounds < 1 || rounds > MAX_ROUNDS || !(seconds > 0)) {
    fprintf(stderr, "bench_train: --rounds from 1 to %d, --seconds > 0\n", MAX_ROUNDS);
    return 2;
  }
  if (nconfigs == 0) {
    const char *defaults[][2] = {{"512,512", "64"}, {"512,512", "256"}, {"4096,4096", "512"}};
    for (int i = 0; i < 3; i++) {
      snprintf(configs[i].widths, sizeof configs[i].widths, "%s", defaults[i][0]);
      configs[i].batch = atoi(defaults[i][1]);
    }
    nconfigs = 3;
  }
  tsr_dataset_t ds = synthetic_fashion(false);

  tsr_errbuf_t err = {""};
  if (tsr_runtime_init(&ro, &err)) {
    fprintf(stderr, "bench_train: %s\n", err.msg);
    return 1;
  }
  int workers = tsr_runtime_ncpus();
  char sched[64];
  snprintf(sched, sizeof sched, "%s", tsr_runtime_sched());
  tsr_runtime_fini();

  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  bench_print_machine(stdout);
  printf("machine: %ld cores; tessera on %d StarPU CPU workers (%s, kernels %s); BLIS %s (%s "
         "kernels) on %d threads; %g s per measurement, %d rounds\n",
         cores, workers, sched, tsr_runtime_kernels_name(ro.kernels), bli_info_get_version_str(),
         bli_arch_string(bli_arch_query_id()), workers, seconds, rounds);
  fflush(stdout);
  for (int i = 0; i < nconfigs; i++) {
    configs[i].max_width = max_width(configs[i].widths);
    configs[i].blis_gflops =
        blis_rate(configs[i].batch, configs[i].max_width, configs[i].max_width, workers, seconds);
  }
  bench_peers_t peers = bench_peers();
  if (!torch) peers.n = 0;
  char version[BENCH_MAX_PEERS][32] = {"", ""}, dir[4096];
  const char *src = peer_dir(dir, sizeof dir, argv[0], "torch_mlp.py");
  for (int r = 0; r < rounds; r++) {
    if (tsr_runtime_init(&ro, &err)) {
      fprintf(stderr, "bench_train: %s\n", err.msg);
      return 1;
    }
    for (int i = 0; i < nconfigs; i++)
      for (int k = 0; k < (compare ? 2 : 1); k++) /* odd rounds: the unfused one first */
        if (run_tessera(&configs[i], r, &ds, tile_rows, tile_cols, seconds,
                        compare ? (k == 0) == (r % 2 == 1) : unfused, compare))
          return 1;
    tsr_runtime_fini();
    for (int i = 0; i < nconfigs; i++) {
      config_t *c = &configs[i];
      printf("round %d: %s:%d tessera %.0f samples/s", r + 1, c->widths, c->batch, c->ours[r]);
      if (compare)
        printf(" (steps as tasks %.0f, fused / as tasks %.3f)", c->apart[r],
               c->ours[r] / c->apart[r]);
      for (int p = 0; p < peers.n; p++) {
        bench_peer_version[0] = '\0';
        run_torch(c, p, r, peers.python[p], src, seconds);
        if (bench_peer_version[0])
          snprintf(version[p], sizeof version[p], "%s", bench_peer_version);
        if (c->theirs[p][r] > 0)
          printf("; PyTorch %s %.0f (%d threads), ratio %.2fx", version[p], c->theirs[p][r],
                 c->threads[p][r], c->ours[r] / c->theirs[p][r]);
      }
      printf("\n");
      fflush(stdout);
    }
  }
  for (int i = 0; i < nconfigs; i++) {
    config_t *c = &configs[i];
    c->samples_per_s = median_of(c->ours, rounds);
    c->gflops = 6.0 * (double)c->params * c->samples_per_s / 1e9;
    c->torch_samples_per_s = peers.n ? median_of(c->theirs[0], rounds) : 0;
    c->torch_threads = peers.n ? c->threads[0][rounds - 1] : 0;
  }

  printf("\n%-10s %5s %9s %8s %11s %9s %11s %6s %11s %7s\n", "widths", "batch", "tiles", "params",
         "samples/s", "GFLOP/s", "BLIS GF/s", "ratio", "torch s/s", "speedup");
  for (int i = 0; i < nconfigs; i++) {
    config_t *c = &configs[i];
    char tiles[32], tor[32], sp[32];
    snprintf(tiles, sizeof tiles, "%dx%d", c->tile_rows, c->tile_cols);
    snprintf(tor, sizeof tor, c->torch_samples_per_s > 0 ? "%.0f (%dt)" : "-",
             c->torch_samples_per_s, c->torch_threads);
    snprintf(sp, sizeof sp, c->torch_samples_per_s > 0 ? "%.2fx" : "-",
             c->samples_per_s / c->torch_samples_per_s);
    printf("%-10s %5d %9s %8lld %11.0f %9.1f %11.1f %5.0f%% %11s %7s\n", c->widths, c->batch, tiles,
           (long long)c->params, c->samples_per_s, c->gflops, c->blis_gflops,
           100 * c->gflops / c->blis_gflops, tor, sp);
  }
  /* Each configuration's ratio round by round against the faster peer of the round. */
  for (int i = 0; i < nconfigs && peers.n > 0; i++) {
    config_t *c = &configs[i];
    double lowest = 1e9;
    printf("%s:%d against the faster PyTorch by round:", c->widths, c->batch);
    for (int r = 0; r < rounds; r++) {
      double best = 0;
      for (int p = 0; p < peers.n; p++)
        best = c->theirs[p][r] > best ? c->theirs[p][r] : best;
      double ratio = best > 0 ? c->ours[r] / best : 0;
      lowest = ratio < lowest ? ratio : lowest;
      printf(" %.2fx", ratio);
    }
    printf("; lowest %.2fx\n", lowest);
  }
  for (int i = 0; i < nconfigs && compare; i++) {
    config_t *c = &configs[i];
    double ratio[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
      ratio[r] = c->ours[r] / c->apart[r];
    printf("%s:%d fused steps / steps as tasks: median %.3f (the same process, each round)\n",
           c->widths, c->batch, median_of(ratio, rounds));
  }
  for (int p = 0; p < peers.n; p++)
    printf("peer %d: PyTorch %s (%s)%s\n", p + 1, version[p], peers.python[p],
           p == 0 ? ", the table's torch column" : "");
  if (csv) {
    FILE *f = fopen(csv, "w");
    if (!f) {
      perror(csv);
      return 1;
    }
    fprintf(f, "widths,batch,tile_rows,tile_cols,workers,sched,params,samples_per_s,gflops,"
               "blis_gflops,torch_samples_per_s,torch_threads\n");
    for (int i = 0; i < nconfigs; i++) {
      config_t *c = &configs[i];
      fprintf(f, "\"%s\",%d,%d,%d,%d,%s,%lld,%.1f,%.2f,%.2f,%.1f,%d\n", c->widths, c->batch,
              c->tile_rows, c->tile_cols, workers, sched, (long long)c->params, c->samples_per_s,
              c->gflops, c->blis_gflops, c->torch_samples_per_s, c->torch_threads);
    }
    fclose(f);
  }
  free(ds.x), free(ds.y);
  return 0;
}
