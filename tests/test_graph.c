/* Networks as graphs: a residual MLP and a small residual CNN (two add blocks and a concat each)
 * against float64 finite differences; every graph error a model file can make, text in and
 * message out; the fusion decisions where an output has several readers; a 1000-layer model
 * file; tile-size invariance of a graph net's training steps; bit-for-bit repeatable gradient
 * sums where an output feeds several layers; model files with inputs written back as read. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/layout.h"
#include "nn/model.h"
#include "nn/net_impl.h"
#include "tessera/tessera.h"

#include "gradcheck.h"
#include "training.h"

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(graph, .init = start, .fini = stop, .timeout = 300);

static tsr_model_spec_t parse(const char *text) {
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse_ini_text(&spec, text, "test.ini", &err), 0, "%s\n%s", err.msg, text);
  return spec;
}

/* 6 features: a (ReLU fused, read by b, s1 and d: three gradients summed), two residual adds,
 * a ReLU after the second, and a concat of s2, d and the input batch (which two layers read)
 * along features, cut across tiles. */
static const char residual_mlp[] = "[a]\ntype = dense\nunits = 5\nactivation = relu\n"
                                   "[b]\ntype = dense\nunits = 5\n"
                                   "[s1]\ntype = add\ninputs = a, b\n"
                                   "[c]\ntype = dense\nunits = 5\nactivation = relu\n"
                                   "[s2]\ntype = add\ninputs = s1, c\nactivation = relu\n"
                                   "[d]\ntype = dense\nunits = 4\ninput = a\n"
                                   "[cat]\ntype = concat\ninputs = s2, d, input\n"
                                   "[out]\ntype = dense\nunits = 3\n";

/* 2 x 6 x 6 samples: c1's output (ReLU fused) read by c2 and r1, two residual adds of
 * convolutions, and a concat of r2 and the input batch along channels, pooled. */
static const char residual_cnn[] =
    "[c1]\ntype = conv\nfilters = 3\nkernel = 3\npadding = 1\nactivation = relu\n"
    "[c2]\ntype = conv\nfilters = 3\nkernel = 3\npadding = 1\n"
    "[r1]\ntype = add\ninputs = c1, c2\nactivation = relu\n"
    "[c3]\ntype = conv\nfilters = 3\nkernel = 1\n"
    "[r2]\ntype = add\ninputs = r1, c3\n"
    "[cat]\ntype = concat\ninputs = r2, input\n"
    "[pool]\ntype = maxpool\nkernel = 2\n"
    "[flat]\ntype = flatten\n"
    "[out]\ntype = dense\nunits = 3\n";

Test(graph, residual_mlp_passes_the_gradient_check) {
  tsr_model_spec_t spec = parse(residual_mlp);
  /* 5 samples with 4 valid, tiles of 2 x 3: the concat's inputs straddle its output's tiles */
  gradient_check(&spec, 6, 1, 1, 3, 5, 4, 2, 3);
  gradient_check(&spec, 6, 1, 1, 3, 5, 5, 5, 2);
  tsr_model_spec_fini(&spec);
}

/* An add of three inputs with its ReLU fused (the accumulation, then a ReLU task), and one of
 * two (the ReLU inside the add's task); backward each input's gradient is dy gated by y. */
static const char relu_adds[] = "[a]\ntype = dense\nunits = 5\nactivation = relu\n"
                                "[b]\ntype = dense\nunits = 5\n"
                                "[c]\ntype = dense\nunits = 5\n"
                                "[s3]\ntype = add\ninputs = a, b, c\nactivation = relu\n"
                                "[s2]\ntype = add\ninputs = s3, b\nactivation = relu\n"
                                "[out]\ntype = dense\nunits = 3\n";

