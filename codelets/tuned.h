/* --kernels tuned (tuned.c): which of a codelet's two CPU implementations a task of one shape
 * runs, chosen by timing both on that shape's first tasks in this process. No StarPU here: the
 * codelets (codelets/impls.c) ask and report; a shape is a key they hash. */
#ifndef TSR_CODELETS_TUNED_H
#define TSR_CODELETS_TUNED_H

#include <stddef.h>
#include <stdint.h>

/* Tasks of each implementation timed on a shape before the faster one is kept. */
#define TSR_TUNED_TRIALS 3

/* The implementation (0 or 1) a new task of shape key runs: while the trials last, the one
 * with fewer tasks given so far (0 first), counted here; then the one whose fastest trial was
 * faster (0 on a tie). key 0, or a table that is full, answers 0. Thread-safe. */
int tsr__tuned_pick(uint64_t key);
/* A task of shape key ran implementation impl in seconds of its thread's CPU time. */
void tsr__tuned_record(uint64_t key, int impl, double seconds);

/* What the table holds for key: -1 while it is still timing (or never saw the key), else the
 * implementation kept; best (may be NULL) gets each one's fastest trial in seconds. */
int tsr__tuned_choice(uint64_t key, double best[2]);

/* A shape's key: FNV-1a over size bytes (never 0). */
uint64_t tsr__tuned_key(const void *bytes, size_t size);

#endif
