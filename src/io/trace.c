/* The timeline file: a run's collected tasks and spans (src/runtime/
 * observe.c) as Chrome trace-event JSON, which Perfetto and chrome://tracing
 * open: a process per rank, a track per worker and one for the main thread. A task's event is
 * named by its codelet (so that a viewer groups a codelet's tasks), its layer, step, tile,
 * priority, job id and dependencies in its args; transfers between ranks are flow events
 * (src/io/trace_graph.c infers both). tessera trace-summary reads the file back
 * (trace_summary.c). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/trace_graph.h"
#include "runtime/observe.h"
#include "tessera/runtime.h"

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

/* Streams the events with fprintf rather than building a cJSON tree: a run
 * has millions of tasks, and every string written is a codelet, worker or
 * span name (escaped all the same). */
static bool write_trace(FILE *f, const tsr_trace_t *tr, const tsr_trace_graph_t *g) {
  int ranks = tsr__trace_ranks(tr);
  int64_t from, to, last;
  tsr__trace_steps(tr, &from, &to, &last);
  fprintf(f,
          "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"tessera, StarPU task "
          "profiling\",\"format\":2,\"ranks\":%d,\"steps\":",
          ranks);
  if (from > 0)
    fprintf(f, "[%lld,%lld]", (long long)from, (long long)to);
  else
    fprintf(f, "null");
  fprintf(f, ",\"last_step\":%lld,\"sched\":", (long long)last);
  json_string(f, tsr_runtime_sched());
  /* Bytes between each rank's memory nodes (CPU RAM, OpenCL devices' memory) over the run. */
  fprintf(f, ",\"memory_transfers\":[");
  bool first_bus = true;
  for (int r = 0; r < ranks; r++) {
    const tsr_bus_stats_t *b;
    int nb = tsr__trace_buses(tr, r, &b);
    for (int i = 0; i < nb; i++) {
      if (b[i].transfers == 0) continue;
      fprintf(f, "%s{\"rank\":%d,\"src\":%d,\"dst\":%d,\"src_name\":", first_bus ? "" : ",", r,
              b[i].src, b[i].dst);
      json_string(f, b[i].src_name);
      fprintf(f, ",\"dst_name\":");
      json_string(f, b[i].dst_name);
      fprintf(f, ",\"bytes\":%lld,\"transfers\":%d}", (long long)b[i].bytes, b[i].transfers);
      first_bus = false;
    }
  }
  fprintf(f, "]},\"traceEvents\":[\n");
  bool first = true;
#define SEP() (first ? (first = false, "") : ",\n")
  for (int r = 0; r < ranks; r++) {
    fprintf(f,
            "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
            SEP(), r, r);
    fprintf(
        f,
        ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}",
        r, r);
    for (int w = 0; w < tsr__trace_workers(tr, r); w++) {
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
              r, w);
      json_string(f, tsr__trace_worker_name(tr, r, w));
      fprintf(f, "}}");
    }
    fprintf(f,
            ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1000,\"args\":{\"name\":"
            "\"main thread (submission, waits, synchronization)\"}}",
            r);
  }
  int64_t n = tsr__trace_count(tr);
  for (int64_t k = 0; k < n; k++) {
    tsr_trace_event_t e;
    tsr__trace_event(tr, k, &e);
    if (e.span) {
      fprintf(f, "%s{\"name\":", SEP());
      json_string(f, e.name);
      fprintf(f, ",\"cat\":\"sync\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":1000}",
              e.ts, e.dur, e.rank);
      continue;
    }
    fprintf(f, "%s{\"name\":", SEP());
    json_string(f, e.name);
    /* Step 0: evaluation, start-up, epoch ends. */
    fprintf(f,
            ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"layer\":%d,\"step\":%lld,\"tile\":[%d,%d],\"priority\":%d,\"mpi\":%s,"
            "\"id\":%lld,",
            e.mpi ? "mpi" : "task", e.ts, e.dur, e.rank, e.worker, e.layer, (long long)e.batch,
            e.ti, e.tj, e.priority, e.mpi ? "true" : "false", (long long)g->id[k]);
    if (e.impl) fprintf(f, "\"impl\":\"%s\",", e.impl); /* which of the codelet's ran */
    fprintf(f, "\"deps\":[");
    for (int64_t d = g->dep_start[k]; d < g->dep_start[k + 1]; d++)
      fprintf(f, "%s%lld", d > g->dep_start[k] ? "," : "", (long long)g->id[g->deps[d]]);
    fprintf(f, "]}}");
  }
  /* Flows bind to the slice around their time on their track: the middle of each task. */
  for (int64_t i = 0; i < g->nflows; i++) {
    tsr_trace_event_t a, b;
    tsr__trace_event(tr, g->flow_from[i], &a);
    tsr__trace_event(tr, g->flow_to[i], &b);
    fprintf(f,
            "%s{\"name\":\"transfer\",\"cat\":\"mpi\",\"ph\":\"s\",\"id\":%lld,\"ts\":%.3f,"
            "\"pid\":%d,\"tid\":%d,\"args\":{\"task\":%lld,\"tag\":%llu}}",
            SEP(), (long long)i + 1, a.ts + a.dur / 2, a.rank, a.worker,
            (long long)g->id[g->flow_from[i]], (unsigned long long)g->flow_tag[i]);
    fprintf(f,
            ",\n{\"name\":\"transfer\",\"cat\":\"mpi\",\"ph\":\"f\",\"bp\":\"e\",\"id\":%lld,"
            "\"ts\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{\"task\":%lld,\"tag\":%llu}}",
            (long long)i + 1, b.ts + b.dur / 2, b.rank, b.worker, (long long)g->id[g->flow_to[i]],
            (unsigned long long)g->flow_tag[i]);
  }
