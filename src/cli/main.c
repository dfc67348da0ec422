/* tessera: the command-line entry point, dispatching to subcommands from a table, from which
 * the usage comes too (and through it the man page and the bash completion, cli_docs.py). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "tessera/runtime.h"

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} commands[] = {
    {"train", tsr_cli_train, "train a network (default: MLP 784-512-512-10 on Fashion-MNIST)"},
    {"eval", tsr_cli_eval, "evaluate a checkpoint on a test set (accuracy, confusion matrix)"},
    {"inspect", tsr_cli_inspect, "list a checkpoint's tensors and metadata"},
    {"generate", tsr_cli_generate, "continue a prompt with a language model's checkpoint"},
    {"info", tsr_cli_info, "show the hardware, StarPU workers, BLIS and MPI this engine runs on"},
    {"plan", tsr_cli_plan, "predict step and epoch times, bytes and memory per rank for P ranks"},
    {"summary", tsr_cli_summary, "a model's layers: output shapes, parameters, FLOPs per sample"},
    {"trace-summary", tsr_cli_trace_summary, "where a traced run's time went (train --trace)"},
};
#define NCOMMANDS (sizeof commands / sizeof *commands)

static void usage(FILE *out) {
  fprintf(out, "usage: tessera <command> [options]\n\ncommands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(out, "  %-13s  %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\n`tessera <command> --help` describes a command's options; `tessera --version`\n"
               "says which tessera and libraries this is.\n");
}

int main(int argc, char **argv) {
  /* Line by line even into a file or a pipe: the banner and each epoch's line show as soon as they
   * are printed, not when a buffer fills or the run ends. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0 ||
      strcmp(argv[1], "version") == 0) {
    char libs[512];
    tsr_versions(libs, sizeof libs);
    printf("tessera %s (git %s)\n%s\n", tsr_version(), tsr_version_git(), libs);
    return 0;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "tessera: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
