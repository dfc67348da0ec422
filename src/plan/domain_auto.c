/* --domain auto's decision for a run: rank 0 plans the run as `tessera plan --domain auto`
 * would (the run's grid, model, data, batch, tiles, policy and workers, on this machine), and
 * every rank takes its choice. Here rather than in the command so that a program calling the
 * library gets the same decision, and the same words for it. */
#include <stdio.h>
#include <stdlib.h>

#include "tessera/dist.h"
#include "tessera/plan.h"
#include "tessera/runtime.h"
#include "try.h"

/* A file of $STARPU_HOME (else ~/.starpu), where tessera plan and StarPU keep calibration. */
static void starpu_home_file(char *buf, size_t size, const char *name) {
  const char *home = getenv("STARPU_HOME");
  if (home && *home)
    snprintf(buf, size, "%s/%s", home, name);
  else
    snprintf(buf, size, "%s/.starpu/%s", getenv("HOME") ? getenv("HOME") : ".", name);
}

/* Rank 0's part: the plan with the fastest cut, and the one with none cut. */
static int plan_here(const tsr_run_config_t *c, const char *calibration, const char *cache,
                     tsr_plan_domain_t *choice, tsr_errbuf_t *err) {
  tsr_plan_opts_t o;
  tsr_plan_opts_from_run(&o, c, tsr_dist_size());
  char machine[1024], rates[1024];
  if (!calibration) starpu_home_file(machine, sizeof machine, "tessera-machine.ini");
  if (!cache) starpu_home_file(rates, sizeof rates, "tessera-plan-rates.txt");
  tsr_machine_t m;
  bool calibrated;
  TSR_TRY(tsr_machine_here(&m, calibration ? calibration : machine, cache ? cache : rates,
                           &calibrated, err));
  m.workers = tsr_runtime_ncpus();
  tsr_plan_row_t chosen, whole;
  int n;
  o.domain = TSR_PLAN_DOMAIN_AUTO;
  TSR_TRY(tsr_plan_run(c->spec, &o, &m, &chosen, 1, &n, err));
  o.domain = TSR_PLAN_DOMAIN_NONE;
  TSR_TRY(tsr_plan_run(c->spec, &o, &m, &whole, 1, &n, err));
  /* A model with nothing to cut computes everything whole; all of them cut is rows, not rows:K. */
  bool some = chosen.domain && chosen.domain_layers < chosen.splittable;
  *choice = (tsr_plan_domain_t){.domain = chosen.domain,
                                .domain_layers = some ? chosen.domain_layers : 0,
                                .splittable = chosen.splittable,
                                .step_s = chosen.step_s,
                                .whole_s = whole.step_s};
  return 0;
}

int tsr_plan_domain_auto(const tsr_run_config_t *c, const char *calibration, const char *cache,
                         tsr_plan_domain_t *choice, tsr_errbuf_t *err) {
  if (!c || !c->spec || !choice)
    return tsr_error_set(err, TSR_EINVAL, "tsr_plan_domain_auto: no run, model or choice given");
  tsr_plan_domain_t mine = {0}, *all = calloc((size_t)tsr_dist_size(), sizeof *all);
  if (!all) return tsr_error_set(err, TSR_ENOMEM, "--domain auto: out of memory");
  int rc = tsr_dist_rank() == 0 ? plan_here(c, calibration, cache, &mine, err) : 0;
  rc = tsr_dist_agree(rc, err, err);
  if (rc == 0) rc = tsr_dist_allgather(&mine, (int)sizeof mine, all);
  if (rc == 0) *choice = all[0];
  free(all);
  return rc;
}

void tsr_plan_domain_describe(const tsr_plan_domain_t *c, char *buf, size_t size) {
  char what[64] = "none", against[48] = "";
  if (c->domain && c->domain_layers > 0)
    snprintf(what, sizeof what, "the first %d (rows:%d)", c->domain_layers, c->domain_layers);
  else if (c->domain)
    snprintf(what, sizeof what, "all (rows)");
  if (c->domain)
    snprintf(against, sizeof against, " against %.3g ms with none cut", 1e3 * c->whole_s);
  if (c->splittable == 0)
    snprintf(buf, size, "--domain auto: the model has no convolution or pooling to cut");
  else
    snprintf(buf, size,
             "--domain auto: %s of %d convolutions and poolings cut, planned %.3g ms per step%s",
             what, c->splittable, 1e3 * c->step_s, against);
}
