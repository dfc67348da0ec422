/* Plain MPI for start-up and shutdown only: starting MPI before StarPU (so
 * that ranks can agree on their configuration and data before any task
 * runs), agreeing on errors, gathering a run's per-rank totals once it is
 * over, and stopping every rank when one fails; besides, at each epoch end
 * (where ranks meet anyway), exchanging a few numbers per rank for --shares. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/dist.h"

static bool active, we_started, multiple;
static int rank, size = 1, local_rank, local_size = 1;
static int agreed_rc; /* the last failure tsr_dist_agree returned: every rank's */

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

int tsr_dist_start(int *argc, char ***argv, bool force) {
  if (active) return 0;
  /* Open MPI's mpirun, a PMI-1/2 or PMIx launcher (Slurm's srun --mpi=pmi2|pmix), Hydra. */
  bool launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
                  getenv("PMI_RANK");
  if (!launched && !force) return 0;
  int initialized;
  MPI_Initialized(&initialized);
  int provided;
  if (!initialized) {
    /* StarPU-MPI calls MPI from its own thread; this thread's plain MPI
     * (tsr_dist_agree) may run while that one polls, which the worker
     * progress mode never stops doing (src/runtime/progress.c). */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return TSR_ERUNTIME;
    we_started = true;
  } else {
    MPI_Query_thread(&provided);
  }
  multiple = provided >= MPI_THREAD_MULTIPLE;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* The ranks sharing this node, from MPI itself whatever launched them (mpirun, Slurm's srun,
   * a PMIx launcher): Open MPI's OMPI_COMM_WORLD_LOCAL_* exist only under its own mpirun, and
   * without them every rank placed its workers as if it were alone on its node. */
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
  } else {
    local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", rank);
    local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", size);
  }
  active = true;
  return 0;
}

bool tsr_dist_active(void) {
  return active;
}
bool tsr_dist_thread_multiple(void) {
  return active && multiple;
}
int tsr_dist_rank(void) {
  return rank;
}
int tsr_dist_size(void) {
  return size;
}
int tsr_dist_local_rank(void) {
  return local_rank;
}
int tsr_dist_local_size(void) {
  return local_size;
}

int tsr_dist_nodes(int *node_of) {
  if (!active) {
    node_of[0] = 0;
    return 1;
  }
  /* Each rank names its node by the lowest world rank on it. */
  MPI_Comm node;
  int lowest = rank, nodes = 0;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Allreduce(&rank, &lowest, 1, MPI_INT, MPI_MIN, node);
    MPI_Comm_free(&node);
  }
  MPI_Allgather(&lowest, 1, MPI_INT, node_of, 1, MPI_INT, MPI_COMM_WORLD);
  /* Renumbered 0, 1, ... in order of the lowest ranks: a node's lowest rank L <= q comes
   * before q, so node_of[L] is already renumbered when q is. */
  for (int q = 0; q < size; q++)
    node_of[q] = node_of[q] == q ? nodes++ : node_of[node_of[q]];
  return nodes;
}

int tsr_dist_agree(int rc, const tsr_errbuf_t *mine, tsr_errbuf_t *err) {
  if (!active) {
    if (rc && err && mine && err != mine) *err = *mine;
    return rc;
  }
  /* The lowest failing rank speaks for all. */
  int failing = rc ? rank : size, first;
  MPI_Allreduce(&failing, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size) return 0;
  int code = rc;
  char msg[sizeof err->msg - 32];
  snprintf(msg, sizeof msg, "%.*s", (int)sizeof msg - 1, mine ? mine->msg : "");
  MPI_Bcast(&code, 1, MPI_INT, first, MPI_COMM_WORLD);
  MPI_Bcast(msg, sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD);
  agreed_rc = code;
  return tsr_error_set(err, code, "rank %d: %s", first, msg[0] ? msg : tsr_strerror(code));
}

bool tsr_dist_agreed(int rc) {
  return !active || size == 1 || (rc != 0 && rc == agreed_rc);
}

int tsr_dist_first_signal(int mine, int *sig, int *ranks) {
  *sig = mine, *ranks = mine != 0;
  if (!active || size == 1) return mine ? 0 : -1;
  int *all = malloc(sizeof *all * (size_t)size), first = -1;
  if (!all) return -1;
  if (MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) all[0] = 0;
  *sig = 0, *ranks = 0;
  for (int q = 0; q < size; q++) {
    if (!all[q]) continue;
    if (first < 0) first = q, *sig = all[q];
    ++*ranks;
  }
  free(all);
  return first;
}

/* FNV-1a: enough to tell configurations apart. */
static unsigned long long hash(const char *s) {
  unsigned long long h = 1469598103934665603ULL;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

int tsr_dist_check_same(const char *config, tsr_errbuf_t *err) {
  if (!active || size == 1) return 0;
  unsigned long long mine = hash(config), *all = malloc(sizeof *all * (size_t)size);
  if (!all) return TSR_ENOMEM;
  MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
  char differ[64] = "";
  int n = 0;
  for (int r = 1; r < size; r++)
    if (all[r] != all[0] && n < (int)sizeof differ - 12)
      n += snprintf(differ + n, sizeof differ - (size_t)n, "%s%d", n ? ", " : "", r);
  free(all);
  if (!n) return 0;
  /* Rank 0's description, so every rank can say what was expected. */
  char expected[256];
  snprintf(expected, sizeof expected, "%s", config);
  MPI_Bcast(expected, sizeof expected, MPI_CHAR, 0, MPI_COMM_WORLD);
  return tsr_error_set(err, TSR_EINVAL,
                       "ranks run different configurations: rank(s) %s differ from rank 0 (%s); "
                       "start every rank with the same options and data",
                       differ, expected);
}

int tsr_dist_gather(const void *mine, int bytes, void *all) {
  if (!active || size == 1) {
    memcpy(all, mine, (size_t)bytes);
    return 0;
  }
  return MPI_Gather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS
             ? 0
             : TSR_ERUNTIME;
}

int tsr_dist_allgather(const void *mine, int bytes, void *all) {
  if (!active || size == 1) {
    memcpy(all, mine, (size_t)bytes);
    return 0;
  }
  return MPI_Allgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS
             ? 0
             : TSR_ERUNTIME;
}

bool tsr_dist_any(bool mine) {
  if (!active || size == 1) return mine;
  int in = mine, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  return out != 0;
}

void tsr_dist_abort_status(const char *msg, int status) {
  if (!active) return;
  fprintf(stderr, "tessera (rank %d of %d): %s; stopping every rank\n", rank, size, msg);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, status);
}

void tsr_dist_abort(const char *msg) {
  tsr_dist_abort_status(msg, 1);
}

void tsr_dist_stop(void) {
  if (active && we_started) {
    int finalized;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  active = false;
}
