/* JSON Lines metrics log written with cJSON, opened by the run's provenance line. A float (a
 * learning rate) is written with its shortest exact digits, as cJSON's %.17g of its double
 * would show "0.00999999977648258" for 0.01f. JSON has no NaN or infinity: a
 * number that is not finite (a diverged loss) is written as the string "nan",
 * "inf" or "-inf", and null means a value that does not exist (test metrics
 * without a test set). Each line is formatted in memory
 * and written whole: a line that cannot be written entirely (a full disk) is
 * cut off again, so the file never ends in half an object. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tessera/log.h"

struct tsr_log {
  int fd;
  off_t end;          /* bytes of whole lines written: where a failed line is cut back to */
  tsr_run_info_t run; /* strings copied below */
  char *model;        /* whole, however long */
  char sched[64], optimizer[32], sync[64], mpi_progress[16];
};

int tsr_output_check(const char *path, const char *what, tsr_errbuf_t *err) {
  struct stat st;
  bool existed = stat(path, &st) == 0;
  if (existed && S_ISDIR(st.st_mode))
    return tsr_error_set(err, TSR_EIO, "%s %s: is a folder; give a file name", what, path);
  if (existed && !S_ISREG(st.st_mode)) return 0;
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0)
    return tsr_error_set(err, TSR_EIO, "%s %s: cannot create: %s", what, path, strerror(errno));
  close(fd);
  if (!existed) unlink(path);
  return 0;
}

void tsr_float_text(char *buf, size_t size, float v) {
  if (!isfinite(v)) {
    snprintf(buf, size, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
    return;
  }
  for (int digits = 1; digits <= 9; digits++) { /* 9 always reads back */
    snprintf(buf, size, "%.*g", digits, (double)v);
    if (strtof(buf, NULL) == v) return;
  }
}

static void add_number(cJSON *o, const char *key, double v);

/* A float's shortest digits as a raw JSON number (not finite: the string, as add_number). */
static void add_float(cJSON *o, const char *key, float v) {
  char text[32];
  if (!isfinite(v)) {
    add_number(o, key, v);
    return;
  }
  tsr_float_text(text, sizeof text, v);
  cJSON_AddRawToObject(o, key, text);
}

static int write_line(tsr_log_t *log, cJSON *o);

/* The run line's configuration, one member per field. */
static void add_config(cJSON *o, const tsr_log_field_t *f, int n) {
  for (int i = 0; o && i < n; i++) {
    switch (f[i].kind) {
    case TSR_LOG_BOOL: cJSON_AddBoolToObject(o, f[i].key, f[i].number != 0); break;
    case TSR_LOG_INT: cJSON_AddNumberToObject(o, f[i].key, f[i].number); break;
    case TSR_LOG_FLOAT: add_float(o, f[i].key, (float)f[i].number); break;
    case TSR_LOG_TEXT:
      if (f[i].text)
        cJSON_AddStringToObject(o, f[i].key, f[i].text);
      else
        cJSON_AddNullToObject(o, f[i].key);
      break;
    case TSR_LOG_NULL: cJSON_AddNullToObject(o, f[i].key); break;
    }
  }
}

/* The first line: what ran, where, when, with what. */
static int write_run(tsr_log_t *log, const tsr_run_info_t *run) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return TSR_ENOMEM;
  cJSON_AddStringToObject(o, "event", "run");
  cJSON_AddStringToObject(o, "tessera", tsr_version());
  cJSON_AddStringToObject(o, "git", tsr_version_git());
  cJSON *cmd = cJSON_AddArrayToObject(o, "command");
  for (int i = 0; cmd && i < run->argc; i++)
    cJSON_AddItemToArray(cmd, cJSON_CreateString(run->argv[i]));
  time_t t = run->started > 0 ? (time_t)run->started : time(NULL);
  struct tm tm;
  char when[32] = "";
  if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  cJSON_AddStringToObject(o, "started", when);
  cJSON_AddNumberToObject(o, "ranks", run->ranks > 0 ? run->ranks : 1);
  /* Each host once, in the order of its first rank; rank_hosts says where each rank ran. */
  cJSON *hosts = cJSON_AddArrayToObject(o, "hosts");
  for (int q = 0; hosts && run->hosts && q < run->ranks; q++) {
    bool seen = false;
    for (int p = 0; p < q && !seen; p++)
      seen = strcmp(run->hosts[p], run->hosts[q]) == 0;
    if (!seen) cJSON_AddItemToArray(hosts, cJSON_CreateString(run->hosts[q]));
  }
  if (run->hosts && run->ranks > 1) {
    cJSON *rh = cJSON_AddArrayToObject(o, "rank_hosts");
    for (int q = 0; rh && q < run->ranks; q++)
      cJSON_AddItemToArray(rh, cJSON_CreateString(run->hosts[q]));
  }
  char libs[512];
  tsr_versions(libs, sizeof libs);
  cJSON_AddStringToObject(o, "libraries", libs);
  add_config(cJSON_AddObjectToObject(o, "config"), run->config, run->nconfig);
  cJSON *from = run->resumed ? cJSON_AddObjectToObject(o, "resumed") : NULL;
  if (from) {
    cJSON_AddStringToObject(from, "checkpoint", run->resumed);
    cJSON_AddNumberToObject(from, "epoch", run->resumed_epoch);
    cJSON_AddNumberToObject(from, "step_in_epoch", (double)run->resumed_step);
  }
  return write_line(log, o);
}

