/* A text written to a fresh file under /tmp, for tests of file readers
 * (model INI files, cluster descriptions). The path lives until the next
 * call; the caller removes the file. */
#ifndef TSR_TEST_TMPFILE_H
#define TSR_TEST_TMPFILE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

static inline char *write_temp(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/tessera-test-XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

#endif
