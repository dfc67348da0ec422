/* The tessera side of the GPT equality test (tests/test_gpt_torch.py): a language model trained
 * for a few AdamW steps on fixed batches of a text's bytes, its losses printed, its checkpoints
 * written before the first step and after the last, so that PyTorch can start from the same
 * weights and take the same steps on the same tokens.
 *
 * The samples are the text's consecutive windows: sample i is bytes i T .. i T + T - 1 (the
 * token ids, as exact integers in float; T x 1 x 1), its targets bytes i T + 1 .. i T + T (the
 * next token at each position). Step k (0-based) trains on samples k B .. k B + B - 1; after the
 * last step, one evaluation on samples steps B .. steps B + B - 1. No standardization, no
 * shuffling, no schedule: the rate is lr at every step; --clip-grad X clips the gradients' norm
 * to X before each update (tsr_net_opts_t.clip_grad). --from FILE starts from FILE's weights (a
 * checkpoint of the same model, e.g. written by the Python package) instead of the initialization.
 *
 * usage: gpt_steps --model gpt:L,D,H,T|FILE.ini --text FILE --out DIR [--batch B] [--steps N]
 *                  [--lr X] [--weight-decay X] [--seed S] [--tile R] [--clip-grad X]
 *                  [--from FILE.st]
 * Prints one JSON line per step {"step": k, "loss": X} (the batch's mean loss per token, before
 * that step's update), then {"eval": X} (after the last update), and writes DIR/init.st and
 * DIR/final.st. Exit 0, or 1 with the reason on stderr. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"

typedef struct {
  const char *model, *text, *out, *from;
  int batch, steps, tile_rows;
  double lr, wd, clip;
  unsigned long long seed;
} args_t;

/* The text's windows of t tokens as a dataset of n samples with t targets each. */
static int text_windows(tsr_dataset_t *ds, const char *path, int t, int64_t need) {
  FILE *f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "gpt_steps: cannot open %s\n", path), 1;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *bytes = len > 0 ? malloc((size_t)len) : NULL;
  size_t got = bytes ? fread(bytes, 1, (size_t)len, f) : 0;
  fclose(f);
  int64_t n = got > 1 ? ((int64_t)got - 1) / t : 0;
  if (n < need) {
    free(bytes);
    return fprintf(stderr, "gpt_steps: %s has %lld windows of %d tokens; %lld needed\n", path,
                   (long long)n, t, (long long)need),
           1;
  }
  *ds = (tsr_dataset_t){
      .n = n, .features = t, .classes = 256, .channels = 1, .height = t, .width = 1, .targets = t};
  ds->x = malloc(sizeof(float) * (size_t)(n * t));
  ds->y = malloc(sizeof(float) * (size_t)(n * t));
  if (!ds->x || !ds->y) return free(bytes), fprintf(stderr, "gpt_steps: out of memory\n"), 1;
  for (int64_t i = 0; i < n * t; i++)
    ds->x[i] = (float)bytes[i], ds->y[i] = (float)bytes[i + 1];
  free(bytes);
  return 0;
}

