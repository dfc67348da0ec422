/* tessera plan: options -> tsr_plan_run -> a table or JSON; --calibrate
 * measures this machine's alpha and beta under mpirun -np 2. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tessera/dist.h"
#include "tessera/optim.h"
#include "tessera/plan.h"
#include "tessera/runtime.h"

#define MAX_ROWS 4096

static void usage(FILE *out) {
  char names[256];
  tsr_optimizer_list(names, sizeof names);
  fprintf(out,
          "usage: tessera plan [options]\n"
          "       mpirun -np 2 tessera plan --calibrate\n\n"
          "Predicts the time per step and per epoch, the bytes and the memory per rank of\n"
          "training on P ranks as a Pr x Pc grid (Pr cuts the dense layers' features, Pc the\n"
          "batch) under a synchronization policy; without --grid it compares every grid\n"
          "shape of P, without --sync the policies batch, every=8 and epoch.\n\n"
          "  --model SPEC|FILE   as tessera train's [mlp]\n"
          "  --batch N           samples per step of one replica (a grid column), as\n"
          "                      tessera train's --batch [64]\n"
          "  --ranks P           MPI ranks [1]\n"
          "  --grid PrxPc        one grid shape (Pr x Pc = P) [every shape]\n"
          "  --sync POLICY       batch, every=K, epoch or epoch=n [batch, every=8, epoch]\n"
          "  --cluster FILE.ini  a described machine [this one]; a bare NAME is looked up in\n"
          "                      the installed share/tessera/clusters/ (ib100, eth10)\n"
          "  --optimizer NAME    %s [sgd]\n"
          "                      (the optimizer state per parameter)\n"
          "  --samples N         training samples per epoch [60000]\n"
          "  --inputs N          features of a sample [784]\n"
          "  --input HxWxC       the sample's shape, e.g. 224x224x3 (sets --inputs)\n"
          "                      [28x28x1 for a square --inputs, else 1x1xN; a language\n"
          "                      model's context T: Tx1x1]\n"
          "  --classes N         classes [10; a language model: 256, bytes]\n"
          "  --tile N|RxC|auto   as tessera train's [auto]\n"
          "  --workers N         CPU workers per rank [the machine's]\n"
          "  --allreduce A       as tessera train's: flat, two-level or auto (two-level\n"
          "                      where several nodes hold several ranks) [auto]\n"
          "  --node-size G       ranks per node [the machine's ranks_per_node]\n"
          "  --bucket-mb M       as tessera train's: averages in buckets of M MiB [0]\n"
          "  --domain D          as tessera train's, for grids with Pr > 1: none, rows\n"
          "                      (convolutions cut into bands of image rows, halos priced),\n"
          "                      rows:K (the first K) or auto (every K priced, the fastest\n"
          "                      kept per grid) [none]\n"
          "  --machine FILE      calibration file [$STARPU_HOME/tessera-machine.ini]\n"
          "  --calibrate         under mpirun -np 2: measure alpha and beta with a StarPU-MPI\n"
          "                      ping-pong and write them to the calibration file\n"
          "  --layers            also the recommended plan layer by layer: each layer's\n"
          "                      seconds of tasks on a rank, forward and backward, and\n"
          "                      flops (a trace's tasks of that layer add up the same way)\n"
          "  --json              JSON instead of a table\n"
          "  -h, --help          this text\n",
          names);
}

static int bad(const char *opt, const char *val, const char *want) {
  fprintf(stderr, "tessera plan: %s %s: expected %s (see tessera plan --help)\n", opt, val, want);
  return 2;
}

static int calibrate(int argc, char **argv, const char *path) {
  if (tsr_dist_start(&argc, &argv, true)) {
    fprintf(stderr, "tessera plan: cannot start MPI\n");
    return 1;
  }
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  ro.ncpus = 1;
  tsr_errbuf_t err = {""};
  int rc = tsr_dist_size() == 2 ? 0 : TSR_EINVAL;
  if (rc)
    tsr_error_set(&err, rc, "--calibrate needs 2 ranks: mpirun -np 2 tessera plan --calibrate");
  bool started = false;
  if (rc == 0) started = (rc = tsr_runtime_init(&ro, &err)) == 0;
  if (rc == 0) rc = tsr_plan_calibrate_save(path, &err);
  if (started) tsr_runtime_fini();
  if (tsr_dist_rank() == 0) {
    if (rc)
      fprintf(stderr, "tessera plan: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    else
      printf("tessera plan: alpha and beta measured, written to %s\n", path);
  }
  tsr_dist_stop();
  return rc == TSR_EINVAL ? 2 : rc ? 1 : 0;
}

static const char *mb(double bytes, char *buf) {
  sprintf(buf, bytes < 1e5 ? "%.3f" : "%.1f", bytes / 1e6);
  return buf;
}

static void print_table(const tsr_plan_row_t *rows, int n, const tsr_plan_opts_t *o,
                        const char *model, const tsr_machine_t *m) {
  printf("tessera plan: %s, batch %d per replica, %d ranks, %lld samples per epoch\n", model,
         o->batch, o->ranks, (long long)o->samples);
  printf("machine: %s (%s)\n\n", m->name, m->source);
  printf("| grid | sync | averaging | tiles | step ms | epoch s | compute ms | grid ms | sync ms "
         "(exposed) "
         "| MB sent per step | MB sent per epoch | memory MB per rank | |\n"
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int i = 0; i < n; i++) {
    const tsr_plan_row_t *r = &rows[i];
    char sync[32], avg[64], a[32], b[32], c[32];
    tsr_sync_schedule_describe(&r->sync, sync, sizeof sync);
    if (r->pc < 2)
      snprintf(avg, sizeof avg, "-");
    else if (r->two_level)
      snprintf(avg, sizeof avg, "two-level, %d nodes of %d", r->nodes, r->node_size);
    else
      snprintf(avg, sizeof avg, "flat");
    if (r->pc >= 2 && r->buckets) {
      size_t at = strlen(avg);
      snprintf(avg + at, sizeof avg - at, ", %lld buckets", (long long)r->buckets);
    }
    double per_step =
        r->grid_bytes_step + (tsr_sync_traits(&r->sync)->meets_every_step ? r->sync_bytes_step : 0);
    char dom[32] = "";
    if (r->domain && r->domain_layers < r->splittable)
      snprintf(dom, sizeof dom, " rows:%d", r->domain_layers);
    else if (r->domain)
      snprintf(dom, sizeof dom, " rows");
    printf("| %dx%d%s | %s | %s | %dx%d | %.3f | %.2f | %.3f | %.3f | %.3f (%.3f) | %s | %s | %s | "
           "%s |\n",
           r->pr, r->pc, dom, sync, avg, r->tile_rows, r->tile_cols, r->step_s * 1e3, r->epoch_s,
           r->compute_s * 1e3, r->grid_s * 1e3,
           (tsr_sync_traits(&r->sync)->meets_every_step ? r->sync_s : r->average_s) * 1e3,
           r->exposed_sync_s * 1e3, mb(per_step, a), mb(r->bytes_epoch, b), mb(r->memory_bytes, c),
           r->best ? "**best**" : "");
  }
}

/* The recommended row's layers (tsr_plan_layers), as a table. */
static void print_layers(const tsr_plan_row_t *r, const tsr_plan_layer_t *l, int n) {
  char sync[32];
  tsr_sync_schedule_describe(&r->sync, sync, sizeof sync);
  printf("\nlayer by layer, %dx%d --sync %s (seconds of tasks on rank 0 per step, its workers' "
         "added up):\n",
         r->pr, r->pc, sync);
  printf("%4s  %-24s %-14s %12s %12s %10s\n", "#", "layer", "type", "forward ms", "backward ms",
         "GFLOP");
  double f = 0, b = 0, fl = 0;
  for (int k = 0; k < n; k++) {
    printf("%4d  %-24s %-14s %12.3f %12.3f %10.3f\n", k + 1, l[k].name, l[k].type,
           l[k].forward_s * 1e3, l[k].backward_s * 1e3, l[k].flops * 1e-9);
    f += l[k].forward_s, b += l[k].backward_s, fl += l[k].flops;
  }
  printf("%4s  %-24s %-14s %12.3f %12.3f %10.3f\n", "", "all", "", f * 1e3, b * 1e3, fl * 1e-9);
}