Test(graph, adds_with_their_relu_fused_pass_the_gradient_check) {
  tsr_model_spec_t spec = parse(relu_adds);
  tsr_net_layout_t lay;
  tsr_errbuf_t err = {""};
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  cr_assert_eq(tsr__net_layout(&lay, &spec, 6, 3, &o, 2, &err), 0, "%s", err.msg);
  int fused = 0;
  for (int l = 0; l < lay.n_layers; l++) {
    cr_assert_neq(lay.layers[l].kind, TSR_LAYER_RELU, "layer %d: a ReLU left unfused", l);
    fused += lay.layers[l].kind == TSR_LAYER_ADD && lay.layers[l].relu;
  }
  cr_assert_eq(fused, 2, "%d adds with their ReLU fused", fused);
  tsr__net_layout_fini(&lay);
  gradient_check(&spec, 6, 1, 1, 3, 5, 4, 2, 3);
  tsr_model_spec_fini(&spec);
}

Test(graph, residual_cnn_passes_the_gradient_check) {
  tsr_model_spec_t spec = parse(residual_cnn);
  gradient_check(&spec, 2, 6, 6, 3, 5, 4, 2, 3);
  tsr_model_spec_fini(&spec);
}

static int layout_domain = -1; /* layout_of's --domain rows:K (0: all; -1: none) */

/* The layout of text on a c x h x w input (2 workers), or its error. */
static int layout_of(tsr_net_layout_t *lay, const char *text, int c, int h, int w, int grid_rows,
                     tsr_errbuf_t *err) {
  tsr_model_spec_t spec;
  int rc = tsr_model_parse_ini_text(&spec, text, "graph.ini", err);
  if (rc) return rc;
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.in_channels = c, o.in_height = h, o.in_width = w, o.grid_rows = grid_rows;
  o.domain = layout_domain >= 0, o.domain_layers = layout_domain >= 0 ? layout_domain : 0;
  const tsr_layer_spec_t *last = &spec.layers[spec.n_layers - 1];
  rc = tsr__net_layout(lay, &spec, c * h * w, last->units >= 2 ? last->units : 3, &o, 2, err);
  if (rc == 0 && lay->grid_rc) {
    rc = lay->grid_rc;
    *err = lay->grid_err;
    tsr__net_layout_fini(lay);
  }
  tsr_model_spec_fini(&spec);
  return rc;
}

/* text is refused, on a c x h x w input, with a message holding every fragment of want. */
static void expect_error(const char *text, int c, int h, int w, int grid_rows,
                         const char *const *want, int nwant) {
  tsr_net_layout_t lay;
  tsr_errbuf_t err = {""};
  int rc = layout_of(&lay, text, c, h, w, grid_rows, &err);
  cr_assert(rc < 0, "accepted:\n%s", text);
  for (int i = 0; i < nwant; i++)
    cr_expect(strstr(err.msg, want[i]), "message '%s' lacks '%s' (model:\n%s)", err.msg, want[i],
              text);
  /* The network builder and the estimate refuse it the same way. */
  if (grid_rows > 1) return; /* a grid needs MPI ranks to build */
  tsr_model_spec_t spec;
  if (tsr_model_parse_ini_text(&spec, text, "graph.ini", &err)) return;
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.in_channels = c, o.in_height = h, o.in_width = w;
  tsr_net_t *net = NULL;
  tsr_errbuf_t cerr = {""}, eerr = {""};
  tsr_net_memory_t mem;
  cr_expect_lt(tsr_net_create(&net, &spec, c * h * w, 3, &o, &cerr), 0);
  cr_expect_null(net);
  cr_expect_lt(tsr_net_estimate(&mem, &spec, c * h * w, 3, &o, &eerr), 0);
  cr_expect_str_eq(cerr.msg, err.msg);
  cr_expect_str_eq(eerr.msg, err.msg);
  tsr_model_spec_fini(&spec);
}

#define WANT(...)                                                                                  \
  (const char *const[]){__VA_ARGS__}, (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *))

static const char out3[] = "[out]\ntype = dense\nunits = 3\n";

static char text_buf[4096];

/* text + the output layer. */
static const char *with_out(const char *text) {
  snprintf(text_buf, sizeof text_buf, "%s%s", text, out3);
  return text_buf;
}

