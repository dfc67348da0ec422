/* tessera trace-summary FILE: where the time of a traced run went (tsr_trace_summary reads the
 * file and writes the report); this file only reads the options. */
#include <getopt.h>
#include <stdio.h>

#include "cli/cli.h"
#include "tessera/tessera.h"

static void trace_usage(FILE *out) {
  fputs("usage: tessera trace-summary [options] FILE.json\n\n"
        "Reads a trace written by `tessera train --trace FILE.json` and prints the busy time\n"
        "per codelet and worker kind, each worker's busy and idle time, the main thread's\n"
        "longest waits and the critical path of one training step.\n\n"
        "  --json              one JSON object instead of tables\n"
        "  --step N            the step whose critical path is shown [the middle one]\n"
        "  --top N             the longest waits listed [10]\n"
        "  -h, --help          this text\n",
        out);
}

int tsr_cli_trace_summary(int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, 0, 'j'},
                                           {"step", required_argument, 0, 's'},
                                           {"top", required_argument, 0, 't'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  tsr_trace_summary_opts_t o;
  tsr_trace_summary_opts_init(&o);
  long v;
  int c;
  while ((c = tsr__cli_getopt("trace-summary", argc, argv, longopts)) != -1) {
    switch (c) {
    case 'j': o.json = true; break;
    case 's':
      if (tsr__cli_to_long(optarg, 1, 1L << 40, &v)) {
        fprintf(stderr, "tessera trace-summary: --step %s: expected a step, 1 or more\n", optarg);
        return 2;
      }
      o.step = v;
      break;
    case 't':
      if (tsr__cli_to_long(optarg, 0, 1 << 20, &v)) {
        fprintf(stderr, "tessera trace-summary: --top %s: expected an integer from 0 to 1048576\n",
                optarg);
        return 2;
      }
      o.top = (int)v;
      break;
    case 'h': trace_usage(stdout); return 0;
    default: return 2;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "tessera trace-summary: expected one trace file (see tessera trace-summary "
                    "--help)\n");
    return 2;
  }
  tsr_errbuf_t err = {""};
  int rc = tsr_trace_summary(stdout, argv[optind], &o, &err);
  if (rc) {
    fprintf(stderr, "tessera trace-summary: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    return rc == TSR_EINVAL ? 2 : 1;
  }
  return 0;
}