static void print_json(const tsr_plan_row_t *rows, int n, const tsr_plan_opts_t *o,
                       const char *model, const tsr_machine_t *m, const tsr_plan_layer_t *layers,
                       int n_layers) {
  cJSON *root = cJSON_CreateObject(), *list = cJSON_CreateArray();
  cJSON_AddStringToObject(root, "model", model);
  cJSON_AddNumberToObject(root, "batch", o->batch);
  cJSON_AddNumberToObject(root, "ranks", o->ranks);
  cJSON_AddNumberToObject(root, "samples", (double)o->samples);
  cJSON *mj = cJSON_AddObjectToObject(root, "machine");
  cJSON_AddStringToObject(mj, "name", m->name);
  cJSON_AddStringToObject(mj, "source", m->source);
  cJSON_AddNumberToObject(mj, "cores_per_node", m->cores_per_node);
  cJSON_AddNumberToObject(mj, "ranks_per_node", m->ranks_per_node);
  cJSON_AddNumberToObject(mj, "gemm_gflops", m->gemm_gflops);
  cJSON_AddNumberToObject(mj, "mem_gbs", m->mem_gbs);
  cJSON_AddNumberToObject(mj, "alpha_s", m->alpha);
  cJSON_AddNumberToObject(mj, "beta_s_per_byte", m->beta);
  cJSON_AddNumberToObject(mj, "gamma_s_per_byte", m->gamma);
  cJSON_AddNumberToObject(mj, "intra_alpha_s", m->intra_alpha > 0 ? m->intra_alpha : m->alpha);
  cJSON_AddNumberToObject(mj, "intra_beta_s_per_byte", m->intra_beta > 0 ? m->intra_beta : m->beta);
  for (int i = 0; i < n; i++) {
    const tsr_plan_row_t *r = &rows[i];
    cJSON *x = cJSON_CreateObject();
    char sync[32], grid[32];
    tsr_sync_schedule_describe(&r->sync, sync, sizeof sync);
    snprintf(grid, sizeof grid, "%dx%d", r->pr, r->pc);
    cJSON_AddStringToObject(x, "grid", grid);
    cJSON_AddNumberToObject(x, "pr", r->pr);
    cJSON_AddNumberToObject(x, "pc", r->pc);
    cJSON_AddStringToObject(x, "sync", sync);
    cJSON_AddNumberToObject(x, "tile_rows", r->tile_rows);
    cJSON_AddNumberToObject(x, "tile_cols", r->tile_cols);
    cJSON_AddNumberToObject(x, "steps_per_epoch", (double)r->steps_per_epoch);
    cJSON_AddNumberToObject(x, "flops_step", r->flops_step);
    cJSON_AddNumberToObject(x, "compute_s", r->compute_s);
    cJSON_AddNumberToObject(x, "grid_s", r->grid_s);
    cJSON_AddNumberToObject(x, "sync_s", r->sync_s);
    cJSON_AddNumberToObject(x, "exposed_sync_s", r->exposed_sync_s);
    cJSON_AddNumberToObject(x, "average_s", r->average_s);
    cJSON_AddNumberToObject(x, "step_s", r->step_s);
    cJSON_AddNumberToObject(x, "epoch_s", r->epoch_s);
    cJSON_AddNumberToObject(x, "grid_bytes_step", r->grid_bytes_step);
    cJSON_AddNumberToObject(x, "grid_messages_step", r->grid_messages_step);
    cJSON_AddStringToObject(x, "domain", r->domain ? "rows" : "none");
    cJSON_AddNumberToObject(x, "domain_layers", r->domain_layers);
    cJSON_AddNumberToObject(x, "halo_bytes_step", r->halo_bytes_step);
    cJSON_AddNumberToObject(x, "sync_bytes_step", r->sync_bytes_step);
    cJSON_AddNumberToObject(x, "sync_messages_step", r->sync_messages_step);
    cJSON_AddNumberToObject(x, "sync_bytes_epoch", r->sync_bytes_epoch);
    cJSON_AddNumberToObject(x, "sync_messages_epoch", r->sync_messages_epoch);
    cJSON_AddStringToObject(x, "allreduce", r->two_level ? "two-level" : "flat");
    cJSON_AddNumberToObject(x, "nodes", r->nodes);
    cJSON_AddNumberToObject(x, "node_size", r->node_size);
    cJSON_AddNumberToObject(x, "buckets", (double)r->buckets);
    cJSON_AddNumberToObject(x, "node_bytes_step", r->node_bytes_step);
    cJSON_AddNumberToObject(x, "inter_messages_step", r->inter_messages_step);
    cJSON_AddNumberToObject(x, "bytes_epoch", r->bytes_epoch);
    cJSON_AddNumberToObject(x, "memory_bytes", r->memory_bytes);
    cJSON_AddBoolToObject(x, "best", r->best);
    if (r->best && layers) {
      cJSON *ls = cJSON_AddArrayToObject(x, "layers");
      for (int k = 0; k < n_layers; k++) {
        cJSON *y = cJSON_CreateObject();
        cJSON_AddNumberToObject(y, "index", k + 1);
        cJSON_AddStringToObject(y, "name", layers[k].name);
        cJSON_AddStringToObject(y, "type", layers[k].type);
        cJSON_AddNumberToObject(y, "forward_s", layers[k].forward_s);
        cJSON_AddNumberToObject(y, "backward_s", layers[k].backward_s);
        cJSON_AddNumberToObject(y, "flops", layers[k].flops);
        cJSON_AddItemToArray(ls, y);
      }
    }
    cJSON_AddItemToArray(list, x);
  }
  cJSON_AddItemToObject(root, "plans", list);
  char *text = cJSON_Print(root);
  if (text) puts(text);
  free(text);
  cJSON_Delete(root);
}

