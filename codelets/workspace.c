/* Per-worker scratch memory for kernels that need a temporary (the lowered
 * input of a convolution). Each StarPU worker thread keeps one buffer and
 * grows it to the largest request it has seen, so steady-state training
 * allocates nothing; the buffer is freed when the thread ends. A task cannot
 * fail, so an allocation failure aborts with a message. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "codelets.h"

static _Thread_local float *buf;
static _Thread_local size_t cap;
static pthread_key_t key; /* its destructor frees a thread's buffer at thread exit */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void make_key(void) {
  if (pthread_key_create(&key, free) != 0) {
    fprintf(stderr, "tessera: cannot create the task workspace key\n");
    abort();
  }
}

float *tsr__workspace(size_t floats) {
  if (floats <= cap) return buf;
  pthread_once(&once, make_key);
  free(buf);
  size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
  buf = aligned_alloc(64, bytes);
  if (!buf) {
    fprintf(stderr, "tessera: cannot allocate %zu bytes of task workspace\n", bytes);
    abort();
  }
  cap = floats;
  pthread_setspecific(key, buf);
  return buf;
}
