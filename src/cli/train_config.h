/* tessera train in three steps: the options are parsed into a configuration
 * (train_parse.c), which the run (train_run.c) carries out through the
 * library; tsr_cli_train (train_cmd.c) joins them. The configuration holds
 * everything the options say and nothing computed from the data. */
#ifndef TSR_CLI_TRAIN_CONFIG_H
#define TSR_CLI_TRAIN_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tessera/tessera.h"

#define TSR_CLI_MAX_OPTIONS 64 /* rows of train_parse.c's table at most */

typedef struct {
  const char *data_dir;   /* --data, borrowed from argv */
  bool data_given;        /* --data was given (a language model without it trains on the
                             default text) */
  bool init_given;        /* --init was given (a language model's default is gpt2) */
  const char *text;       /* --text FILE[,FILE...] or "default", borrowed; NULL: none */
  const char *model;      /* --model: a shorthand for tsr_model_parse, or an INI file */
  bool model_file;        /* --model names an INI file (ends in .ini) */
  const char *log_path;   /* --log, NULL: no log */
  int log_every;          /* --log-every N: a step line every N steps (0: none) */
  int eval_every;         /* --eval-every N: an evaluation every N steps (0: epoch ends only) */
  const char *trace_path; /* --trace, NULL: no timeline */
  const char *checkpoint; /* --checkpoint, NULL: none */
  int checkpoint_every;   /* --checkpoint-every N[epochs|steps] (default 1 epoch) */
  bool checkpoint_in_steps;
  const char *resume;            /* --resume FILE or auto (then train_resume.c makes it the
                                    --checkpoint FILE, or NULL), NULL: from the start */
  bool model_from_checkpoint;    /* --resume without --model: the checkpoint's model */
  int64_t train_limit;           /* --train-limit, -1: every training sample */
  int64_t test_limit;            /* --test-limit, -1: every test sample */
  int classes;                   /* --classes, 0: 1 + the largest training label */
  tsr_standardize_t standardize; /* --standardize, auto: column for CSV, scalar/channel images */
  tsr_augment_t augment;         /* --crop S:P, --flip (fill: the run's, from the data) */
  bool domain_auto;              /* --domain auto: the planner's choice of net.domain and
                                    net.domain_layers, made once the data is loaded */
  double val_split;              /* --val-split F: the fraction held out (0: none) */
  bool quiet;                    /* --quiet */
  bool help;                     /* --help: print the usage and run nothing */
  /* The run as the library's setup reads it (tsr_run_config_t): net (batch, tiles, seed,
   * optimizer with lr as asked, before scaling; --grid's Pr is net.grid_rows, --domain) and
   * grid_cols (--grid's Pc, 0: no --grid). The run points its sync and shares at the two below
   * and adds the model and the data's shapes once loaded (train_run.c). */
  tsr_run_config_t run;
  tsr_train_opts_t train;     /* epochs, schedule, --lr-scaling, window, seed; the setup and
                                 callbacks are the run's */
  tsr_sync_t sync;            /* --sync, --sync-state, --weighting, --deterministic */
  tsr_shares_t shares;        /* --shares (the count is checked against the ranks by the run);
                               * owned: tsr_shares_fini */
  tsr_runtime_opts_t runtime; /* --sched, --workers, --devices, --mpi-progress, --no-priorities,
                                 --stats, --trace */
  /* The arguments as given, which every rank must share (tsr_dist_check_same) and which MPI may
   * see (tsr_dist_start): borrowed. argv[-1] is main's, the program's name. */
  int argc;
  char **argv;
  /* Each row of the option table's last argument (a flag's name), NULL: not given. */
  const char *given[TSR_CLI_MAX_OPTIONS];
} tsr_cli_train_config_t;

/* The configuration as the log's run line holds it: one field per option (its value as the run
 * takes it, defaults included), texts in text. */
typedef struct {
  tsr_log_field_t field[TSR_CLI_MAX_OPTIONS];
  char text[TSR_CLI_MAX_OPTIONS][80];
  int n;
} tsr_cli_train_fields_t;

void tsr__cli_train_fields(const tsr_cli_train_config_t *cfg, tsr_cli_train_fields_t *out);

/* Fills cfg from `tessera train`'s arguments (argv[0] is "train"). Returns 0 when cfg is ready
 * (cfg->help: only the usage was asked for), or 2, the command's exit status, after writing
 * what is wrong with an option to stderr. */
int tsr__cli_train_parse(tsr_cli_train_config_t *cfg, int argc, char **argv);

/* The argument option `name` (without "--") was given with (its name for a flag), or NULL. */
const char *tsr__cli_train_given(const tsr_cli_train_config_t *cfg, const char *name);

/* --resume (train_resume.c), on every rank once MPI started: auto made the --checkpoint FILE
 * if it exists, else NULL (a new run, said on rank 0); then the checkpoint's run settings in
 * cfg where their options were not given (the model too, model_from_checkpoint), a given one
 * that differs refused in one line naming the option, the checkpoint's value and the given
 * one. Notes go to stderr on the speaker. Returns 0, or the command's exit status (2 refused,
 * 1 an unreadable checkpoint) after the message. */
int tsr__cli_train_resume(tsr_cli_train_config_t *cfg, bool speaker);

/* `tessera train --help`. */
void tsr__cli_train_usage(FILE *out);
/* Option i of tessera train's table: its name, argument form (NULL: a flag) and help (made into
 * buf, size bytes, where the library's registries make it); false past the last option. */
bool tsr__cli_train_option(int i, const char **name, const char **arg, const char **help, char *buf,
                           size_t size);

/* Trains as cfg says, on every rank when started by mpirun: loads and standardizes the data,
 * builds the net, trains, and reports (banner, a line per epoch, log, statistics, trace) on
 * rank 0. Returns the command's exit status: 0; 3 when training diverged (a loss that is not a
 * finite number); 1 after any other error; each after writing the error to stderr. Under MPI a
 * rank that fails once training started stops every rank with that status (MPI_Abort). */
int tsr__cli_train_run(const tsr_cli_train_config_t *cfg);

#endif
