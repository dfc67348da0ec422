/* libFuzzer harness for cluster files (tsr_machine_load_ini, src/plan/machine.c): the input is
 * the text of an INI cluster file. A refused file gets a message that names it; an accepted
 * one describes a machine the planner can cost without overflow: every count and rate inside
 * the range machine.c documents (finite, positive where the planner divides by it), and the
 * counts small enough that the planner's product of ranks per node and workers fits an int
 * (tessera plan multiplies nodes and ranks per node in 64 bits). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "plan/plan_impl.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  return 0;
}

static bool within(double v, double lo, double hi) {
  return isfinite(v) && v >= lo && v <= hi;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tsr_machine_t m;
  tsr_errbuf_t err = {{0}};
  int rc = tsr__machine_parse_ini_mem(&m, data, size, "fuzz.ini", &err);
  if (rc) {
    FUZZ_CHECK(rc < 0 && strncmp(err.msg, "fuzz.ini", 8) == 0);
    return 0;
  }
  FUZZ_CHECK(m.nodes >= 0 && m.nodes <= 1000000);
  FUZZ_CHECK(m.cores_per_node >= 1 && m.cores_per_node <= 65536);
  FUZZ_CHECK(m.ranks_per_node >= 1 && m.ranks_per_node <= 65536);
  FUZZ_CHECK(m.workers >= 0 && m.workers <= 4096);
  FUZZ_CHECK((int64_t)m.ranks_per_node * (m.workers > 0 ? m.workers : 4) < INT32_MAX);
  FUZZ_CHECK(within(m.gemm_gflops, 1e-300, 1e6) && within(m.conv_gflops, 0, 1e6));
  FUZZ_CHECK(within(m.mem_gbs, 1e-300, 1e5));
  FUZZ_CHECK(within(m.alpha, 0, 10) && within(m.beta, 0, 1e300) && m.beta > 0);
  FUZZ_CHECK(within(m.gamma, 0, 1e300) && m.gamma > 0);
  FUZZ_CHECK(within(m.task_overhead, 0, 1));
  return 0;
}
