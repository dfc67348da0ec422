/* Error codes. Every fallible tessera function returns 0 or one of these
 * negative codes; tsr_strerror() turns a code into words. Functions that can
 * say more (which file, which field) also fill a caller's tsr_errbuf_t. */
#ifndef TESSERA_ERROR_H
#define TESSERA_ERROR_H

#include <stddef.h>

#include "tessera/export.h"

TSR_EXTERN_C_BEGIN

enum {
  TSR_OK = 0,
  TSR_EINVAL = -1,   /* an argument or option is out of range */
  TSR_ENOMEM = -2,   /* an allocation failed */
  TSR_EIO = -3,      /* a file could not be opened, read or written */
  TSR_EFORMAT = -4,  /* a file's contents are malformed */
  TSR_ESHAPE = -5,   /* shapes or tilings of operands do not fit */
  TSR_ERUNTIME = -6, /* StarPU, MPI or BLIS refused to start or run */
  TSR_ESTOPPED = -7, /* stopped on request (a signal) before the end */
  TSR_EDIVERGED = -8 /* training diverged: a loss that is not a finite number */
};

/* A caller-owned buffer for a message that names the file, the field and the fix. */
typedef struct {
  char msg[512];
} tsr_errbuf_t;

TSR_API const char *tsr_strerror(int code);

/* Writes printf-style text into err (when err is not NULL) and returns code. */
TSR_API int tsr_error_set(tsr_errbuf_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* For "did you mean ...?" in messages: the edit distance between a's first n characters and b,
 * counting insertions, deletions, substitutions and swaps of two neighbours ("--jsno" is one
 * edit from "--json", "mpl" from "mlp"); 99 when either is over 63 characters. */
TSR_API int tsr_edit_distance(const char *a, size_t n, const char *b);

TSR_EXTERN_C_END

#endif
