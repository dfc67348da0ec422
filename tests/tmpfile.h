/* Temporary files for the Criterion suites: a text written to a fresh file under /tmp, for
 * tests of file readers (model INI files, cluster descriptions; the path lives until the next
 * call, the caller removes the file), and a fresh folder for a suite's files, removed whole. */
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

/* A fresh folder /tmp/PREFIX-XXXXXX into dir (size bytes). */
static inline void make_temp_dir(char *dir, size_t size, const char *prefix) {
  snprintf(dir, size, "/tmp/%s-XXXXXX", prefix);
  cr_assert_not_null(mkdtemp(dir));
}

/* dir and everything in it. */
static inline void remove_temp_dir(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {
  }
}

#endif
