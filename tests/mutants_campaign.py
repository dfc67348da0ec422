#!/usr/bin/env python3
"""Issue 20's mutation campaign: realistic single-edit bugs written from the sources and the
docs alone, without reading the tests, over src/parallel, src/optim, src/train, src/io,
src/plan, src/tile, codelets/ (OpenCL included) and src/data.

The machinery is tests/mutants.py's (the same options); `tests/mutants.py --check`, which the
`mutants-apply` test runs, checks that this list still applies too.

    tests/mutants_campaign.py --first            # the campaign: named suites up to the first
                                                 # failure, the whole suite for a survivor
    tests/mutants_campaign.py --list
    tests/mutants_campaign.py --first --only cl-softmax-last-item

Each entry: (name, what the bug is, file, [(old, new), ...], suites guessed to catch it, in the
order --first runs them).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutants  # noqa: E402

CAMPAIGN = [
    # ---- src/data ----
    ("order-sattolo", "the epoch shuffle draws j below i, not up to i (Sattolo's cycle: no "
     "sample ever stays in place, and the orders are not uniform)", "src/data/order.c",
     [("tsr__rng_below(&rng, (uint64_t)i + 1)", "tsr__rng_below(&rng, (uint64_t)i)")],
     ["data", "reference", "train"]),
    ("normalize-paren", "standardization subtracts the mean after scaling: x / std - mean",
     "src/data/dataset.c",
     [("ds->x[i] = (ds->x[i] - mean) * scale;", "ds->x[i] = ds->x[i] * scale - mean;")],
     ["data", "train"]),
    ("idx-classes", "the IDX reader counts classes as the largest label, not one more",
     "src/data/idx.c", [("ds->classes = 1 + max_label;", "ds->classes = max_label;")],
     ["data", "cli"]),
    ("csv-column-number", "a bad CSV feature is reported one column to the left",
     "src/data/csv.c", [("int col = (int)(j + 2);", "int col = (int)(j + 1);")],
     ["data", "cli"]),
    # ---- src/optim ----
    ("adam-betas-swapped", "Adam given beta2 as beta1 and beta1 as beta2", "src/optim/adam.c",
     [("lr, hp->beta1, hp->beta2,", "lr, hp->beta2, hp->beta1,")], ["train", "kernels"]),
    ("adamw-coupled", "AdamW runs Adam's L2 decay, not the decoupled one", "src/optim/adamw.c",
     [("r0, g, gi, gj, o, true);", "r0, g, gi, gj, o, false);")], ["train", "cli"]),
    ("decay-on-biases", "weight decay applied to every parameter, biases included",
     "src/optim/optim.c",
     [("float wd = o->params[param].decay ? o->hp.weight_decay : 0.0f;",
       "float wd = o->hp.weight_decay;")], ["train", "python"]),
    ("cosine-total-minus-1", "the cosine schedule reaches its end one step early "
     "(progress t / (T - 1))", "src/optim/schedule.c",
     [("(double)t / (double)total;", "(double)t / (double)(total - 1);")], ["train", "reference"]),
    ("momentum-one-accepted", "--momentum 1 accepted (the check is > 1, not >= 1)",
     "src/optim/registry.c",
     [("opt->momentum >= 1.0f ||", "opt->momentum > 1.0f ||")],
     ["checkpoint-cli", "cli", "train"]),
    ("outer-nesterov-flipped", "the outer step takes Nesterov for SlowMo and SlowMo for Nesterov",
     "src/optim/outer.c",
     [("mean, i, j,\n                         o->hp.kind == TSR_OUTER_NESTEROV,",
       "mean, i, j,\n                         o->hp.kind != TSR_OUTER_NESTEROV,")],
     ["mpi-outer-2"]),
    # ---- src/tile ----
    ("tile-cols-modulo", "the last tile column's width as n % nb (0 when nb divides n)",
     "src/tile/tiles.c",
     [("return j < t->nt - 1 ? t->nb : (int)(t->n - (int64_t)j * t->nb);",
       "return j < t->nt - 1 ? t->nb : (int)(t->n % t->nb);")], ["tiles", "train"]),
    ("remote-handle-transposed", "another rank's tile registered with rows and columns swapped "
     "(nx = rows, ny = cols: the same for square tiles only)", "src/tile/tiles.c",
     [("(uint32_t)tsr_tiles_tile_cols(t, j),\n                              "
       "(uint32_t)tsr_tiles_tile_rows(t, i), sizeof(float));",
       "(uint32_t)tsr_tiles_tile_rows(t, i),\n                              "
       "(uint32_t)tsr_tiles_tile_cols(t, j), sizeof(float));")],
     ["mpi-tiles-2", "mpi-grid-2"]),
    ("owned-corner-stride", "the owned tiles' host corner strides rows by nb, not by n",
     "src/tile/tiles.c",
     [("      if (!tsr_tiles_is_local(t, i, j)) continue;\n"
       "      float *corner = host + (int64_t)i * t->mb * t->n + (int64_t)j * t->nb;",
       "      if (!tsr_tiles_is_local(t, i, j)) continue;\n"
       "      float *corner = host + (int64_t)i * t->mb * t->nb + (int64_t)j * t->nb;")],
     ["tiles", "mpi-grid-2"]),
    ("bias-grad-wrong-index", "the bias gradient's first-row reset tests the column j, not the "
     "row i (column 0 keeps only its last row tile, the others add to the last step's)",
     "src/tile/ops.c",
     [("tsr__tile(dy, i, j), i == 0 ? 0.0f : 1.0f));", "tsr__tile(dy, i, j), j == 0 ? 0.0f : 1.0f));")],
     ["grad", "train"]),
    ("conv-tree-no-reset", "the tree of conv filter partials accumulates onto the last step's "
     "partials (beta 1 for the partials)", "src/tile/ops.c",
     [("i == 0 || tree ? 0.0f : 1.0f));", "i == 0 ? 0.0f : 1.0f));")], ["conv", "grad"]),
    ("dropout-offsets-swapped", "dropout's mask offsets passed as (column, row)",
     "src/tile/ops.c",
     [("(int64_t)i * y->mb, (int64_t)j * y->nb, rate));",
       "(int64_t)j * y->nb, (int64_t)i * y->mb, rate));")], ["grad", "train", "opencl"]),
    # ---- codelets/ (C and OpenCL) ----
    ("sgd-band-v-no-ld", "a band's SGD momentum offset is r0 floats, not r0 rows",
     "codelets/sgd.c",
     [("long off_v = mom ? (long)a->r0 * TSR_LD(v) : 0;",
       "long off_v = mom ? (long)a->r0 : 0;")], ["mpi-batch-2", "mpi-batch-3"]),
    ("cl-global-rows-floor", "OpenCL 2-D launches round the rows down to whole work-groups "
     "(the last partial group of rows never runs)", "codelets/opencl.c",
     [("((size_t)m + LOCAL_ROWS - 1) / LOCAL_ROWS * LOCAL_ROWS", "(size_t)m / LOCAL_ROWS * LOCAL_ROWS")],
     ["opencl", "opencl-cli"]),
    ("cl-outer-operands-swapped", "the OpenCL outer step computes d = mean - x (a and b swapped)",
     "codelets/outer.c",
     [("outer_run(buffers, cl_arg, 0, 1, 0, 2, 1.0f);", "outer_run(buffers, cl_arg, 0, 1, 2, 0, 1.0f);")],
     ["opencl"]),
    ("cl-softmax-last-item", "the OpenCL loss reduction skips the last work-item's part",
     "codelets/tessera.cl",
     [("for (int k = 1; k < size; k++)\n    loss += part[2 * k]",
       "for (int k = 1; k < size - 1; k++)\n    loss += part[2 * k]")], ["opencl", "opencl-cli"]),
    ("cl-sgd-v-stride", "the OpenCL SGD reads the momentum with the weights' leading dimension",
     "codelets/tessera.cl",
     [("float vj = flush(momentum * AT(v, vo, ldv, i, j) + gj + wd * wj);",
       "float vj = flush(momentum * AT(v, vo, ldw, i, j) + gj + wd * wj);")], ["opencl"]),
    ("cl-pool-kernel-width", "the OpenCL pooling steps window rows by the kernel width, not the "
     "image width", "codelets/tessera.cl",
     [("      float xi = corner[((long)(iy0 + ky) * g.w + ix0 + kx) * g.c];",
       "      float xi = corner[((long)(iy0 + ky) * g.kw + ix0 + kx) * g.c];")], ["opencl"]),
    ("cl-dropout-col", "the OpenCL dropout hashes column col0 + j, the CPU's col0 + j + 1",
     "codelets/tessera.cl",
     [("(ulong)(col0 + j + 1));", "(ulong)(col0 + j));")], ["opencl"]),
    ("cl-bias-grad-beta0", "the OpenCL bias gradient reads db when beta is 0 (NaN x 0 is NaN)",
     "codelets/tessera.cl",
     [("float s = beta == 0.0f ? 0.0f : beta * db[dbo + j];", "float s = beta * db[dbo + j];")],
     ["opencl"]),
    # ---- src/parallel ----
    ("postlocal-early", "post-local switches to local SGD one epoch early",
     "src/parallel/sync_post_local.c",
     [("epoch <= s->post_epochs) return 0;", "epoch < s->post_epochs) return 0;")],
     ["mpi-postlocal-2", "mpi-postlocal-3"]),
    ("epoch-n-phase", "epoch=n averages after epochs n-1, 2n-1, ... (and the last), not n, 2n",
     "src/parallel/sync_epoch.c",
     [("epoch % s->every == 0 || last ?", "(epoch + 1) % s->every == 0 || last ?")],
     ["mpi-epochn-2", "mpi-epoch-2", "mpi-cli"]),
    ("reduce-bytes-all", "the home counts a chunk received from every rank, itself included",
     "src/parallel/collective.c",
     [("r->st.bytes_received += bytes * (uint64_t)(n - 1), r->st.messages_received += n - 1;\n  "
       "else if (in)\n    r->st.bytes_sent",
       "r->st.bytes_received += bytes * (uint64_t)n, r->st.messages_received += n - 1;\n  else "
       "if (in)\n    r->st.bytes_sent")],
     ["mpi-bytes-3", "mpi-batch-2"]),
    ("grid-weights-unscaled", "under a grid the average's weights are not multiplied by Pr",
     "src/parallel/home.c",
     [("    if (all) r->weights[q] *= r->m.grid_rows;\n",
       "")], ["mpi-grid-4", "mpi-grid-2"]),
    ("group-clears-global", "a group average of hier clears the global sample counts too",
     "src/parallel/average.c",
     [("  if (!sc) tsr__home_clear(r);",
       "  for (int t = 0; sc && t < g->n; t++)\n    r->samples[g->ranks[t]] = 0;\n"
       "  if (!sc) tsr__home_clear(r);")], ["mpi-hiersamples-3", "mpi-hier-3"]),
    ("fednova-lambda-swapped", "FedNova's step from the anchor with lambda and 1 - lambda swapped",
     "src/parallel/home.c",
     [("(float)(1.0 - h->lambda), x, (float)h->lambda, rp->acc,",
       "(float)h->lambda, x, (float)(1.0 - h->lambda), rp->acc,")],
     ["mpi-shares-3", "mpi-weighted-2", "mpi-weighted-3", "mpi-outer-2"]),
    ("stats-last-rank-missing", "the training loss and accuracy sums leave out the last rank",
     "src/parallel/replicas.c",
     [("for (int q = 0; q < r->m.size && rc == 0; q += r->m.grid_rows)",
       "for (int q = 0; q < r->m.size - 1 && rc == 0; q += r->m.grid_rows)")],
     ["mpi-cli", "reference", "mpi-batch-2"]),
    ("shares-remainder-smallest", "the samples left by rounding go to the smallest fractions",
     "src/parallel/shares.c",
     [("if (frac[q] > frac[best]) best = q;", "if (frac[q] < frac[best]) best = q;")],
     ["shares", "mpi-shares-3", "mpi-uneven-3", "mpi-cli"]),
    # ---- src/train ----
    ("shard-last-batch-lost", "a shard's steps count one batch too many as taken (the last "
     "batch of every shard is empty)", "src/train/train.c",
     [("left = sh->lo[q + 1] - sh->lo[q] - k * b;", "left = sh->lo[q + 1] - sh->lo[q] - (k + 1) * b;")],
     ["mpi-batch-2", "train"]),
    ("eval-partial-batch-dropped", "evaluation skips the last, partial batch but divides by "
     "every sample", "src/train/train.c",
     [("for (int64_t s = 0; s < ds->n && rc == 0; s += b)\n    rc = tsr_net_eval_step",
       "for (int64_t s = 0; s + b <= ds->n && rc == 0; s += b)\n    rc = tsr_net_eval_step")],
     ["train", "cli"]),
    ("resume-skips-every-epoch", "a resumed run starts every epoch at the checkpoint's step, "
     "not only the first", "src/train/train.c",
     [("*k = e == r->first ? o->start_step : 0;", "*k = o->start_step;")],
     ["checkpoint", "checkpoint-cli", "mpi-resume-2"]),
    ("checkpoint-due-shifted", "--checkpoint-every N writes after epochs 1, N+1, ... "
     "(e - 1) % N", "src/train/train.c",
     [(": e % o->checkpoint_every == 0));", ": (e - 1) % o->checkpoint_every == 0));")],
     ["checkpoint-cli", "checkpoint"]),
    ("step-checkpoint-skipped-at-epoch-end", "--checkpoint-every Nsteps skips the N-th step "
     "when it is an epoch's last (the chaos runs' find)", "src/train/train.c",
     [("(o->checkpoint_in_steps ? r->step % o->checkpoint_every == 0",
       "(o->checkpoint_in_steps ? false")],
     ["checkpoint"]),
    ("lr-scaled-by-ranks", "under a grid the linear scaling rule multiplies by every rank, not "
     "the replicas", "src/train/train.c",
     [("int replicas = tsr_dist_size() / tsr_net_grid_rows(net);", "int replicas = tsr_dist_size();")],
     ["mpi-cli", "mpi-grid-2", "mpi-grid-4"]),
    ("resume-optim-steps-lost", "a checkpoint's optimizer step count is read but not restored "
     "(Adam's bias correction restarts)", "src/train/checkpoint_state.c",
     [("  if (rc == 0) tsr__optim_set_steps(net->optim, steps);\n",
       "  if (rc == 0 && steps < 0) rc = TSR_EFORMAT;\n")], ["checkpoint", "checkpoint-cli"]),
    ("resume-state-first-name", "every optimizer state tensor is loaded from the first state's "
     "name (Adam's exp_avg_sq from exp_avg)", "src/train/checkpoint_state.c",
     [("        snprintf(state, sizeof state, \"optimizer.%s.%s\", name,\n"
       "                 tsr__optim_state_name(net->optim, s));\n"
       "        rc = tsr__ckpt_load_tensor(",
       "        snprintf(state, sizeof state, \"optimizer.%s.%s\", name,\n"
       "                 tsr__optim_state_name(net->optim, 0));\n"
       "        rc = tsr__ckpt_load_tensor(")], ["checkpoint", "checkpoint-cli"]),
    # ---- src/io ----
    ("st-end-as-length", "safetensors data_offsets written as [begin, length], not [begin, end]",
     "src/io/safetensors.c",
     [("cJSON_CreateNumber((double)(offset + bytes))", "cJSON_CreateNumber((double)bytes)")],
     ["checkpoint", "python"]),
    ("st-trailing-accepted", "the safetensors reader accepts bytes after the last tensor",
     "src/io/safetensors.c",
     [("if (at != f->size) return bad(", "if (at > f->size) return bad(")],
     ["checkpoint", "fuzz"]),
    ("log-test-nan-not-null", "the log writes test_loss \"nan\" rather than null without a test "
     "set", "src/io/log.c",
     [('add_optional(o, "test_loss", st->test_samples > 0,',
       'add_optional(o, "test_loss", st->test_samples >= 0,')], ["cli", "python"]),
    ("busiest-not-times-n", "--stats's busiest rank line divides by the total, not the mean",
     "src/io/stats.c",
     [("(double)most * n / (double)total", "(double)most / (double)total")],
     ["mpi-cli", "cli"]),
    # ---- src/plan ----
    ("plan-steps-floor", "the planner's steps per epoch drop the last, partial batch",
     "src/plan/plan.c",
     [("row->steps_per_epoch = (shard + o->batch - 1) / o->batch;",
       "row->steps_per_epoch = shard / o->batch;")], ["plan", "plan-cli"]),
    ("plan-update-by-rows", "the planner shares a sharded update over the grid rows, not the "
     "columns", "src/plan/plan.c",
     [("    c->work -= t * (1.0 - 1.0 / c->pc);\n    t /= c->pc;",
       "    c->work -= t * (1.0 - 1.0 / c->pr);\n    t /= c->pr;")], ["plan", "plan-cli"]),
    ("plan-best-is-worst", "the planner marks the slowest plan as the best", "src/plan/plan.c",
     [("if (best < 0 || r->epoch_s < rows[best].epoch_s)",
       "if (best < 0 || r->epoch_s > rows[best].epoch_s)")], ["plan", "plan-cli"]),
    ("plan-memory-no-grad", "the planner's memory per rank leaves out the updated copies of "
     "--sync batch's gradient sums", "src/plan/plan.c",
     [("(double)mem->params / pc * (grads ? 2 : 1)", "(double)mem->params / pc")],
     ["plan", "plan-cli"]),
    ("cluster-bandwidth-bytes", "a cluster file's bandwidth_gbits read as GB/s (no factor 8)",
     "src/plan/machine.c",
     [("FIELD(beta), 8.0 / 1e9,", "FIELD(beta), 1.0 / 1e9,")], ["plan", "plan-cli"]),
    ("plan-sent-ranks-minus-1", "the planner's home sends each chunk it homes to itself too "
     "(P - 1 copies sent, not P - 2 more than once)", "src/plan/plan.c",
     [("sends(t, h, b, gm - 1, true);", "sends(t, h, b, gm, true);")], ["plan", "plan-cli"]),
]

if __name__ == "__main__":
    sys.exit(mutants.main(CAMPAIGN, "tests/mutants_campaign.py"))