Test(graph, unknown_and_ambiguous_names_are_refused) {
  expect_error(with_out("[a]\ntype = dense\nunits = 4\n[s]\ntype = add\ninputs = a, nosuch\n"), 6,
               1, 1, 1, WANT("layer 2 [s] (add)", "'nosuch' names no layer"));
  expect_error(with_out("[a]\ntype = dense\nunits = 4\n[b]\ntype = dense\nunits = 4\n"
                        "[a]\ntype = dense\nunits = 4\n[s]\ntype = add\ninputs = a, b\n"),
               6, 1, 1, 1, WANT("layer 4 [s] (add)", "'a' is ambiguous", "2 layers"));
  expect_error(with_out("[input]\ntype = dense\nunits = 6\n[s]\ntype = add\ninputs = input, "
                        "input\n"),
               6, 1, 1, 1, WANT("'input' is ambiguous", "input batch", "layer 1 [input]"));
}

Test(graph, cycles_are_refused_naming_their_layers) {
  expect_error("[a]\ntype = dense\nunits = 4\ninput = c\n[b]\ntype = dense\nunits = 4\n"
               "[c]\ntype = dense\nunits = 4\n[out]\ntype = dense\nunits = 3\ninput = c\n",
               6, 1, 1, 1, WANT("a -> b -> c -> a", "cycle"));
  expect_error(with_out("[a]\ntype = dense\nunits = 4\ninput = a\n"), 6, 1, 1, 1,
               WANT("layer 1 [a] (dense)", "reads its own output"));
}

Test(graph, unread_outputs_are_refused) {
  expect_error(with_out("[a]\ntype = dense\nunits = 4\n[b]\ntype = dense\nunits = 4\ninput = "
                        "input\n"),
               6, 1, 1, 1, WANT("layer 1 [a] (dense)", "nothing reads its output"));
  /* A ReLU of its own is a layer too: here nothing reads a's ReLU. */
  expect_error(with_out("[a]\ntype = dense\nunits = 4\nactivation = relu\n[b]\ntype = "
                        "dense\nunits = 4\ninput = input\n"),
               6, 1, 1, 1, WANT("[a.relu] (relu)", "nothing reads its output"));
}

Test(graph, inputs_of_different_shapes_are_refused) {
  expect_error(with_out("[a]\ntype = dense\nunits = 4\n[b]\ntype = dense\nunits = 5\ninput = "
                        "input\n[s]\ntype = add\ninputs = a, b\n"),
               6, 1, 1, 1, WANT("layer 3 [s] (add)", "a (1x1x4", "b (1x1x5)", "differ in shape"));
  expect_error(with_out("[a]\ntype = conv\nfilters = 2\nkernel = 3\n[b]\ntype = conv\nfilters = "
                        "2\nkernel = 3\npadding = 1\ninput = input\n[cat]\ntype = concat\ninputs "
                        "= a, b\n[f]\ntype = flatten\n"),
               1, 8, 8, 1, WANT("layer 3 [cat] (concat)", "a (6x6x2", "b (8x8x2)", "h x w"));
}

Test(graph, layers_reading_too_many_or_too_few_inputs_are_refused) {
  expect_error(with_out("[a]\ntype = dense\nunits = 4\n[b]\ntype = dense\nunits = 4\ninputs = "
                        "a, input\n"),
               6, 1, 1, 1, WANT("layer 2 [b] (dense)", "reads 2 inputs", "reads one"));
  expect_error(with_out("[a]\ntype = dense\nunits = 6\n[s]\ntype = add\n"), 6, 1, 1, 1,
               WANT("layer 2 [s] (add)", "reads 1 input", "2 to 8", "inputs = A, B"));
}

Test(graph, the_output_stays_last_and_dense) {
  expect_error("[a]\ntype = dense\nunits = 4\n[s]\ntype = add\ninputs = a, a\n", 6, 1, 1, 1,
               WANT("last layer must be dense"));
}

