#!/usr/bin/env python3
"""Issue 41's mutation campaign: realistic single-edit bugs written from the sources and the
docs alone, without reading the tests, over the code issues 38, 40 and 41 changed: --kernels
tuned (codelets/tuned.c, codelets/impls.c), the convolution's fused batchnorm statistics (the
_st codelets of codelets/conv_fwd.c), evaluation's folded batchnorm (codelets/conv_bn_fwd.c,
tsr__k_bn_fold, the folds_bn/folded flags of src/nn/layout.c, conv.c, batchnorm.c), the
batchnorm kernels' masks, GELU and its exp, layer norm, the embedding, attention, the portable
build (src/kernels/hot.h), the stop agreed inside an epoch (src/runtime/mpi.c's lagged
agreement), --domain auto (src/plan/domain_auto.c), tessera inspect and trace-summary's reader.

The machinery is tests/mutants.py's (the same options); `tests/mutants.py --check`, which the
`mutants-apply` test runs, checks that this list still applies too.

    tests/mutants_round2.py --first              # the campaign: named suites up to the first
                                                 # failure, the whole suite for a survivor
    tests/mutants_round2.py --first --quick      # named suites only (what the table reports)
    tests/mutants_round2.py --list
    tests/mutants_round2.py --first --only gelu-half-sign

Each entry: (name, what the bug is, file, [(old, new), ...], suites guessed to catch it, in the
order --first runs them).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutants  # noqa: E402

ROUND2 = [
    # ---- --kernels tuned: codelets/tuned.c, codelets/impls.c ----
    ("tuned-first-trial-kept", "a shape's table keeps each implementation's first trial, not "
     "its fastest", "codelets/tuned.c",
     [("if (s->timed[impl] == 0 || seconds < s->best[impl]) s->best[impl] = seconds;",
       "if (s->timed[impl] == 0) s->best[impl] = seconds;")], ["conv", "cli"]),
    ("tuned-decides-early", "a shape is decided once either implementation has its trials (the "
     "other's best still 0)", "codelets/tuned.c",
     [("if (s->timed[0] >= TSR_TUNED_TRIALS && s->timed[1] >= TSR_TUNED_TRIALS)",
       "if (s->timed[0] >= TSR_TUNED_TRIALS || s->timed[1] >= TSR_TUNED_TRIALS)")],
     ["conv", "cli"]),
    ("tuned-trials-one-side", "while timing, every task is handed implementation 0 (the other "
     "never tried, the shape never decided)", "codelets/tuned.c",
     [("impl = c >= 0 ? c : s->given[1] < s->given[0];", "impl = c >= 0 ? c : 0;")],
     ["conv", "cli"]),
    ("tuned-time-swapped", "a task's time is recorded against the other implementation",
     "codelets/impls.c",
     [("tsr__tuned_record(c->key, impl,", "tsr__tuned_record(c->key, 1 - impl,")],
     ["conv", "cli"]),
    ("impl-names-no-st", "the _st codelets (conv with batchnorm statistics) left out of the "
     "table that names the implementation that ran", "codelets/impls.c",
     [("&tsr_cl_conv_fwd_st,\n    &tsr_cl_conv_fwd_wb_st,  ", "\n    ")],
     ["batchnorm-cli", "trace", "cli"]),
    # ---- the convolution's fused batchnorm statistics: codelets/conv_fwd.c ----
    ("st-stats-buffer-index", "the statistics partial taken from buffer 4 also when buffer 4 "
     "holds oneDNN's reordered weights", "codelets/conv_fwd.c",
     [("void *p = buffers[a->wb_n > 0 ? 5 : 4];", "void *p = buffers[4];")],
     ["batchnorm", "conv"]),
    ("st-stats-tile-rows", "the fused statistics count every row of the tile, a short batch's "
     "padding rows included", "codelets/conv_fwd.c",
     [("tsr__k_bn_stats(a->stats, a->g.oh", "tsr__k_bn_stats(TSR_ROWS(buffers[0]), a->g.oh")],
     ["batchnorm", "conv"]),
    ("st-stats-input-hw", "the fused statistics read the input's h w positions, not the "
     "output's oh ow (a strided convolution)", "codelets/conv_fwd.c",
     [("tsr__k_bn_stats(a->stats, a->g.oh * a->g.ow,",
       "tsr__k_bn_stats(a->stats, a->g.h * a->g.w,")],
     ["batchnorm", "conv"]),
    ("st-onednn-no-stats", "oneDNN's implementation of the _st codelets forgets the statistics "
     "(only the lowered one gathers them)", "codelets/conv_fwd.c",
     [("  conv_fwd_dnnl(buffers, cl_arg);\n  conv_fwd_stats(buffers, cl_arg);\n",
       "  conv_fwd_dnnl(buffers, cl_arg);\n")], ["batchnorm", "conv"]),
    ("st-check-full-tile", "the statistics' row count checked with >= (a whole tile of real "
     "rows refused)", "codelets/conv_fwd.c",
     [("stats > tsr__handle_rows(y))))", "stats >= tsr__handle_rows(y))))")],
     ["batchnorm", "conv"]),
    # ---- evaluation's folded batchnorm ----
    ("conv-bn-kernels-swapped", "the folded task runs the lowered kernel under --kernels onednn "
     "and oneDNN's under --kernels blis", "codelets/conv_bn_fwd.c",
     [("if (a->kernels == TSR_KERNELS_BLIS ||", "if (a->kernels == TSR_KERNELS_ONEDNN ||")],
     ["conv", "batchnorm", "reference"]),
    ("conv-bn-relu-dropped", "the folded task leaves out the batchnorm's fused ReLU",
     "src/nn/conv.c", [("tsr__bn_eps(bn), bn->relu);", "tsr__bn_eps(bn), false);")],
     ["batchnorm", "batchnorm-cli"]),
    ("conv-bn-eps-default", "the folded task uses eps 1e-5 whatever the batchnorm's eps",
     "src/nn/conv.c", [("tsr__bn_eps(bn), bn->relu);", "1e-5f, bn->relu);")],
     ["batchnorm", "batchnorm-cli"]),
    ("fold-stats-next-layer", "training's fused statistics written into the partials of the "
     "layer after the batchnorm (folds_bn is an index plus one)", "src/nn/conv.c",
     [("net->layers[l->lay->folds_bn - 1].scratch[0], net->valid);",
       "net->layers[l->lay->folds_bn].scratch[0], net->valid);")],
     ["batchnorm", "batchnorm-cli"]),
    ("bn-fold-rows-forward", "tsr__k_bn_fold scales the rows top down, so row 0's k is "
     "overwritten before the rows below read it", "src/kernels/batchnorm.c",
     [("for (int r = fan_in - 1; r >= 0; r--)", "for (int r = 0; r < fan_in; r++)")],
     ["batchnorm", "kernels"]),
    ("bn-fold-shift-scaled", "the folded bias scales the shift by k too", "src/kernels/batchnorm.c",
     [("b2[ch] = (float)(((double)b[ch] - run_mean[ch]) * k + shift[ch]);",
       "b2[ch] = (float)(((double)b[ch] - run_mean[ch] + shift[ch]) * k);")],
     ["batchnorm", "kernels"]),
    ("bn-fold-eps-outside", "the fold divides by sqrt(var) + eps, not sqrt(var + eps)",
     "src/kernels/batchnorm.c",
     [("double k = (double)scale[ch] / sqrt((double)run_var[ch] + (double)eps);",
       "double k = (double)scale[ch] / (sqrt((double)run_var[ch]) + (double)eps);")],
     ["batchnorm", "kernels"]),
    ("fold-conv-with-relu", "a batchnorm folded into a convolution that has its own ReLU (the "
     "ReLU lost)", "src/nn/layout.c",
     [("if (c->type->folds_in && !c->relu && c->consumers == 1 && !c->folds_bn)",
       "if (c->type->folds_in && c->consumers == 1 && !c->folds_bn)")],
     ["batchnorm", "graph", "batchnorm-cli"]),
    ("fold-conv-two-readers", "a batchnorm folded into a convolution another layer also reads "
     "(its output never written)", "src/nn/layout.c",
     [("if (c->type->folds_in && !c->relu && c->consumers == 1 && !c->folds_bn)",
       "if (c->type->folds_in && !c->relu && c->consumers >= 1 && !c->folds_bn)")],
     ["batchnorm", "graph", "batchnorm-cli"]),
    ("bn-folded-skips-training", "a folded batchnorm skips its forward in training too, not only "
     "in evaluation", "src/nn/batchnorm.c",
     [("if (!train && l->lay->folded) return 0;", "if (l->lay->folded) return 0;")],
     ["batchnorm", "batchnorm-cli"]),
    ("bn-dx-first-padding-row", "batchnorm's input gradient computed for the first padding row "
     "of a short batch (i > valid)", "src/kernels/batchnorm.c",
     [("      if (i >= valid) {", "      if (i > valid) {")], ["batchnorm", "kernels"]),
    # ---- GELU, its exp, layer norm, the embedding: src/kernels/sequence.c, src/nn ----
    ("gelu-half-sign", "GELU's logistic of +2u instead of -2u inside exp (x sigmoid(-2u))",
     "src/kernels/sequence.c",
     [("fast_expf(-2.0f * gelu_k * (v + gelu_c * v * v * v))",
       "fast_expf(2.0f * gelu_k * (v + gelu_c * v * v * v))")], ["seq", "grad", "gpt-torch"]),
    ("gelu-bwd-half-tanh-term", "GELU's derivative with x (1 - tanh^2) u' / 2 taken as "
     "x s (1 - s) u' (4 s (1 - s) / 2 without its 2)", "src/kernels/sequence.c",
     [("(s + 2.0f * v * s * (1.0f - s) * gelu_k", "(s + v * s * (1.0f - s) * gelu_k")],
     ["seq", "grad", "gpt-torch"]),
    ("expf-bias-126", "fast_expf builds 2^k with the exponent bias 126 (every exp halved)",
     "src/kernels/sequence.c",
     [("scale = {.i = (k + 127) << 23};", "scale = {.i = (k + 126) << 23};")],
     ["seq", "kernels", "gpt-torch"]),
    ("expf-low-part-sign", "fast_expf adds ln 2's low part instead of subtracting it",
     "src/kernels/sequence.c",
     [("- kf * 1.428606765330187e-06f;", "+ kf * 1.428606765330187e-06f;")],
     ["seq", "kernels", "gpt-torch"]),
    ("layernorm-var-unbiased", "layer norm divides the squared deviations by c - 1 (PyTorch's is "
     "the biased variance)", "src/kernels/sequence.c",
     [("      var /= c;\n", "      var /= c - 1;\n")], ["seq", "gpt-torch"]),
    ("layernorm-dw-no-xhat", "layer norm's scale gradient sums dy, not dy xhat",
     "src/kernels/sequence.c", [("dw[k] += g[k] * xhat;", "dw[k] += g[k];")],
     ["seq", "grad", "gpt-torch"]),
    ("embed-context-equal-refused", "an embedding whose context equals the window refused "
     "(context <= T)", "src/nn/embedding.c",
     [("if (s->context > 0 && s->context < g->h)", "if (s->context > 0 && s->context <= g->h)")],
     ["seq", "text-cli"]),
    # ---- attention: src/kernels/attention.c ----
    ("attn-diag-excludes-self", "causal attention lets a query see only the keys before it, "
     "not itself", "src/kernels/attention.c",
     [("return j0 < i0 ? bk : imin(i + 1, bk);", "return j0 < i0 ? bk : imin(i, bk);")],
     ["attention", "seq", "gpt-torch"]),
    ("attn-bwd-skips-diagonal", "attention's backward starts each key block's queries one block "
     "below the diagonal", "src/kernels/attention.c",
     [("for (int i0 = j0; i0 < t; i0 += B) {", "for (int i0 = j0 + B; i0 < t; i0 += B) {")],
     ["attention", "seq", "gpt-torch"]),
    ("attn-lse-no-max", "the saved log-sum-exp leaves out the running maximum",
     "src/kernels/attention.c",
     [("lse[i0 + i] = mx[i] + logf(sum[i]);", "lse[i0 + i] = logf(sum[i]);")],
     ["attention", "seq", "gpt-torch"]),
    # ---- the stop agreed inside an epoch: src/runtime/mpi.c ----
    ("agree-own-wish", "the lagged agreement returns this rank's wish of the step before, not "
     "the ranks' agreed one", "src/runtime/mpi.c",
     [("    *any = lag_out != 0;\n  }\n  if (*any) return 0;",
       "    *any = lag_in != 0;\n  }\n  if (*any) return 0;")], ["stop-mpi", "mpi-faults"]),
    ("agree-all-ranks", "the ranks stop only when every rank asked (logical and)",
     "src/runtime/mpi.c",
     [("MPI_INT, MPI_LOR, lag_comm", "MPI_INT, MPI_LAND, lag_comm")], ["stop-mpi", "mpi-faults"]),
    # ---- --domain auto: src/plan/domain_auto.c ----
    ("domain-auto-all-is-some", "--domain auto reports every layer cut as rows:K, not rows",
     "src/plan/domain_auto.c",
     [("chosen.domain_layers < chosen.splittable;", "chosen.domain_layers <= chosen.splittable;")],
     ["mpi-cli", "plan-cli"]),
    ("domain-auto-own-choice", "each rank takes its own answer to --domain auto (only rank 0 "
     "planned), not rank 0's", "src/plan/domain_auto.c",
     [("if (rc == 0) *choice = all[0];", "if (rc == 0) *choice = mine;")], ["mpi-cli", "plan-cli"]),
    # ---- tessera inspect, trace-summary's reader ----
    ("inspect-params-last", "tessera inspect --json counts the parameters of the last tensor "
     "only", "src/cli/inspect_cmd.c", [("    params += n;\n", "    params = n;\n")],
     ["checkpoint-cli", "cli", "python"]),
    ("trace-worker-rank-bound", "trace-summary takes a worker track on rank == otherData.ranks "
     "(one past the per-rank arrays)", "src/io/trace_summary.c",
     [("if (pid < 0 || pid >= t->ranks || tid < 0 || tid > INT_MAX)",
       "if (pid < 0 || pid > t->ranks || tid < 0 || tid > INT_MAX)")], ["trace", "fuzz"]),
    # ---- the tile GEMMs' two implementations and padded rows (issue 38, the evening's) ----
    ("gemm-dnnl-operands-swapped", "oneDNN's GEMM called with the two transpositions swapped",
     "src/kernels/gemm.c", [("dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N',",
                             "dnnl_sgemm(tb ? 'T' : 'N', ta ? 'T' : 'N',")], ["kernels", "train"]),
    ("gemm-blis-runs-onednn", "the tile GEMM's BLIS implementation computes with oneDNN's "
     "(a copy of the line above it): --kernels blis gives oneDNN's digits", "codelets/gemm.c",
     [("static void gemm_blis(void *buffers[], void *cl_arg) {\n  gemm_run(buffers, cl_arg, false);",
       "static void gemm_blis(void *buffers[], void *cl_arg) {\n  gemm_run(buffers, cl_arg, true);")],
     ["tiles", "reference"]),
    ("gemm-impl-unnamed", "the plain tile GEMM codelets left out of the table that names the "
     "implementation that ran", "codelets/impls.c",
     [("&tsr_cl_gemm,\n    &tsr_cl_gemm_w,          ", "\n    ")], ["cli", "trace"]),
    ("opencl-tasks-named-cpu", "a task on an OpenCL worker is counted under its codelet's first "
     "CPU implementation's name", "src/runtime/observe.c",
     [("  if (w >= 0 && starpu_worker_get_type(w) != STARPU_CPU_WORKER) impl = NOT_CPU;\n", "")],
     ["opencl-cli"]),
    ("row-stride-every-matrix", "every local matrix gets padded rows, one tile wide too (a "
     "convolution's activations, a sequence's positions)", "src/tile/tiles.c",
     [("return several_tiles && even_lines ? n + 16 : n;",
       "return (several_tiles || true) && even_lines ? n + 16 : n;")],
     ["seq", "conv", "gpt-torch"]),
    # ---- the portable build: src/kernels/hot.h ----
    ("portable-no-clones", "hot.h's guard tests a misspelt macro: the portable build's kernels "
     "get no AVX2 or AVX-512 versions", "src/kernels/hot.h",
     [("#if defined(TSR_PORTABLE) && defined(__x86_64__)",
       "#if defined(TSR_PORTABLE_BUILD) && defined(__x86_64__)")], ["portable"]),
]

if __name__ == "__main__":
    sys.exit(mutants.main(ROUND2, "tests/mutants_round2.py"))
