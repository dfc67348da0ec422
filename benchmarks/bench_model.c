/* Training throughput of any model file (the zoo's `--model resnet20`, or a path) on synthetic
 * images of one shape, against PyTorch training the same model (benchmarks/torch_model.py
 * builds it from the same model text with the tessera Python package's torch modules) at the
 * same batch, at its best thread count, measured in the same run. Rounds alternate tessera and
 * PyTorch so that load from other processes hits both alike; the ratio of the medians is the
 * result. Both use SGD with momentum 0.9 and lr 0.01, PyTorch's initialization.
 *
 * usage: bench_model --model NAME|FILE [--input HxWxC] [--classes N] [--batch N]
 *                    [--seconds S] [--rounds N] [--workers N] [--sched NAME] [--tile R]
 *                    [--kernels auto|onednn|blis|tuned] [--no-torch]
 * PyTorch: Debian's, and $TSR_PEER_PYTHON's when set (bench_common.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <blis.h>

#include "bench_common.h"

typedef struct {
  const char *model;
  int h, w, c, classes, batch, tile_rows;
  double seconds;
  int tile_used;     /* out */
  int64_t params;    /* out */
  char ini[1 << 16]; /* out: the model as built, for the peer */
  const tsr_dataset_t *ds;
  const char *peer_dir; /* where torch_model.py is */
  char ini_path[64];    /* the model text for the peer: written after round 1, "" when not */
} bench_t;

/* The model (a zoo name or a file) with its `units = classes` bound. */
static int load_model(tsr_model_spec_t *spec, const bench_t *b, tsr_errbuf_t *err) {
  size_t n = strlen(b->model);
  bool file = n > 4 && strcmp(b->model + n - 4, ".ini") == 0; /* as tessera train's --model */
  int rc = file ? tsr_model_load_ini(spec, b->model, err)
                : tsr_model_parse(spec, b->model, b->classes, err);
  if (rc == 0) tsr_model_bind_classes(spec, b->classes);
  return rc;
}

/* Trains for about `seconds` after a warm-up; returns samples/s (0 on error). */
static double run_tessera(bench_t *b, const tsr_dataset_t *ds) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = b->batch, o.tile_rows = b->tile_rows;
  o.in_channels = ds->channels, o.in_height = ds->height, o.in_width = ds->width;
  tsr_net_t *net = NULL;
  int rc = load_model(&spec, b, &err);
  if (rc == 0) rc = tsr_model_to_ini(&spec, b->ini, sizeof b->ini);
  if (rc == 0) rc = bench_build(&net, &spec, ds, &o, &err);
  tsr_model_spec_fini(&spec); /* the net has its own copy */
  if (rc) {
    fprintf(stderr, "bench_model: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    return 0;
  }
  int cols;
  tsr_net_tiles(net, &b->tile_used, &cols);
  b->params = tsr_net_param_count(net);
  double rate = bench_time_steps(net, ds, b->batch, 5, b->seconds, 4, &rc);
  if (rc) fprintf(stderr, "bench_model: training failed: %s\n", tsr_strerror(rc));
  tsr_net_destroy(&net);
  return rate;
}

/* PyTorch's best samples/s over 1 and 2 threads on the model text in `ini_path`; 0 when it
 * cannot run. */
static double run_torch(const char *python, const char *dir, const char *ini_path, const bench_t *b,
                        int *threads) {
  char cmd[9000];
  snprintf(cmd, sizeof cmd,
           "%.200s %.4000s/torch_model.py --model-file %.4000s --input %dx%dx%d "
           "--batch %d --best-threads 1,2 --seconds %g 2>/dev/null",
           python, dir, ini_path, b->c, b->h, b->w, b->batch, b->seconds);
  double best = 0;
  run_peer(cmd, &best, threads);
  return best;
}

static double our_side(void *ctx, int r) {
  (void)r;
  bench_t *b = ctx;
  return run_tessera(b, b->ds);
}

