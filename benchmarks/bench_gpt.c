/* Training throughput of the language model (`--model gpt:L,D,H,T`) in tokens/s on random
 * tokens, against PyTorch training the same model (benchmarks/torch_gpt.py: tessera.gpt.GPT,
 * nanoGPT's modules) at the same batch, at its best thread count (1 and 2), measured in the
 * same run. Rounds alternate tessera and PyTorch (bench_rounds) so that load from other
 * processes hits both alike; the ratio of the medians is the result. Both train with AdamW
 * (lr 1e-3, weight decay 0.1 on the embedding tables and projection weights), GPT-2's
 * initialization, the cross-entropy at every position.
 *
 * usage: bench_gpt [--model gpt:L,D,H,T] [--batch N] [--seconds S] [--rounds N] [--workers N]
 *                  [--sched NAME] [--tile R] [--kernels auto|onednn|blis|tuned] [--no-torch]
 * (the projections are 1x1 convolutions over the positions: --kernels picks their kernels) */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <blis.h>

#include "bench_common.h"

typedef struct {
  const char *model;
  int batch, tile_rows, t;
  double seconds;
  int tile_used;  /* out */
  int64_t params; /* out */
  const tsr_dataset_t *ds;
  const char *peer_dir; /* where torch_gpt.py is */
} bench_t;

/* Trains for about `seconds` after a warm-up; returns samples/s (0 on error). */
static double run_tessera(bench_t *b) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = b->batch, o.tile_rows = b->tile_rows, o.init = TSR_INIT_GPT2;
  o.in_channels = 1, o.in_height = b->t, o.in_width = 1;
  tsr_net_t *net = NULL;
  int rc = tsr_optimizer_init(&o.opt, "adamw", &err);
  o.opt.lr = 1e-3f, o.opt.weight_decay = 0.1f;
  if (rc == 0) rc = tsr_model_parse(&spec, b->model, b->ds->classes, &err);
  if (rc == 0) rc = bench_build(&net, &spec, b->ds, &o, &err);
  tsr_model_spec_fini(&spec); /* the net has its own copy */
  if (rc) {
    fprintf(stderr, "bench_gpt: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    return 0;
  }
  int cols;
  tsr_net_tiles(net, &b->tile_used, &cols);
  b->params = tsr_net_param_count(net);
  double rate = bench_time_steps(net, b->ds, b->batch, 3, b->seconds, 4, &rc);
  if (rc) fprintf(stderr, "bench_gpt: training failed: %s\n", tsr_strerror(rc));
  tsr_net_destroy(&net);
  return rate;
}

static double our_side(void *ctx, int r) {
  (void)r;
  return run_tessera(ctx);
}

/* PyTorch's best samples/s over 1 and 2 threads; 0 when it cannot run. */
static double their_side(void *ctx, int r, const char *python, int *threads) {
  (void)r;
  const bench_t *b = ctx;
  char cmd[4800];
  snprintf(cmd, sizeof cmd,
           "%.200s %.4000s/torch_gpt.py --model %.200s --batch %d --best-threads 1,2 "
           "--seconds %g 2>/dev/null",
           python, b->peer_dir, b->model, b->batch, b->seconds);
  double best = 0;
  run_peer(cmd, &best, threads);
  return best;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"model", required_argument, 0, 'm'},
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
  const char *use = "usage: bench_gpt [--model gpt:L,D,H,T] [--batch N] [--seconds S] "
                    "[--rounds N] [--workers N]\n                 [--sched NAME] [--tile R] "
                    "[--kernels auto|onednn|blis|tuned] [--no-torch]\n";
  static bench_t b = {.model = "gpt:4,256,4,128", .batch = 16, .seconds = 10};
  int rounds = 3;
  bool torch = true;
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  int opt;
  while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'm': b.model = optarg; break;
    case 'b': b.batch = atoi(optarg); break;
    case 's': b.seconds = atof(optarg); break;
    case 'r': rounds = atoi(optarg); break;
    case 'w': ro.ncpus = atoi(optarg); break;
    case 'S': ro.sched = optarg; break;
    case 't': b.tile_rows = atoi(optarg); break;
    case 'n': torch = false; break;
    case 'k':
      if (bench_parse_kernels("bench_gpt", optarg, &ro.kernels)) return 2;
      break;
    default: fputs(use, opt == 'h' ? stdout : stderr); return opt == 'h' ? 0 : 2;
    }
  }
  /* The context T from the shorthand (its embedding's), the sequences' length. */
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  if (strncmp(b.model, "gpt", 3) || tsr_model_parse(&spec, b.model, 256, &err)) {
    fprintf(stderr, "bench_gpt: --model %s: %s\n", b.model,
            err.msg[0] ? err.msg : "use gpt:L,D,H,T");
    return 2;
  }
  b.t = spec.layers[0].context;
  tsr_model_spec_fini(&spec);
  if (b.batch <= 0 || b.seconds <= 0 || rounds < 1 || rounds > 32 || b.tile_rows < 0) {
    fprintf(stderr, "bench_gpt: --batch, --seconds and --rounds (1-32) must be positive\n%s", use);
    return 2;
  }
  /* Four distinct batches of random byte tokens; the content does not change the work. */
  tsr_dataset_t ds = {.n = b.batch * 4,
                      .features = b.t,
                      .classes = 256,
                      .channels = 1,
                      .height = b.t,
                      .width = 1,
                      .targets = b.t};
  ds.x = malloc(sizeof(float) * (size_t)(ds.n * b.t));
  ds.y = malloc(sizeof(float) * (size_t)(ds.n * b.t));
  if (!ds.x || !ds.y) return fprintf(stderr, "bench_gpt: out of memory\n"), 1;
  tsr_rng_t rng = {9};
  for (int64_t i = 0; i < ds.n * b.t; i++)
    ds.x[i] = (float)(int)(256 * tsr__rng_uniform(&rng)),
    ds.y[i] = (float)(int)(256 * tsr__rng_uniform(&rng));

  char dir[4096];
  b.ds = &ds, b.peer_dir = peer_dir(dir, sizeof dir, argv[0], "torch_gpt.py");
  bench_print_machine(stdout);
  static bench_result_t res;
  int rc = bench_rounds("bench_gpt", &ro, rounds, our_side, torch ? their_side : NULL, &b, &res);
  free(ds.x), free(ds.y);
  if (rc) return 1;
  printf("\nmachine: BLIS %s kernels; tessera on %d StarPU CPU workers (%s, kernels %s), model %s "
         "(%lld parameters), batch %d (%d tokens a step), tiles of %d rows; %d rounds of %g s\n",
         bli_arch_string(bli_arch_query_id()), res.workers, res.sched,
         tsr_runtime_kernels_name(ro.kernels), b.model, (long long)b.params, b.batch, b.batch * b.t,
         b.tile_used, rounds, b.seconds);
  bench_report(&res, "tokens/s", b.t);
  return 0;
}
