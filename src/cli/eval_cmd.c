/* tessera eval: a checkpoint's network on a test set (accuracy, per-class
 * accuracy, confusion matrix). It only parses options and calls the library. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tessera/tessera.h"

static void eval_usage(FILE *out) {
  fprintf(out,
          "usage: tessera eval --checkpoint FILE [options]\n\n"
          "  --checkpoint FILE   a checkpoint written by tessera train --checkpoint\n"
          "  --data DIR          dataset folder whose test set is evaluated [%s]\n"
          "  --text FILE[,FILE...]  a language model's text: the last tenth of its\n"
          "                      windows is evaluated, as tessera train cuts it (loss, bits\n"
          "                      per byte, next-byte accuracy) [a language model: the\n"
          "                      default text, Debian's fortunes]\n"
          "  --test-limit N      only the first N test samples\n"
          "  --validation        the samples the checkpoint's run held out (--val-split)\n"
          "                      from --data's training set, instead of its test set\n"
          "  --batch N           samples per evaluation step [256, or fewer samples]\n"
          "  --workers N         CPU workers [all cores StarPU may use]\n"
          "  --devices D         OpenCL devices beside them: opencl, opencl:N or none, as\n"
          "                      for tessera train [what StarPU finds]\n"
          "  --label-smoothing EPS  the loss against (1 - EPS) one-hot + EPS / classes, as\n"
          "                      tessera train's test loss with that option (a checkpoint\n"
          "                      does not record it) [0]\n"
          "  --json              one JSON object instead of text\n"
          "  --verbose           StarPU's own messages on stderr [off]\n"
          "  -h, --help          this text\n\n"
          "The test set is standardized as the checkpoint's training data was.\n",
          TSR_DEFAULT_DATA_DIR);
}

/* Accuracy, loss, per-class accuracy and the confusion matrix (rows: true
 * class, columns: predicted). */
static void report(FILE *out, bool json, const char *path, const char *what,
                   const tsr_dataset_t *test, const int32_t *pred, int classes, double loss,
                   double accuracy) {
  int64_t *confusion = calloc((size_t)classes * (size_t)classes, sizeof *confusion);
  if (!confusion) return;
  for (int64_t i = 0; i < test->n; i++)
    confusion[(int)test->y[i] * classes + pred[i]]++;
  if (json) {
    fprintf(out,
            "{\"checkpoint\": \"%s\", \"samples\": %lld, \"accuracy\": %.6f, \"loss\": %.6f, "
            "\"per_class\": [",
            path, (long long)test->n, accuracy, loss);
    for (int c = 0; c < classes; c++) {
      int64_t row = 0;
      for (int p = 0; p < classes; p++)
        row += confusion[c * classes + p];
      fprintf(out, "%s%.6f", c ? ", " : "",
              row ? (double)confusion[c * classes + c] / (double)row : 0.0);
    }
    fprintf(out, "], \"confusion\": [");
    for (int c = 0; c < classes; c++) {
      fprintf(out, "%s[", c ? ", " : "");
      for (int p = 0; p < classes; p++)
        fprintf(out, "%s%lld", p ? ", " : "", (long long)confusion[c * classes + p]);
      fprintf(out, "]");
    }
    fprintf(out, "]}\n");
  } else {
    fprintf(out, "%s: %lld %s samples, accuracy %.2f%%, loss %.4f\n", path, (long long)test->n,
            what, 100 * accuracy, loss);
    fprintf(out, "\nconfusion (rows: true class, columns: predicted)  accuracy\n      ");
    for (int p = 0; p < classes; p++)
      fprintf(out, "%6d", p);
    fprintf(out, "\n");
    for (int c = 0; c < classes; c++) {
      int64_t row = 0;
      fprintf(out, "  %3d ", c);
      for (int p = 0; p < classes; p++)
        fprintf(out, "%6lld", (long long)confusion[c * classes + p]),
            row += confusion[c * classes + p];
      fprintf(out, "   %6.2f%%\n",
              row ? 100.0 * (double)confusion[c * classes + c] / (double)row : 0.0);
    }
  }
  free(confusion);
}

/* --validation: *test becomes the samples the checkpoint's run held out of train, drawn again
 * as it drew them (the seed, the fraction, the training samples it drew from), once train is
 * known to be that run's. */
