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
                                     # it checks tests/mutants_campaign.py's and
                                     # tests/mutants_round2.py's lists too)
    tests/mutants.py --first         # each mutant's named suites in order, stopping at the first
                                     # failure; the rest of the whole suite only when none failed
    tests/mutants_campaign.py ...    # the same options on issue 20's campaign (its own list)
    tests/mutants_round2.py ...      # and on issue 41's (its own list)

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
     "src/kernels/pool.c",
     [("left[q] = hit ? 0.0f : left[q];", "left[q] = left[q];")] * 2, ["kernels", "conv"]),
    ("weights-stale", "--weighting samples leaves the last rank's weight stale",
     "src/parallel/home.c",
     [("    int q = g->ranks[t];\n    r->weights[q] = ",
       "    int q = g->ranks[t];\n    if (!r->sync.by_samples || q < g->n - 1) r->weights[q] = ")],
     ["mpi-weighted-2"]),
    ("grow-fixed-period", "grow=K averages every K steps, its period never doubling",
     "src/parallel/sync_grow.c", [("return (m & (m - 1)) == 0;", "return m > 0;")],
     ["mpi-grow-2"]),
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
    ("reversed-ranks", "deterministic reduction in reversed rank order", "src/parallel/collective.c",
     [("  for (int t = 0; t < n; t++) {\n    int q = ranks[t];\n    in = in || q == "
       "r->m.rank;\n    if (at_home || q == r->m.rank)\n",
       "  for (int t = n - 1; t >= 0; t--) {\n    int q = ranks[t];\n    in = in || q == "
       "r->m.rank;\n    if (at_home || q == r->m.rank)\n"),
      ("det && t == 0 ? 0.0f : 1.0f, dst", "det && t == n - 1 ? 0.0f : 1.0f, dst")],
     ["mpi-deterministic-3"]),
    ("weights-p-minus-1", "averaging weights 1/(P-1)", "src/parallel/home.c",
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
     "src/parallel/average.c", [("share = 1.0f / (float)g->n;", "share = 1.0f;")],
     ["mpi-outer-2"]),
    ("postlocal-phase", "post-local counts every=K from the run's first step, not the switch",
     "src/parallel/sync_post_local.c",
     [("(step - p->local_from) % s->every == 0", "(step - 0 * p->local_from) % s->every == 0")],
     ["mpi-postlocal-2"]),
    ("hier-group-all", "hier's group averages go over all ranks", "src/parallel/sync_hier.c",
     [("return tsr__replicas_average_group(r, state);",
       "return tsr__replicas_average_all(r);")],
     ["mpi-hier-3"]),
    # Issue 12: --grid PrxPc.
    ("grid-no-gather", "a grid layer never gathers the input tiles other rows own",
     "src/tile/ops.c", [("if (from == owner) continue;", "continue;")], ["mpi-grid-2"]),
    ("grid-row-weights", "weight averages across grid columns weigh each rank 1/P, not 1/Pc",
     "src/parallel/home.c", [("if (all) r->weights[q] *= r->m.grid_rows;",
       "")],
     ["mpi-grid-4"]),
    # Issue 13: shares and FedNova.
    ("fednova-no-extrapolation", "--weighting steps takes the step-normalized mean without "
     "extrapolating from the anchor (lambda 1)", "src/parallel/home.c",
     [("  h->lambda = S > 0 ? tau_eff * S : 1.0;",
       "  h->lambda = 1.0;")], ["mpi-shares-3"]),
    ("shares-equal-homes", "chunk homes stay equal under uneven --shares",
     "src/train/train.c", [("uneven ? sh->share : NULL", "uneven && false ? sh->share : NULL")], ["mpi-shares-3"]),
    ("shares-batch-uniform-shards", "per-rank batches follow --shares but shards stay uniform",
     "src/train/setup.c",
     [("      tsr_shares_split(of_batch, ranks, n, 1, part);",
       "      tsr_shares_split(of_batch[0] < 0 ? of_batch : (double[]){0.3333333333,"
       " 0.3333333333, 0.3333333334}, ranks, n, 1, part);")], ["mpi-shares-3"]),
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
     "issue 19 names)", "src/train/checkpoint_format.c",
     [("  if (tsr_optimizer_init(opt ? opt : &o, name, NULL) == 0) return 0;",
       "  if (tsr_optimizer_init(opt ? opt : &o, name, NULL) == 0 ||\n      "
       "tsr_optimizer_init(opt ? opt : &o, \"sgd\", NULL) == 0)\n    return 0;")],
     ["checkpoint"]),
    # Issue 20: checkpoints that lose nothing, and their contracts.
    ("resume-rank0-state", "a resumed local SGD run gives every rank rank 0's optimizer state "
     "(the file holds each rank's)", "src/train/checkpoint_resume.c",
     [("tsr_dist_size() / pr && q > 0)", "tsr_dist_size() / pr && q > 1)")],
     ["resume-mpi"]),
    ("grid-two-level-all-nodes", "under a grid two levels group every rank by node, not the rank's "
     "grid row", "src/parallel/members.c",
     [("member_nodes(m, pr > 1 ? &m->rows[m->rank % pr] : &m->all, of_rank)",
       "member_nodes(m, &m->all, of_rank)")], ["grid-sync"]),
    ("grid-two-level-home-rank", "under a grid with two levels a chunk's home is kept as a rank, "
     "not as its column in the row", "src/parallel/placement.c",
     [("row[e].home[c] = g->ranks[row[e].local[c] % g->n] / stride;",
       "row[e].home[c] = g->ranks[row[e].local[c] % g->n] / (stride / stride);")],
     ["grid-sync"]),
    ("grid-rows-plan-whole", "under a grid each row plans its chunks from every tile column of a "
     "spread parameter, not its own", "src/parallel/placement.c",
     [("if (r < 0 || r == p)", "if (r < 0 || r == p || j >= 0)")], ["plan-cli"]),
    ("grid-outer-gather-plan", "under a grid the outer momentum is gathered by rank 0's plan of "
     "the other rows' homes", "src/parallel/state.c",
     [("return r->m.grid_rows > 1 ? tsr_tiles_gather_owned(x, into) : tsr_tiles_gather(x, into);",
       "return tsr_tiles_gather(x, into);")], ["grid-sync"]),
    ("grid-bucket-senders-all", "under a grid a bucket's home sums the rows of every rank, not "
     "of its grid row's", "src/parallel/buckets.c",
     [("const tsr__group_t *row = r->m.grid_rows > 1 ? &r->m.rows[r->m.rank % r->m.grid_rows] : "
       "&r->m.all;",
       "const tsr__group_t *row = &r->m.all;")], ["grid-sync"]),
    ("grid-bucket-no-pad", "under a grid each rank makes its own row's buckets only, as many as "
     "that row has", "src/parallel/buckets.c",
     [("if (r->m.grid_rows > 1 && r->sync.bucket_mb > 0) TSR_TRY(pad_buckets(r));",
       "if (r->m.grid_rows > 1 && r->sync.bucket_mb > 0 && 0) TSR_TRY(pad_buckets(r));")],
     ["mpi-twolevel-8"]),
    ("grid-bucket-other-rows", "under a grid a rank offers another row's chunks to the buckets",
     "src/parallel/buckets.c",
     [("  if (!tsr__group_has(tsr__scope(r, rp, NULL, j), r->m.rank))\n    return 0; /* grid: another row's column */\n",
       "")], ["grid-sync"]),
    ("resume-grid-column-of-rank", "a resumed grid run gives each rank the optimizer state of the "
     "replica its rank numbers, not its grid column's", "src/train/checkpoint_resume.c",
     [("q = tsr_dist_rank() / pr;", "q = tsr_dist_rank() % pr;")], ["grid-checkpoint"]),
    ("gather-copies-column-0", "each grid column's optimizer state is gathered from column 0's "
     "ranks", "src/tile/tiles.c",
     [("every + (size_t)(c * stride + owner)", "every + (size_t)(owner)")], ["grid-checkpoint"]),
    ("resume-outer-zero", "a resumed run's outer momentum restarts from zero", "src/train/checkpoint_resume.c",
     [("(rc = tsr__replicas_kept(rep, TSR__KEPT_OUTER_MOMENTUM, l->params[k].index,\n"
       "                                              NULL, data)) != 0)",
       "(rc = 0) != 0)")], ["resume-mpi"]),
    ("resume-post-local-again", "post-local resumed past its switch switches again (sharing one "
     "rank's state, counting from the resume)", "src/train/checkpoint_resume.c",
     [("(rc = tsr__replicas_resume(rep, &past)) != 0)", "(rc = 0) != 0)")], ["resume-mpi"]),
    ("outer-gather-rank0", "a distributed matrix (the outer momentum, a grid's tiles) gathered "
     "from rank 0's tiles only, not each tile's owner", "src/tile/tiles.c",
     [("every + (size_t)tsr_tiles_rank_of(t, i, j) * (size_t)count", "every")],
     ["resume-mpi", "grid-checkpoint"]),
    ("final-average-unmarked", "async-epoch's final average not recorded: a resume from it is "
     "taken for the uninterrupted run", "src/parallel/sync_async_epoch.c",
     [("    tsr__replicas_mark_final(r);\n", "")], ["resume-mpi"]),
    ("checkpoint-unagreed", "a checkpoint written where local SGD's replicas differ (rank 0's "
     "weights between averages)", "src/train/train.c",
     [("  if (!saved.agreed && !saved.between) return 0;\n", "")],
     ["mpi-checkpoint-agree-2"]),
    ("stop-not-agreed", "each rank stops at its own stop signal, without the ranks' agreement "
     "a step later", "src/train/train.c",
     [("    if (r->rep) rc = tsr__dist_any_lagged(stop, &stop);\n", "")],
     ["mpi-resume-2", "stop-mpi"]),
    ("stop-between-own-weights", "a rank resumed between averages keeps rank 0's weights, not "
     "its own the checkpoint holds", "src/train/checkpoint_resume.c",
     [("      if (q > 0) rc = tsr__ckpt_load_tensor(f, path, full, t, err);\n", "")],
     ["stop-mpi"]),
    ("stop-between-anchor", "the outer optimizer's anchor of the last average not given back on "
     "a resume between averages", "src/train/checkpoint_resume.c",
     [("(rc = tsr__replicas_kept(rep, TSR__KEPT_ANCHOR, l->params[k].index, NULL, data)) != 0)",
       "(rc = 0) != 0)")],
     ["stop-mpi"]),
    ("checkpoint-test-stats", "the checkpoint records the test set's standardization",
     "src/cli/train_run.c",
     [("tsr_standardization_fit(&r->standardization, cfg->standardize, &r->train,",
       "tsr_standardization_fit(&r->standardization, cfg->standardize, &r->test,")],
     ["resume-mpi"]),
    ("checksum-missing-trusted", "a tensor with no recorded checksum is trusted",
     "src/train/checkpoint_format.c",
     [("    if (!want || strcmp(want, got) != 0)", "    if (want && strcmp(want, got) != 0)")],
     ["checkpoint-contracts"]),
    ("failed-write-keeps-tmp", "a failed checkpoint write leaves its temporary file",
     "src/io/safetensors.c", [("  if (rc) {\n    unlink(tmp);\n", "  if (rc) {\n")],
     ["checkpoint-contracts"]),
    ("meta-float-unchecked", "a float of the metadata cast to float checked for inf and nan "
     "only (1e300 and 1e39 overflow the cast, 1e-40 is subnormal)", "src/train/checkpoint_format.c",
     [("if (end == *s || !isfinite(x) || m > FLT_MAX || (m != 0 && m < FLT_MIN)) {",
       "if (end == *s || !isfinite(m)) {")], ["checkpoint-contracts"]),
    ("meta-int-unchecked", "a whole number of the metadata cast to int without its range",
     "src/train/checkpoint_format.c",
     [("if (end == *s || errno || x < lo || x > hi) {", "if (end == *s || errno) {")],
     ["checkpoint-contracts"]),
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
    # Issue 20: faults under mpirun (tests/test_faults.sh).
    ("second-signal-ignored", "a second SIGINT or SIGTERM is ignored like the first",
     "src/cli/train_run.c",
     [("  if (stop_signal) {\n    signal(sig, SIG_DFL);\n    raise(sig);\n    return;\n  }\n",
       "  if (stop_signal) return;\n")], ["mpi-faults"]),
    ("signal-rank-not-reduced", "each rank's exit status and line from its own signal, not the "
     "ranks' agreed (signal, rank)", "src/cli/train_run.c",
     [("int sig, ranks, first = tsr_dist_first_signal(stop_signal, &sig, &ranks);",
       "int sig = stop_signal, ranks = sig != 0, first = sig ? tsr_dist_rank() : -1;")],
     ["mpi-faults"]),
    ("late-signal-silent", "a signal that came in the last epoch goes unsaid",
     "src/cli/train_run.c",
     [("  if (first < 0 && rc == 0) return 0;", "  if (rc == 0) return 0;")], ["mpi-faults"]),
    ("agreed-error-aborts", "an error every rank agreed on (a full disk) still ends in MPI_Abort",
     "src/cli/train_run.c", [(" && !tsr_dist_agreed(rc))", ")")], ["mpi-faults"]),
    ("report-not-agreed", "what rank 0 decides at an epoch end (divergence) is its alone",
     "src/train/train.c",
     [("  if (r->rep) report_rc = tsr_dist_agree(report_rc, r->err, r->err);\n", "")],
     ["mpi-faults"]),
    ("test-loss-unchecked", "a test loss that is not finite is not divergence",
     "src/train/train.c",
     [("test_bad = st->test_samples > 0 && !isfinite(st->test_loss);", "test_bad = false;")],
     ["mpi-faults"]),
    ("resume-sync-silent", "resuming under another --sync than the checkpoint's, silently",
     "src/cli/train_run.c",
     [("if (cfg->resume && r->speaker && r->resumed.sync[0] &&",
       "if (!cfg && cfg->resume && r->speaker && r->resumed.sync[0] &&")], ["mpi-faults"]),
    # Issue 20: the contracts no test checked (tests20).
    ("cosine-step-ahead", "the cosine schedule one step ahead", "src/train/train.c",
     [("(int64_t)((e - 1) * sh->steps + k)", "(int64_t)((e - 1) * sh->steps + k + 1)")],
     ["train"]),
    ("cosine-formula-ahead", "the cosine formula one step ahead", "src/optim/schedule.c",
     [("double progress = (double)t / (double)total;",
       "double progress = (double)(t + 1) / (double)total;")], ["train"]),
    ("init-pytorch-he-bound", "--init pytorch draws weights with He's bound", "src/nn/dense.c",
     [("double bound = 1.0 / sqrt((double)fin);", "double bound = sqrt(6.0 / fin);")], ["train"]),
    ("init-pytorch-zero-bias", "--init pytorch leaves the biases zero", "src/nn/dense.c",
     [("return init_uniform(params[1].w, (size_t)fout, bound, rng);", "return 0;")], ["train"]),
    ("fednova-anchor-stays", "FedNova without --outer extrapolates from the initial weights at "
     "every average (its anchor never moves)", "src/parallel/home.c",
     [("if (!outer) TSR_TRY(tsr__tile_copy(&local, h->anchor[rp->index], rp->acc, I, j));",
       "")],
     ["mpi-fednova-2"]),
    ("fednova-empty-steps", "FedNova counts a step without samples as a local step",
     "src/parallel/home.c",
     [("r->homes->steps[q] += samples_per_rank[q] > 0;",
       "r->homes->steps[q] += samples_per_rank[q] >= 0;")], ["mpi-fednova-2"]),
    ("hier-group-samples-restart", "hier's group averages weigh the samples since the group's "
     "own last average, not since the last average of all ranks", "src/parallel/average.c",
     [("  return average(r, &sc, NULL, false);\n",
       "  int rc = average(r, &sc, NULL, false);\n"
       "  for (int t = 0; t < sc.group->n; t++)\n    r->samples[sc.group->ranks[t]] = 0;\n"
       "  return rc;\n")],
     ["mpi-hiersamples-3"]),
    ("postlocal-state-sharded", "post-local's switch keeps the optimizer state sharded (each "
     "rank only its chunks')", "src/parallel/gradients.c",
     [("  int rc = share ? tsr__replicas_share_state(r) : 0;",
       "  int rc = share ? 0 : 0;")],
     ["mpi-postlocalstate-2"]),
    ("epoch-n-no-final", "epoch=n skips the average at the end when the epochs are not a "
     "multiple of n", "src/parallel/sync_epoch.c",
     [("epoch % s->every == 0 || last ?",
       "epoch % s->every == 0 || (last && epoch % s->every == 0) ?")], ["mpi-epochn-2"]),
    ("grid-estimate-partials", "the memory estimate under a grid counts a dense layer's gathered "
     "inputs but not its partial input gradients", "src/nn/layout.c",
     [("if (l->partials) l->act_floats += 2 * batch * l->fin;",
       "if (l->partials) l->act_floats += batch * l->fin;")], ["mpi-grid-2"]),
    ("plan-memory-workspace", "the planner's memory per rank leaves out the workers' scratch",
     "src/plan/plan.c",
     [("row->memory_bytes = (double)mem->total +",
       "row->memory_bytes = (double)(mem->total - mem->workspace) +")],
     ["plan"]),
    ("checkpoint-init-unread", "a checkpoint's initialization is read as the default",
     "src/train/checkpoint_format.c",
     [("tsr_init_from_name(&o.init, init ? init : \"he\")",
       "tsr_init_from_name(&o.init, \"pytorch\")")], ["checkpoint"]),
    ("plan-memory-sums", "the planner's memory per rank leaves out batch's updated chunk copies",
     "src/plan/plan.c", [("/ pc * (grads ? 2 : 1)", "/ pc")], ["plan"]),
    # Issue 22: validation and schedules.
    ("warmup-cosine-clock", "cosine's clock not moved by the warm-up", "src/optim/schedule.c",
     [("tsr__lr_at(kind, base, t - w, total - w)", "tsr__lr_at(kind, base, t, total)")],
     ["schedule"]),
    ("step-decay-early", "step decay from the listed epoch, not after it", "src/optim/schedule.c",
     [("lr->milestones[i] < epoch", "lr->milestones[i] <= epoch")], ["schedule"]),
    ("plateau-no-threshold", "reduce-on-plateau without the relative threshold",
     "src/optim/schedule.c",
     [("loss < s->plateau_best * (1.0 - lr->threshold)", "loss < s->plateau_best")], ["schedule"]),
    ("plateau-patience-early", "reduce-on-plateau at PATIENCE bad epochs, not more",
     "src/optim/schedule.c",
     [("if (++s->plateau_bad <= lr->patience)", "if (++s->plateau_bad < lr->patience)")],
     ["schedule"]),
    ("early-stop-late", "early stopping one epoch late", "src/optim/schedule.c",
     [("return ++s->early_bad >= patience;", "return ++s->early_bad > patience;")], ["schedule"]),
    ("val-split-seedless", "the same held-out samples for every seed", "src/train/validation.c",
     [("tsr_rng_t rng = {seed ^ SPLIT_STREAM};", "tsr_rng_t rng = {(seed & 0) ^ SPLIT_STREAM};")],
     ["schedule"]),
    ("early-stop-ignored", "early stopping decided but the run goes on", "src/train/train.c",
     [("    r->ended = true;", "    r->ended = false;")], ["schedule"]),
    ("schedule-state-not-resumed", "a resumed run's plateau and early stopping start again",
     "src/cli/train_run.c",
     [("if (r->resumed.has_schedule_state) r->train_opts.start_state",
       "if (!r) r->train_opts.start_state")], ["schedule-cli"]),
    ("warmup-off-on-constant", "no warm-up on a constant schedule", "src/train/train.c",
     [("if (o->lr_schedule != TSR_LR_CONSTANT || o->lr.warmup > 0) {",
       "if (o->lr_schedule != TSR_LR_CONSTANT) {")], ["schedule-cli"]),
    ("val-split-resume-silent", "a resume under another --val-split taken", "src/cli/train_run.c",
     [("if (was.val_split != cfg->val_split) {", "if (!r && was.val_split != cfg->val_split) {")],
     ["schedule-cli"]),
    # Issue 22: augmentation in batch assembly.
    ("augment-flip-off-by-one", "a mirrored image reads one pixel too far right",
     "src/kernels/augment.c",
     [("sx = (mirror ? g->w - 1 - x : x)", "sx = (mirror ? g->w - x : x)")], ["augment"]),
    ("augment-key-by-row", "a sample's draws keyed by its row in the batch, not in the dataset",
     "src/kernels/augment.c",
     [("tsr__k_augment_draw(g, rows[r], &dy, &dx, &mirror);",
       "tsr__k_augment_draw(g, r, &dy, &dx, &mirror);")], ["augment"]),
    ("augment-in-eval", "evaluation batches augmented too", "src/nn/net.c",
     [("TSR_TRY(load_batch(net, ds, rows, n, false));",
       "TSR_TRY(load_batch(net, ds, rows, n, true));")], ["augment"]),
    ("augment-no-epoch", "tsr_train never sets the epoch: every epoch draws the same crops",
     "src/train/train.c", [("  tsr_net_set_epoch(r->net, e);", "")], ["augment"]),
    ("augment-resume-unchecked", "a resume under other augmentation settings passes silently",
     "src/train/checkpoint_resume.c", [("if (strcmp(augment, then_augment) != 0) {", "if (0) {")],
     ["augment-cli"]),
    ("bn-padding-in-stats", "batchnorm's statistics take the padding rows of a short batch",
     "src/tile/ops.c", [("return (int)(v < 0 ? 0 : v < rows ? v : rows);",
                         "return (int)(v < 0 ? rows : rows);")], ["batchnorm", "grad"]),
    ("bn-biased-running-var", "batchnorm's running variance moved by the biased variance",
     "src/kernels/batchnorm.c", [("mo * (m2 / (n - 1))", "mo * (m2 / n)")], ["batchnorm"]),
    ("bn-buffers-not-averaged", "weight averaging leaves batchnorm's running statistics alone",
     "src/parallel/average.c", [("    if (rp->bufs) own[nsets]", "    if (0 && rp->bufs) own[nsets]")],
     ["mpi-bnevery-2"]),
    ("syncbn-backward-as-forward", "--sync-bn combines the backward sums by Chan's formula",
     "src/parallel/sync_bn.c", [("e->view[q], backward));", "e->view[q], backward && !backward));")],
     ["mpi-syncbn-2"]),
    ("syncbn-grid-all-ranks", "--sync-bn under a grid combines every rank's statistics, a "
     "column's copies as well, instead of along the grid's rows",
     "src/parallel/sync_bn.c", [("s->rows = tsr_net_grid_rows(net);", "s->rows = 1;")],
     ["mpi-syncbngrid-4"]),
    ("concat-bands-first-only", "a concat over bands of image rows joins only the first band's "
     "channels, leaving the other bands' output as it was",
     "src/tile/ops.c", [("for (int j = 0; pixels > 1 && j < dst->nt; j++)",
                         "for (int j = 0; pixels > 1 && j < 1; j++)")],
     ["mpi-domain-2"]),
    ("syncbn-uneven-plain-sums", "--sync-bn with batches of different sizes adds the ranks' "
     "backward sums unweighted, as if every batch were the same size",
     "src/parallel/sync_bn.c", [("if (backward && s->uneven) {", "if (backward && !s) {")],
     ["mpi-syncbn-2"]),
    ("syncbn-empty-step-skipped", "an empty step under weight averaging and --sync-bn is "
     "skipped, so the other ranks wait for its statistics forever",
     "src/train/setup.c", [("|| (s->sync.sync_bn && s->ranks > 1)", "")],
     ["batchnorm-cli"]),
    ("grid-fednova-row-weights", "--weighting steps under a grid weights a grid row's ranks "
     "as if they were all the ranks (1/Pr of their weight)", "src/parallel/home.c",
     [("p / (double)h->steps[q] / S * r->m.grid_rows",
       "p / (double)h->steps[q] / S")],
     ["mpi-gridshares-4"]),
    ("syncbn-domain-no-hook", "--sync-bn over bands of image rows leaves each column's forward "
     "statistics its own", "src/nn/batchnorm.c",
     [("                                    &net->traffic));\n      if (net->on_stats.fn)",
       "                                    &net->traffic));\n      if (0)")],
     ["mpi-syncbngrid-4"]),
    ("tied-grad-overwritten", "the embedding's backward overwrites the tied head's gradient of the "
     "token table instead of adding to it", "src/nn/embedding.c",
     [("l->dy, l->shared_grad_written);", "l->dy, false);")], ["seq", "grad"]),
    ("lmhead-partials-lost", "the head's table gradient keeps tile 0's partial only",
     "src/tile/seq_ops.c",
     [("return parts ? tree(&r, tsr__tile(dw, 0, 0), partials, 1, dy->mt) : 0;", "return 0;")],
     ["seq", "grad"]),
    ("layernorm-dx-no-xhat", "layer norm's input gradient without the xhat mean(g xhat) term's "
     "full weight", "src/kernels/sequence.c",
     [("out[k] = rstd * (g[k] * w[k] - mg - xhat * mgx);",
       "out[k] = rstd * (g[k] * w[k] - mg - 0.5f * xhat * mgx);")], ["seq", "grad"]),
    ("gelu-derivative", "GELU's derivative with the cubic's coefficient 2 instead of 3",
     "src/kernels/sequence.c",
     [("(1.0f + 3.0f * gelu_c * v * v)", "(1.0f + 2.0f * gelu_c * v * v)")], ["seq", "grad"]),
    ("embed-chain-reversed", "the embedding's gradient chain runs the batch-row tiles backwards "
     "(the bits then depend on the tiling)", "src/tile/seq_ops.c",
     [("  for (int i = 0; i < dy->mt; i++)\n    TSR_TRY(tsr__insert_embed_bwd(",
       "  for (int i = dy->mt - 1; i >= 0; i--)\n    TSR_TRY(tsr__insert_embed_bwd("),
      ("tsr__tile(dy, i, 0), i == 0 && !add_tokens,\n                                  i == 0));",
       "tsr__tile(dy, i, 0), i == dy->mt - 1 && !add_tokens,\n"
       "                                  i == dy->mt - 1));")], ["seq"]),
    ("loss-not-per-token", "the per-position loss's gradient averaged over samples, not tokens",
     "src/nn/net.c",
     [("1.0f / ((float)n * (float)net->positions)", "1.0f / (float)n")], ["seq", "grad"]),
    ("clip-norm-squared", "--clip-grad against the squared norm instead of the norm",
     "src/kernels/elementwise.c",
     [("float coef = max_norm / (sqrtf(sumsq) + 1e-6f);", "float coef = max_norm / (sumsq + 1e-6f);")],
     ["gpt-torch", "mpi-batch-2"]),
    ("clip-home-norm", "--sync batch clips with the home's own part of the norm, not the ranks' sum",
     "src/parallel/home.c",
     [("tsr__tile_clip(local, rp->acc, I, j, norm,",
       "tsr__tile_clip(local, rp->acc, I, j, r->net->grad_sq,")], ["mpi-batch-2"]),
    ("two-level-one-node-homes", "two levels home every chunk on node 0 (the nodes unbalanced)",
     "src/parallel/chunks.c",
     [("by_node[best] += all[c].bytes, homed[best * per_node + l]++;",
       "by_node[0] += all[c].bytes, homed[best * per_node + l]++;")], ["plan", "mpi-twolevel-8"]),
    ("two-level-node-order", "deterministic two levels add the nodes' sums in reversed order",
     "src/parallel/collective.c",
     [("  for (int n = 0; n < r->m.nnodes; n++) {\n    if (me != home && (n != r->m.my_node || "
       "me != lh)) continue;",
       "  for (int n = r->m.nnodes - 1; n >= 0; n--) {\n    if (me != home && (n != "
       "r->m.my_node || me != lh)) continue;"),
      ("float beta = det && n == 0 ? 0.0f : 1.0f;",
       "float beta = det && n == r->m.nnodes - 1 ? 0.0f : 1.0f;")],
     ["mpi-twolevel-8"]),
    ("bucket-no-unpack", "a bucket's result is not unpacked on the ranks that receive it",
     "src/parallel/buckets.c",
     [("bool unpacks = gets && (!at_home || with_home);", "bool unpacks = gets && with_home;")],
     ["mpi-buckets-4"]),
    ("bucket-close-early", "a home's bucket closes one chunk early, leaving its last chunk unsent",
     "src/parallel/buckets.c",
     [("  *full = ++b->packed == b->nchunks ? b : NULL;",
       "  *full = ++b->packed == b->nchunks - 1 ? b : NULL;")], ["mpi-buckets-4"]),
    ("grid-hier-groups", "hier under a grid groups G + 1 columns, not G",
     "src/parallel/members.c",
     [("of_col[c] = gs > 0 ? c / gs : -1;", "of_col[c] = gs > 0 ? c / (gs + 1) : -1;")],
     ["grid-sync"]),
    ("grid-outer-home", "under a grid the outer step runs on the chunk's home over all ranks",
     "src/parallel/average.c",
     [("bool at_home = in && r->m.rank == tsr__home_in(in, rp, I, j);",
       "bool at_home = in && r->m.rank == tsr__home_in(g, rp, I, j);")], ["grid-sync"]),
    ("grid-fold-share", "under a grid async-epoch's outer fold takes a rank's share 1/P of the "
     "pseudo-gradient instead of a grid column's 1/Pc", "src/parallel/average.c",
     [("float share = 1.0f / (float)g->n;", "float share = 1.0f / (float)r->m.size;")],
     ["grid-sync"]),
    ("domain-no-halo", "a domain-split layer's slab leaves its halo rows as they were: the "
     "neighbouring bands' rows never reach the window", "src/tile/domain.c",
     [("        TSR_TRY(tsr__insert_columns(&l, tsr__tile(b->slab, i, 0), at, h, 0, width, false));\n",
       "")], ["mpi-domain-2"]),
    ("domain-halo-grad-dropped", "the halo rows' gradients are not added back on their owners",
     "src/tile/domain.c",
     [("        TSR_TRY(tsr__insert_columns(&l, t, (lo - q0) * wc, h, 0, width, true));",
       "        (void)h;")], ["mpi-domain-2"]),
    ("domain-dw-band0", "a convolution's weight gradient is band 0's alone, the other bands' "
     "never added", "src/tile/domain.c",
     [("    TSR_TRY(tsr__insert_axpby(&l, 1.0f, hw, 1.0f, tsr__tile(d->dw_sum, 0, 0)));", "")],
     ["mpi-domain-2"]),
    ("domain-bn-band-stats", "batch normalization over bands normalizes with row 0's band's "
     "statistics only", "src/tile/domain.c",
     [("    TSR_TRY(tsr__insert_bn_combine(&l, first, h, sums));", "")], ["mpi-domain-2"]),
    # Issue 38: oneDNN's convolutions, the kernels chosen per task, the fusions.
    ("onednn-relu-flag", "oneDNN's forward fuses the ReLU where none follows, and drops it where "
     "one does", "src/kernels/conv_dnnl.c",
     [("if (ok && k->pass == FWD && k->flag)", "if (ok && k->pass == FWD && !k->flag)")],
     ["conv"]),
    ("onednn-beta-overwrites", "oneDNN's filter gradient overwrites what a beta of 1 adds to",
     "src/kernels/conv_dnnl.c",
     [("dnnl_post_ops_append_sum(rops, 1.0f)", "dnnl_post_ops_append_sum(rops, 0.0f)")], ["conv"]),
    ("onednn-pad-right", "oneDNN's right padding taken as the left's (a band's window is "
     "asymmetric)", "src/kernels/conv_dnnl.c",
     [("dnnl_dims_t pad_r = {(dnnl_dim_t)(g->oh - 1) * g->sh + g->kh - g->h - g->ph,",
       "dnnl_dims_t pad_r = {(dnnl_dim_t)g->ph + 0 * ((g->oh - 1) * g->sh + g->kh - g->h - g->ph),")],
     ["conv"]),
    ("kernels-blis-ignored", "--kernels blis still lets oneDNN's implementation run",
     "codelets/impls.c",
     [("return tsr__k_dnnl_built() && kernels != TSR_KERNELS_BLIS;",
       "return tsr__k_dnnl_built();")], ["cli"]),
    ("bn-fold-mean-left-out", "evaluation's folded batchnorm leaves the running mean out of the "
     "bias", "src/kernels/batchnorm.c",
     [("b2[ch] = (float)(((double)b[ch] - run_mean[ch]) * k + shift[ch]);",
       "b2[ch] = (float)(((double)b[ch] - 0 * run_mean[ch]) * k + shift[ch]);")], ["batchnorm"]),
    ("filter-gemm-dy-ld", "a 1x1 filter gradient by dnnl_sgemm copies dy's rows to another "
     "leading dimension than the GEMM reads them at", "src/kernels/conv_dnnl.c",
     [("tsr__k_copy(m, g->oc, work, ldd, dy, g->oc);",
       "tsr__k_copy(m, g->oc, work, g->oc, dy, g->oc);")],
     ["conv"]),
    ("filter-gemm-im2col-ld", "a wide filter gradient by dnnl_sgemm lowers x at its fan-in where "
     "the GEMM reads the rows at the padded leading dimension", "src/kernels/conv_dnnl.c",
     [("tsr__k_im2col(g, n, work, ldc, x, ldx);", "tsr__k_im2col(g, n, work, k, x, ldx);")],
     ["conv"]),
    ("filter-gemm-bias-beta", "a 1x1 filter gradient by dnnl_sgemm overwrites the bias gradient "
     "where the next tiles add to it", "src/kernels/conv_dnnl.c",
     [("tsr__k_bias_grad(m, g->oc, db, dy, g->oc, beta);",
       "tsr__k_bias_grad(m, g->oc, db, dy, g->oc, 0.0f);")], ["conv"]),
    ("conv-stats-padding", "the statistics the convolution gathers for its batchnorm count a "
     "short batch's padding rows", "src/tile/ops.c",
     [("false, tsr__tile(p, i, 0), valid_rows(y, i, valid)));",
       "false, tsr__tile(p, i, 0), valid_rows(y, i, valid + y->mt * y->mb)));")], ["batchnorm"]),
    ("tuned-keeps-slower", "--kernels tuned keeps the implementation whose trials were slower",
     "codelets/tuned.c",
     [("atomic_store(&s->chosen, s->best[1] < s->best[0]);",
       "atomic_store(&s->chosen, s->best[1] > s->best[0]);")], ["conv"]),
    ("tuned-never-tries", "--kernels tuned runs oneDNN's implementation on every task, never "
     "timing the other", "codelets/impls.c",
     [("if (c && c->key) return (int)nimpl == tuned_pick(task);",
       "if (c && c->key) return (int)nimpl == 0 * tuned_pick(task);")], ["cli"]),
    ("add-relu-grad-ungated", "a residual add with its ReLU fused passes dy to its inputs where "
     "the ReLU closed", "src/nn/add.c",
     [("    if (dx[k] && l->relu)\n", "    if (dx[k] && l->relu && 0)\n")], ["graph"]),
    ("bn-dx-gate-open", "batchnorm's backward lets dy through where its fused ReLU's output is 0",
     "src/kernels/batchnorm.c",
     [("uint32_t bits, mask = y > 0.0f ? ~0u : 0u;", "uint32_t bits, mask = ~0u + 0 * (y > 0.0f);")],
     ["batchnorm"]),
    # Issue 41: the contracts of the last wave that no test checked.
    ("early-stop-count-kept", "early stopping's count of bad epochs does not start again at a "
     "new best", "src/optim/schedule.c",
     [("s->early_best = loss, s->early_best_epoch = epoch, s->early_bad = 0;",
       "s->early_best = loss, s->early_best_epoch = epoch;")], ["schedule"]),
    ("plan-bn-whole-image", "the planner prices batchnorm under --domain rows on the whole image",
     "src/nn/batchnorm.c",
     [("double share = tsr__cost_rows_share(lay, l); /* row 0's band under --domain rows */",
       "double share = 1 + 0 * tsr__cost_rows_share(lay, l);")], ["plan"]),
    ("position-grad-accumulates", "the position table's gradient adds up across steps",
     "src/tile/seq_ops.c",
     [("tsr__tile(tok, i, 0), tsr__tile(dy, i, 0), i == 0 && !add_tokens,\n"
       "                                  i == 0));",
       "tsr__tile(tok, i, 0), tsr__tile(dy, i, 0), i == 0 && !add_tokens,\n"
       "                                  false));")], ["seq"]),
    ("opencl-channels-never-add", "the OpenCL channel copy overwrites where asked to add",
     "codelets/tessera.cl", [("d[at] = add ? d[at] + v : v;", "d[at] = v;")], ["opencl"]),
    ("opencl-channels-always-add", "the OpenCL channel copy adds where asked to overwrite",
     "codelets/tessera.cl", [("d[at] = add ? d[at] + v : v;", "d[at] = d[at] + v;")], ["opencl"]),
    ("domain-bn-padding", "batchnorm over bands counts a short batch's padding rows",
     "src/tile/domain.c",
     [("return (int)(v < 0 ? 0 : v < rows ? v : rows);", "return (int)(0 * v + rows);")],
     ["mpi-domainshort-2"]),
    ("two-level-home-own-node", "with two levels a local home does not count its own node's "
     "partial as received", "src/parallel/collective.c",
     [("return tsr__sum_on_home(o, r, lh, node->n, node->ranks, NULL, xs, part, i, j, tile);",
       "return tsr__sum_on_home(o, r, lh, node->n, node->ranks, NULL, xs, part, i, j,\n"
       "                          r->m.rank == lh ? 0 : tile);")], ["mpi-twolevel-8"]),
    ("attention-width-scale", "attention scores scaled by the model width, not the head width",
     "src/kernels/attention.c",
     [("  float scale = 1.0f / sqrtf((float)dh);\n", "  float scale = 1.0f / sqrtf((float)d);\n"),
      ("  float scale = 1.0f / sqrtf((float)dh);\n", "  float scale = 1.0f / sqrtf((float)d);\n")],
     ["gpt-torch", "attention"]),
    ("fused-step-bias-decay", "the fused step decays the bias with the weights' decay",
     "src/tile/ops.c",
     [("tsr_sgd_args_t b = {s->lr, s->momentum, s->bias_wd, 0, s->nesterov};",
       "tsr_sgd_args_t b = {s->lr, s->momentum, s->wd, 0, s->nesterov};")], ["fused-step"]),
    ("fused-step-under-clipping", "the step is fused under --clip-grad, before the clipping",
     "src/nn/net.c", [("if (!net->updating || net->on_grad.fn != default_grad_hook ||",
                       "if (!net->updating ||")], ["fused-step"]),
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
    if args.check and mutants is None:  # the test checks the three lists
        import mutants_campaign
        import mutants_round2
        every = MUTANTS + mutants_campaign.CAMPAIGN + mutants_round2.ROUND2
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
