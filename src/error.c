/* Error codes and messages shared by the whole library. */
#include <stdarg.h>
#include <stdio.h>

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
