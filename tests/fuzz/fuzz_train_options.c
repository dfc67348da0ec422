/* libFuzzer harness for tessera train's options (tsr__cli_train_parse,
 * src/cli/train_parse.c): the input is the argument list after `tessera
 * train`, one argument a line (a last newline ends the last argument). Parsing either fails with
 * status 2 (after a message) or gives a configuration whose every value is in the range its option
 * documents, and --tile gives back its argument as it found it. */
#include <getopt.h>
#include <math.h>
#include <string.h>

#include "cli/train_config.h"
#include "fuzz.h"

#define MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

static void check_config(const tsr_cli_train_config_t *c) {
  FUZZ_CHECK(c->data_dir && c->model);
  FUZZ_CHECK(c->train.epochs >= 0 && c->train.epochs <= 100000);
  FUZZ_CHECK(c->run.net.batch >= 1 && c->run.net.batch <= 1 << 20);
  FUZZ_CHECK(isfinite(c->run.net.opt.lr) && c->run.net.opt.lr > 0.0f);
  FUZZ_CHECK(c->run.net.opt.momentum >= 0.0f && c->run.net.opt.momentum < 1.0f);
  FUZZ_CHECK(isfinite(c->run.net.opt.weight_decay) && c->run.net.opt.weight_decay >= 0.0f);
  FUZZ_CHECK(c->run.net.tile_rows >= 0 && c->run.net.tile_rows <= 1 << 20);
  FUZZ_CHECK(c->run.net.tile_cols >= 0 && c->run.net.tile_cols <= 1 << 20);
  FUZZ_CHECK((c->run.net.tile_rows == 0) == (c->run.net.tile_cols == 0));
  FUZZ_CHECK(c->runtime.ncpus == -1 || (c->runtime.ncpus >= 1 && c->runtime.ncpus <= 4096));
  FUZZ_CHECK(c->train.window >= 1 && c->train.window <= 1 << 16);
  FUZZ_CHECK(c->train_limit == -1 || c->train_limit >= 1);
  FUZZ_CHECK(c->test_limit >= -1);
  FUZZ_CHECK(c->sync.schedule.every >= 1);
  /* --shares: a list is 1 to TSR_MAX_RANKS finite values >= 0 with a positive sum. */
  FUZZ_CHECK(c->shares.kind == TSR_SHARES_UNIFORM || c->shares.kind == TSR_SHARES_AUTO ||
             c->shares.kind == TSR_SHARES_FIXED);
  if (c->shares.kind == TSR_SHARES_FIXED) {
    double sum = 0;
    FUZZ_CHECK(c->shares.n >= 1 && c->shares.n <= TSR_MAX_RANKS && c->shares.w);
    for (int q = 0; q < c->shares.n; q++) {
      FUZZ_CHECK(isfinite(c->shares.w[q]) && c->shares.w[q] >= 0);
      sum += c->shares.w[q];
    }
    FUZZ_CHECK(sum > 0);
  }
  /* --weighting steps counts samples too, and only where weights are averaged. */
  FUZZ_CHECK(!c->sync.by_steps || (c->sync.by_samples && c->sync.schedule.kind != TSR_SYNC_BATCH &&
                                   c->sync.schedule.kind != TSR_SYNC_ASYNC_EPOCH));
  FUZZ_CHECK(!c->runtime.trace ||
             (c->trace_path && strlen(c->trace_path) >= 5 &&
              strcmp(c->trace_path + strlen(c->trace_path) - 5, ".json") == 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The arguments, NUL-terminated in a writable copy, as a shell would pass them. */
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  char *argv[MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = "train";
  for (char *p = text; argc <= MAX_ARGS && p < text + size;) {
    char *nl = memchr(p, '\n', (size_t)(text + size - p));
    if (nl) *nl = '\0';
    argv[argc++] = p;
    if (!nl) break;
    p = nl + 1;
  }
  argv[argc] = NULL;

  /* The option strings' bytes before, to see that the parser gives back what it borrowed. */
  char *before = malloc(size + 1);
  if (!before) {
    free(text);
    return 0;
  }
  memcpy(before, text, size + 1);

  optind = 0; /* glibc: start getopt_long afresh for this argument list */
  tsr_cli_train_config_t cfg;
  int rc = tsr__cli_train_parse(&cfg, argc, argv);
  FUZZ_CHECK(rc == 0 || rc == 2);
  if (rc == 0 && !cfg.help) check_config(&cfg);
  tsr_shares_fini(&cfg.shares); /* the configuration owns its shares' weights */
  FUZZ_CHECK(memcmp(before, text, size + 1) == 0);
  free(before);
  free(text);
  return 0;
}