Test(graph, grid_placements_that_cannot_work_are_refused) {
  /* an add of the replicated input batch and a dense layer's spread output */
  expect_error(with_out("[a]\ntype = dense\nunits = 6\n[s]\ntype = add\ninputs = input, a\n"), 6, 1,
               1, 2, WANT("layer 2 [s] (add)", "--grid", "placed alike", "--grid 1xP"));
  /* a concat of dense layers' outputs */
  expect_error(with_out("[a]\ntype = dense\nunits = 4\n[b]\ntype = dense\nunits = 4\ninput = "
                        "input\n[cat]\ntype = concat\ninputs = a, b\n"),
               6, 1, 1, 2, WANT("layer 3 [cat] (concat)", "--grid", "--grid 1xP"));
  /* an add of two spread outputs works */
  tsr_net_layout_t lay;
  tsr_errbuf_t err = {""};
  cr_assert_eq(layout_of(&lay,
                         with_out("[a]\ntype = dense\nunits = 6\n[b]\ntype = dense\nunits "
                                  "= 6\n[s]\ntype = add\ninputs = a, b\n"),
                         6, 1, 1, 2, &err),
               0, "%s", err.msg);
  cr_expect(lay.layers[2].place == TSR_PLACE_SPREAD && lay.layers[2].in_place == TSR_PLACE_SPREAD &&
            !lay.layers[2].cuts);
  tsr__net_layout_fini(&lay);
}

/* Under --domain rows a concat of inputs in bands of image rows gives its output in the same
 * bands (8 rows on 2 grid rows: 4 each, of the 4 + 6 channels); under rows:2 only c1 and a are
 * cut, and a concat of a's bands and b's whole images is refused. */
Test(graph, concats_of_bands_under_domain_rows) {
  static const char text[] =
      "[c1]\ntype = conv\nfilters = 2\nkernel = 3\npadding = 1\nactivation = relu\n"
      "[a]\ntype = conv\nfilters = 4\nkernel = 1\ninput = c1.relu\n"
      "[b]\ntype = conv\nfilters = 6\nkernel = 3\npadding = 1\ninput = c1.relu\n"
      "[cat]\ntype = concat\ninputs = a, b\n[out]\ntype = dense\nunits = 3\n";
  tsr_net_layout_t lay;
  tsr_errbuf_t err = {""};
  layout_domain = 0;
  cr_assert_eq(layout_of(&lay, text, 1, 8, 8, 2, &err), 0, "%s", err.msg);
  const tsr_layout_layer_t *cat = NULL;
  for (int j = 0; j < lay.n_layers; j++)
    if (strcmp(lay.layers[j].name, "cat") == 0) cat = &lay.layers[j];
  cr_assert(cat);
  cr_expect(cat->place == TSR_PLACE_BANDS && cat->in_place == TSR_PLACE_BANDS && !cat->domain &&
            !cat->whole_samples);
  cr_expect_eq(cat->out_nb, 4 * 8 * 10, "out_nb %d", cat->out_nb);
  tsr__net_layout_fini(&lay);
  layout_domain = 2;
  expect_error(text, 1, 8, 8, 2,
               WANT("[cat] (concat)", "rows:K", "1 of its 2 inputs", "cut alike"));
  layout_domain = -1;
}

