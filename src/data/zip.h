/* The part of the zip format that NumPy's .npz files use (src/data/zip.c), on bytes in memory. */
#ifndef TSR_DATA_ZIP_H
#define TSR_DATA_ZIP_H

#include <stddef.h>

#include "tessera/error.h"

/* An archive member's bytes: data (len) borrowed from the archive when stored, owned (freed by
 * tsr__zip_entry_fini) when inflated. */
typedef struct {
  const unsigned char *data;
  size_t len;
  unsigned char *owned;
} tsr__zip_entry_t;

/* Finds member `member` in the zip archive zip (len bytes, borrowed; `name` in messages) and
 * gives its bytes, stored or deflated, their CRC-32 checked: 1 when found, 0 when the archive has
 * no such member, a negative TSR_E* code naming name when the archive is malformed. `members`,
 * when not NULL, receives the archive's member names, comma-separated (cut at size). */
int tsr__zip_find(tsr__zip_entry_t *e, const unsigned char *zip, size_t len, const char *name,
                  const char *member, char *members, size_t size, tsr_errbuf_t *err);
void tsr__zip_entry_fini(tsr__zip_entry_t *e);

#endif
