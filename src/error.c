/* Error codes and messages shared by the whole library. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tessera/error.h"

const char *tsr_strerror(int code) {
  switch (code) {
  case TSR_OK: return "success";
  case TSR_EINVAL: return "invalid argument";
  case TSR_ENOMEM: return "out of memory";
  case TSR_EIO: return "input/output error";
  case TSR_EFORMAT: return "malformed file";
  case TSR_ESHAPE: return "shapes do not fit";
  case TSR_ERUNTIME: return "runtime error";
  case TSR_ESTOPPED: return "stopped on request";
  case TSR_EDIVERGED: return "training diverged";
  default: return "unknown error";
  }
}

int tsr_error_set(tsr_errbuf_t *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

int tsr_edit_distance(const char *a, size_t n, const char *b) {
  size_t m = strlen(b);
  if (n > 63 || m > 63) return 99;
  int d[64][64];
  for (size_t i = 0; i <= n; i++)
    d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++)
    d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[n][m];
}
