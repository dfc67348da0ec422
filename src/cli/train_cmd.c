/* tessera train: its options parsed into a configuration (train_parse.c), which is then run
 * through the library (train_run.c). */
#include <stdio.h>

#include "cli/cli.h"
#include "cli/train_config.h"

int tsr_cli_train(int argc, char **argv) {
  tsr_cli_train_config_t cfg;
  int rc = tsr__cli_train_parse(&cfg, argc, argv); /* cfg owns its shares' weights after */
  if (rc == 0 && cfg.help)
    tsr__cli_train_usage(stdout);
  else if (rc == 0)
    rc = tsr__cli_train_run(&cfg);
  tsr_shares_fini(&cfg.shares);
  return rc;
}