int tsr_log_open(tsr_log_t **out, const char *path, const tsr_run_info_t *run, bool *held,
                 tsr_errbuf_t *err) {
  *out = NULL;
  if (held) *held = false;
  tsr_log_t *log = calloc(1, sizeof *log);
  if (!log) return TSR_ENOMEM;
  log->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  if (log->fd < 0) {
    int e = errno;
    free(log);
    return tsr_error_set(err, TSR_EIO, "--log %s: cannot open for writing: %s", path, strerror(e));
  }
  /* A failed line is cut back to the end of the lines before it, this run's or earlier ones'
   * (a pipe has no end: 0, and is never cut). */
  off_t end = lseek(log->fd, 0, SEEK_END);
  log->end = end > 0 ? end : 0;
  if (held) *held = end > 0;
  log->run = *run;
  log->model = strdup(run->model ? run->model : "");
  if (!log->model) {
    close(log->fd);
    free(log);
    return tsr_error_set(err, TSR_ENOMEM, "--log %s: out of memory", path);
  }
  snprintf(log->sched, sizeof log->sched, "%s", run->sched ? run->sched : "");
  snprintf(log->optimizer, sizeof log->optimizer, "%s", run->optimizer ? run->optimizer : "");
  snprintf(log->sync, sizeof log->sync, "%s", run->sync ? run->sync : "none");
  snprintf(log->mpi_progress, sizeof log->mpi_progress, "%s",
           run->mpi_progress ? run->mpi_progress : "none");
  int rc = write_run(log, run);
  if (rc) {
    int e = errno;
    close(log->fd);
    free(log->model), free(log);
    return rc == TSR_EIO ? tsr_error_set(err, TSR_EIO, "--log %s: cannot write the run line: %s",
                                         path, strerror(e))
                         : tsr_error_set(err, rc, "--log %s: out of memory", path);
  }
  *out = log;
  return 0;
}

