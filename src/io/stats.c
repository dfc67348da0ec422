/* The tables that --stats prints at the end of a run: per worker (the
 * numbers come from src/runtime/observe.c) and, under MPI, per rank
 * (tsr_train's totals). */
#include <stdio.h>
#include <string.h>

#include "tessera/log.h"
#include "tessera/runtime.h"

void tsr_run_stats_print(FILE *out, const tsr_run_stats_t *st) {
  fprintf(out, "\nworker statistics (StarPU profiling)\n");
  fprintf(out, "  %-4s %-22s %9s %9s %7s %7s %9s %9s\n", "rank", "worker", "seconds", "executing",
          "idle", "overhd", "tasks", "tasks/s");
  for (int i = 0; i < st->nworkers; i++) {
    const tsr_worker_stats_t *w = &st->workers[i];
    double pct = w->seconds > 0 ? 100.0 / w->seconds : 0;
    fprintf(out, "  %-4d %-22s %9.3f %8.1f%% %6.1f%% %6.1f%% %9lld %9.0f\n", w->rank, w->name,
            w->seconds, w->executing * pct, w->idle * pct, w->overhead * pct, (long long)w->tasks,
            w->seconds > 0 ? (double)w->tasks / w->seconds : 0.0);
  }
  /* Per kind of worker (CPU, OpenCL, CUDA: the first word of StarPU's worker names), so a
   * run with devices shows at a glance what ran where. */
  char kinds[4][16] = {{0}};
  int64_t kind_tasks[4] = {0};
  int nkinds = 0;
  for (int i = 0; i < st->nworkers; i++) {
    char kind[16];
    snprintf(kind, sizeof kind, "%.*s", (int)strcspn(st->workers[i].name, " "),
             st->workers[i].name);
    int k = 0;
    while (k < nkinds && strcmp(kinds[k], kind) != 0)
      k++;
    if (k == nkinds) {
      if (nkinds == 4) continue;
      snprintf(kinds[nkinds++], sizeof kinds[0], "%s", kind);
    }
    kind_tasks[k] += st->workers[i].tasks;
  }
  fprintf(out, "  tasks per worker kind:");
  for (int k = 0; k < nkinds; k++)
    fprintf(out, "%s %s %lld", k ? "," : "", kinds[k], (long long)kind_tasks[k]);
  fprintf(out, "\n");
  /* With several kinds, which codelets each kind ran. */
  for (int k = 0; nkinds > 1 && k < nkinds; k++) {
    fprintf(out, "  %s tasks per codelet:", kinds[k]);
    int shown = 0;
    for (int c = 0; c < st->ncodelets; c++) {
      int64_t n = 0;
      for (int i = 0; i < st->nworkers; i++)
        if (strncmp(st->workers[i].name, kinds[k], strlen(kinds[k])) == 0 &&
            (st->workers[i].name[strlen(kinds[k])] == ' ' ||
             st->workers[i].name[strlen(kinds[k])] == '\0'))
          n += st->workers[i].codelet_tasks[c];
      if (n) fprintf(out, "%s %s %lld", shown++ ? "," : "", st->codelets[c], (long long)n);
    }
    fprintf(out, "%s\n", shown ? "" : " none");
  }
  fprintf(out, "  tasks per codelet:");
  for (int c = 0; c < st->ncodelets; c++) {
    int64_t n = 0;
    for (int i = 0; i < st->nworkers; i++)
      n += st->workers[i].codelet_tasks[c];
    fprintf(out, "%s %s %lld", c ? "," : "", st->codelets[c], (long long)n);
  }
  fprintf(out, "\n");
  int64_t bytes = 0;
  for (int b = 0; b < st->nbuses; b++) {
    if (st->buses[b].transfers == 0) continue;
    const tsr_bus_stats_t *bs = &st->buses[b];
    fprintf(out, "  rank %d memory node %d -> %d: %.3f MB in %d transfers (%s -> %s)\n", bs->rank,
            bs->src, bs->dst, 1e-6 * (double)bs->bytes, bs->transfers,
            bs->src_name[0] ? bs->src_name : "?", bs->dst_name[0] ? bs->dst_name : "?");
    bytes += st->buses[b].bytes;
  }
  if (bytes == 0) fprintf(out, "  no transfers between memory nodes (one memory node per rank)\n");
}

void tsr_rank_stats_print(FILE *out, const tsr_rank_stats_t *ranks, int n) {
  uint64_t most = 0, total = 0;
  for (int q = 0; q < n; q++) {
    total += ranks[q].bytes_sent;
    most = ranks[q].bytes_sent > most ? ranks[q].bytes_sent : most;
  }
  fprintf(out, "\nranks (synchronization over the run)\n");
  fprintf(out, "  %-4s %9s %9s %12s %12s %9s %9s %6s %8s %9s %9s\n", "rank", "seconds", "sync s",
          "MB sent", "MB received", "msgs out", "msgs in", "share", "steps", "compute s", "wait s");
  for (int q = 0; q < n; q++) {
    const tsr_rank_stats_t *r = &ranks[q];
    fprintf(out, "  %-4d %9.2f %9.2f %12.2f %12.2f %9lld %9lld %6.3f %8lld %9.2f %9.2f\n", r->rank,
            r->seconds, r->sync_seconds, 1e-6 * (double)r->bytes_sent,
            1e-6 * (double)r->bytes_received, (long long)r->messages_sent,
            (long long)r->messages_received, r->work.share, (long long)r->work.steps,
            r->work.compute_seconds, r->work.wait_seconds);
  }
  if (n > 0 && total > 0)
    fprintf(out, "  the busiest rank sent %.3f x the mean\n", (double)most * n / (double)total);
}
