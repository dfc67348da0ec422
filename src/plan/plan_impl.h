/* The planner's insides, shared by its files (plan.c: the model; machine.c:
 * machines and measured kernel rates) and its tests. No StarPU, no MPI. */
#ifndef TSR_PLAN_IMPL_H
#define TSR_PLAN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "parallel/chunks.h"
#include "tessera/plan.h"

/* One parameter matrix as averaging sees it: rows x cols floats in mb x nb
 * tiles (mb, nb as given to tsr_tiles_create, which clamps them to the
 * matrix; tsr__plan_average does the same). */
typedef tsr_chunk_shape_t tsr__plan_param_t;

/* What one averaging of a set of parameters over P ranks moves
 * (src/parallel/collective.c: a reduce-scatter into each chunk's home, then an
 * all-gather from it; or with two levels through each node's local homes), for the busiest
 * rank, the busiest node, and rank 0. Ranks are in nodes of per_node consecutive ranks (the
 * last may hold fewer). */
typedef struct {
  int64_t chunks;      /* chunks over all parameters */
  double bytes;        /* the parameters' bytes */
  double sent_max;     /* bytes the busiest rank sends (it receives as many) */
  double messages_max; /* messages it sends (and receives) */
  double reduced_max;  /* bytes it adds into its chunks' sums */
  double sent_rank0, messages_rank0;
  double intra_sent_max, intra_messages_max; /* to ranks of its node: the busiest rank */
  double inter_messages_max;                 /* to other nodes: the busiest rank */
  double node_sent_max; /* bytes the busiest node's ranks send to other nodes together */
  int64_t buckets;      /* with bucket_bytes: the buckets */
} tsr__plan_average_t;

/* Chunks and homes as the engine averages them (tsr__placement_row, the same call: flat, or
 * two_level; with bucket_bytes > 0 in buckets of that size, each one message), then the
 * bytes and messages each rank and node moves. release, where not NULL ([n]): the bytes whose
 * averaging can start once parameter k's gradient is handed over: its own, or with buckets
 * those of each bucket whose last chunk is packed from it (parameters are packed last to
 * first). */
int tsr__plan_average(const tsr__plan_param_t *params, int n, int ranks, int per_node,
                      bool two_level, uint64_t bucket_bytes, double *release,
                      tsr__plan_average_t *out);

/* Seconds of one averaging costed with m's alpha, beta and gamma: the busiest rank's messages
 * and bytes inside its node at intra_alpha and intra_beta, plus its messages to other nodes at
 * alpha, plus the busiest node's bytes to other nodes at beta (its ranks share the link), plus
 * the bytes reduced at gamma. */
double tsr__plan_average_seconds(const tsr__plan_average_t *a, const tsr_machine_t *m);

/* 2 m n k: the flops of a GEMM (m, k) x (k, n). */
double tsr__plan_gemm_flops(int64_t m, int64_t n, int64_t k);

/* One worker's rate in flop/s on a GEMM tile of this shape, or on a
 * convolution task of geometry g over n samples (which: 0 forward, 1 input
 * gradient, 2 filter gradient): measured on this machine when
 * m->measure_kernels (cached in m->cache), else the described rate. */
double tsr__plan_gemm_rate(const tsr_machine_t *m, bool ta, bool tb, int rows, int cols, int inner);
double tsr__plan_conv_rate(const tsr_machine_t *m, const tsr_conv_geom_t *g, int n, int which);
/* Seconds of one max (max) or mean pooling task of geometry g over n samples on one worker
 * (which: 0 forward, 1 backward), measured on this machine when m->measure_kernels (cached in
 * m->cache); 0 otherwise (the planner then prices it by its bytes). */
double tsr__plan_pool_seconds(const tsr_machine_t *m, const tsr_conv_geom_t *g, int n, bool max,
                              int which);

/* As tsr_machine_load_ini, from len bytes of INI text (borrowed, need not end in NUL) that
 * messages call `name`: for the fuzzer (tests/fuzz/fuzz_cluster.c) and tests. */
int tsr__machine_parse_ini_mem(tsr_machine_t *m, const void *text, size_t len, const char *name,
                               tsr_errbuf_t *err);

#endif
