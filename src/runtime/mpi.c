/* Plain MPI for start-up and shutdown only: starting MPI before StarPU (so
 * that ranks can agree on their configuration and data before any task
 * runs), agreeing on errors, gathering a run's per-rank totals once it is
 * over, and stopping every rank when one fails; besides, at each epoch end
 * (where ranks meet anyway), exchanging a few numbers per rank for --shares, and at each step a
 * stop on request agreed a step late (runtime/agree.h). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/agree.h"
#include "tessera/dist.h"

static bool active, we_started, multiple;
static int rank, size = 1, local_rank, local_size = 1;
static int agreed_rc; /* the last failure tsr_dist_agree returned: every rank's */
/* The lagged agreement (agree.h): its communicator, the request in flight, its flags. */
static MPI_Comm lag_comm = MPI_COMM_NULL;
static MPI_Request lag_req = MPI_REQUEST_NULL;
static int lag_in, lag_out;

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
  if (size > 1 && MPI_Comm_dup(MPI_COMM_WORLD, &lag_comm) != MPI_SUCCESS) return TSR_ERUNTIME;
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

/* Descriptions compared word by word (space-separated), each word cut to WORD_MAX - 1
 * characters, at most MAX_WORDS of them. */
#define CONFIG_MAX 1024
#define WORD_MAX 96
#define MAX_WORDS 256

static int split_words(const char *s, char (*w)[WORD_MAX]) {
  int n = 0;
  while (*s && n < MAX_WORDS) {
    while (*s == ' ')
      s++;
    size_t len = strcspn(s, " ");
    if (!len) break;
    snprintf(w[n++], WORD_MAX, "%.*s", (int)(len < WORD_MAX ? len : WORD_MAX - 1), s);
    s += len;
  }
  return n;
}

static bool is_option(const char *word) {
  return word[0] == '-' && word[1] == '-';
}

/* What a description says at word i, the first that differs: the option it belongs to and its
 * value ("--lr 0.1"), an option with its value, or the words from the last option (or the start)
 * to it; "nothing" past the end. */
static void say_at(char (*w)[WORD_MAX], int n, int i, char *buf, size_t size) {
  if (i >= n) {
    snprintf(buf, size, "nothing there");
    return;
  }
  int from = i, to = i;
  if (is_option(w[i]) && i + 1 < n && !is_option(w[i + 1])) to = i + 1;
  while (!is_option(w[from]) && from > 0 && i - from < 8)
    from--;
  size_t at = 0;
  buf[0] = '\0';
  for (int k = from; k <= to && at < size; k++)
    at += (size_t)snprintf(buf + at, size - at, "%s%s", k > from ? " " : "", w[k]);
}

/* Into buf: where rank r's description b first differs from rank 0's a. */
static void first_difference(const char *a, const char *b, int r, char *buf, size_t size) {
  char(*wa)[WORD_MAX] = malloc(sizeof *wa * MAX_WORDS),
  (*wb)[WORD_MAX] = malloc(sizeof *wb * MAX_WORDS);
  if (!wa || !wb) {
    snprintf(buf, size, "rank %d's configuration is not rank 0's", r);
    free(wa), free(wb);
    return;
  }
  int na = split_words(a, wa), nb = split_words(b, wb), i = 0;
  while (i < na && i < nb && strcmp(wa[i], wb[i]) == 0)
    i++;
  char theirs[320], ours[320];
  say_at(wb, nb, i, theirs, sizeof theirs);
  say_at(wa, na, i, ours, sizeof ours);
  snprintf(buf, size, "rank %d has '%s' where rank 0 has '%s'", r, theirs, ours);
  free(wa), free(wb);
}

int tsr_dist_check_same(const char *config, tsr_errbuf_t *err) {
  if (!active || size == 1) return 0;
  unsigned long long mine = hash(config), *all = malloc(sizeof *all * (size_t)size);
  if (!all) return TSR_ENOMEM;
  MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
  char differ[64] = "";
  int n = 0, first = -1;
  for (int r = 1; r < size; r++)
    if (all[r] != all[0]) {
      if (first < 0) first = r;
      if (n < (int)sizeof differ - 12)
        n += snprintf(differ + n, sizeof differ - (size_t)n, "%s%d", n ? ", " : "", r);
    }
  free(all);
  if (!n) return 0;
  /* Rank 0's description and the first differing rank's, so every rank can say what differs
   * (the same two broadcasts on every rank: all[] is every rank's). */
  char expected[CONFIG_MAX], theirs[CONFIG_MAX], what[800];
  snprintf(expected, sizeof expected, "%s", config);
  snprintf(theirs, sizeof theirs, "%s", config);
  MPI_Bcast(expected, sizeof expected, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(theirs, sizeof theirs, MPI_CHAR, first, MPI_COMM_WORLD);
  first_difference(expected, theirs, first, what, sizeof what);
  return tsr_error_set(err, TSR_EINVAL,
                       "ranks run different configurations: rank(s) %s differ from rank 0: %s; "
                       "start every rank with the same options and data",
                       differ, what);
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

int tsr__dist_any_lagged(bool mine, bool *any) {
  *any = mine;
  if (!active || size == 1) return 0;
  *any = false;
  if (lag_req != MPI_REQUEST_NULL) {
    if (MPI_Wait(&lag_req, MPI_STATUS_IGNORE) != MPI_SUCCESS) return TSR_ERUNTIME;
    *any = lag_out != 0;
  }
  if (*any) return 0; /* every rank learnt it here: none starts another */
  lag_in = mine;
  return MPI_Iallreduce(&lag_in, &lag_out, 1, MPI_INT, MPI_LOR, lag_comm, &lag_req) == MPI_SUCCESS
             ? 0
             : TSR_ERUNTIME;
}

bool tsr__dist_any_settle(bool mine) {
  bool was = false;
  if (active && lag_req != MPI_REQUEST_NULL && MPI_Wait(&lag_req, MPI_STATUS_IGNORE) == MPI_SUCCESS)
    was = lag_out != 0;
  return tsr_dist_any(mine || was);
}

void tsr_dist_stop(void) {
  /* An agreement left in flight (an error every rank agreed on mid-epoch): every rank started
   * it, so it completes. */
  if (active && lag_req != MPI_REQUEST_NULL) MPI_Wait(&lag_req, MPI_STATUS_IGNORE);
  if (active && lag_comm != MPI_COMM_NULL) MPI_Comm_free(&lag_comm);
  if (active && we_started) {
    int finalized;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  active = false;
}
