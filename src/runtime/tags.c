/* The one allocator of MPI tag spaces (tags.h). */
#include "runtime/tags.h"

static int64_t next_space = 1;

int64_t tsr__tag_space(void) {
  return next_space++;
}

int64_t tsr__tag(int64_t space, int64_t index) {
  return space << 32 | index;
}
