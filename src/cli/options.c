/* What every tessera command shares in reading its options: getopt_long over the command's
 * table with exact names only (an abbreviation would start meaning another option the day one
 * is added), -h for --help, and a mistake told with the command's name and, for an unknown
 * option, the nearest one of its table (edit distance); and the launch check of the commands
 * that start MPI (srun without a PMI plugin). */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tessera/tessera.h"
#include "try.h"

const char *tsr__cli_nearest(const char *name, size_t n, const struct option *longopts) {
  const char *best = NULL;
  int best_d = 99;
  for (const struct option *o = longopts; o->name; o++) {
    int d = tsr_edit_distance(name, n, o->name);
    /* A beginning ("--checkpoint-ev") counts as one edit away whatever its length. */
    if (n >= 4 && strncmp(o->name, name, n) == 0 && d > 1) d = 1;
    if (d < best_d) best_d = d, best = o->name;
  }
  /* Near enough to be a typo: 2 edits, 1 in a name under 6 letters ("--lr" is no "--log"). */
  int most = n >= 6 ? 2 : 1;
  return best && best_d <= most ? best : NULL;
}

static const struct option *by_val(const struct option *longopts, int val) {
  for (const struct option *o = longopts; o->name; o++)
    if (o->val == val) return o;
  return NULL;
}

static int unknown(const char *cmd, const char *token, const struct option *longopts) {
  const char *name = token + 2;
  size_t n = strcspn(name, "=");
  const char *near = strncmp(token, "--", 2) == 0 ? tsr__cli_nearest(name, n, longopts) : NULL;
  if (near)
    fprintf(stderr,
            "tessera %s: unknown option '%.*s'; did you mean '--%s'? (see tessera %s --help)\n",
            cmd, (int)(n + 2), token, near, cmd);
  else
    fprintf(stderr, "tessera %s: unknown option '%.*s' (see tessera %s --help)\n", cmd,
            (int)strcspn(token, "="), token, cmd);
  return '?';
}

/* Before getopt_long, which would take "--epoch" for "--epochs": every "--name" of argv (until
 * "--") must be a name of the table; an option's separate argument is skipped. */
static int check_names(const char *cmd, int argc, char **argv, const struct option *longopts) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) return 0;
    if (strncmp(a, "--", 2) != 0) continue;
    size_t n = strcspn(a + 2, "=");
    const struct option *hit = NULL;
    for (const struct option *o = longopts; o->name && !hit; o++)
      if (strlen(o->name) == n && strncmp(o->name, a + 2, n) == 0) hit = o;
    if (!hit) return unknown(cmd, a, longopts);
    if (hit->has_arg == required_argument && a[2 + n] != '=') i++;
  }
  return 0;
}

int tsr__cli_getopt(const char *cmd, int argc, char **argv, const struct option *longopts) {
  /* Before the first option (optind 1, or 0 where a caller restarts getopt, as the fuzzer does). */
  if (optind <= 1 && check_names(cmd, argc, argv, longopts)) return '?';
  int old = opterr;
  opterr = 0;
  int c = getopt_long(argc, argv, ":h", longopts, NULL);
  opterr = old;
  if (c == 'h') {
    const struct option *help = longopts;
    while (help->name && strcmp(help->name, "help") != 0)
      help++;
    return help->name ? help->val : 'h';
  }
  if (c == ':') {
    const struct option *o = by_val(longopts, optopt);
    fprintf(stderr, "tessera %s: --%s needs a value (see tessera %s --help)\n", cmd,
            o ? o->name : "?", cmd);
    return '?';
  }
  if (c == '?') {
    char token[8] = "-?";
    token[1] = (char)(optopt ? optopt : '?');
    /* Only short options reach here: long names were checked before. */
    fprintf(stderr, "tessera %s: unknown option '%s' (see tessera %s --help)\n", cmd,
            optopt ? token : argv[optind - 1], cmd);
    return '?';
  }
  return c;
}

/* Tasks of the Slurm job step this process is part of, from srun's environment (0: none). */
static long slurm_tasks(void) {
  const char *s = getenv("SLURM_STEP_NUM_TASKS");
  if (!s && getenv("SLURM_PROCID")) s = getenv("SLURM_NTASKS");
  return s ? strtol(s, NULL, 10) : 0;
}

