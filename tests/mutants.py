#!/usr/bin/env python3
"""Mutation check: does the test suite catch small, realistic bugs?

Each mutant is one edit of the sources (an exact text, replaced). For each, this
script applies the edit, rebuilds, runs the test suite, records which tests
failed, and restores the file, whatever happens. A mutant that no test catches
"survives"; one whose text is no longer in the file "does not apply" (the code
moved: update the mutant). Exit status 0 only when every mutant applied, built
and was caught.

    tests/mutants.py                 # every mutant, whole suite each time (~20 min here)
    tests/mutants.py --list
    tests/mutants.py --only adam-step,fold-copy
    tests/mutants.py --quick         # only the suites named with each mutant (a few minutes)
    tests/mutants.py --check         # only whether every mutant still applies (a test runs this;
                                     # it checks tests/mutants_campaign.py's list too)
    tests/mutants.py --first         # each mutant's named suites in order, stopping at the first
                                     # failure; the rest of the whole suite only when none failed
    tests/mutants_campaign.py ...    # the same options on issue 20's campaign (its own list)

The first thirteen are the bugs of issue 9's table (a mutation run that found
the suite blind to them above the kernels); the rest guard other formulas.
"""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, what the bug is, file, [(old, new), ...], suites expected to catch it for --quick)
MUTANTS = [
    ("softmax-no-max", "softmax without subtracting the row maximum", "src/kernels/loss.c",
     [("    double sum = 0.0;\n", "    zmax = 0.0f;\n    double sum = 0.0;\n")], ["kernels"]),
    ("sgd-decay-sign", "weight decay with the wrong sign in plain SGD (momentum 0)",
     "src/kernels/optim.c",
     [("wr[j] -= lr * (gr[j] + wd * wr[j]);", "wr[j] -= lr * (gr[j] - wd * wr[j]);")],
     ["kernels"]),
    ("adam-step", "Adam given step t+1 (bias correction off by one); issue 9 had it in the second "
     "optimizer dispatch of --sync batch, which the optimizer module replaced",
     "src/optim/optim.c", [("o->lr, o->t, wd,", "o->lr, o->t + 1, wd,")], ["train"]),
    ("pool-ties", "max-pool backward gives the gradient to every tied maximum",
     "src/kernels/conv.c",
     [("left[q] = hit ? 0.0f : left[q];", "left[q] = left[q];")] * 2, ["kernels", "conv"]),
    ("weights-stale", "--weighting samples leaves the last rank's weight stale",
     "src/parallel/sync.c",
     [("    int q = g->ranks[t];\n    r->weights[q] = ",
       "    int q = g->ranks[t];\n    if (!r->sync.by_samples || q < g->n - 1) r->weights[q] = ")],
     ["mpi-weighted-2"]),
    ("every-phase", "every=K averages at steps 1, K+1, 2K+1", "src/parallel/sync_every.c",
     [("if (step % s->every == 0) return", "if ((step - 1) % s->every == 0) return")],
     ["mpi-every-2"]),
    ("cosine-ahead", "cosine schedule one epoch ahead", "src/train/train.c",
     [("(int64_t)((e - 1) * sh->steps + k)", "(int64_t)(e * sh->steps + k)")], ["train"]),
    ("same-shuffle", "the same shuffle every epoch", "src/train/train.c",
     [("o->shuffle ? e : 0", "o->shuffle ? 1 : 0")], ["train"]),
    ("eval-on-train", "per-epoch evaluation on the training set", "src/train/train.c",
     [("rc = tsr_evaluate(net, test, &st->test_loss", "rc = tsr_evaluate(net, r->train, &st->test_loss")],
     ["train"]),
    ("test-statistics", "standardization with the test set's statistics", "src/data/dataset.c",
     [("  if (test) tsr_dataset_normalize(test, mean, std);\n",
       "  if (test) tsr_dataset_stats(test, &mean, &std);\n"
       "  if (test) tsr_dataset_normalize(test, mean, std);\n")],
     ["data", "cli"]),
    ("reversed-ranks", "deterministic reduction in reversed rank order", "src/parallel/sync.c",
     [("  for (int t = 0; t < g->n; t++) {\n    int q = g->ranks[t];\n    if (at_home || q == r->rank)\n",
       "  for (int t = g->n - 1; t >= 0; t--) {\n    int q = g->ranks[t];\n"
       "    if (at_home || q == r->rank)\n"),
      ("det && t == 0 ? 0.0f : 1.0f", "det && t == g->n - 1 ? 0.0f : 1.0f")],
     ["mpi-deterministic-3"]),
    ("weights-p-minus-1", "averaging weights 1/(P-1)", "src/parallel/sync.c",
     [(": 1.0 / g->n;", ": 1.0 / (g->n - 1);")], ["mpi-epoch-2"]),
    ("fold-copy", "async fold sets global = w", "codelets/fold.c",
     [("tsr__k_axpby(m, n, 0.5f, TSR_PTR(buffers[2]), TSR_LD(buffers[2]), 0.5f,",
       "tsr__k_axpby(m, n, 1.0f, TSR_PTR(buffers[2]), TSR_LD(buffers[2]), 0.0f,")],
     ["mpi-async-2"]),
    ("lr-unscaled", "tsr_train ignores the linear scaling rule under --sync batch",
     "src/train/train.c", [("lr *= (float)replicas;", "lr *= 1.0f;")],
     ["mpi-batch-2", "mpi-cli"]),
    # Issue 15: outer optimizers, post-local and hierarchical averaging.
    ("slowmo-no-gamma", "SlowMo's anchor step without the base rate", "src/kernels/optim.c",
     [("xr[j] -= lr * gamma * ur[j];", "xr[j] -= lr * ur[j];")], ["mpi-outer-2"]),
    ("nesterov-no-lookahead", "the outer Nesterov step without its look-ahead term",
     "src/kernels/optim.c",
     [("xr[j] -= lr * (d + momentum * ur[j]);", "xr[j] -= lr * ur[j];")], ["mpi-outer-2"]),
    ("outer-fold-whole", "async-epoch's outer fold takes the whole pseudo-gradient, not 1/P",
     "src/parallel/sync.c", [("share = 1.0f / (float)r->size;", "share = 1.0f;")],
     ["mpi-outer-2"]),
    ("postlocal-phase", "post-local counts every=K from the run's first step, not the switch",
     "src/parallel/sync_post_local.c",
     [("(step - tsr__replicas_local_from(r)) % s->every == 0", "step % s->every == 0")],
     ["mpi-postlocal-2"]),
    ("hier-group-all", "hier's group averages go over all ranks", "src/parallel/sync_hier.c",
     [("return tsr__replicas_average_group(r);", "return tsr__replicas_average_all(r);")],
     ["mpi-hier-3"]),
    # Issue 12: --grid PrxPc.
    ("grid-no-gather", "a grid layer never gathers the input tiles other rows own",
     "src/tile/ops.c", [("if (from == owner) continue;", "continue;")], ["mpi-grid-2"]),
    ("grid-row-weights", "weight averages across grid columns weigh each rank 1/P, not 1/Pc",
     "src/parallel/sync.c", [("if (gi < 0) r->weights[q] *= r->grid_rows;", "")],
     ["mpi-grid-4"]),
    # Issue 13: shares and FedNova.
    ("fednova-no-extrapolation", "--weighting steps takes the step-normalized mean without "
     "extrapolating from the anchor (lambda 1)", "src/parallel/sync.c",
     [("  r->lambda = S > 0 ? tau_eff * S : 1.0;", "  r->lambda = 1.0;")], ["mpi-shares-3"]),
    ("shares-equal-homes", "chunk homes stay equal under uneven --shares",
     "src/train/train.c", [("uneven ? sh->share : NULL", "NULL")], ["mpi-shares-3"]),
    ("shares-batch-uniform-shards", "per-rank batches follow --shares but shards stay uniform",
     "src/train/setup.c",
     [("      tsr_shares_split(of_batch, ranks, n, 1, part);",
       "      tsr_shares_split((double[]){0.3333333333, 0.3333333333, 0.3333333334}, ranks,"
       " n, 1, part);")], ["mpi-shares-3"]),
    ("shuffle-last-stays", "the shuffle never moves the last sample", "src/data/order.c",
     [("for (int64_t i = n - 1; i > 0; i--)", "for (int64_t i = n - 2; i > 0; i--)")],
     ["train"]),
    # Issue 20: an output written for the first time (beta 0) may hold NaN, and NaN x 0 is NaN.
    ("cl-axpby-reads-y", "OpenCL axpby reads y when beta is 0", "codelets/tessera.cl",
     [("AT(y, yo, ldy, i, j) = beta == 0.0f ? v : v + beta * AT(y, yo, ldy, i, j);",
       "AT(y, yo, ldy, i, j) = v + beta * AT(y, yo, ldy, i, j);")], ["opencl"]),
    ("cl-bias-grad-reads-db", "OpenCL bias gradient reads db when beta is 0",
     "codelets/tessera.cl",
     [("float s = beta == 0.0f ? 0.0f : beta * db[dbo + j];",
       "float s = beta * db[dbo + j];")], ["opencl"]),
    # Issue 19: optimizers as a registry, AdamW and Nesterov SGD.
    ("adamw-decay-after", "AdamW decays the weights after Adam's step instead of before",
     "src/kernels/optim.c",
     [("      wr[j] *= keep;\n"
       "      adam_element(&wr[j], &ar[j], &br[j], gr[j], lr, beta1, beta2, eps, c1, c2);\n",
       "      adam_element(&wr[j], &ar[j], &br[j], gr[j], lr, beta1, beta2, eps, c1, c2);\n"
       "      wr[j] *= keep;\n")], ["kernels"]),
    ("sgd-nesterov-no-lookahead", "Nesterov SGD steps by the buffer alone (plain momentum)",
     "src/kernels/optim.c",
     [("wr[j] -= lr * (gj + momentum * vj);", "wr[j] -= lr * vj;")], ["kernels"]),
    ("adamw-as-adam", "the adamw descriptor takes Adam's step (L2 decay in the gradient)",
     "src/optim/adamw.c", [("gi, gj, o, true);", "gi, gj, o, false);")], ["train"]),
    ("adamw-cl-l2", "AdamW's OpenCL kernel adds the decay to the gradient as well",
     "codelets/tessera.cl",
     [("ldm2, wj, AT(g, go, ldg, i, j), lr,", "ldm2, wj, AT(g, go, ldg, i, j) + wd * wj, lr,")],
     ["opencl"]),
    ("sgd-nesterov-cl-no-lookahead", "Nesterov SGD's OpenCL kernel without the look-ahead",
     "codelets/tessera.cl",
     [("AT(w, wo, ldw, i, j) = wj - lr * (gj + momentum * vj);",
       "AT(w, wo, ldw, i, j) = wj - lr * vj;")], ["opencl"]),
    ("nesterov-lr-unscaled", "sgd-nesterov's rate is not scaled by the replicas under --sync "
     "batch", "src/optim/sgd_nesterov.c", [("    .lr_scales_with_replicas = true,\n", "")],
     ["mpi-batch-2"]),
    ("checkpoint-unknown-as-sgd", "a checkpoint of an unknown optimizer is read as SGD (the bug "
     "issue 19 names)", "src/train/checkpoint.c",
     [("  if (tsr_optimizer_init(opt ? opt : &o, name, NULL) == 0) return 0;",
       "  if (tsr_optimizer_init(opt ? opt : &o, name, NULL) == 0 ||\n"
       "      tsr_optimizer_init(opt ? opt : &o, \"sgd\", NULL) == 0)\n    return 0;")],
     ["checkpoint"]),
    # Issue 21: traces people can read.
    ("trace-busy-last", "trace-summary keeps a codelet's last task time instead of the sum",
     "src/io/trace_summary.c",
     [("b[j].tasks++, b[j].busy += k->dur;", "b[j].tasks++, b[j].busy = k->dur;")], ["trace"]),
    ("trace-steps-edge", "--trace-steps A-B leaves out step B", "src/runtime/observe.c",
     [("return step >= win_from && step <= win_to;", "return step >= win_from && step < win_to;")],
     ["trace"]),
    ("deps-no-readers", "in a trace, a write waits only for the last write, not the reads since",
     "src/io/trace_graph.c",
     [("const vec_t *before = d->readers.n ? &d->readers : &d->last;",
       "const vec_t *before = &d->last;")], ["trace"]),
    ("flow-older-writer", "a transfer is drawn from the owner's writer before the last",
     "src/io/trace_graph.c", [("  int64_t k = lo - 1;\n", "  int64_t k = lo - 2;\n")],
     ["mpi-trace-summary"]),
    ("critical-path-first-dep", "the critical path follows a task's first dependency, not its "
     "heaviest", "src/io/trace_summary.c",
     [("if (v > b) b = v, arg = j;", "if (arg < 0) b = v, arg = j;")] * 2, ["trace"]),
]


