/* tessera info: what the engine will run on. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tessera/tessera.h"

int tsr_cli_info(int argc, char **argv) {
  static const struct option longopts[] = {
      {"sched", required_argument, 0, 's'},   {"workers", required_argument, 0, 'w'},
      {"devices", required_argument, 0, 'd'}, {"sched-list", no_argument, 0, 'l'},
      {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 's': ro.sched = optarg; break;
    case 'w': ro.ncpus = atoi(optarg); break;
    case 'd':
      if (tsr__cli_devices("info", optarg, &ro.opencl)) return 2;
      break;
    case 'l': tsr_sched_list(stdout); return 0;
    case 'h':
      printf("usage: tessera info [--sched NAME] [--workers N] [--devices D] [--sched-list]\n"
             "Prints the hwloc topology, the StarPU workers and memory nodes, the OpenCL\n"
             "devices with a measured GEMM rate each, the BLIS configuration and the\n"
             "StarPU and MPI versions. --devices as for tessera train. --sched-list lists\n"
             "the scheduling policies this StarPU offers. Under mpirun or srun each rank\n"
             "prints its own report, with its rank and node-local rank.\n");
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
