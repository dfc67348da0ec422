/* What the embedding layer type (embedding.c) tells the layer that ties to its token table (the
 * language-model head, lmhead.c): which layer of a network is its embedding. */
#ifndef TSR_NN_EMBEDDING_H
#define TSR_NN_EMBEDDING_H

#include "nn/layout.h"

/* The index in lay->layers of the first embedding layer (-1: none); *count: how many the
 * network has. */
int tsr__embedding_index(const tsr_net_layout_t *lay, int *count);

#endif