#undef SEP
  fprintf(f, "\n]}\n");
  return !ferror(f);
}

int tsr_runtime_trace_write(const char *path, tsr_errbuf_t *err) {
  tsr_trace_t *tr;
  int rc = tsr__trace_collect(&tr, err);
  if (rc || !tr) return rc; /* ranks other than 0 end here */
  tsr_trace_graph_t g;
  if (tsr__trace_graph_build(&g, tr)) {
    tsr__trace_free(&tr);
    return tsr_error_set(err, TSR_ENOMEM, "--trace %s: out of memory for the dependencies", path);
  }
  FILE *f = fopen(path, "w");
  if (!f) {
    int e = errno;
    tsr__trace_graph_fini(&g);
    tsr__trace_free(&tr);
    return tsr_error_set(err, TSR_EIO, "--trace %s: cannot open for writing: %s", path,
                         strerror(e));
  }
  struct stat st;
  bool regular = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
  errno = 0;
  bool ok = write_trace(f, tr, &g);
  tsr__trace_graph_fini(&g);
  int e = ok ? 0 : errno; /* the write that failed */
  if (fclose(f) != 0 && ok) ok = false, e = errno;
  int64_t dropped = tsr__trace_dropped(tr), from, to, last;
  tsr__trace_steps(tr, &from, &to, &last);
  int64_t tasks = 0;
  for (int64_t k = 0; k < tsr__trace_count(tr); k++) {
    tsr_trace_event_t e;
    tsr__trace_event(tr, k, &e);
    tasks += !e.span;
  }
  tsr__trace_free(&tr);
  if (!ok) {
    /* A cut trace is not JSON: nothing is better. Only a regular file, never /dev/full. */
    bool removed = regular && unlink(path) == 0;
    return tsr_error_set(err, TSR_EIO, "--trace %s: cannot write: %s%s", path,
                         strerror(e ? e : EIO), removed ? "; the partial file was removed" : "");
  }
  if (dropped)
    fprintf(stderr,
            "tessera: the trace buffer was full: %lld tasks not recorded "
            "(TSR_TRACE_CAPACITY raises it)\n",
            (long long)dropped);
  if (from > 0 && tasks == 0)
    fprintf(stderr,
            "tessera: --trace-steps %lld-%lld: the run's last step was %lld; the trace holds "
            "no task\n",
            (long long)from, (long long)to, (long long)last);
  return 0;
}