static int held_out(tsr_dataset_t *train, tsr_dataset_t *test, const char *data, const char *path,
                    const tsr_checkpoint_info_t *info, tsr_errbuf_t *err) {
  if (!(info->val_split > 0))
    return tsr_error_set(err, TSR_EINVAL,
                         "--validation: %s was written by a run without --val-split: it held "
                         "nothing out (evaluate its test set without --validation)",
                         path);
  char seen[128] = "";
  if (info->val_from <= train->n) tsr_dataset_truncate(train, info->val_from);
  tsr_dataset_fingerprint(train, seen, sizeof seen);
  if (train->n != info->val_from || strcmp(seen, info->data) != 0)
    return tsr_error_set(err, TSR_EINVAL,
                         "--validation: the training set in %s (%s) is not the one %s was "
                         "trained on (%s): give the run's --data",
                         data, seen, path, info->data);
  tsr_dataset_fini(test);
  int rc = tsr_validation_split(train, test, info->val_split, info->seed, err);
  tsr_dataset_fingerprint(test, seen, sizeof seen);
  if (rc == 0 && info->val_data[0] && strcmp(seen, info->val_data) != 0)
    rc = tsr_error_set(err, TSR_EINVAL,
                       "--validation: the samples drawn again (%s) are not those %s records "
                       "(%s)",
                       seen, path, info->val_data);
  return rc;
}