def apply(text, edits):
    """text with every edit made in turn, or None when one's old text is missing."""
    for old, new in edits:
        if old not in text:
            return None
        text = text.replace(old, new, 1)
    return text


def run(cmd, env=None):
    return subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def meson_tests(build):
    """Every test's name, in meson's order."""
    out = run(["meson", "test", "-C", build, "--list"])
    return [line.split(" / ", 1)[1].strip() for line in out.stdout.splitlines() if " / " in line]


def failures(out):
    """The tests that failed in run-tests.sh's output, less the two any edit fails."""
    failing = list(dict.fromkeys(  # meson lists a failure again in its summary
        re.findall(r"^\s*\d+/\d+ (\S+ / \S+)\s+(?:FAIL|TIMEOUT|ERROR)", out, re.M)))
    # These two fail on any edit (the mutant's text is gone, the file unformatted): they say
    # nothing about the mutant.
    return [t for t in failing if not t.endswith(("/ mutants-apply", "/ format"))]


def run_first(suites, everything):
    """The named suites one at a time, stopping at the first that fails; when none fails, the
    rest of everything (the whole suite; none with --quick). The failing tests, and the suites
    that ran."""
    tests = os.path.join(ROOT, "scripts/run-tests.sh")
    for suite in suites:
        failing = failures(run([tests, suite]).stdout)
        if failing:
            return failing, [suite]
    rest = [t for t in everything if t not in suites]
    if not rest:
        return [], suites
    return failures(run([tests] + rest).stdout), suites + ["the rest"]