int tsr_cli_plan(int argc, char **argv) {
  enum {
    O_MODEL = 256,
    O_BATCH,
    O_RANKS,
    O_GRID,
    O_SYNC,
    O_CLUSTER,
    O_OPT,
    O_SAMPLES,
    O_INPUTS,
    O_INPUT,
    O_CLASSES,
    O_TILE,
    O_WORKERS,
    O_ALLREDUCE,
    O_NODE_SIZE,
    O_BUCKET_MB,
    O_DOMAIN,
    O_MACHINE,
    O_CALIBRATE,
    O_LAYERS,
    O_JSON,
    O_HELP
  };
  static const struct option longopts[] = {{"model", required_argument, 0, O_MODEL},
                                           {"batch", required_argument, 0, O_BATCH},
                                           {"ranks", required_argument, 0, O_RANKS},
                                           {"grid", required_argument, 0, O_GRID},
                                           {"sync", required_argument, 0, O_SYNC},
                                           {"cluster", required_argument, 0, O_CLUSTER},
                                           {"optimizer", required_argument, 0, O_OPT},
                                           {"samples", required_argument, 0, O_SAMPLES},
                                           {"inputs", required_argument, 0, O_INPUTS},
                                           {"input", required_argument, 0, O_INPUT},
                                           {"classes", required_argument, 0, O_CLASSES},
                                           {"tile", required_argument, 0, O_TILE},
                                           {"workers", required_argument, 0, O_WORKERS},
                                           {"allreduce", required_argument, 0, O_ALLREDUCE},
                                           {"node-size", required_argument, 0, O_NODE_SIZE},
                                           {"bucket-mb", required_argument, 0, O_BUCKET_MB},
                                           {"domain", required_argument, 0, O_DOMAIN},
                                           {"machine", required_argument, 0, O_MACHINE},
                                           {"calibrate", no_argument, 0, O_CALIBRATE},
                                           {"layers", no_argument, 0, O_LAYERS},
                                           {"json", no_argument, 0, O_JSON},
                                           {"help", no_argument, 0, O_HELP},
                                           {0, 0, 0, 0}};
  tsr_plan_opts_t o;
  tsr_plan_opts_init(&o);
  o.all_policies = true;
  const char *model = "mlp", *cluster = NULL;
  char machine_path[1024], cache_path[1024];
  tsr__cli_starpu_home_file(machine_path, sizeof machine_path, "tessera-machine.ini");
  tsr__cli_starpu_home_file(cache_path, sizeof cache_path, "tessera-plan-rates.txt");
  bool json = false, do_calibrate = false, input_given = false, classes_given = false;
  bool by_layer = false;
  int workers = 0;
  long v;
  int c;
  while ((c = tsr__cli_getopt("plan", argc, argv, longopts)) != -1) {
    switch (c) {
    case O_MODEL: model = optarg; break;
    case O_BATCH:
      if (tsr__cli_to_long(optarg, 1, 1 << 20, &v))
        return bad("--batch", optarg, "an integer from 1 to 1048576");
      o.batch = (int)v;
      break;
    case O_RANKS:
      if (tsr__cli_to_long(optarg, 1, 1 << 20, &v))
        return bad("--ranks", optarg, "an integer from 1 to 1048576");
      o.ranks = (int)v;
      break;
    case O_GRID: {
      long r, cc;
      char *x = strchr(optarg, 'x');
      if (!x) return bad("--grid", optarg, "PrxPc, e.g. 2x4 (Pr x Pc = --ranks)");
      *x = '\0';
      int e1 = tsr__cli_to_long(optarg, 1, 1 << 20, &r),
          e2 = tsr__cli_to_long(x + 1, 1, 1 << 20, &cc);
      *x = 'x';
      if (e1 || e2) return bad("--grid", optarg, "PrxPc, e.g. 2x4 (Pr x Pc = --ranks)");
      o.pr = (int)r, o.pc = (int)cc;
      break;
    }
    case O_SYNC: {
      o.all_policies = false;
      tsr_errbuf_t err = {""};
      if (tsr_plan_sync_parse(&o.sync, optarg, &err)) {
        fprintf(stderr, "tessera plan: %s (see tessera plan --help)\n", err.msg);
        return 2;
      }
      break;
    }
    case O_CLUSTER: cluster = optarg; break;
    case O_OPT: {
      tsr_optimizer_t opt; /* with its default momentum: sgd keeps a velocity */
      tsr_errbuf_t why = {""};
      if (tsr_optimizer_init(&opt, optarg, &why)) {
        fprintf(stderr, "tessera plan: %s\n", why.msg);
        return 2;
      }
      o.nstate = tsr_optimizer_nstate(&opt);
      break;
    }
    case O_SAMPLES:
      if (tsr__cli_to_long(optarg, 1, 1L << 40, &v))
        return bad("--samples", optarg, "an integer from 1 to 2^40");
      o.samples = v;
      break;
    case O_INPUTS:
      if (tsr__cli_to_long(optarg, 1, 1 << 24, &v))
        return bad("--inputs", optarg, "an integer from 1 to 16777216");
      o.inputs = (int)v, input_given = true;
      break;
    case O_INPUT:
      if (tsr__cli_shape(optarg, &o.in_height, &o.in_width, &o.in_channels))
        return bad("--input", optarg, "HxWxC, e.g. 224x224x3 (each from 1 to 65536)");
      o.inputs = o.in_height * o.in_width * o.in_channels, input_given = true;
      break;
    case O_CLASSES:
      if (tsr__cli_to_long(optarg, 2, 1 << 20, &v))
        return bad("--classes", optarg, "an integer from 2 to 1048576");
      o.classes = (int)v, classes_given = true;
      break;
    case O_TILE:
      if (tsr__cli_tile(optarg, &o.tile_rows, &o.tile_cols))
        return bad("--tile", optarg, "N or RxC (integers from 1 to 1048576) or auto");
      break;
    case O_WORKERS:
      if (tsr__cli_to_long(optarg, 1, 4096, &v))
        return bad("--workers", optarg, "an integer from 1 to 4096");
      workers = (int)v;
      break;
    case O_ALLREDUCE:
      if (!strcmp(optarg, "auto"))
        o.allreduce = TSR_ALLREDUCE_AUTO;
      else if (!strcmp(optarg, "flat"))
        o.allreduce = TSR_ALLREDUCE_FLAT;
      else if (!strcmp(optarg, "two-level"))
        o.allreduce = TSR_ALLREDUCE_TWO_LEVEL;
      else
        return bad("--allreduce", optarg, "auto, flat or two-level");
      break;
    case O_NODE_SIZE:
      if (tsr__cli_to_long(optarg, 1, 1 << 20, &v))
        return bad("--node-size", optarg, "an integer from 1 to 1048576");
      o.node_size = (int)v;
      break;
    case O_BUCKET_MB: {
      char *end;
      double mb = strtod(optarg, &end);
      if (end == optarg || *end || !(mb >= 0 && mb <= 1e6))
        return bad("--bucket-mb", optarg, "a number of MiB from 0 to 1e6");
      o.bucket_mb = (float)mb;
      break;
    }
    case O_DOMAIN:
      if (!strcmp(optarg, "none"))
        o.domain = TSR_PLAN_DOMAIN_NONE;
      else if (!strcmp(optarg, "rows"))
        o.domain = TSR_PLAN_DOMAIN_ROWS;
      else if (!strncmp(optarg, "rows:", 5) && !tsr__cli_to_long(optarg + 5, 1, 1 << 20, &v))
        o.domain = TSR_PLAN_DOMAIN_ROWS, o.domain_layers = (int)v;
      else if (!strcmp(optarg, "auto"))
        o.domain = TSR_PLAN_DOMAIN_AUTO;
      else
        return bad("--domain", optarg, "none, rows, rows:K or auto");
      break;
    case O_MACHINE: snprintf(machine_path, sizeof machine_path, "%s", optarg); break;
    case O_CALIBRATE: do_calibrate = true; break;
    case O_LAYERS: by_layer = true; break;
    case O_JSON: json = true; break;
    case O_HELP: usage(stdout); return 0;
    default: return 2; /* said by tsr__cli_getopt */
    }
  }
  if (optind < argc) {
    fprintf(stderr, "tessera plan: unexpected argument '%s' (see tessera plan --help)\n",
            argv[optind]);
    return 2;
  }
  if (do_calibrate) return calibrate(argc, argv, machine_path);
  if ((o.pr || o.pc) && o.pr * o.pc != o.ranks) {
    fprintf(stderr, "tessera plan: --grid %dx%d: Pr x Pc is %d, but --ranks is %d\n", o.pr, o.pc,
            o.pr * o.pc, o.ranks);
    return 2;
  }
  tsr_errbuf_t err = {""};
  tsr_model_spec_t spec;
  int rc = tsr__cli_model("plan", model, o.classes, &spec);
  if (rc) return rc;
  /* A language model (a context T): its samples are T token ids of bytes unless said. */
  int context = tsr__cli_model_context(&spec);
  if (context > 0 && !input_given) o.in_height = o.inputs = context, o.in_width = o.in_channels = 1;
  if (context > 0 && !classes_given) {
    o.classes = 256;
    tsr_model_spec_fini(&spec);
    if ((rc = tsr__cli_model("plan", model, o.classes, &spec))) return rc;
  }
  tsr_machine_t m;
  bool calibrated = true;
  rc = cluster ? tsr_machine_load_ini(&m, cluster, &err)
               : tsr_machine_here(&m, machine_path, cache_path, &calibrated, &err);
  if (rc) {
    fprintf(stderr, "tessera plan: %s\n", err.msg);
    tsr_model_spec_fini(&spec);
    return 1;
  }
  if (!calibrated && !json)
    fprintf(stderr,
            "tessera plan: no calibration at %s: alpha and beta are this machine class's "
            "defaults (run `mpirun -np 2 tessera plan --calibrate` to measure them)\n",
            machine_path);
  if (workers) m.workers = workers;
  if (m.nodes > 0 && m.ranks_per_node > 0 && o.ranks > (int64_t)m.nodes * m.ranks_per_node && !json)
    fprintf(stderr,
            "tessera plan: %d ranks need more than the %d nodes of %s; predicted as if "
            "they were there\n",
            o.ranks, m.nodes, m.name);
  tsr_plan_row_t *rows = calloc(MAX_ROWS, sizeof *rows);
  int n = 0;
  if (!rows) {
    tsr_model_spec_fini(&spec);
    return 1;
  }
  rc = tsr_plan_run(&spec, &o, &m, rows, MAX_ROWS, &n, &err);
  /* --layers: the recommended row's (the fewest seconds per epoch) */
  tsr_plan_layer_t *layers = NULL;
  int n_layers = 0, best = 0;
  for (int i = 0; i < n; i++)
    if (rows[i].best) best = i;
  if (rc == 0 && by_layer && n > 0) {
    layers = calloc((size_t)spec.n_layers * 2 + 8, sizeof *layers); /* fused and added ones */
    rc = layers ? tsr_plan_layers(&spec, &o, &m, &rows[best], layers, spec.n_layers * 2 + 8,
                                  &n_layers, &err)
                : tsr_error_set(&err, TSR_ENOMEM, "out of memory");
  }
  tsr_model_spec_fini(&spec);
  if (rc) {
    fprintf(stderr, "tessera plan: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    free(rows), free(layers);
    return 1;
  }
  if (json) {
    print_json(rows, n, &o, model, &m, layers, n_layers);
  } else {
    print_table(rows, n, &o, model, &m);
    if (layers) print_layers(&rows[best], layers, n_layers);
  }
  free(rows), free(layers);
  return 0;
}
