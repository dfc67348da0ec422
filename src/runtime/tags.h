/* MPI tags. Every StarPU-MPI registration takes its tag from here: a tag
 * space is 2^32 tags, tag = space << 32 | index, handed out in order (the
 * keep-alive of src/runtime/progress.c takes one, every distributed
 * descriptor or view of src/tile/ one for its tiles). Every rank creates
 * its distributed descriptors in the same order, so a descriptor gets the
 * same space on every rank and its tiles the same tags. */
#ifndef TSR_RUNTIME_TAGS_H
#define TSR_RUNTIME_TAGS_H

#include <stdbool.h>
#include <stdint.h>

/* The next free tag space (1, 2, ...). */
int64_t tsr__tag_space(void);
/* Tag number index (0 <= index < 2^32) of a space. */
int64_t tsr__tag(int64_t space, int64_t index);
/* Whether StarPU-MPI runs in this process: distributed data must then be
 * registered with it. */
bool tsr__runtime_mpi(void);

#endif
