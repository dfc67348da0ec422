/* The tessera command: subcommands parse their options and call the library. */
#ifndef TSR_CLI_H
#define TSR_CLI_H

#include <stddef.h>

#include "tessera/net.h"
#include "tessera/runtime.h"

int tsr_cli_train(int argc, char **argv);
int tsr_cli_info(int argc, char **argv);
int tsr_cli_eval(int argc, char **argv);
int tsr_cli_inspect(int argc, char **argv);
int tsr_cli_plan(int argc, char **argv);
int tsr_cli_trace_summary(int argc, char **argv);
int tsr_cli_summary(int argc, char **argv);
int tsr_cli_generate(int argc, char **argv);

/* A whole number in [lo, hi] from s, all of it: 0, or -1 (out untouched). */
int tsr__cli_to_long(const char *s, long lo, long hi, long *out);
/* --devices' value for command cmd ("train", "info", "eval") into *opencl
 * (tsr_runtime_opts_t.opencl): 0, or 2 after saying on stderr what is wrong
 * (a bad value; devices asked of a build without OpenCL). */
int tsr__cli_devices(const char *cmd, const char *arg, int *opencl);
/* --tile's value: "N" (both), "RxC", or "auto" (0 and 0: chosen from the shapes and the
 * workers); 0, or -1 for anything else (the outputs untouched). */
int tsr__cli_tile(const char *arg, int *rows, int *cols);
/* --kernels' value into *kernels (tsr_runtime_opts_t.kernels), or a message naming `cmd` on
 * stderr and 2: an unknown name, or onednn in a build without it. */
int tsr__cli_kernels(const char *cmd, const char *arg, tsr_kernels_t *kernels);

/* $STARPU_HOME/name, or ~/.starpu/name (where StarPU keeps its own calibration, and the
 * planner its machine file and kernel rates), into buf. */
void tsr__cli_starpu_home_file(char *buf, size_t size, const char *name);
/* HxWxC (e.g. 224x224x3, each from 1 to 65536) into *h, *w, *c: 0, or -1 (untouched). */
int tsr__cli_shape(const char *s, int *h, int *w, int *c);
/* --model's value for command cmd ("plan", "summary") into *spec, for `classes` classes: a model
 * file (NAME.ini, a model file's units = classes bound to them), a shorthand or a zoo model
 * (tsr_model_parse). 0, or the exit code after saying on stderr what is wrong: 2 for a bad
 * shorthand, 1 for a file's problem (spec then left empty). */
int tsr__cli_model(const char *cmd, const char *model, int classes, tsr_model_spec_t *spec);
/* The window length T of a language model: the largest `context` of spec's layers (an
 * embedding's positions), 0 when no layer has one (not a language model). */
int tsr__cli_model_context(const tsr_model_spec_t *spec);

/* The fraction of a text's windows, its end, that is the test set (train and eval alike). */
#define TSR_CLI_TEXT_TEST_FRACTION 0.1
/* A language model's text as --text names it (files separated by commas; NULL or "default":
 * Debian's fortunes, TSR_DEFAULT_TEXT_DIR), cut into windows of context bytes, the last
 * TSR_CLI_TEXT_TEST_FRACTION of them the test set (tsr_dataset_load_text). 0 or a TSR_E* code
 * with err set; an empty file name is TSR_EINVAL. */
int tsr__cli_load_text(const char *text, int context, tsr_dataset_t *train, tsr_dataset_t *test,
                       tsr_errbuf_t *err);

/* getopt_long for command cmd ("train", ...) over longopts, which must have no abbreviation
 * taken for a name: the next option's val (-h gives the "help" entry's), -1 after the last, or
 * '?' after saying on stderr what is wrong, naming cmd: an unknown option with the nearest name
 * of longopts when one is near, a missing value. The caller then exits 2. */
struct option;
int tsr__cli_getopt(const char *cmd, int argc, char **argv, const struct option *longopts);
/* The name in longopts nearest to name's first n characters (edit distance, a swap of two
 * neighbours one edit: at most 1 edit in a name under 6 letters, 2 otherwise; a beginning of a
 * name counts as 1), or NULL. */
const char *tsr__cli_nearest(const char *name, size_t n, const struct option *longopts);
/* After tsr_dist_start: 2 after saying so, when srun started several tasks but MPI sees this
 * one alone (srun without --mpi=pmix); else 0. */
int tsr__cli_launch_check(const char *cmd);

#endif