Test(graph, model_file_inputs_are_checked_when_read) {
  struct {
    const char *text, *expect;
  } cases[] = {
      {"[a]\ntype = add\ninputs = x,,y\n", "inputs = x,,y: expected section names"},
      {"[a]\ntype = add\ninputs = x,\n", "expected section names"},
      {"[a]\ntype = dense\nunits = 3\ninput = x, y\n", "input = x, y: expected one section name"},
      {"[a]\ntype = add\ninputs = a,b,c,d,e,f,g,h,i\n", "at most 8"},
      {"[a]\ntype = add\ninput = x\ninputs = x, y\n", "already said its inputs"},
      {"[a]\ntype = add\ninputs = x, y\ninput = z\n", "already said its inputs"},
      {"[a]\ntype = add\ninputs = a,b,c,d\ninputs = e,f,g,h,i\n", "at most 8 in all"},
      {"[a]\ninputs = x, y\ntype = add\n", "before 'type'"},
      {"[a]\ntype = add\ninputs = x,;y\n", "expected section names"},
      {"[a]\ntype = dense\nunits = 3\nactivation = relu\nactivation = relu\n",
       "a second activation"},
      /* keys before any section still make a layer, and it must say what its type needs */
      {"type = conv\nfilters = 3\n", "no 'kernel'"},
      /* ... which goes by layer1, so a section [layer1] right after it would be read back as the
       * same section once the model is written out (the fuzzer's find) */
      {"type = dense\nunits = 3\n[layer1]\ntype = dense\nunits = 3\n",
       "[layer1] follows the keys before the first section"},
      /* ... and so would a section named as the ReLU that activation = relu adds before it */
      {"[a]\ntype = dense\nunits = 3\nactivation = relu\n[a.relu]\ntype = dense\nunits = 3\n",
       "[a.relu] follows a section with activation = relu"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tsr_model_spec_t s;
    tsr_errbuf_t err = {""};
    cr_assert_neq(tsr_model_parse_ini_text(&s, cases[i].text, "in.ini", &err), 0, "case %zu", i);
    cr_expect(strstr(err.msg, "in.ini") && strstr(err.msg, cases[i].expect), "case %zu: '%s'", i,
              err.msg);
  }
}

/* Where an output has several readers nothing is fused into its producer's tasks: a ReLU
 * reading a dense layer read by another layer too is a layer of its own, and max pooling after
 * a convolution read twice leaves the convolution's ReLU backward to it. */
Test(graph, fusions_only_where_the_producer_has_one_reader) {
  tsr_net_layout_t lay;
  tsr_errbuf_t err = {""};
  cr_assert_eq(layout_of(&lay,
                         with_out("[a]\ntype = dense\nunits = 4\n[r]\ntype = relu\n"
                                  "[b]\ntype = dense\nunits = 4\ninput = a\n"
                                  "[s]\ntype = add\ninputs = r, b\n"),
                         6, 1, 1, 1, &err),
               0, "%s", err.msg);
  cr_assert_eq(lay.n_layers, 5); /* a, r, b, s, out */
  cr_expect(!lay.layers[0].relu && lay.layers[0].consumers == 2);
  cr_expect_eq(lay.layers[1].kind, TSR_LAYER_RELU);
  tsr__net_layout_fini(&lay);
  cr_assert_eq(layout_of(&lay,
                         with_out("[c]\ntype = conv\nfilters = 2\nkernel = 3\nactivation = "
                                  "relu\n[p]\ntype = maxpool\nkernel = 2\n"
                                  "[q]\ntype = maxpool\nkernel = 2\ninput = c\n"
                                  "[s]\ntype = add\ninputs = p, q\n[f]\ntype = flatten\n"),
                         1, 8, 8, 1, &err),
               0, "%s", err.msg);
  cr_expect(lay.layers[0].relu && lay.layers[0].consumers == 2);
  cr_expect(!lay.layers[0].relu_grad_by_next && !lay.layers[1].relu_grad_in);
  tsr__net_layout_fini(&lay);
  /* one reader: fused, and the pooling applies the ReLU's backward */
  cr_assert_eq(layout_of(&lay,
                         with_out("[c]\ntype = conv\nfilters = 2\nkernel = 3\nactivation = "
                                  "relu\n[p]\ntype = maxpool\nkernel = 2\n"),
                         1, 8, 8, 1, &err),
               0, "%s", err.msg);
  cr_expect(lay.layers[0].relu && lay.layers[0].relu_grad_by_next && lay.layers[1].relu_grad_in);
  tsr__net_layout_fini(&lay);
}

/* Files written by tsr_model_to_ini read back to the same layers, inputs written only where a
 * layer does not read the previous one; a stack's file has no inputs at all. */
Test(graph, model_files_with_inputs_round_trip) {
  tsr_model_spec_t spec = parse(residual_cnn), back;
  char text[4096];
  cr_assert_eq(tsr_model_to_ini(&spec, text, sizeof text), 0);
  cr_expect(strstr(text, "[r1]\ntype = add\ninputs = c1.relu, c2\n"), "%s", text);
  cr_expect(strstr(text, "[c1.relu]\ntype = relu\n\n[c2]"), "%s", text);
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse_ini_text(&back, text, "back", &err), 0, "%s", err.msg);
  cr_assert_eq(back.n_layers, spec.n_layers);
  cr_expect(memcmp(back.layers, spec.layers, sizeof *spec.layers * (size_t)spec.n_layers) == 0,
            "changed through\n%s", text);
  char desc[512];
  tsr_model_describe(&spec, 72, desc, sizeof desc);
  cr_expect_str_eq(desc, "72-conv3x3/3p1x1-relu-conv3x3/3p1x1-add[c1.relu,c2]-relu-conv1x1/3-"
                         "add[r1.relu,c3]-concat[r2,input]-maxpool2x2-flatten-3");
  tsr_model_spec_fini(&back), tsr_model_spec_fini(&spec);
  tsr_model_spec_t mlp;
  cr_assert_eq(tsr_model_parse(&mlp, "mlp", 10, &err), 0);
  cr_assert_eq(tsr_model_to_ini(&mlp, text, sizeof text), 0);
  cr_expect(!strstr(text, "input"), "%s", text);
  cr_expect(strstr(text, "[layer1]\ntype = dense\nunits = 512\n\n[layer2]\ntype = relu\n"), "%s",
            text);
  tsr_model_spec_fini(&mlp);
}

