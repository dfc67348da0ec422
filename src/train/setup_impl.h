/* What tsr_train needs of the run's setup beyond the public calls (src/train/setup.c). */
#ifndef TSR_SETUP_IMPL_H
#define TSR_SETUP_IMPL_H

#include "tessera/train.h"

/* Each replica's batch and shard, and the steps of an epoch, from s's shares as they stand
 * now: uniform shards with the batch asked for, for uniform shares, one replica, or
 * auto shares not measured yet; else shards in proportion to the shares, and where ranks meet
 * at every step, batches too (s->global_batch cut by the shares, each shard in proportion to
 * its batch so that all end together). tsr_train calls it again when --shares auto moves.
 * TSR_ENOMEM for its scratch (sized to the replicas). */
int tsr__run_shard(tsr_run_setup_t *s, tsr_errbuf_t *err);
/* dst (zeroed, or a setup: what it held is freed) as a copy of src with arrays of its own, so
 * that tsr_train can move its shares without touching the caller's setup. TSR_ENOMEM. */
int tsr__run_setup_copy(tsr_run_setup_t *dst, const tsr_run_setup_t *src, tsr_errbuf_t *err);

#endif
