/* --kernels tuned (tuned.h): a table of shapes, each timing both implementations on its first
 * tasks and then keeping the faster, for the life of the process. The choice is the lws
 * policy's answer to what dmda learns from its history models: made in the run itself, from
 * TSR_TUNED_TRIALS tasks of each implementation per shape, with no model files. Times are the
 * task's own thread CPU time, so a process on the same core stealing the worker's time does
 * not make an implementation look slower than it is. Open addressing over a fixed table: a
 * network has a few hundred shapes at most; a full table leaves new shapes on implementation 0. */
#include "tuned.h"

#include <pthread.h>
#include <stdatomic.h>

#define SLOTS 4096

typedef struct {
  _Atomic uint64_t key;   /* 0: free */
  _Atomic int chosen;     /* -1 while timing */
  int given[2], timed[2]; /* tasks handed each implementation; of those, timed */
  double best[2];         /* the fastest trial of each, seconds */
} slot_t;

static slot_t slots[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t tsr__tuned_key(const void *bytes, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; i++)
    h = (h ^ ((const unsigned char *)bytes)[i]) * 1099511628211ull;
  return h ? h : 1;
}

/* key's slot, or NULL; with add, a free one taken for it (under the lock). */
static slot_t *find(uint64_t key, int add) {
  for (size_t i = 0, s = key % SLOTS; i < SLOTS; i++, s = (s + 1) % SLOTS) {
    uint64_t k = atomic_load(&slots[s].key);
    if (k == key) return &slots[s];
    if (k == 0) {
      if (!add) return NULL;
      slots[s] = (slot_t){.chosen = -1};
      atomic_store(&slots[s].key, key);
      return &slots[s];
    }
  }
  return NULL;
}

int tsr__tuned_pick(uint64_t key) {
  if (!key) return 0;
  slot_t *s = find(key, 0); /* the common case: chosen long ago, no lock */
  int c = s ? atomic_load(&s->chosen) : -1;
  if (c >= 0) return c;
  pthread_mutex_lock(&lock);
  s = find(key, 1);
  int impl = 0;
  if (s) {
    c = atomic_load(&s->chosen);
    impl = c >= 0 ? c : s->given[1] < s->given[0];
    if (c < 0) s->given[impl]++;
  }
  pthread_mutex_unlock(&lock);
  return impl;
}

void tsr__tuned_record(uint64_t key, int impl, double seconds) {
  if (!key || (impl != 0 && impl != 1)) return;
  pthread_mutex_lock(&lock);
  slot_t *s = find(key, 0);
  if (s && atomic_load(&s->chosen) < 0) {
    if (s->timed[impl] == 0 || seconds < s->best[impl]) s->best[impl] = seconds;
    s->timed[impl]++;
    if (s->timed[0] >= TSR_TUNED_TRIALS && s->timed[1] >= TSR_TUNED_TRIALS)
      atomic_store(&s->chosen, s->best[1] < s->best[0]);
  }
  pthread_mutex_unlock(&lock);
}

int tsr__tuned_choice(uint64_t key, double best[2]) {
  pthread_mutex_lock(&lock);
  slot_t *s = find(key, 0);
  int c = s ? atomic_load(&s->chosen) : -1;
  if (s && best) best[0] = s->best[0], best[1] = s->best[1];
  pthread_mutex_unlock(&lock);
  return c;
}