static void add_number(cJSON *o, const char *key, double v) {
  if (isfinite(v))
    cJSON_AddNumberToObject(o, key, v);
  else
    cJSON_AddStringToObject(o, key, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

/* A number, or null when it does not exist. */
static void add_optional(cJSON *o, const char *key, bool exists, double v) {
  if (exists)
    add_number(o, key, v);
  else
    cJSON_AddNullToObject(o, key);
}

/* Writes o as one line, straight to the file; takes o. A line written in part
 * is cut off again (where the file can be truncated), leaving errno as the
 * write failed. */
static int write_line(tsr_log_t *log, cJSON *o) {
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!text) return TSR_ENOMEM;
  size_t len = strlen(text);
  char *line = malloc(len + 1);
  if (!line) {
    cJSON_free(text);
    return TSR_ENOMEM;
  }
  memcpy(line, text, len);
  line[len++] = '\n';
  cJSON_free(text);
  size_t done = 0;
  while (done < len) { /* one write, unless a pipe or a signal takes part of it */
    ssize_t k = write(log->fd, line + done, len - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = ENOSPC;
      break;
    }
    done += (size_t)k;
  }
  free(line);
  if (done == len) {
    log->end += (off_t)len;
    return 0;
  }
  int e = errno;
  if (done > 0 && ftruncate(log->fd, log->end) == 0) lseek(log->fd, log->end, SEEK_SET);
  errno = e;
  return TSR_EIO;
}

/* One rank's share and time, as the epoch lines and the ranks' line write them. */
static void add_work(cJSON *x, const tsr_rank_work_t *w) {
  add_number(x, "share", w->share);
  cJSON_AddNumberToObject(x, "samples", (double)w->samples);
  cJSON_AddNumberToObject(x, "steps", (double)w->steps);
  add_number(x, "compute_seconds", w->compute_seconds);
  add_number(x, "wait_seconds", w->wait_seconds);
}

int tsr_log_epoch(tsr_log_t *log, const tsr_epoch_stats_t *st) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return TSR_ENOMEM;
  cJSON_AddNumberToObject(o, "epoch", st->epoch);
  add_number(o, "loss", st->loss);
  add_number(o, "train_accuracy", st->train_accuracy);
  add_optional(o, "test_loss", st->test_samples > 0, st->test_loss);
  add_optional(o, "test_accuracy", st->test_samples > 0, st->test_accuracy);
  add_optional(o, "val_loss", st->val_samples > 0, st->val_loss);
  add_optional(o, "val_accuracy", st->val_samples > 0, st->val_accuracy);
  if (st->lr_factor != 1 && st->lr_factor > 0) add_number(o, "lr_factor", st->lr_factor);
  if (st->stopped) cJSON_AddStringToObject(o, "stopped", st->stopped);
  add_number(o, "seconds", st->seconds);
  add_number(o, "eval_seconds", st->eval_seconds);
  add_number(o, "samples_per_s", st->samples_per_s);
  if (st->positions > 1) { /* a language model: tokens and bits per byte */
    add_number(o, "tokens_per_s", st->samples_per_s * st->positions);
    cJSON_AddNumberToObject(o, "tokens", (double)st->samples * st->positions);
    add_optional(o, "test_bpb", st->test_samples > 0, st->test_loss / M_LN2);
    add_optional(o, "val_bpb", st->val_samples > 0, st->val_loss / M_LN2);
  }
  cJSON_AddNumberToObject(o, "ranks", st->ranks > 0 ? st->ranks : 1);
  cJSON_AddStringToObject(o, "sync", log->sync);
  cJSON_AddStringToObject(o, "mpi_progress", log->mpi_progress);
  add_number(o, "sync_seconds", st->sync_seconds);
  cJSON_AddNumberToObject(o, "bytes_sent", (double)st->bytes_sent);
  cJSON_AddNumberToObject(o, "bytes_received", (double)st->bytes_received);
  cJSON_AddNumberToObject(o, "messages_sent", (double)st->messages_sent);
  cJSON_AddNumberToObject(o, "messages_received", (double)st->messages_received);
  cJSON_AddNumberToObject(o, "averages", (double)st->averages);
  cJSON_AddNumberToObject(o, "group_averages", (double)st->group_averages);
  if (st->per_rank) {
    /* --grid: each rank's transfers inside its grid column and across columns. */
    char grid[32];
    snprintf(grid, sizeof grid, "%dx%d", st->grid_rows, st->grid_cols);
    cJSON_AddStringToObject(o, "grid", grid);
    cJSON *rs = cJSON_AddArrayToObject(o, "per_rank");
    for (int q = 0; rs && q < st->ranks; q++) {
      const tsr_rank_traffic_t *r = &st->per_rank[q];
      cJSON *x = cJSON_CreateObject();
      if (!x) break;
      cJSON_AddNumberToObject(x, "rank", r->rank);
      cJSON_AddNumberToObject(x, "grid_bytes_sent", (double)r->grid_bytes_sent);
      cJSON_AddNumberToObject(x, "grid_bytes_received", (double)r->grid_bytes_received);
      cJSON_AddNumberToObject(x, "grid_messages_sent", (double)r->grid_messages_sent);
      cJSON_AddNumberToObject(x, "grid_messages_received", (double)r->grid_messages_received);
      cJSON_AddNumberToObject(x, "sync_bytes_sent", (double)r->sync_bytes_sent);
      cJSON_AddNumberToObject(x, "sync_bytes_received", (double)r->sync_bytes_received);
      cJSON_AddNumberToObject(x, "sync_messages_sent", (double)r->sync_messages_sent);
      cJSON_AddNumberToObject(x, "sync_messages_received", (double)r->sync_messages_received);
      cJSON_AddNumberToObject(x, "measured_sent_inside", (double)r->measured_sent_inside);
      cJSON_AddNumberToObject(x, "measured_sent_across", (double)r->measured_sent_across);
      cJSON_AddNumberToObject(x, "halo_bytes_sent", (double)r->halo_bytes_sent);
      cJSON_AddNumberToObject(x, "halo_messages_sent", (double)r->halo_messages_sent);
      cJSON_AddItemToArray(rs, x);
    }
  }
  cJSON *ws = st->work ? cJSON_AddArrayToObject(o, "work") : NULL;
  for (int q = 0; ws && q < st->ranks; q++) {
    cJSON *x = cJSON_CreateObject();
    if (!x) break;
    cJSON_AddNumberToObject(x, "rank", q);
    add_work(x, &st->work[q]);
    cJSON_AddItemToArray(ws, x);
  }
  cJSON_AddStringToObject(o, "model", log->model);
  cJSON_AddStringToObject(o, "sched", log->sched);
  cJSON_AddStringToObject(o, "optimizer", log->optimizer);
  add_float(o, "lr", (float)log->run.lr);
  add_float(o, "lr_end", (float)st->lr_end);
  cJSON_AddNumberToObject(o, "batch", log->run.batch);
  cJSON_AddNumberToObject(o, "tile_rows", log->run.tile_rows);
  cJSON_AddNumberToObject(o, "tile_cols", log->run.tile_cols);
  cJSON_AddNumberToObject(o, "workers", log->run.workers);
  cJSON_AddNumberToObject(o, "seed", (double)log->run.seed);
  cJSON_AddBoolToObject(o, "priorities", !log->run.no_priorities);
  return write_line(log, o);
}

