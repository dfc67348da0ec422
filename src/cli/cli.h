/* The tessera command: subcommands parse their options and call the library. */
#ifndef TSR_CLI_H
#define TSR_CLI_H

int tsr_cli_train(int argc, char **argv);
int tsr_cli_info(int argc, char **argv);
int tsr_cli_eval(int argc, char **argv);
int tsr_cli_inspect(int argc, char **argv);
int tsr_cli_plan(int argc, char **argv);
int tsr_cli_trace_summary(int argc, char **argv);

/* A whole number in [lo, hi] from s, all of it: 0, or -1 (out untouched). */
int tsr__cli_to_long(const char *s, long lo, long hi, long *out);
/* --devices' value for command cmd ("train", "info", "eval") into *opencl
 * (tsr_runtime_opts_t.opencl): 0, or 2 after saying on stderr what is wrong
 * (a bad value; devices asked of a build without OpenCL). */
int tsr__cli_devices(const char *cmd, const char *arg, int *opencl);

#endif