int tsr__cli_launch_check(const char *cmd) {
  long tasks = slurm_tasks();
  if (tasks <= 1 || tsr_dist_size() > 1) return 0;
  /* Every task says it: each believes it is the only one. */
  fprintf(stderr,
          "tessera %s: srun started %ld tasks, but MPI sees this one alone: srun needs a PMI "
          "plugin to connect them; use `srun --mpi=pmix` (`srun --mpi=list` lists the plugins; "
          "Debian's Open MPI works with pmix), or mpirun inside salloc\n",
          cmd, tasks);
  return 2;
}

void tsr__cli_starpu_home_file(char *buf, size_t size, const char *name) {
  const char *home = getenv("STARPU_HOME");
  if (home && *home)
    snprintf(buf, size, "%s/%s", home, name);
  else
    snprintf(buf, size, "%s/.starpu/%s", getenv("HOME") ? getenv("HOME") : ".", name);
}

int tsr__cli_shape(const char *s, int *h, int *w, int *c) {
  long v[3];
  const char *p = s;
  for (int i = 0; i < 3; i++) {
    char part[16];
    size_t n = strcspn(p, "x");
    if (n == 0 || n >= sizeof part || (i < 2) != (p[n] == 'x')) return -1;
    memcpy(part, p, n), part[n] = '\0';
    if (tsr__cli_to_long(part, 1, 65536, &v[i])) return -1;
    p += n + (i < 2);
  }
  *h = (int)v[0], *w = (int)v[1], *c = (int)v[2];
  return 0;
}

int tsr__cli_model(const char *cmd, const char *model, int classes, tsr_model_spec_t *spec) {
  tsr_errbuf_t err = {""};
  size_t len = strlen(model);
  bool file = len > 4 && strcmp(model + len - 4, ".ini") == 0;
  int rc =
      file ? tsr_model_load_ini(spec, model, &err) : tsr_model_parse(spec, model, classes, &err);
  if (rc) {
    fprintf(stderr, "tessera %s: %s\n", cmd, err.msg[0] ? err.msg : tsr_strerror(rc));
    return rc == TSR_EINVAL && !file ? 2 : 1;
  }
  tsr_model_bind_classes(spec, classes); /* a model file's units = classes */
  return 0;
}

int tsr__cli_model_context(const tsr_model_spec_t *spec) {
  int context = 0;
  for (int i = 0; spec && i < spec->n_layers; i++)
    if (spec->layers[i].context > context) context = spec->layers[i].context;
  return context;
}

int tsr__cli_load_text(const char *text, int context, tsr_dataset_t *train, tsr_dataset_t *test,
                       tsr_errbuf_t *err) {
  if (!text || strcmp(text, "default") == 0) {
    char **owned = NULL;
    int n = 0;
    TSR_TRY(tsr_dataset_text_files(&owned, &n, TSR_DEFAULT_TEXT_DIR, err));
    int rc = tsr_dataset_load_text(train, test, (const char **)owned, n, context,
                                   TSR_CLI_TEXT_TEST_FRACTION, err);
    tsr_dataset_text_files_free(owned, n);
    return rc;
  }
  size_t len = strlen(text);
  char *copy = malloc(len + 1);
  const char **paths = malloc(sizeof *paths * (len / 2 + 1)); /* a name every two characters */
  int n = 0, rc = copy && paths ? 0 : tsr_error_set(err, TSR_ENOMEM, "--text: out of memory");
  if (rc == 0) memcpy(copy, text, len + 1);
  for (char *at = copy, *comma; rc == 0; at = comma + 1) {
    comma = strchr(at, ',');
    if (comma) *comma = '\0';
    if (!*at)
      rc =
          tsr_error_set(err, TSR_EINVAL,
                        "--text %s: an empty file name; separate the files by single commas", text);
    else
      paths[n++] = at;
    if (!comma) break;
  }
  if (rc == 0)
    rc = tsr_dataset_load_text(train, test, paths, n, context, TSR_CLI_TEXT_TEST_FRACTION, err);
  free(paths), free(copy);
  return rc;
}

int tsr__cli_tile(const char *arg, int *rows, int *cols) {
  if (strcmp(arg, "auto") == 0) return *rows = *cols = 0, 0;
  long r, c;
  const char *x = strchr(arg, 'x');
  char first[32];
  if (!x) {
    if (tsr__cli_to_long(arg, 1, 1 << 20, &r)) return -1;
    return *rows = *cols = (int)r, 0;
  }
  if (x - arg >= (long)sizeof first) return -1;
  snprintf(first, sizeof first, "%.*s", (int)(x - arg), arg);
  if (tsr__cli_to_long(first, 1, 1 << 20, &r) || tsr__cli_to_long(x + 1, 1, 1 << 20, &c)) return -1;
  return *rows = (int)r, *cols = (int)c, 0;
}
