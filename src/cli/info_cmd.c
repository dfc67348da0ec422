/* tessera info: what the engine will run on. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tessera/tessera.h"

int tsr_cli_info(int argc, char **argv) {
  static const struct option longopts[] = {{"sched", required_argument, 0, 's'},
                                           {"workers", required_argument, 0, 'w'},
                                           {"devices", required_argument, 0, 'd'},
                                           {"sched-list", no_argument, 0, 'l'},
                                           {"verbose", no_argument, 0, 'v'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  int c;
  while ((c = tsr__cli_getopt("info", argc, argv, longopts)) != -1) {
    switch (c) {
    case 's': ro.sched = optarg; break;
    case 'w': {
      long n;
      if (tsr__cli_to_long(optarg, 1, 4096, &n)) {
        fprintf(stderr, "tessera info: --workers %s: expected an integer from 1 to 4096\n", optarg);
        return 2;
      }
      ro.ncpus = (int)n;
      break;
    }
    case 'v': ro.verbose = true; break;
    case 'd':
      if (tsr__cli_devices("info", optarg, &ro.opencl)) return 2;
      break;
    case 'l': tsr_sched_list(stdout); return 0;
    case 'h':
      printf("usage: tessera info [options]\n\n"
             "Prints the hwloc topology, the StarPU workers and memory nodes, the OpenCL\n"
             "devices with a measured GEMM rate each, the BLIS configuration and the\n"
             "StarPU and MPI versions. Under mpirun or srun each rank prints its own report,\n"
             "with its rank and node-local rank.\n\n"
             "  --sched NAME        StarPU scheduling policy [" TSR_DEFAULT_SCHED "]\n"
             "  --workers N         CPU workers [all cores StarPU may use]\n"
             "  --devices D         OpenCL devices: opencl, opencl:N or none, as for\n"
             "                      tessera train [what StarPU finds]\n"
             "  --sched-list        list the scheduling policies this StarPU offers\n"
             "  --verbose           StarPU's own messages on stderr [off]\n"
             "  -h, --help          this text\n");
      return 0;
    default: return 2;
    }
  }
  /* Under a launcher (mpirun, srun --mpi=pmix) each rank reports its rank, its node-local rank
   * and the cores its workers get from it; a no-op otherwise. */
  if (tsr_dist_start(&argc, &argv, false)) {
    fprintf(stderr, "tessera info: cannot start MPI\n");
    return 1;
  }
  tsr_errbuf_t err = {""};
  int rc = tsr_info_print(stdout, &ro, &err);
  tsr_dist_stop();
  if (rc) {
    fprintf(stderr, "tessera info: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    return 1;
  }
  return 0;
}
