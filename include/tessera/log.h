/* Metrics log: JSON Lines. The first line is the run's provenance ("event": "run": tessera's
 * version, the command line, hosts, ranks, start time, libraries, the whole configuration);
 * then one object per epoch, each carrying the run's identity (model, scheduler, batch, tiles,
 * workers) so that lines from several runs can be plotted together, and with a step interval
 * a line ("event": "step") every so many steps. A float is written with the fewest digits that
 * read back as the same float ("lr": 0.01). */
#ifndef TESSERA_LOG_H
#define TESSERA_LOG_H

#include <stdbool.h>
#include <stdio.h>

#include "tessera/error.h"
#include "tessera/runtime.h"
#include "tessera/train.h"

TSR_EXTERN_C_BEGIN

/* One entry of the configuration in the run line: key and a value of its kind. */
typedef enum {
  TSR_LOG_NULL,
  TSR_LOG_BOOL,
  TSR_LOG_INT,
  TSR_LOG_FLOAT,
  TSR_LOG_TEXT
} tsr_log_kind_t;
typedef struct {
  const char *key;     /* borrowed */
  tsr_log_kind_t kind; /* FLOAT: number holds a float, written with its shortest digits */
  double number;       /* BOOL (0 or 1), INT, FLOAT */
  const char *text;    /* TEXT, borrowed; NULL writes null */
} tsr_log_field_t;

typedef struct {
  const char *model;
  const char *sched;
  const char *optimizer;
  const char *sync;         /* synchronization policy across ranks ("none" for one process) */
  const char *mpi_progress; /* tsr_runtime_mpi_progress(); NULL: "none" */
  int batch, tile_rows, tile_cols, workers;
  double lr;
  unsigned long long seed;
  bool no_priorities; /* task priorities were turned off */
  /* The run line's provenance, all borrowed until tsr_log_open returns (NULL, 0: left out):
   * the command line, each rank's host (hosts[q] for rank q of ranks), when the command
   * started (seconds since 1970; 0: now), and the configuration, one field per option. */
  int argc;
  char *const *argv;
  int ranks;
  const char *const *hosts;
  double started;
  const tsr_log_field_t *config;
  int nconfig;
  /* A resumed run: the checkpoint it goes on from (borrowed; NULL: a new run), where that
   * stood (epochs done, steps of the next), written as the run line's "resumed". */
  const char *resumed;
  int resumed_epoch;
  int64_t resumed_step;
} tsr_run_info_t;

typedef struct tsr_log tsr_log_t;

/* Checks, before a run spends any time, that an output file it will write at
 * some point (what names the option, e.g. "--log") can be created: path is
 * opened for writing, created if missing and then removed again, an existing
 * file's contents left as they are. A folder is refused; a path that exists
 * and is not a regular file (a pipe, /dev/stdout) is accepted unopened. */
TSR_API int tsr_output_check(const char *path, const char *what, tsr_errbuf_t *err);

/* Opens path for appending (creating it) and writes the run line: a log grows by each run
 * written to it, never cut (docs/training.md, "Logs"). *log is owned by the caller; *held (may
 * be NULL) says whether the file held lines before. */
TSR_API int tsr_log_open(tsr_log_t **log, const char *path, const tsr_run_info_t *run, bool *held,
                         tsr_errbuf_t *err);
/* Appends one line, written whole straight to the file, so a crashed run
 * keeps its epochs. A line that cannot be written entirely (a full disk) is
 * cut off again so that no half line stays, and TSR_EIO returned with errno
 * saying why; the same holds for every line below. */
TSR_API int tsr_log_epoch(tsr_log_t *log, const tsr_epoch_stats_t *st);
/* Appends a step line ("event": "step"): epoch, step, step_in_epoch, loss, accuracy, lr,
 * samples_per_s, seconds (tsr_train_opts_t.on_step). */
TSR_API int tsr_log_step(tsr_log_t *log, const tsr_step_stats_t *st);
/* Appends an evaluation line ("event": "eval"): epoch, step, step_in_epoch, steps, samples,
 * tokens (samples x positions, language models), set ("val" or "test"), evaluated, loss,
 * accuracy, bpb (loss / ln 2, language models), agreed, seconds (tsr_train_opts_t.on_eval). */
TSR_API int tsr_log_eval(tsr_log_t *log, const tsr_eval_stats_t *st);
/* Appends the run's statistics as one object with "event": "stats": per
 * worker of each rank seconds, executing, idle, overhead, tasks and tasks
 * per codelet; bytes per bus; trace events recorded. */
TSR_API int tsr_log_stats(tsr_log_t *log, const tsr_run_stats_t *st);
/* Appends every rank's totals of the run (tsr_train_opts_t.on_ranks) as one
 * object with "event": "ranks" and an array "ranks" of {rank, seconds,
 * sync_seconds, bytes_sent, bytes_received, messages_sent,
 * messages_received}. */
TSR_API int tsr_log_ranks(tsr_log_t *log, const tsr_rank_stats_t *ranks, int n);
/* Prints the same as a table, with each rank's share of the bytes. */
TSR_API void tsr_rank_stats_print(FILE *out, const tsr_rank_stats_t *ranks, int n);
TSR_API void tsr_log_close(tsr_log_t **log);
/* v with the fewest significant digits (1 to 9) that strtof reads back as v: "0.01", not
 * "0.00999999977648258"; "nan", "inf", "-inf" as printf writes them. Into buf (size bytes, 16
 * suffice). */
TSR_API void tsr_float_text(char *buf, size_t size, float v);

TSR_EXTERN_C_END

#endif