/* The peer reads the model tessera built in the first round, written to a file once. */
static double their_side(void *ctx, int r, const char *python, int *threads) {
  bench_t *b = ctx;
  if (r == 0 && !b->ini_path[0]) {
    snprintf(b->ini_path, sizeof b->ini_path, "/tmp/bench_model_XXXXXX");
    int fd = mkstemp(b->ini_path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f || fputs(b->ini, f) < 0 || fclose(f) != 0) {
      fprintf(stderr, "bench_model: cannot write the model for PyTorch in %s\n", b->ini_path);
      if (fd >= 0) unlink(b->ini_path);
      b->ini_path[0] = '\0';
    }
  }
  return b->ini_path[0] ? run_torch(python, b->peer_dir, b->ini_path, b, threads) : 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: bench_model --model NAME|FILE [--input HxWxC] [--classes N] [--batch N]\n"
             "                   [--seconds S] [--rounds N] [--workers N] [--sched NAME]\n"
             "                   [--tile R] [--kernels auto|onednn|blis|tuned] [--no-torch]\n");
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"model", required_argument, 0, 'm'},
                                           {"input", required_argument, 0, 'i'},
                                           {"classes", required_argument, 0, 'c'},
                                           {"batch", required_argument, 0, 'b'},
                                           {"seconds", required_argument, 0, 's'},
                                           {"rounds", required_argument, 0, 'r'},
                                           {"workers", required_argument, 0, 'w'},
                                           {"sched", required_argument, 0, 'S'},
                                           {"tile", required_argument, 0, 't'},
                                           {"no-torch", no_argument, 0, 'n'},
                                           {"kernels", required_argument, 0, 'k'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  static bench_t b = {.h = 32, .w = 32, .c = 3, .classes = 10, .batch = 64, .seconds = 5};
  int rounds = 3;
  bool torch = true;
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  int opt;
  while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'm': b.model = optarg; break;
    case 'i':
      if (sscanf(optarg, "%dx%dx%d", &b.h, &b.w, &b.c) != 3) b.h = 0;
      break;
    case 'c': b.classes = atoi(optarg); break;
    case 'b': b.batch = atoi(optarg); break;
    case 's': b.seconds = atof(optarg); break;
    case 'r': rounds = atoi(optarg); break;
    case 'w': ro.ncpus = atoi(optarg); break;
    case 'S': ro.sched = optarg; break;
    case 't': b.tile_rows = atoi(optarg); break;
    case 'n': torch = false; break;
    case 'k':
      if (bench_parse_kernels("bench_model", optarg, &ro.kernels)) return 2;
      break;
    default: usage(opt == 'h' ? stdout : stderr); return opt == 'h' ? 0 : 2;
    }
  }
  if (!b.model || b.h <= 0 || b.w <= 0 || b.c <= 0 || b.classes < 2 || b.batch <= 0 ||
      b.seconds <= 0 || rounds < 1 || rounds > 32 || b.tile_rows < 0) {
    fprintf(stderr, "bench_model: --model is required; --input HxWxC, --batch, --seconds and "
                    "--rounds (1-32) must be positive, --classes at least 2\n");
    usage(stderr);
    return 2;
  }
  /* Enough samples for a few distinct batches; the content does not change the work. */
  tsr_dataset_t ds = {
      .n = b.batch * 4, .classes = b.classes, .channels = b.c, .height = b.h, .width = b.w};
  ds.features = (int64_t)b.h * b.w * b.c;
  ds.x = malloc(sizeof(float) * (size_t)(ds.n * ds.features));
  ds.y = malloc(sizeof(float) * (size_t)ds.n);
  if (!ds.x || !ds.y) return fprintf(stderr, "bench_model: out of memory\n"), 1;
  tsr_rng_t rng = {9};
  for (int64_t i = 0; i < ds.n * ds.features; i++)
    ds.x[i] = (float)(tsr__rng_uniform(&rng) - 0.5);
  for (int64_t i = 0; i < ds.n; i++)
    ds.y[i] = (float)(i % b.classes);

  char dir[4096];
  b.ds = &ds, b.peer_dir = peer_dir(dir, sizeof dir, argv[0], "torch_model.py");
  bench_print_machine(stdout);
  static bench_result_t res;
  int rc = bench_rounds("bench_model", &ro, rounds, our_side, torch ? their_side : NULL, &b, &res);
  if (b.ini_path[0]) unlink(b.ini_path);
  if (rc) return 1;
  printf("\nmachine: BLIS %s kernels, %s; tessera on %d StarPU CPU workers (%s, kernels %s), "
         "model %s at %dx%dx%d, %d classes (%lld parameters), batch %d, tiles of %d rows; %d "
         "rounds of %g s\n",
         bli_arch_string(bli_arch_query_id()), tsr_runtime_onednn_version(), res.workers, res.sched,
         tsr_runtime_kernels_name(ro.kernels), b.model, b.h, b.w, b.c, b.classes,
         (long long)b.params, b.batch, b.tile_used, rounds, b.seconds);
  bench_report(&res, "samples/s", 1.0);
  free(ds.x), free(ds.y);
  return 0;
}