def main(mutants=None, list_file="tests/mutants.py"):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated mutant names")
    ap.add_argument("--quick", action="store_true", help="run only each mutant's named suites")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check", action="store_true", help="only check that every mutant applies")
    ap.add_argument("--first", action="store_true",
                    help="each mutant's named suites in order, up to the first failure; the rest "
                    "of the whole suite only when none failed (with --quick: not)")
    args = ap.parse_args()
    every = MUTANTS if mutants is None else mutants
    if args.check and mutants is None:  # the test checks both lists
        import mutants_campaign
        every = MUTANTS + mutants_campaign.CAMPAIGN
    chosen = every
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in {m[0] for m in every}]
        if unknown:
            sys.exit("unknown mutant(s): %s (see --list)" % ", ".join(unknown))
        chosen = [m for m in every if m[0] in names]
    if args.list:
        for name, what, path, _, suites in chosen:
            print("%-18s %-24s %s  [%s]" % (name, path, what, " ".join(suites)))
        return 0
    if args.check:
        stale = [(m[0], m[2]) for m in chosen
                 if apply(open(os.path.join(ROOT, m[2])).read(), m[3]) is None]
        for name, path in stale:
            print("%s does not apply: %s changed; update its text in %s" % (name, path, list_file))
        print("%d of %d mutants apply" % (len(chosen) - len(stale), len(chosen)))
        return 1 if stale else 0
    build = os.environ.get("TSR_BUILD_DIR", "build")
    build = build if os.path.isabs(build) else os.path.join(ROOT, build)
    base = run([os.path.join(ROOT, "scripts/setup.sh")])
    if base.returncode:
        sys.exit("the unmutated tree does not build:\n" + base.stdout[-3000:])
    everything = meson_tests(build) if args.first and not args.quick else []
    results = []
    for name, what, path, edits, suites in chosen:
        full = os.path.join(ROOT, path)
        original = open(full).read()
        mutated = apply(original, edits)
        if mutated is None:
            results.append((name, "does not apply", ""))
            print("%-18s does not apply: %s changed; update the mutant" % (name, path), flush=True)
            continue
        t0, status = time.time(), None
        try:
            with open(full, "w") as f:
                f.write(mutated)
            built = run(["ninja", "-C", build])
            if built.returncode:
                status, failing = "does not build", []
                results.append((name, status, built.stdout[-2000:]))
                continue
            if args.first:
                failing, _ = run_first(suites, everything)
            else:
                out = run([os.path.join(ROOT, "scripts/run-tests.sh")] +
                          (suites if args.quick else []))
                failing = failures(out.stdout)

            status = "caught" if failing else "SURVIVED"
            results.append((name, status, ", ".join(failing)))
        finally:
            with open(full, "w") as f:
                f.write(original)
            if status == "does not build":
                print("%-18s does not build" % name, flush=True)
        print("%-18s %-9s %5.0f s  %s: %s" % (name, status, time.time() - t0, what,
                                               ", ".join(failing) or "every test passed"),
              flush=True)
    run(["ninja", "-C", build])  # back to the unmutated build
    bad = [r for r in results if r[1] != "caught"]
    print("\n%d of %d mutants caught" % (len(results) - len(bad), len(results)))
    for name, status, detail in bad:
        print("  %s: %s %s" % (name, status, detail[:500]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
