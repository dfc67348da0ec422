/* CNN training throughput: trains the default CNN (`--model cnn`: conv 3x3 32
 * - ReLU - maxpool 2 - conv 3x3 64 - ReLU - maxpool 2 - dense 128 - ReLU -
 * dense 10, convolutions padded by 1, or by --padding; SGD momentum 0.9) on
 * 28x28 one-channel inputs on all StarPU
 * workers, and measures in the same run, on the same cores, PyTorch CPU
 * training the same model at the same batch at its best thread count
 * (benchmarks/torch_cnn.py). Rounds alternate tessera and PyTorch so that
 * load from other processes on a shared machine hits both alike; the ratio
 * of the medians is the result.
 *
 * usage: bench_cnn [--batch N] [--seconds S] [--rounds N] [--workers N]
 *                  [--sched NAME] [--tile R] [--padding 0|1] [--kernels K] [--no-torch]
 * PyTorch: Debian's, and $TSR_PEER_PYTHON's when set (bench_common.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

typedef struct {
  int batch, tile_rows, padding;
  double seconds;
  const tsr_dataset_t *ds;
  const char *peer_dir; /* where torch_cnn.py is */
  int tile_used;        /* out */
  int64_t params;
} bench_t;

/* Trains for about `seconds` after a warm-up; returns samples/s (0 on error). */
static double run_tessera(bench_t *b, const tsr_dataset_t *ds) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = b->batch, o.tile_rows = b->tile_rows;
  o.in_channels = ds->channels, o.in_height = ds->height, o.in_width = ds->width;
  tsr_net_t *net = NULL;
  int rc = tsr_model_parse(&spec, "cnn", ds->classes, &err);
  for (int i = 0; i < spec.n_layers; i++)
    if (spec.layers[i].kind == TSR_LAYER_CONV)
      spec.layers[i].pad_h = spec.layers[i].pad_w = b->padding;
  if (rc == 0) rc = bench_build(&net, &spec, ds, &o, &err);
  tsr_model_spec_fini(&spec); /* the net has its own copy */
  if (rc) {
    fprintf(stderr, "bench_cnn: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    return 0;
  }
  int cols;
  tsr_net_tiles(net, &b->tile_used, &cols);
  b->params = tsr_net_param_count(net);
  double rate = bench_time_steps(net, ds, b->batch, 10, b->seconds, 8, &rc);
  tsr_net_destroy(&net);
  return rate;
}

/* PyTorch's best samples/s over 1 and 2 threads; 0 when it cannot run. */
static double run_torch(const char *python, const char *dir, int batch, int padding, double seconds,
                        int *threads) {
  char cmd[4600];
  snprintf(cmd, sizeof cmd,
           "%.200s %.4000s/torch_cnn.py --batch %d --padding %d --best-threads 1,2 "
           "--seconds %g 2>/dev/null",
           python, dir, batch, padding, seconds);
  double best = 0;
  run_peer(cmd, &best, threads);
  return best;
}

static double our_side(void *ctx, int r) {
  (void)r;
  bench_t *b = ctx;
  return run_tessera(b, b->ds);
}

static double their_side(void *ctx, int r, const char *python, int *threads) {
  (void)r;
  bench_t *b = ctx;
  return run_torch(python, b->peer_dir, b->batch, b->padding, b->seconds, threads);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"batch", required_argument, 0, 'b'},
                                           {"seconds", required_argument, 0, 's'},
                                           {"rounds", required_argument, 0, 'r'},
                                           {"workers", required_argument, 0, 'w'},
                                           {"sched", required_argument, 0, 'S'},
                                           {"tile", required_argument, 0, 't'},
                                           {"padding", required_argument, 0, 'p'},
                                           {"no-torch", no_argument, 0, 'n'},
                                           {"kernels", required_argument, 0, 'k'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  bench_t b = {.batch = 64, .padding = 1, .seconds = 5};
  int rounds = 3;
  bool torch = true;
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  int opt;
  while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'b': b.batch = atoi(optarg); break;
    case 's': b.seconds = atof(optarg); break;
    case 'r': rounds = atoi(optarg); break;
    case 'w': ro.ncpus = atoi(optarg); break;
    case 'S': ro.sched = optarg; break;
    case 't': b.tile_rows = atoi(optarg); break;
    case 'p': b.padding = atoi(optarg); break;
    case 'n': torch = false; break;
    case 'k':
      if (bench_parse_kernels("bench_cnn", optarg, &ro.kernels)) return 2;
      break;
    default:
      fprintf(stderr, "usage: bench_cnn [--batch N] [--seconds S] [--rounds N] [--workers N]\n"
                      "                 [--sched NAME] [--tile R] [--padding 0|1]\n"
                      "                 [--kernels auto|onednn|blis|tuned] [--no-torch]\n");
      return opt == 'h' ? 0 : 2;
    }
  }
  if (b.batch <= 0 || b.seconds <= 0 || rounds < 1 || rounds > 32 || b.tile_rows < 0 ||
      (b.padding != 0 && b.padding != 1)) {
    fprintf(stderr, "bench_cnn: --batch, --seconds and --rounds (1-32) must be positive, "
                    "--padding 0 or 1\n");
    return 2;
  }
  tsr_dataset_t ds = synthetic_fashion(true);
  char dir[4096];
  b.ds = &ds, b.peer_dir = peer_dir(dir, sizeof dir, argv[0], "torch_cnn.py");
  bench_print_machine(stdout);
  static bench_result_t res;
  if (bench_rounds("bench_cnn", &ro, rounds, our_side, torch ? their_side : NULL, &b, &res))
    return 1;
  printf("\nmachine: tessera on %d StarPU CPU workers (%s, kernels %s), batch %d, tiles of %d "
         "rows, model cnn with padding %d (%lld parameters); %d rounds of %g s\n",
         res.workers, res.sched, tsr_runtime_kernels_name(ro.kernels), b.batch, b.tile_used,
         b.padding, (long long)b.params, rounds, b.seconds);
  bench_report(&res, "samples/s", 1.0);
  free(ds.x), free(ds.y);
  return 0;
}
