/* tessera: the command-line entry point, dispatching to subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "tessera/runtime.h"

static void usage(FILE *out) {
  fprintf(out, "usage: tessera <command> [options]\n\n"
               "commands:\n"
               "  train   train a network (default: MLP 784-512-512-10 on Fashion-MNIST)\n"
               "  eval    evaluate a checkpoint on a test set (accuracy, confusion matrix)\n"
               "  inspect list a checkpoint's tensors and metadata\n"
               "  info    show the hardware, StarPU workers, BLIS and MPI this engine runs on\n"
               "  plan    predict step and epoch times, bytes and memory per rank for P ranks\n"
               "  trace-summary  where a traced run's time went (tessera train --trace)\n\n"
               "`tessera <command> --help` describes a command's options; `tessera --version`\n"
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
  if (strcmp(argv[1], "train") == 0) return tsr_cli_train(argc - 1, argv + 1);
  if (strcmp(argv[1], "info") == 0) return tsr_cli_info(argc - 1, argv + 1);
  if (strcmp(argv[1], "eval") == 0) return tsr_cli_eval(argc - 1, argv + 1);
  if (strcmp(argv[1], "inspect") == 0) return tsr_cli_inspect(argc - 1, argv + 1);
  if (strcmp(argv[1], "plan") == 0) return tsr_cli_plan(argc - 1, argv + 1);
  if (strcmp(argv[1], "trace-summary") == 0) return tsr_cli_trace_summary(argc - 1, argv + 1);
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