static int save(const tsr_net_t *net, const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  tsr_checkpoint_info_t info = {.input_mean = 0.0f, .input_std = 1.0f, .ranks = 1};
  snprintf(info.sync, sizeof info.sync, "none");
  tsr_errbuf_t err = {""};
  int rc = tsr_checkpoint_save(net, &info, path, &err);
  if (rc) fprintf(stderr, "gpt_steps: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
  return rc;
}

static int run(const args_t *a) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  size_t len = strlen(a->model);
  int rc = len > 4 && strcmp(a->model + len - 4, ".ini") == 0
               ? tsr_model_load_ini(&spec, a->model, &err)
               : tsr_model_parse(&spec, a->model, 256, &err);
  if (rc == 0) tsr_model_bind_classes(&spec, 256);
  if (rc) return fprintf(stderr, "gpt_steps: %s\n", err.msg), 1;
  int t = spec.n_layers > 0 ? spec.layers[0].context : 0;
  tsr_dataset_t ds = {0};
  if (t <= 0 || text_windows(&ds, a->text, t, (int64_t)(a->steps + 1) * a->batch)) {
    if (t <= 0)
      fprintf(stderr, "gpt_steps: %s does not start with an embedding of a context\n", a->model);
    tsr_model_spec_fini(&spec);
    return 1;
  }
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = a->batch, o.tile_rows = a->tile_rows, o.seed = a->seed, o.init = TSR_INIT_GPT2;
  o.in_channels = 1, o.in_height = t, o.in_width = 1;
  rc = tsr_optimizer_init(&o.opt, "adamw", &err);
  o.opt.lr = (float)a->lr, o.opt.weight_decay = (float)a->wd, o.clip_grad = (float)a->clip;
  tsr_net_t *net = NULL;
  if (rc == 0) rc = tsr_net_create(&net, &spec, t, 256, &o, &err);
  tsr_model_spec_fini(&spec);
  if (rc) {
    fprintf(stderr, "gpt_steps: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    tsr_dataset_fini(&ds);
    return 1;
  }
  if (a->from && tsr_checkpoint_load(net, a->from, NULL, NULL, &err) != 0) {
    fprintf(stderr, "gpt_steps: %s\n", err.msg);
    tsr_net_destroy(&net);
    tsr_dataset_fini(&ds);
    return 1;
  }
  rc = save(net, a->out, "init.st");
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)a->batch);
  if (!rows) rc = TSR_ENOMEM;
  for (int k = 0; rc == 0 && k <= a->steps; k++) {
    for (int i = 0; i < a->batch; i++)
      rows[i] = (int32_t)(k * a->batch + i);
    bool eval = k == a->steps;
    rc = eval ? tsr_net_eval_step(net, &ds, rows, a->batch)
              : tsr_net_train_step(net, &ds, rows, a->batch, true);
    double loss = 0, correct = 0;
    if (rc == 0) rc = tsr_net_take_stats(net, eval, &loss, &correct);
    if (rc == 0 && eval) printf("{\"eval\": %.9g}\n", loss / a->batch);
    if (rc == 0 && !eval) printf("{\"step\": %d, \"loss\": %.9g}\n", k, loss / a->batch);
  }
  if (rc == 0)
    rc = save(net, a->out, "final.st");
  else
    fprintf(stderr, "gpt_steps: training failed: %s\n", tsr_strerror(rc));
  free(rows);
  tsr_net_destroy(&net);
  tsr_dataset_fini(&ds);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"model", required_argument, 0, 'm'},        {"text", required_argument, 0, 'x'},
      {"out", required_argument, 0, 'o'},          {"batch", required_argument, 0, 'b'},
      {"steps", required_argument, 0, 'n'},        {"lr", required_argument, 0, 'l'},
      {"weight-decay", required_argument, 0, 'w'}, {"seed", required_argument, 0, 's'},
      {"tile", required_argument, 0, 't'},         {"clip-grad", required_argument, 0, 'c'},
      {"from", required_argument, 0, 'f'},         {0, 0, 0, 0}};
  args_t a = {.batch = 8, .steps = 10, .lr = 1e-3, .wd = 0.1, .seed = 1};
  int opt;
  while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (opt) {
    case 'm': a.model = optarg; break;
    case 'x': a.text = optarg; break;
    case 'o': a.out = optarg; break;
    case 'b': a.batch = atoi(optarg); break;
    case 'n': a.steps = atoi(optarg); break;
    case 'l': a.lr = atof(optarg); break;
    case 'w': a.wd = atof(optarg); break;
    case 's': a.seed = strtoull(optarg, NULL, 10); break;
    case 't': a.tile_rows = atoi(optarg); break;
    case 'c': a.clip = atof(optarg); break;
    case 'f': a.from = optarg; break;
    default: return 2;
    }
  }
  if (!a.model || !a.text || !a.out || a.batch < 1 || a.steps < 1 || !(a.lr > 0) || a.wd < 0 ||
      a.tile_rows < 0 || a.clip < 0) {
    fprintf(stderr, "usage: gpt_steps --model gpt:L,D,H,T --text FILE --out DIR [--batch B] "
                    "[--steps N] [--lr X] [--weight-decay X] [--seed S] [--tile R] "
                    "[--clip-grad X] [--from FILE.st]\n");
    return 2;
  }
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  tsr_errbuf_t err = {""};
  if (tsr_runtime_init(&ro, &err)) return fprintf(stderr, "gpt_steps: %s\n", err.msg), 1;
  int rc = run(&a);
  tsr_runtime_fini();
  return rc;
}