/* Names as long as a section name can be (49 characters), eight inputs of them: the file
 * tsr_model_to_ini writes keeps its lines under the INI reader's 200 characters (inputs on
 * several lines, which add up) and reads back to the same layers. */
Test(graph, long_names_and_input_lists_round_trip) {
  tsr_model_spec_t spec;
  tsr_model_spec_init(&spec);
  char names[8][TSR_NAME_MAX];
  tsr_layer_spec_t cat = {.kind = TSR_LAYER_CONCAT, .n_inputs = 8};
  for (int k = 0; k < 8; k++) {
    snprintf(names[k], sizeof names[k], "branch%d_%041d", k, k);
    cr_assert_eq(strlen(names[k]), TSR_NAME_MAX - 1);
    tsr_layer_spec_t d = {.kind = TSR_LAYER_DENSE, .units = 2, .n_inputs = 1, .inputs = {"input"}};
    if (k == 0) /* the first reads the batch anyway */
      d.n_inputs = 0, memset(d.inputs, 0, sizeof d.inputs);
    memcpy(d.name, names[k], sizeof d.name);
    memcpy(cat.inputs[k], names[k], sizeof cat.inputs[k]);
    cr_assert_eq(tsr_model_spec_add(&spec, &d), 0);
  }
  cr_assert_eq(tsr_model_spec_add(&spec, &cat), 0);
  cr_assert_eq(tsr_model_spec_add(&spec, &(tsr_layer_spec_t){.kind = TSR_LAYER_DENSE, .units = 3}),
               0);
  char text[8192];
  cr_assert_eq(tsr_model_to_ini(&spec, text, sizeof text), 0);
  for (const char *line = text; *line;) {
    const char *end = strchr(line, '\n');
    cr_assert(end && end - line < 200, "a line of %d characters:\n%s", (int)(end - line), text);
    line = end + 1;
  }
  tsr_model_spec_t back;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse_ini_text(&back, text, "back", &err), 0, "%s\n%s", err.msg, text);
  cr_assert_eq(back.n_layers, spec.n_layers);
  cr_expect(memcmp(back.layers, spec.layers, sizeof *spec.layers * (size_t)spec.n_layers) == 0,
            "changed through\n%s", text);
  tsr_net_memory_t mem;
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  cr_expect_eq(tsr_net_estimate(&mem, &spec, 5, 3, &o, &err), 0, "%s", err.msg);
  tsr_model_spec_fini(&back), tsr_model_spec_fini(&spec);
}

/* A long residual MLP: 250 blocks of dense 8 + ReLU, dense 8, add: 1001 layers in 751 sections,
 * built, trained a step, saved as a checkpoint and read back. */
