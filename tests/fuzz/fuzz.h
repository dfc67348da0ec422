/* Shared by the libFuzzer harnesses of tests/fuzz/: each defines
 * LLVMFuzzerTestOneInput and checks, besides "no crash, no leak, no undefined
 * behaviour" (ASan, UBSan, LeakSanitizer), what the parser promises about what
 * it accepts. A broken promise aborts, which libFuzzer reports as a crash. */
#ifndef TSR_FUZZ_H
#define TSR_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A promise that does not hold: say which and abort. */
#define FUZZ_CHECK(cond)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(fuzz_real_stderr(), "%s:%d: promise broken: %s\n", __FILE__, __LINE__, #cond);       \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* The parsers write user messages to stderr (the option parser does); a
 * million of them would drown libFuzzer's output. The sanitizers write to file
 * descriptor 2 directly, so their reports still show. */
static FILE *fuzz_stderr;
static inline FILE *fuzz_real_stderr(void) {
  return fuzz_stderr ? fuzz_stderr : stderr;
}
static inline void fuzz_quiet_stderr(void) {
  if (fuzz_stderr) return;
  fuzz_stderr = stderr;
  FILE *null = fopen("/dev/null", "w");
  if (null) stderr = null;
}

#endif
