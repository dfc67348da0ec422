/* --sync-bn (sync_bn.c): batch statistics reduced over every rank's batch, installed as the
 * net's statistics hook. No StarPU types here. */
#ifndef TSR_PARALLEL_SYNC_BN_H
#define TSR_PARALLEL_SYNC_BN_H

#include "nn/net_impl.h"

typedef struct tsr_sync_bn tsr_sync_bn_t;

/* Registers every rank's copy of each batch-statistics layer's partials (every rank calls it
 * alike, after the net is built) and installs the hook; TSR_ENOMEM. net is borrowed and must
 * outlive *s. */
int tsr__sync_bn_create(tsr_sync_bn_t **s, tsr_net_t *net);
/* The samples each rank takes in the coming step ([size]; every rank gives the same): batches
 * of different sizes weight the backward sums (sync_bn.c). Until called, equal batches. */
void tsr__sync_bn_count(tsr_sync_bn_t *s, const int *samples_per_rank);
/* Puts the previous hook back and frees *s (NULL: nothing). */
void tsr__sync_bn_destroy(tsr_sync_bn_t **s);

#endif