Test(graph, a_thousand_layer_model_file_builds_and_trains) {
  size_t size = 1 << 17, n = 0;
  char *text = malloc(size);
  const int blocks = 250;
  for (int k = 0; k < blocks; k++) {
    char before[32] = "input"; /* what the block adds to: the input batch, or the last block */
    if (k) snprintf(before, sizeof before, "s%d", k - 1);
    n += (size_t)snprintf(text + n, size - n,
                          "[a%d]\ntype = dense\nunits = 8\nactivation = relu\n"
                          "[b%d]\ntype = dense\nunits = 8\n"
                          "[s%d]\ntype = add\ninputs = %s, b%d\n",
                          k, k, k, before, k);
  }
  n += (size_t)snprintf(text + n, size - n, "%s", out3);
  cr_assert_lt(n, size);
  tsr_model_spec_t spec = parse(text);
  cr_assert_eq(spec.n_layers, 4 * blocks + 1);
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 4, o.opt.lr = 0.001f;
  tsr_net_t *net;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, &spec, 8, 3, &o, &err), 0, "%s", err.msg);
  cr_expect_eq(net->n_layers, 3 * blocks + 1); /* the ReLUs are fused */
  cr_expect_eq(tsr_net_n_params(net), 2 * (2 * blocks + 1));
  /* Small weights keep 250 residual additions from overflowing (He initialization does). */
  for (int p = 0; p < tsr_net_n_params(net); p++) {
    int64_t r, c;
    cr_assert_eq(tsr_net_param_info(net, p, &r, &c), 0);
    float v[64];
    for (int64_t i = 0; i < r * c && i < 64; i++)
      v[i] = p % 2 ? 0.0f : 0.02f;
    cr_assert_eq(tsr_net_param_set(net, p, v), 0);
  }
  tsr_dataset_t ds = {.n = 4, .features = 8, .classes = 3};
  float x[32], y[4] = {0, 1, 2, 0};
  for (int i = 0; i < 32; i++)
    x[i] = (float)((i * 7) % 5) / 5.0f - 0.4f;
  ds.x = x, ds.y = y;
  int32_t rows[4] = {0, 1, 2, 3};
  cr_assert_eq(tsr_net_train_step(net, &ds, rows, 4, true), 0);
  double loss, correct;
  cr_assert_eq(tsr_net_take_stats(net, false, &loss, &correct), 0);
  cr_expect(isfinite(loss) && loss > 0, "loss %g", loss);
  /* A checkpoint holds the whole model file (tens of kilobytes here) and reads back to it. */
  char path[] = "/tmp/tessera-graph-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  tsr_checkpoint_info_t info = {.epoch = 1};
  cr_assert_eq(tsr_checkpoint_save(net, &info, path, &err), 0, "%s", err.msg);
  tsr_model_spec_t back;
  tsr_net_opts_t bo;
  int inputs, classes;
  cr_assert_eq(tsr_checkpoint_read(path, NULL, &back, &bo, &inputs, &classes, &err), 0, "%s",
               err.msg);
  cr_assert_eq(back.n_layers, spec.n_layers);
  cr_expect(memcmp(back.layers, spec.layers, sizeof *spec.layers * (size_t)spec.n_layers) == 0);
  tsr_net_t *again;
  bo.batch = 4;
  cr_assert_eq(tsr_net_create(&again, &back, inputs, classes, &bo, &err), 0, "%s", err.msg);
  cr_assert_eq(tsr_checkpoint_load(again, path, NULL, NULL, &err), 0, "%s", err.msg);
  float w0[64], w1[64];
  cr_assert_eq(tsr_net_param_get(net, 2, w0), 0);
  cr_assert_eq(tsr_net_param_get(again, 2, w1), 0);
  cr_expect(memcmp(w0, w1, sizeof(float) * 64) == 0);
  remove(path);
  tsr_net_destroy(&again);
  tsr_model_spec_fini(&back);
  tsr_net_destroy(&net);
  tsr_model_spec_fini(&spec);
  free(text);
}

/* Fashion-MNIST residual nets: 5 SGD steps end at the same loss whatever the tiles. */
static const char mnist_mlp[] = "[a]\ntype = dense\nunits = 40\nactivation = relu\n"
                                "[b]\ntype = dense\nunits = 40\n"
                                "[s]\ntype = add\ninputs = a, b\nactivation = relu\n"
                                "[c]\ntype = dense\nunits = 24\ninput = a\n"
                                "[cat]\ntype = concat\ninputs = s, c\n"
                                "[out]\ntype = dense\nunits = 10\n";
