/* libFuzzer harness for `tessera trace-summary`'s reader (tsr_trace_summary,
 * src/io/trace_summary.c): the input is
 *
 *   byte 0      the options: bit 0 --json, bits 1-2 --step (0: the middle one, else 1 to 3),
 *               bits 3-4 --top (0 to 3)
 *   the rest    the trace file's text
 *
 * written to an in-memory file (memfd) and read through its path, as the command reads a file.
 * A refusal must come with a negative code and a message; an accepted trace is summarized into
 * /dev/null (tables or JSON), every event, flow and dependency followed. */
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "tessera/runtime.h"

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_quiet_stderr();
  devnull = fopen("/dev/null", "w");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || !devnull) return 0;
  int fd = memfd_create("trace", MFD_CLOEXEC);
  if (fd < 0) return 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if (write(fd, data + 1, size - 1) == (ssize_t)(size - 1)) {
    tsr_trace_summary_opts_t o;
    tsr_trace_summary_opts_init(&o);
    o.json = data[0] & 1;
    o.step = (data[0] >> 1) & 3;
    o.top = (data[0] >> 3) & 3;
    tsr_errbuf_t err = {{0}};
    int rc = tsr_trace_summary(devnull, path, &o, &err);
    FUZZ_CHECK(rc == 0 || (rc < 0 && err.msg[0] != '\0'));
  }
  close(fd);
  return 0;
}
