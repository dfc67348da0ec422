/* Checkpoints of a run under MPI (src/train/checkpoint_state.c and checkpoint_resume.c), beyond the
 * public tessera/checkpoint.h: what the replicas hold (each rank's optimizer state under weight
 * averaging, the outer optimizer's momentum, post-local's switch) written with the net and given
 * back on resume. tsr_train calls these; the file's layout is in docs/checkpoints.md. */
#ifndef TSR_CHECKPOINT_RUN_H
#define TSR_CHECKPOINT_RUN_H

#include "parallel/replicas.h"
#include "tessera/checkpoint.h"

/* tsr_checkpoint_save of net and, with rep (borrowed; NULL: one process), of what the
 * replicas hold (saved: tsr__replicas_checkpoint's, taken as the checkpoint is written): collective
 * under MPI, every rank calling at the same point, rank 0 writing. Every rank's optimizer state
 * goes in when the replicas keep their own (local SGD), and the outer optimizer's momentum when
 * there is one. The result is rank 0's writing on rank 0 (err filled there), 0 elsewhere unless
 * gathering failed (then the same on every rank). */
int tsr__checkpoint_save_run(const tsr_net_t *net, tsr_replicas_t *rep,
                             const tsr__replicas_saved_t *saved, const tsr_checkpoint_info_t *info,
                             const char *path, tsr_errbuf_t *err);

/* After tsr_checkpoint_load of path into net and once the replicas exist: this rank's own
 * optimizer state and step count when the file holds every rank's and was written by as many
 * ranks, the outer momentum when it holds one, and post-local's switch when it was written
 * under the same policy (sync, as tsr_sync_describe writes it) after the switch. What the file
 * does not hold stays as loaded (rank 0's state; the momentum at zero):
 * tsr_checkpoint_resume_check says so before. Not collective. */
int tsr__checkpoint_restore_run(tsr_net_t *net, tsr_replicas_t *rep, const char *path,
                                const char *sync, tsr_errbuf_t *err);

#endif