int tsr_log_step(tsr_log_t *log, const tsr_step_stats_t *st) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return TSR_ENOMEM;
  cJSON_AddStringToObject(o, "event", "step");
  cJSON_AddNumberToObject(o, "epoch", st->epoch);
  cJSON_AddNumberToObject(o, "step", (double)st->step);
  cJSON_AddNumberToObject(o, "step_in_epoch", (double)st->step_in_epoch);
  cJSON_AddNumberToObject(o, "steps", (double)st->steps);
  add_number(o, "loss", st->loss);
  add_number(o, "accuracy", st->accuracy);
  add_float(o, "lr", (float)st->lr);
  add_number(o, "samples_per_s", st->samples_per_s);
  add_number(o, "seconds", st->seconds);
  return write_line(log, o);
}

int tsr_log_eval(tsr_log_t *log, const tsr_eval_stats_t *st) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return TSR_ENOMEM;
  cJSON_AddStringToObject(o, "event", "eval");
  cJSON_AddNumberToObject(o, "epoch", st->epoch);
  cJSON_AddNumberToObject(o, "step", (double)st->step);
  cJSON_AddNumberToObject(o, "step_in_epoch", (double)st->step_in_epoch);
  cJSON_AddNumberToObject(o, "steps", (double)st->steps);
  cJSON_AddNumberToObject(o, "samples", (double)st->samples);
  if (st->positions > 1)
    cJSON_AddNumberToObject(o, "tokens", (double)st->samples * (double)st->positions);
  cJSON_AddStringToObject(o, "set", st->set);
  cJSON_AddNumberToObject(o, "evaluated", (double)st->evaluated);
  add_number(o, "loss", st->loss);
  add_number(o, "accuracy", st->accuracy);
  if (st->positions > 1) add_number(o, "bpb", st->loss / M_LN2);
  cJSON_AddBoolToObject(o, "agreed", st->agreed);
  add_number(o, "seconds", st->seconds);
  return write_line(log, o);
}

