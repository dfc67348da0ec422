/* tessera train --help: its options by topic (train_parse.c's table holds them, in the order the
 * log's config lists them), then the exit statuses. cli_docs.py makes the man page and the bash
 * completion from this text. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/train_config.h"

/* One row: its name and argument in a column of 18, the help beside them and under it. */
static void usage_row(FILE *out, int i) {
  const char *name, *arg, *help;
  char made[512];
  tsr__cli_train_option(i, &name, &arg, &help, made, sizeof made);
  char left[64];
  snprintf(left, sizeof left, "%s--%s%s%s", strcmp(name, "help") ? "" : "-h, ", name,
           arg ? " " : "", arg ? arg : "");
  fprintf(out, "  %-18s  ", left);
  for (const char *h = help; *h;) {
    const char *nl = strchr(h, '\n');
    int n = nl ? (int)(nl - h) : (int)strlen(h);
    fprintf(out, "%.*s\n", n, h);
    h += n;
    if (*h == '\n' && *++h) fprintf(out, "%22s", "");
  }
}

/* The help's topics, each with its options in the order shown; an option no topic names is
 * shown under the last, so none can be left out of the help. */
static const struct {
  const char *title;
  const char *names[20];
} topics[] = {
    {"Data",
     {"data", "text", "train-limit", "test-limit", "val-split", "standardize", "crop", "flip",
      "classes"}},
    {"Model", {"model", "init"}},
    {"Optimization",
     {"epochs", "batch", "optimizer", "nesterov", "lr", "lr-schedule", "schedule-epochs", "warmup",
      "early-stop", "momentum", "weight-decay", "seed", "clip-grad", "label-smoothing"}},
    {"Runtime (one process)",
     {"workers", "devices", "sched", "kernels", "tile", "window", "no-priorities",
      "deterministic"}},
    {"Distribution (under mpirun)",
     {"sync", "outer", "outer-lr", "outer-momentum", "lr-scaling", "sync-state", "weighting",
      "shares", "allreduce", "node-size", "bucket-mb", "sync-bn", "grid", "domain",
      "mpi-progress"}},
    {"Checkpoints", {"checkpoint", "checkpoint-every", "resume"}},
    {"Output",
     {"log", "log-every", "eval-every", "bn-recompute", "stats", "trace", "trace-steps", "verbose",
      "quiet", "help"}},
};

static bool in_a_topic(const char *name) {
  for (size_t t = 0; t < sizeof topics / sizeof *topics; t++)
    for (int k = 0; k < 20 && topics[t].names[k]; k++)
      if (strcmp(topics[t].names[k], name) == 0) return true;
  return false;
}

/* The name of option i, or NULL past the last. */
static const char *option_name(int i) {
  const char *name, *arg, *help;
  char made[512];
  return tsr__cli_train_option(i, &name, &arg, &help, made, sizeof made) ? name : NULL;
}

/* The options by topic, then the exit statuses. */
void tsr__cli_train_usage(FILE *out) {
  fprintf(out, "usage: tessera train [options]\n");
  size_t last = sizeof topics / sizeof *topics - 1;
  for (size_t t = 0; t <= last; t++) {
    fprintf(out, "\n%s:\n", topics[t].title);
    for (int k = 0; k < 20 && topics[t].names[k]; k++)
      for (int i = 0; option_name(i); i++)
        if (strcmp(option_name(i), topics[t].names[k]) == 0) usage_row(out, i);
    for (int i = 0; t == last && option_name(i); i++)
      if (!in_a_topic(option_name(i))) usage_row(out, i);
  }
  fprintf(out, "\nExit status: 0 trained; 1 a run that failed (a file, the data, memory, the "
               "runtime);\n2 a bad option or combination of options, before anything loads; 3 "
               "training diverged\n(a loss not finite); 128 + the signal (130 SIGINT, 143 "
               "SIGTERM) when stopped by one\nafter the step in flight (every rank a step or "
               "two later), after writing the\ncheckpoint of that step.\n");
}
