/* Data-parallel training over MPI ranks: each rank holds a full replica and
 * a shard of the training set; a synchronization policy keeps the replicas
 * in agreement. All communication inside the training loop is StarPU-MPI
 * moving tiles between tasks; plain MPI is used only at start-up (checking
 * that ranks agree) and on a fatal error (stopping every rank). */
#ifndef TESSERA_DIST_H
#define TESSERA_DIST_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/error.h"

TSR_EXTERN_C_BEGIN

typedef enum {
  TSR_SYNC_NONE,       /* one process, or independent replicas */
  TSR_SYNC_BATCH,      /* gradients averaged every batch; update on each tile's home rank */
  TSR_SYNC_EVERY,      /* weights averaged every K batches (local SGD) */
  TSR_SYNC_EPOCH,      /* weights averaged every n epochs, all ranks together */
  TSR_SYNC_ASYNC_EPOCH /* at its epoch end each rank folds itself into a global copy */
} tsr_sync_kind_t;

typedef struct {
  tsr_sync_kind_t kind;
  int every;          /* K for TSR_SYNC_EVERY, n for TSR_SYNC_EPOCH (>= 1) */
  bool average_state; /* average optimizer state (momentum, Adam moments) with the weights */
  /* Sum contributions in rank order, in float32: acc = w_0 x_0, then acc = w_q x_q + acc for
   * q = 1 .. P-1 (async-epoch: the folds in rank order); bitwise-reproducible runs. Otherwise
   * contributions are added as they arrive. */
  bool deterministic;
  bool by_samples; /* weight each rank by the samples it processed (else uniform) */
} tsr_sync_t;

/* Parses "batch", "every=K", "epoch", "epoch=n", "async-epoch", "none". */
TSR_API int tsr_sync_parse(tsr_sync_t *sync, const char *text, tsr_errbuf_t *err);
/* Writes the policy back as text ("every=8"). */
TSR_API void tsr_sync_describe(const tsr_sync_t *sync, char *buf, int size);

/* Starts MPI when this process was launched by mpirun (or when force is
 * set); a no-op otherwise. Returns 0 or TSR_ERUNTIME. */
TSR_API int tsr_dist_start(int *argc, char ***argv, bool force);
TSR_API bool tsr_dist_active(void);
/* Whether MPI lets several threads call it at once (MPI_THREAD_MULTIPLE). */
TSR_API bool tsr_dist_thread_multiple(void);
TSR_API int tsr_dist_rank(void); /* 0 without MPI */
TSR_API int tsr_dist_size(void); /* 1 without MPI */
/* Ranks sharing this node and this rank's index among them (placement). */
TSR_API int tsr_dist_local_rank(void);
TSR_API int tsr_dist_local_size(void);

/* Every rank calls this with its own status: the result is the first failing
 * rank's code, with its message prefixed by its rank, on every rank. */
TSR_API int tsr_dist_agree(int rc, const tsr_errbuf_t *mine, tsr_errbuf_t *err);
/* Every rank passes a description of its configuration; ranks that differ
 * from rank 0 are named in err and TSR_EINVAL returned on every rank. */
TSR_API int tsr_dist_check_same(const char *config, tsr_errbuf_t *err);
/* Every rank passes `bytes` bytes; rank 0 receives them all in rank order
 * in all (size x bytes; ignored elsewhere). Plain MPI, collective: for the
 * end of a run, after its transfers (tsr_train's per-rank totals). */
TSR_API int tsr_dist_gather(const void *mine, int bytes, void *all);
/* Whether any rank passes true (plain MPI, collective; mine without MPI). */
TSR_API bool tsr_dist_any(bool mine);
/* Under MPI: prints msg (prefixed with the rank) and stops every rank with
 * exit status 1 (MPI_Abort). Without MPI it does nothing and returns. */
TSR_API void tsr_dist_abort(const char *msg);
/* The same with another exit status (mpirun exits with it). */
TSR_API void tsr_dist_abort_status(const char *msg, int status);
/* Finalizes MPI if tsr_dist_start started it. */
TSR_API void tsr_dist_stop(void);

TSR_EXTERN_C_END

#endif
