/* tessera summary: a model's layer table (name, type, output shape, parameters, forward FLOPs
 * per sample) and its totals, from tsr_model_summarize; options parsed here, numbers from the
 * library. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "tessera/net.h"

static void usage(FILE *out) {
  fprintf(out, "usage: tessera summary [options]\n\n"
               "Prints a model's layers as the network builds them: name, type (+relu when a\n"
               "ReLU is fused into it), output shape (h x w x c), parameters and forward\n"
               "floating-point operations per sample (a multiply-add counts 2), then the totals\n"
               "and the activations' bytes per sample. Nothing is trained or allocated.\n\n"
               "  --model SPEC|FILE   as tessera train's: a shorthand, a zoo model (resnet20,\n"
               "                      resnet50, vgg16, alexnet, googlenet, ...) or a model\n"
               "                      file [mlp]\n"
               "  --input HxWxC       the input sample's shape, e.g. 224x224x3 [28x28x1]\n"
               "  --classes N         classes: the output layer's units [10]\n"
               "  --json              JSON instead of a table\n"
               "  --layer-types       the registered layer types as JSON instead (their model\n"
               "                      file keys, parameter and buffer names), what the\n"
               "                      Python package's layer_types.py is written from\n"
               "  -h, --help          this text\n");
}

static void print_table(const tsr_model_summary_t *s, const char *model, int classes) {
  printf("model %s, input %dx%dx%d, %d classes\n\n", model, s->in_h, s->in_w, s->in_c, classes);
  printf("%-28s %-14s %16s %14s %16s\n", "layer", "type", "output", "parameters", "FLOPs");
  for (int i = 0; i < s->n_layers; i++) {
    const tsr_layer_summary_t *r = &s->layers[i];
    char shape[48];
    snprintf(shape, sizeof shape, "%dx%dx%d", r->h, r->w, r->c);
    printf("%-28s %-14s %16s %14lld %16.0f\n", r->name, r->type, shape, (long long)r->params,
           r->flops);
  }
  printf("\ntotal: %d layers, %lld parameters (%.2f M), %.0f FLOPs per sample (%.3f G), "
         "activations %.2f MB per sample\n",
         s->n_layers, (long long)s->params, s->params / 1e6, s->flops, s->flops / 1e9,
         s->act_bytes / 1e6);
}

static void print_json(const tsr_model_summary_t *s, const char *model, int classes) {
  cJSON *root = cJSON_CreateObject(), *list = cJSON_CreateArray();
  cJSON_AddStringToObject(root, "model", model);
  cJSON_AddNumberToObject(root, "classes", classes);
  cJSON *in = cJSON_AddArrayToObject(root, "input");
  cJSON_AddItemToArray(in, cJSON_CreateNumber(s->in_h));
  cJSON_AddItemToArray(in, cJSON_CreateNumber(s->in_w));
  cJSON_AddItemToArray(in, cJSON_CreateNumber(s->in_c));
  for (int i = 0; i < s->n_layers; i++) {
    const tsr_layer_summary_t *r = &s->layers[i];
    cJSON *x = cJSON_CreateObject(), *shape = cJSON_AddArrayToObject(x, "output");
    cJSON_AddStringToObject(x, "name", r->name);
    cJSON_AddStringToObject(x, "type", r->type);
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(r->h));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(r->w));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(r->c));
    cJSON_AddNumberToObject(x, "params", (double)r->params);
    cJSON_AddNumberToObject(x, "flops", r->flops);
    cJSON_AddNumberToObject(x, "act_bytes", (double)r->act_bytes);
    cJSON_AddItemToArray(list, x);
  }
  cJSON_AddItemToObject(root, "layers", list);
  cJSON_AddNumberToObject(root, "params", (double)s->params);
  cJSON_AddNumberToObject(root, "flops", s->flops);
  cJSON_AddNumberToObject(root, "act_bytes", (double)s->act_bytes);
  char *text = cJSON_Print(root);
  if (text) puts(text);
  free(text);
  cJSON_Delete(root);
}

int tsr_cli_summary(int argc, char **argv) {
  enum { O_MODEL = 1, O_INPUT, O_CLASSES, O_JSON, O_TYPES, O_HELP };
  static const struct option longopts[] = {{"model", required_argument, 0, O_MODEL},
                                           {"input", required_argument, 0, O_INPUT},
                                           {"classes", required_argument, 0, O_CLASSES},
                                           {"json", no_argument, 0, O_JSON},
                                           {"layer-types", no_argument, 0, O_TYPES},
                                           {"help", no_argument, 0, O_HELP},
                                           {0, 0, 0, 0}};
  const char *model = "mlp";
  tsr_net_opts_t no;
  tsr_net_opts_init(&no);
  no.batch = 1;
  no.in_height = 28, no.in_width = 28, no.in_channels = 1;
  int classes = 10, c;
  long v;
  bool json = false, types = false;
  while ((c = tsr__cli_getopt("summary", argc, argv, longopts)) != -1) {
    switch (c) {
    case O_MODEL: model = optarg; break;
    case O_INPUT:
      if (tsr__cli_shape(optarg, &no.in_height, &no.in_width, &no.in_channels)) {
        fprintf(stderr,
                "tessera summary: --input %s: expected HxWxC, e.g. 224x224x3 (each from 1 to "
                "65536; see tessera summary --help)\n",
                optarg);
        return 2;
      }
      break;
    case O_CLASSES:
      if (tsr__cli_to_long(optarg, 2, 1 << 20, &v)) {
        fprintf(stderr,
                "tessera summary: --classes %s: expected an integer from 2 to 1048576 (see "
                "tessera summary --help)\n",
                optarg);
        return 2;
      }
      classes = (int)v;
      break;
    case O_JSON: json = true; break;
    case O_TYPES: types = true; break;
    case O_HELP: usage(stdout); return 0;
    default: return 2; /* said by tsr__cli_getopt */
    }
  }
  if (optind < argc) {
    fprintf(stderr, "tessera summary: unexpected argument '%s' (see tessera summary --help)\n",
            argv[optind]);
    return 2;
  }
  if (types) {
    char *text = tsr_layer_types_json();
    if (!text) return fprintf(stderr, "tessera summary: out of memory\n"), 1;
    printf("%s\n", text);
    free(text);
    return 0;
  }
  tsr_model_spec_t spec;
  int rc = tsr__cli_model("summary", model, classes, &spec);
  if (rc) return rc;
  tsr_errbuf_t err = {""};
  tsr_model_summary_t s;
  int inputs = no.in_height * no.in_width * no.in_channels;
  rc = tsr_model_summarize(&s, &spec, inputs, classes, &no, &err);
  tsr_model_spec_fini(&spec);
  if (rc) {
    fprintf(stderr, "tessera summary: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
    return 1;
  }
  if (json)
    print_json(&s, model, classes);
  else
    print_table(&s, model, classes);
  tsr_model_summary_fini(&s);
  return 0;
}
