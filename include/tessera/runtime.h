/* Starting and stopping the task runtime (StarPU) for a tessera process. */
#ifndef TESSERA_RUNTIME_H
#define TESSERA_RUNTIME_H

#include <stdbool.h>
#include <stdio.h>

#include "tessera/error.h"

typedef struct {
  const char *sched; /* StarPU scheduling policy name; NULL: TSR_DEFAULT_SCHED */
  int ncpus;         /* CPU workers; -1: every core StarPU may use */
} tsr_runtime_opts_t;

/* The policy that measured fastest for training on small nodes (README). */
#define TSR_DEFAULT_SCHED "lws"

TSR_API void tsr_runtime_opts_init(tsr_runtime_opts_t *opts);

/* Validates the options and starts StarPU; BLIS is made single-threaded so
 * that StarPU is the only source of parallelism. An unknown policy is
 * rejected with the list of known ones in err. */
TSR_API int tsr_runtime_init(const tsr_runtime_opts_t *opts, tsr_errbuf_t *err);
/* Waits for all tasks and stops StarPU. Safe to call when not started. */
TSR_API void tsr_runtime_fini(void);

TSR_API int tsr_runtime_ncpus(void);    /* CPU workers StarPU runs */
TSR_API const char *tsr_runtime_sched(void); /* policy in use */

/* Whether name is a scheduling policy the installed StarPU offers. */
TSR_API bool tsr_sched_known(const char *name);
/* Writes the installed policies, one "name  description" per line. */
TSR_API void tsr_sched_list(FILE *out);

/* Prints what the engine will run on: hwloc topology, StarPU workers and
 * memory nodes, BLIS configuration, StarPU and MPI versions, and a warning
 * with the fix when the node has more cores than one StarPU process may use.
 * Starts and stops the runtime itself when it is not running. */
TSR_API int tsr_info_print(FILE *out, const tsr_runtime_opts_t *opts, tsr_errbuf_t *err);

#endif
