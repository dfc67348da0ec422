/* tessera inspect: a checkpoint's tensors and metadata, as text or one line of JSON. The
 * library checks and lists the file (tsr_checkpoint_list); how it is shown is the command's. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "tessera/tessera.h"

/* The text: a line per tensor (name, shape), then the metadata, a multi-line value indented
 * under its key. */
static void print_text(FILE *out, const char *path, const tsr_checkpoint_listing_t *l) {
  fprintf(out, "%s: %d tensors\n", path, l->n_tensors);
  for (int i = 0; i < l->n_tensors; i++) {
    const tsr_checkpoint_tensor_t *t = &l->tensors[i];
    fprintf(out, "  %-52s F32 [", t->name);
    for (int d = 0; d < t->ndims; d++)
      fprintf(out, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    fprintf(out, "]\n");
  }
  fprintf(out, "metadata:\n");
  for (int k = 0; k < l->n_metadata; k++) {
    const tsr_checkpoint_entry_t *m = &l->metadata[k];
    if (strchr(m->value, '\n')) {
      fprintf(out, "  %s:\n    ", m->key);
      for (const char *c = m->value; *c; c++)
        fputs(*c == '\n' && c[1] ? "\n    " : (char[2]){*c, 0}, out);
      fputc('\n', out);
    } else {
      fprintf(out, "  %-16s %s\n", m->key, m->value);
    }
  }
}

/* The same as one line of JSON: {"file", "tensors": [{"name", "dtype": "F32", "shape": [...]}],
 * "metadata": {key: value as stored, a string}, "parameters": the floats of all tensors}. */
static int print_json(FILE *out, const char *path, const tsr_checkpoint_listing_t *l,
                      tsr_errbuf_t *err) {
  cJSON *o = cJSON_CreateObject();
  cJSON *ts =
      o && cJSON_AddStringToObject(o, "file", path) ? cJSON_AddArrayToObject(o, "tensors") : NULL;
  double params = 0;
  for (int i = 0; ts && i < l->n_tensors; i++) {
    const tsr_checkpoint_tensor_t *t = &l->tensors[i];
    cJSON *x = cJSON_CreateObject(), *shape = x ? cJSON_AddArrayToObject(x, "shape") : NULL;
    if (!shape) break;
    double n = 1;
    for (int d = 0; d < t->ndims; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d])),
          n *= (double)t->shape[d];
    params += n;
    cJSON_AddItemToObject(x, "name", cJSON_CreateString(t->name));
    cJSON_AddItemToObject(x, "dtype", cJSON_CreateString("F32"));
    cJSON_AddItemToArray(ts, x);
  }
  cJSON *meta = o ? cJSON_AddObjectToObject(o, "metadata") : NULL;
  for (int k = 0; meta && k < l->n_metadata; k++)
    cJSON_AddStringToObject(meta, l->metadata[k].key, l->metadata[k].value);
  char *text = NULL;
  if (meta && cJSON_AddNumberToObject(o, "parameters", params)) text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!text) return tsr_error_set(err, TSR_ENOMEM, "%s: out of memory for the JSON", path);
  fprintf(out, "%s\n", text);
  cJSON_free(text);
  return 0;
}

static void inspect_usage(FILE *out) {
  fprintf(out, "usage: tessera inspect [options] FILE\n\n"
               "Checks a checkpoint (every tensor's checksum) and prints its tensors (name, "
               "shape)\nand metadata (model, training state).\n\n"
               "  --json              one JSON object instead of text\n"
               "  -h, --help          this text\n");
}

int tsr_cli_inspect(int argc, char **argv) {
  static const struct option longopts[] = {
      {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  bool json = false;
  int c;
  while ((c = tsr__cli_getopt("inspect", argc, argv, longopts)) != -1) {
    switch (c) {
    case 'j': json = true; break;
    case 'h': inspect_usage(stdout); return 0;
    default: return 2;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "tessera inspect: expected one checkpoint file (see tessera inspect --help)\n");
    return 2;
  }
  tsr_errbuf_t err = {""};
  tsr_checkpoint_listing_t l;
  const char *path = argv[optind];
  int rc = tsr_checkpoint_list(&l, path, &err);
  if (rc == 0 && json)
    rc = print_json(stdout, path, &l, &err);
  else if (rc == 0)
    print_text(stdout, path, &l);
  tsr_checkpoint_listing_fini(&l);
  if (rc) fprintf(stderr, "tessera inspect: %s\n", err.msg);
  return rc ? 1 : 0;
}
