/* Opening the INI files a user names on the command line: model files (--model NAME.ini) and
 * cluster files (tessera plan --cluster NAME). A name with a slash, or one that exists in the
 * current folder, is read as given; a bare name that does not is looked up in the data folders,
 * in this order:
 *   - $TESSERA_DATA_DIR/KIND/ alone, when that variable is set and not empty;
 *   - otherwise PREFIX/share/tessera/KIND/ (PREFIX the folder above the running program's: an
 * installed tree, wherever it was moved or staged with meson install --destdir), the configured
 *     DATADIR/tessera/KIND/, and, when the program runs from this checkout's build folder, the
 *     checkout's own folder (models/, benchmarks/clusters/).
 * NAME and NAME.ini are tried in each. The file must be a regular file: it is opened without
 * blocking, so that a named pipe or a device is refused rather than waited on. */
#ifndef TSR_IO_DATAFILE_H
#define TSR_IO_DATAFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "tessera/error.h"

typedef struct {
  const char *folder;   /* under share/tessera: "models" */
  const char *checkout; /* the checkout's folder, from the source root: "models" */
  const char *what;     /* in messages: "model file" */
  const char *hint;     /* the fix after a refusal: "a model is read from a regular INI file" */
} tsr_datafile_kind_t;

extern const tsr_datafile_kind_t tsr__datafile_models, tsr__datafile_clusters;

/* Opens the file name means (above) for reading into *f (owned by the caller, who fcloses it),
 * and writes the path it opened into found (found_size bytes, at least 1; the name itself when
 * read as given). TSR_EIO with a message naming the file and the fix when it cannot be opened or
 * is not a regular file; for a bare name found nowhere, the message lists every folder looked
 * in. */
int tsr__datafile_open(const tsr_datafile_kind_t *kind, const char *name, FILE **f, char *found,
                       size_t found_size, tsr_errbuf_t *err);

/* Whether a regular file `name` (a bare name, as given: no .ini added) is in one of the data
 * folders (not the current folder), and its path in found (found_size bytes) when it is. */
bool tsr__datafile_find(const tsr_datafile_kind_t *kind, const char *name, char *found,
                        size_t found_size);

#endif