int tsr_log_stats(tsr_log_t *log, const tsr_run_stats_t *st) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return TSR_ENOMEM;
  cJSON_AddStringToObject(o, "event", "stats");
  cJSON_AddStringToObject(o, "model", log->model);
  cJSON_AddStringToObject(o, "sched", log->sched);
  cJSON_AddNumberToObject(o, "tile_rows", log->run.tile_rows);
  cJSON_AddNumberToObject(o, "tile_cols", log->run.tile_cols);
  cJSON *ws = cJSON_AddArrayToObject(o, "workers");
  for (int i = 0; ws && i < st->nworkers; i++) {
    const tsr_worker_stats_t *w = &st->workers[i];
    cJSON *x = cJSON_CreateObject();
    if (!x) break;
    cJSON_AddNumberToObject(x, "rank", w->rank);
    cJSON_AddNumberToObject(x, "worker", w->worker);
    cJSON_AddStringToObject(x, "name", w->name);
    add_number(x, "seconds", w->seconds);
    add_number(x, "executing", w->executing);
    add_number(x, "idle", w->idle);
    add_number(x, "overhead", w->overhead);
    cJSON_AddNumberToObject(x, "tasks", (double)w->tasks);
    cJSON *per = cJSON_AddObjectToObject(x, "codelets");
    for (int c = 0; per && c < st->ncodelets; c++)
      if (w->codelet_tasks[c])
        cJSON_AddNumberToObject(per, st->codelets[c], (double)w->codelet_tasks[c]);
    cJSON_AddItemToArray(ws, x);
  }
  cJSON *bs = cJSON_AddArrayToObject(o, "buses");
  for (int b = 0; bs && b < st->nbuses; b++) {
    cJSON *x = cJSON_CreateObject();
    if (!x) break;
    cJSON_AddNumberToObject(x, "rank", st->buses[b].rank);
    cJSON_AddNumberToObject(x, "src", st->buses[b].src);
    cJSON_AddNumberToObject(x, "dst", st->buses[b].dst);
    cJSON_AddStringToObject(x, "src_name", st->buses[b].src_name);
    cJSON_AddStringToObject(x, "dst_name", st->buses[b].dst_name);
    cJSON_AddNumberToObject(x, "bytes", (double)st->buses[b].bytes);
    cJSON_AddNumberToObject(x, "transfers", st->buses[b].transfers);
    cJSON_AddItemToArray(bs, x);
  }
  cJSON_AddNumberToObject(o, "trace_events", (double)st->trace_events);
  cJSON_AddNumberToObject(o, "trace_dropped", (double)st->trace_dropped);
  return write_line(log, o);
}

int tsr_log_ranks(tsr_log_t *log, const tsr_rank_stats_t *ranks, int n) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return TSR_ENOMEM;
  cJSON_AddStringToObject(o, "event", "ranks");
  cJSON_AddStringToObject(o, "sync", log->sync);
  cJSON *rs = cJSON_AddArrayToObject(o, "ranks");
  for (int q = 0; rs && q < n; q++) {
    const tsr_rank_stats_t *r = &ranks[q];
    cJSON *x = cJSON_CreateObject();
    if (!x) break;
    cJSON_AddNumberToObject(x, "rank", r->rank);
    add_number(x, "seconds", r->seconds);
    add_number(x, "sync_seconds", r->sync_seconds);
    cJSON_AddNumberToObject(x, "bytes_sent", (double)r->bytes_sent);
    cJSON_AddNumberToObject(x, "bytes_received", (double)r->bytes_received);
    cJSON_AddNumberToObject(x, "messages_sent", (double)r->messages_sent);
    cJSON_AddNumberToObject(x, "messages_received", (double)r->messages_received);
    add_work(x, &r->work);
    cJSON_AddItemToArray(rs, x);
  }
  return write_line(log, o);
}

void tsr_log_close(tsr_log_t **lp) {
  if (!*lp) return;
  close((*lp)->fd);
  free((*lp)->model), free(*lp);
  *lp = NULL;
}
