/* tessera generate: a language model's checkpoint continues a prompt, so that a person sees what
 * it learned. The net is built for one sample; each new token is one forward pass over the last
 * T tokens (left-aligned, the positions after them 0: the attention is causal, so the logits at
 * the last real position see only the real ones) and a draw from the softmax of that position's
 * logits over the temperature (0: the most likely token). Tokens are bytes (tessera train --text
 * is byte-level), written to stdout as they are, the prompt first. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "rng.h"
#include "tessera/tessera.h"
#include "try.h"

static void generate_usage(FILE *out) {
  fprintf(out,
          "usage: tessera generate --checkpoint FILE --prompt TEXT [options]\n\n"
          "Continues TEXT with a language model trained by tessera train --text (or\n"
          "--model gpt:L,D,H,T on the default text) and prints the prompt and the\n"
          "continuation, byte for byte.\n\n"
          "  --checkpoint FILE   a checkpoint of a language model (tessera train --checkpoint)\n"
          "  --prompt TEXT       the text to continue, any bytes, at least one\n"
          "  --tokens N          tokens (bytes) to generate, 0 to 1000000 [200]\n"
          "  --temperature X     the logits divided by X before the softmax, 0 to 100;\n"
          "                      0: the most likely token each time [0.8]\n"
          "  --seed N            the draws' seed, 0 to 2147483647 [1]\n"
          "  --workers N         CPU workers [all cores StarPU may use]\n"
          "  --verbose           StarPU's own messages on stderr [off]\n"
          "  -h, --help          this text\n");
}

typedef struct {
  const char *checkpoint, *prompt;
  long tokens, seed, workers;
  double temperature;
  bool verbose;
} options_t;

/* The options into o: 0, 1 after --help, or 2 after a message. */
static int parse(options_t *o, int argc, char **argv) {
  static const struct option longopts[] = {{"checkpoint", required_argument, 0, 'c'},
                                           {"prompt", required_argument, 0, 'p'},
                                           {"tokens", required_argument, 0, 'n'},
                                           {"temperature", required_argument, 0, 't'},
                                           {"seed", required_argument, 0, 's'},
                                           {"workers", required_argument, 0, 'w'},
                                           {"verbose", no_argument, 0, 'v'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  *o = (options_t){.tokens = 200, .seed = 1, .workers = -1, .temperature = 0.8};
  int c;
  while ((c = tsr__cli_getopt("generate", argc, argv, longopts)) != -1) {
    const char *opt = NULL, *want = NULL;
    char *end;
    switch (c) {
    case 'c': o->checkpoint = optarg; break;
    case 'p': o->prompt = optarg; break;
    case 'n':
      if (tsr__cli_to_long(optarg, 0, 1000000, &o->tokens))
        opt = "--tokens", want = "an integer from 0 to 1000000";
      break;
    case 't':
      o->temperature = strtod(optarg, &end);
      if (end == optarg || *end || !(o->temperature >= 0 && o->temperature <= 100))
        opt = "--temperature", want = "a number from 0 to 100 (0: the most likely token)";
      break;
    case 's':
      if (tsr__cli_to_long(optarg, 0, 0x7fffffffL, &o->seed))
        opt = "--seed", want = "an integer from 0 to 2147483647";
      break;
    case 'w':
      if (tsr__cli_to_long(optarg, 1, 4096, &o->workers))
        opt = "--workers", want = "an integer from 1 to 4096";
      break;
    case 'v': o->verbose = true; break;
    case 'h': generate_usage(stdout); return 1;
    default: return 2;
    }
    if (opt) {
      fprintf(stderr, "tessera generate: %s %s: expected %s (see tessera generate --help)\n", opt,
              optarg, want);
      return 2;
    }
  }
  const char *missing = !o->checkpoint ? "--checkpoint FILE is required"
                        : !o->prompt   ? "--prompt TEXT is required"
                        : !o->prompt[0]
                            ? "--prompt is empty: a continuation needs at least one byte to "
                              "start from"
                        : optind < argc ? "unexpected argument"
                                        : NULL;
  if (missing) {
    fprintf(stderr, "tessera generate: %s (see tessera generate --help)\n", missing);
    return 2;
  }
  return 0;
}

/* The next token from a position's logits z (vocab): the largest at temperature 0, else a draw
 * from softmax(z / temperature), in double. */
static int sample(const float *z, int vocab, double temperature, tsr_rng_t *rng) {
  int best = 0;
  for (int v = 1; v < vocab; v++)
    if (z[v] > z[best]) best = v;
  if (temperature == 0) return best;
  double sum = 0;
  for (int v = 0; v < vocab; v++)
    sum += exp(((double)z[v] - z[best]) / temperature);
  double u = tsr__rng_uniform(rng) * sum, acc = 0;
  for (int v = 0; v < vocab; v++)
    if ((acc += exp(((double)z[v] - z[best]) / temperature)) > u) return v;
  return best; /* u within rounding of sum */
}

/* What generates: the checkpoint's net for one window of T tokens, and that window as a
 * dataset of one sample. */
typedef struct {
  tsr_net_t *net;
  tsr_dataset_t window; /* (1, T): x the tokens, left-aligned; y zeros (the loss is not read) */
  float *logits;        /* (T, vocab) */
  int context, vocab;
} model_t;

/* The checkpoint into m: a language model (a layer with a context, one token a position) of a
 * vocabulary that holds the prompt's bytes. */
static int build(model_t *m, const options_t *o, tsr_errbuf_t *err) {
  tsr_model_spec_t spec = {0};
  tsr_net_opts_t no;
  int inputs, classes;
  TSR_TRY(tsr_checkpoint_read(o->checkpoint, NULL, &spec, &no, &inputs, &classes, err));
  m->context = tsr__cli_model_context(&spec), m->vocab = classes;
  int rc = 0;
  if (m->context == 0 || inputs != m->context)
    rc = tsr_error_set(err, TSR_EINVAL,
                       "%s: not a language model (no layer of its model has a context, the "
                       "window of T tokens it reads): generate needs a checkpoint of tessera "
                       "train --text or --model gpt:L,D,H,T",
                       o->checkpoint);
  for (const char *p = o->prompt; rc == 0 && *p; p++)
    if ((unsigned char)*p >= (unsigned)classes)
      rc = tsr_error_set(err, TSR_EINVAL,
                         "--prompt: byte %d at position %d is outside %s's vocabulary of %d "
                         "tokens",
                         (unsigned char)*p, (int)(p - o->prompt) + 1, o->checkpoint, classes);
  size_t t = (size_t)m->context;
  m->window = (tsr_dataset_t){.n = 1,
                              .features = m->context,
                              .classes = classes,
                              .channels = 1,
                              .height = m->context,
                              .width = 1,
                              .targets = m->context,
                              .x = calloc(t, sizeof(float)),
                              .y = calloc(t, sizeof(float))};
  m->logits = malloc(sizeof(float) * t * (size_t)classes);
  if (rc == 0 && (!m->window.x || !m->window.y || !m->logits))
    rc = tsr_error_set(err, TSR_ENOMEM, "out of memory for the logits of %zu positions", t);
  no.batch = 1, no.tile_rows = 0, no.grid_rows = 0;
  if (rc == 0) rc = tsr_net_create(&m->net, &spec, inputs, classes, &no, err);
  if (rc == 0) rc = tsr_checkpoint_load(m->net, o->checkpoint, NULL, NULL, err);
  tsr_model_spec_fini(&spec);
  return rc;
}

/* The prompt, then o->tokens more, each written as soon as it is drawn. */
static int generate(model_t *m, const options_t *o, tsr_errbuf_t *err) {
  size_t len = strlen(o->prompt), total = len + (size_t)o->tokens;
  unsigned char *text = malloc(total);
  if (!text) return tsr_error_set(err, TSR_ENOMEM, "out of memory for %zu tokens", total);
  memcpy(text, o->prompt, len);
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  tsr_rng_t rng = {(uint64_t)o->seed};
  int32_t row = 0;
  int rc = 0;
  for (; rc == 0 && len < total; len++) {
    size_t w = len < (size_t)m->context ? len : (size_t)m->context;
    for (size_t p = 0; p < (size_t)m->context; p++)
      m->window.x[p] = p < w ? (float)text[len - w + p] : 0.0f;
    rc = tsr_net_eval_step(m->net, &m->window, &row, 1);
    if (rc == 0) rc = tsr_net_logits_get(m->net, m->logits);
    if (rc) break;
    text[len] = (unsigned char)sample(m->logits + (w - 1) * (size_t)m->vocab, m->vocab,
                                      o->temperature, &rng);
    fputc(text[len], stdout);
    fflush(stdout);
  }
  double loss, correct;
  if (rc == 0) rc = tsr_net_take_stats(m->net, true, &loss, &correct);
  if (rc) tsr_error_set(err, rc, "a forward pass failed: %s", tsr_strerror(rc));
  if (isatty(STDOUT_FILENO)) fputc('\n', stdout);
  free(text);
  return rc;
}

int tsr_cli_generate(int argc, char **argv) {
  options_t o;
  int rc = parse(&o, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  tsr_errbuf_t err = {""};
  /* The checkpoint is read before the runtime starts: a wrong path fails at once. */
  rc = tsr_checkpoint_read(o.checkpoint, NULL, NULL, NULL, NULL, NULL, &err);
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  ro.ncpus = (int)o.workers, ro.verbose = o.verbose, ro.opencl = 0;
  bool started = false;
  if (rc == 0) started = (rc = tsr_runtime_init(&ro, &err)) == 0;
  model_t m = {0};
  if (rc == 0) rc = build(&m, &o, &err);
  if (rc == 0) rc = generate(&m, &o, &err);
  if (rc) fprintf(stderr, "tessera generate: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
  tsr_net_destroy(&m.net);
  if (started) tsr_runtime_fini();
  tsr_dataset_fini(&m.window);
  free(m.logits);
  return rc ? 1 : 0;
}