static const char mnist_cnn[] =
    "[c1]\ntype = conv\nfilters = 4\nkernel = 3\npadding = 1\nactivation = relu\n"
    "[c2]\ntype = conv\nfilters = 4\nkernel = 3\npadding = 1\n"
    "[r]\ntype = add\ninputs = c1, c2\nactivation = relu\n"
    "[cat]\ntype = concat\ninputs = r, input\n"
    "[p]\ntype = maxpool\nkernel = 2\n[f]\ntype = flatten\n"
    "[h]\ntype = dense\nunits = 20\nactivation = relu\n[out]\ntype = dense\nunits = 10\n";

Test(graph, training_steps_do_not_depend_on_the_tile_size) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 1000);
  const char *models[] = {mnist_mlp, mnist_cnn};
  for (int m = 0; m < 2; m++) {
    tsr_model_spec_t spec = parse(models[m]);
    double one = loss_after_steps(&train, &spec, 5, 32, 1 << 20);
    double t8 = loss_after_steps(&train, &spec, 5, 8, 8);
    double t5x7 = loss_after_steps(&train, &spec, 5, 5, 7);
    double start = loss_after_steps(&train, &spec, 0, 32, 32);
    cr_expect(one < start * 0.95, "model %d: 5 steps must lower the loss (%g -> %g)", m, start,
              one);
    cr_expect(fabs(t8 - one) <= 1e-5 * one, "model %d: tile 8: %.9g vs one tile %.9g", m, t8, one);
    cr_expect(fabs(t5x7 - one) <= 1e-5 * one, "model %d: tile 5x7: %.9g vs one tile %.9g", m, t5x7,
              one);
    tsr_model_spec_fini(&spec);
  }
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}

/* Every parameter after `steps` steps of a net whose output x has four readers (and the input
 * batch three), on every worker the runtime has. */
static float *weights_after(const tsr_dataset_t *ds, const tsr_model_spec_t *spec, int steps,
                            int64_t *count) {
  tsr_net_opts_t o;
  tsr_net_opts_init(&o);
  o.batch = 64, o.tile_rows = 16, o.tile_cols = 16, o.seed = 7;
  tsr_net_t *net;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_net_create(&net, spec, (int)ds->features, ds->classes, &o, &err), 0, "%s",
               err.msg);
  int32_t rows[64];
  for (int s = 0; s < steps; s++) {
    for (int i = 0; i < 64; i++)
      rows[i] = (int32_t)((s * 64 + i * 11) % ds->n);
    cr_assert_eq(tsr_net_train_step(net, ds, rows, 64, true), 0);
  }
  int64_t total = tsr_net_param_count(net), off = 0;
  float *all = malloc(sizeof(float) * (size_t)total);
  for (int p = 0; p < tsr_net_n_params(net); p++) {
    int64_t r, c;
    tsr_net_param_info(net, p, &r, &c);
    cr_assert_eq(tsr_net_param_get(net, p, all + off), 0);
    off += r * c;
  }
  tsr_net_destroy(&net);
  *count = total;
  return all;
}

Test(graph, gradient_sums_at_fan_out_repeat_bit_for_bit) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 1000);
  tsr_model_spec_t spec =
      parse("[x]\ntype = dense\nunits = 48\nactivation = relu\n"
            "[a]\ntype = dense\nunits = 48\ninput = x\n[b]\ntype = dense\nunits = 48\ninput = x\n"
            "[c]\ntype = dense\nunits = 48\ninput = x\n[d]\ntype = dense\nunits = 48\ninput = "
            "input\n[e]\ntype = dense\nunits = 48\ninput = input\n"
            "[s]\ntype = add\ninputs = x, a, b, c, d, e\n[out]\ntype = dense\nunits = 10\n");
  int64_t n, m;
  float *first = weights_after(&train, &spec, 6, &n);
  for (int run = 0; run < 3; run++) {
    float *again = weights_after(&train, &spec, 6, &m);
    cr_assert_eq(m, n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++)
      differ += memcmp(&first[i], &again[i], sizeof(float)) != 0;
    cr_expect_eq(differ, 0, "run %d: %lld of %lld weights differ from the first run's", run + 2,
                 (long long)differ, (long long)n);
    free(again);
  }
  free(first);
  tsr_model_spec_fini(&spec);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test);
}