int tsr_cli_eval(int argc, char **argv) {
  static const struct option longopts[] = {{"checkpoint", required_argument, 0, 'c'},
                                           {"data", required_argument, 0, 'd'},
                                           {"text", required_argument, 0, 'T'},
                                           {"test-limit", required_argument, 0, 'l'},
                                           {"batch", required_argument, 0, 'b'},
                                           {"workers", required_argument, 0, 'w'},
                                           {"devices", required_argument, 0, 'D'},
                                           {"label-smoothing", required_argument, 0, 's'},
                                           {"json", no_argument, 0, 'j'},
                                           {"validation", no_argument, 0, 'V'},
                                           {"verbose", no_argument, 0, 'v'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const char *path = NULL, *data = TSR_DEFAULT_DATA_DIR, *text = NULL;
  bool data_given = false;
  long limit = -1, batch = 256, workers = -1;
  int opencl = TSR_OPENCL_AUTO;
  bool json = false, verbose = false, validation = false;
  float smoothing = 0.0f;
  int c;
  while ((c = tsr__cli_getopt("eval", argc, argv, longopts)) != -1) {
    switch (c) {
    case 'c': path = optarg; break;
    case 'd': data = optarg, data_given = true; break;
    case 'T': text = optarg; break;
    case 'l':
      if (tsr__cli_to_long(optarg, 1, 0x7fffffffL, &limit)) {
        fprintf(stderr, "tessera eval: --test-limit %s: expected an integer >= 1\n", optarg);
        return 2;
      }
      break;
    case 'b':
      if (tsr__cli_to_long(optarg, 1, 1 << 16, &batch)) {
        fprintf(stderr, "tessera eval: --batch %s: expected an integer in 1..65536\n", optarg);
        return 2;
      }
      break;
    case 'w':
      if (tsr__cli_to_long(optarg, 1, 4096, &workers)) {
        fprintf(stderr, "tessera eval: --workers %s: expected an integer >= 1\n", optarg);
        return 2;
      }
      break;
    case 'D':
      if (tsr__cli_devices("eval", optarg, &opencl)) return 2;
      break;
    case 's': {
      char *end;
      double eps = strtod(optarg, &end);
      if (end == optarg || *end || !(eps >= 0.0 && eps < 1.0) || (float)eps >= 1.0f) {
        fprintf(stderr, "tessera eval: --label-smoothing %s: expected a number in [0, 1)\n",
                optarg);
        return 2;
      }
      smoothing = (float)eps;
      break;
    }
    case 'j': json = true; break;
    case 'V': validation = true; break;
    case 'v': verbose = true; break;
    case 'h': eval_usage(stdout); return 0;
    default: return 2;
    }
  }
  if (!path || optind < argc) {
    fprintf(stderr, "tessera eval: %s (see tessera eval --help)\n",
            path ? "unexpected argument" : "--checkpoint FILE is required");
    return 2;
  }
  tsr_errbuf_t err = {""};
  tsr_checkpoint_info_t info;
  tsr_model_spec_t spec = {0};
  tsr_net_opts_t no;
  int inputs, classes;
  int rc = tsr_checkpoint_read(path, &info, &spec, &no, &inputs, &classes, &err);
  no.label_smoothing = smoothing;
  tsr_dataset_t train = {0}, test = {0};
  /* A language model is evaluated on text, as tessera train held its test windows out. */
  int context = rc == 0 ? tsr__cli_model_context(&spec) : 0;
  if (rc == 0 && context > 0 && (data_given || validation))
    rc = tsr_error_set(&err, TSR_EINVAL,
                       "%s is a language model: it is evaluated on text (--text FILE[,FILE...], "
                       "default: Debian's fortunes), not on --data%s",
                       path, validation ? " or --validation" : "");
  else if (rc == 0 && context == 0 && text)
    rc = tsr_error_set(&err, TSR_EINVAL,
                       "--text: %s is not a language model (no layer has a context); evaluate "
                       "it on --data",
                       path);
  if (rc == 0 && context > 0) {
    rc = tsr__cli_load_text(text, context, &train, &test, &err);
    data = text ? text : "the default text";
  } else if (rc == 0) {
    rc = tsr_dataset_load_dir(&train, &test, data, &err);
  }
  if (rc == 0 && validation) rc = held_out(&train, &test, data, path, &info, &err);
  tsr_dataset_fini(&train); /* the test set (or the held-out samples) is what counts */
  if (rc == 0 && limit > 0 && limit < test.n) rc = tsr_dataset_truncate(&test, limit);
  if (rc == 0 && (test.features != inputs || test.classes > classes || test.n == 0))
    rc = tsr_error_set(&err, TSR_ESHAPE,
                       "%s: %lld test samples of %lld features in %d classes; %s takes %d features "
                       "and %d classes",
                       data, (long long)test.n, (long long)test.features, test.classes, path,
                       inputs, classes);
  tsr_standardization_t z = {0};
  if (rc == 0) rc = tsr_checkpoint_read_standardization(path, &z, &err);
  if (rc == 0) rc = tsr_standardization_apply(&z, &test, data, &err);
  tsr_standardization_fini(&z);
  tsr_runtime_opts_t ro;
  tsr_runtime_opts_init(&ro);
  ro.ncpus = (int)workers, ro.opencl = opencl, ro.verbose = verbose;
  bool started = false;
  if (rc == 0) started = (rc = tsr_runtime_init(&ro, &err)) == 0;
  tsr_net_t *net = NULL;
  /* No larger than the samples evaluated: a net of 256 rows built for one GPT window took 15 s. */
  no.batch = (int)(test.n > 0 && test.n < batch ? test.n : batch);
  if (rc == 0) rc = tsr_net_create(&net, &spec, inputs, classes, &no, &err);
  if (rc == 0) rc = tsr_checkpoint_load(net, path, NULL, NULL, &err);
  int32_t *pred = rc == 0 && !context ? malloc(sizeof(int32_t) * (size_t)test.n) : NULL;
  if (rc == 0 && !context && !pred) rc = TSR_ENOMEM;
  double loss = 0, accuracy = 0;
  if (rc == 0) rc = tsr_evaluate(net, &test, &loss, &accuracy);
  if (rc == 0 && !context) rc = tsr_predict(net, &test, pred);
  /* A language model: per byte, the loss in nats and in bits, and the next byte's accuracy. */
  double bits = loss / 0.6931471805599453;
  long long windows = (long long)test.n, tokens = (long long)test.n * context;
  if (rc == 0 && context && json)
    printf("{\"checkpoint\": \"%s\", \"text\": \"%s\", \"windows\": %lld, \"tokens\": %lld, "
           "\"loss\": %.6f, \"bits_per_byte\": %.6f, \"accuracy\": %.6f}\n",
           path, data, windows, tokens, loss, bits, accuracy);
  else if (rc == 0 && context)
    printf("%s: %s, %lld test windows (%lld tokens): loss %.4f, %.4f bits per byte, next-byte "
           "accuracy %.2f%%\n",
           path, data, windows, tokens, loss, bits, 100 * accuracy);
  else if (rc == 0)
    report(stdout, json, path, validation ? "validation" : "test", &test, pred, classes, loss,
           accuracy);
  else
    fprintf(stderr, "tessera eval: %s\n", err.msg[0] ? err.msg : tsr_strerror(rc));
  free(pred);
  tsr_net_destroy(&net);
  tsr_model_spec_fini(&spec);
  if (started) tsr_runtime_fini();
  tsr_dataset_fini(&test);
  return rc ? 1 : 0;
}
