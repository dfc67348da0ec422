#!/usr/bin/env bash
# tessera train under mpirun as a user meets it: ranks started with different
# options (the message names the first option that differs, and the rank), or one rank that
# cannot read its data, end every rank with a non-zero exit and one message, within a time bound; a short distributed run
# logs the synchronization fields; the CNN learns under every --sync policy.
# Usage: test_mpi_cli.sh PATH/TO/tessera
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Every run below takes at most 1,280 training and 500 test samples: those alone (lib.sh).
data=$(prefix_data "$data" "$tmp/data" 1280 500)
common=(--workers 1 --train-limit 1280 --test-limit 500 --data "$data")
mpi=(mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT "${mpi_env[@]}")

# expect CODE PATTERN SECONDS -- COMMAND...; the output stays in $last.
expect() {
  local code=$1 pattern=$2 limit=$3
  shift 4
  local start out rc
  start=$(date +%s)
  out=$(timeout "$limit" "$@" 2>&1)
  rc=$?
  last=$out
  local took=$(($(date +%s) - start))
  if [[ $rc == "$code" ]] && grep -qE -- "$pattern" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL ($took s): $* -> exit $rc (want $code, /$pattern/):"
    echo "$out" | grep -v '^\[' | head -8
  fi
}

expect 1 "ranks run different configurations: rank\(s\) 1 differ from rank 0: rank 1 has '--epochs 2' where rank 0 has '--epochs 1'" 60 -- \
  "${mpi[@]}" -np 1 "$tessera" train "${common[@]}" --epochs 1 : \
  -np 1 "$tessera" train "${common[@]}" --epochs 2
expect 1 "rank 1: .*/nonexistent" 60 -- \
  "${mpi[@]}" -np 1 "$tessera" train "${common[@]}" --epochs 1 : \
  -np 1 "$tessera" train --workers 1 --data /nonexistent --epochs 1
expect 1 "rank 1: .*model" 60 -- \
  "${mpi[@]}" -np 1 "$tessera" train "${common[@]}" --epochs 1 : \
  -np 1 "$tessera" train "${common[@]}" --epochs 1 --model "$tmp/missing.ini"
# A bad option on one rank: mpirun stops the others.
expect 2 "--batch 0" 60 -- \
  "${mpi[@]}" -np 1 "$tessera" train "${common[@]}" --epochs 1 : \
  -np 1 "$tessera" train "${common[@]}" --epochs 1 --batch 0
# --shares: one value per rank (exit 2 before the data loads); auto measures and logs every
# rank's share, steps and times; a given list under batch gives each rank its part of the
# global batch (2 x 64 = 128: 96 and 32).
expect 2 "--shares: 3 values for 2 ranks" 60 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --shares 1,2,3 --data /nonexistent
expect 0 "shares \(auto, measured, re-measured every epoch\): rank 0 0\.[0-9]+, rank 1" 120 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 2 --sync epoch --shares auto \
  --weighting steps --log "$tmp/shares.jsonl"
if /usr/bin/python3 - "$tmp/shares.jsonl" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: --shares auto's log"; fi
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
epochs = [o for o in lines if "event" not in o]
ranks = [o for o in lines if o.get("event") == "ranks"][0]["ranks"]
for o in epochs:
    w = o["work"]
    assert len(w) == 2 and abs(sum(x["share"] for x in w) - 1) < 1e-6, w
    assert sum(x["samples"] for x in w) == 1280, w
    assert all(x["steps"] >= 1 and x["compute_seconds"] > 0 and x["wait_seconds"] >= 0 for x in w), w
assert sum(r["samples"] for r in ranks) == 2 * 1280 and all("wait_seconds" in r for r in ranks), ranks
PY
expect 0 "rank 0 0\.750 \(batch 96\), rank 1 0\.250 \(batch 32\)" 120 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --sync batch --shares 3,1
# Rank 0 writes the trace: a path it cannot create stops every rank before training.
expect 1 "rank 0: --trace /proc/x/y.json: cannot create" 60 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --trace /proc/x/y.json
# A log line that cannot be written (a full disk) stops every rank, with rank 0's message and a
# non-zero exit; it used to be ignored, and every epoch ran. /dev/full takes no line: the first,
# the run's, fails before training.
expect 1 "log /dev/full: cannot write the run line: No space left on device" 60 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 3 --log /dev/full
if grep -q "^epoch 2/3" <<<"$last"; then
  failed=$((failed + 1))
  echo "FAIL: --log /dev/full under mpirun: epoch 2 ran"
fi
# A diverging run stops every rank after the epoch whose loss is NaN, with exit 3 (gradient and
# weight averaging both used to train every epoch on NaN and exit 0).
for policy in batch epoch; do
  expect 3 "training diverged in epoch 1" 60 -- "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" \
    --epochs 3 --lr 1e6 --sync "$policy"
done
# A network no machine has memory for (mlp:200000,200000: about 480 GB of parameters, gradients
# and momentum) is refused on every rank before it is built, with the estimate.
expect 1 "the network needs about [0-9.]+ GB of memory.*even --batch 1 needs about" 60 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --model mlp:200000,200000
expect 0 "epoch 2/2" 120 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 2 --sync every=4 --log "$tmp/log.jsonl"
# Either progress mode trains the same model: the same loss and accuracy, digit for digit.
for mode in thread worker; do
  timeout 120 "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --mpi-progress "$mode" \
    --log "$tmp/$mode.jsonl" >"$tmp/$mode.out" 2>&1
  echo "exit $?" >>"$tmp/$mode.out"
done
if grep -q "MPI progress: worker" "$tmp/worker.out" && grep -q "MPI progress: thread" "$tmp/thread.out" &&
  grep -q "exit 0" "$tmp/thread.out" &&
  diff <(grep -o "loss .*test [0-9.]*%" "$tmp/thread.out") \
    <(grep -o "loss .*test [0-9.]*%" "$tmp/worker.out") >/dev/null &&
  grep -q "loss " "$tmp/worker.out" && grep -q "exit 0" "$tmp/worker.out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: --mpi-progress thread and worker differ:"
  grep -v '^\[' "$tmp/thread.out" "$tmp/worker.out" | head -12
fi
expect 2 "--mpi-progress sometimes" 30 -- "$tessera" train "${common[@]}" --mpi-progress sometimes
expect 2 "--lr-scaling square" 30 -- "$tessera" train "${common[@]}" --lr-scaling square
# --sync batch scales the rate by the ranks unless told not to; every=K never does. --stats: the
# busiest rank's traffic over the mean is the table's largest "MB sent" times the ranks over their
# sum (between 1 and the ranks); the 2 even ranks of batch send about the same.
expect 0 "lr 0.01 x 2 ranks" 120 -- "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 \
  --sync batch --lr-schedule constant --stats
if /usr/bin/python3 - "$last" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: --stats's busiest rank: $last" | head -20; fi
import re, sys
text = sys.argv[1]
table = text.split("ranks (synchronization over the run)")[1]
sent = [float(m.group(1)) for m in re.finditer(r"^  [0-9]+ +[0-9.]+ +[0-9.]+ +([0-9.]+) ", table, re.M)]
busiest = float(re.search(r"the busiest rank sent ([0-9.]+) x the mean", table).group(1))
assert len(sent) == 2 and sum(sent) > 0, sent
want = max(sent) * len(sent) / sum(sent)
assert abs(busiest - want) < 0.01 and 0.99 <= busiest <= 1.05, (busiest, want, sent)
PY
# The epoch's training loss and accuracy are over every rank's samples: with a rate too small to
# move the weights (1e-7), 2 ranks report what one process does over the same 1280 samples.
timeout 60 "$tessera" train "${common[@]}" --epochs 1 --lr 1e-7 --quiet --log "$tmp/one.jsonl" \
  >/dev/null 2>&1
timeout 60 "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --lr 1e-7 --sync batch \
  --quiet --log "$tmp/two.jsonl" >/dev/null 2>&1
if /usr/bin/python3 - "$tmp/one.jsonl" "$tmp/two.jsonl" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: 2 ranks' training loss and accuracy are not over all samples"; fi
import json, sys
one, two = ([json.loads(l) for l in open(p) if '"event"' not in l][0] for p in sys.argv[1:])
assert two["ranks"] == 2 and sum(w["samples"] for w in two["work"]) == 1280, two
assert abs(two["loss"] - one["loss"]) < 1e-4 * one["loss"], (one["loss"], two["loss"])
assert abs(two["train_accuracy"] - one["train_accuracy"]) <= 1.5 / 1280, (one, two)
PY
expect 0 "sgd lr 0.01,.*batch 64 per rank; tessera " 120 -- "${mpi[@]}" -np 2 "$tessera" train \
  "${common[@]}" --epochs 1 --sync batch --lr-scaling none
# The CNN under every synchronization policy learns and logs what it moved.
# Test accuracy with seed 1 (the default), 3 runs each: batch 0.360, every=4
# and epoch 0.410 (4 steps a rank: both average once), async-epoch 0.400-0.415;
# seeds 1-5 gave 0.295-0.415 except seed 2 (0.10-0.215). Chance is 0.1, and
# the epoch-1 loss (2.9-3.1) is above ln 10: He-initialized, the CNN starts at 3.3.
# These 4 steps a rank are too few for PyTorch's initialization (the default since issue 20:
# every=4 0.145, async-epoch 0.135), hence --init he.
for policy in batch every=4 epoch async-epoch; do
  expect 0 "epoch 1/1" 120 -- "${mpi[@]}" -np 2 "$tessera" train --init he --workers 1 \
    --data "$data" --model cnn --train-limit 512 --test-limit 200 --epochs 1 --sync "$policy" \
    --log "$tmp/cnn-$policy.jsonl"
  check_log "CNN --sync $policy" "$tmp/cnn-$policy.jsonl" 1 "sync=$policy" ranks=2 \
    "test_accuracy>0.2" "bytes_sent>0" "bytes_received>0"
done
if /usr/bin/python3 - "$tmp/log.jsonl" "$tmp/worker.jsonl" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: log"; cat "$tmp/log.jsonl"; fi
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
objs = [o for o in lines if "event" not in o]
assert len(objs) == 2, "rank 0 alone writes one line per epoch"
for o in objs:
    assert o["ranks"] == 2 and o["sync"] == "every=4", o
    assert o["bytes_sent"] > 0 and o["bytes_received"] > 0 and o["sync_seconds"] >= 0, o
    assert o["messages_sent"] > 0 and o["messages_received"] > 0, o
    assert 0 < o["test_accuracy"] <= 1, o
    assert abs(o["lr"] - 0.01) < 1e-6, o
# The last line: every rank's totals. What ranks send, ranks receive; rank 0's totals are the
# sum of its epochs.
ranks = lines[-1]
assert ranks["event"] == "ranks" and [r["rank"] for r in ranks["ranks"]] == [0, 1], ranks
rs = ranks["ranks"]
for key in ("bytes", "messages"):
    sent = sum(r[key + "_sent"] for r in rs)
    assert sent > 0 and sent == sum(r[key + "_received"] for r in rs), (key, rs)
    assert rs[0][key + "_sent"] == sum(o[key + "_sent"] for o in objs), (key, rs[0], objs)
assert all(r["seconds"] > 0 and 0 <= r["sync_seconds"] <= r["seconds"] for r in rs), rs
batch = [json.loads(l) for l in open(sys.argv[2]) if '"event"' not in l][0]
assert batch["sync"] == "batch" and abs(batch["lr"] - 0.02) < 1e-6, batch
assert batch["mpi_progress"] == "worker", batch
PY

# Issue 15: post-local and hier average at the steps they promise, counted from the log. 1280
# samples on 2 ranks at batch 64 are 10 steps an epoch. post-local:1,3 averages gradients in
# epoch 1 (no weight average), then weights at steps 13, 16, 19 | 22, 25, 28 and once at the end
# (step 30 is not a multiple of 3 from the switch). hier:2,5 on one node: one group of both
# ranks; all ranks at steps 5 and 10 of each epoch, the group at 2, 4, 6, 8.
"${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 3 --sync post-local:1,3 \
  --log "$tmp/post.jsonl" >/dev/null 2>&1
"${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 2 --sync hier:2,5 --outer slowmo \
  --log "$tmp/hier.jsonl" >/dev/null 2>&1
if /usr/bin/python3 - "$tmp/post.jsonl" "$tmp/hier.jsonl" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: post-local/hier averages"; cat "$tmp/post.jsonl" "$tmp/hier.jsonl"; fi
import json, sys
def epochs(path):
    return [o for o in map(json.loads, open(path)) if "event" not in o]
post = epochs(sys.argv[1])
assert [o["averages"] for o in post] == [0, 3, 4], [o["averages"] for o in post]
assert all(o["sync"] == "post-local:1,3" and abs(o["lr"] - 0.02) < 1e-6 for o in post), post[0]
# Gradients every step move far more than 3 or 4 weight averages (plus the optimizer state
# shared once at the switch).
assert post[0]["bytes_sent"] > 2 * post[1]["bytes_sent"] > 0, [o["bytes_sent"] for o in post]
hier = epochs(sys.argv[2])
assert [(o["averages"], o["group_averages"]) for o in hier] == [(2, 4), (2, 4)], hier
assert hier[0]["sync"] == "hier:2,5 slowmo(1,0.5)", hier[0]["sync"]
PY
expect 2 "--outer slowmo needs a policy that averages weights" 30 -- \
  "$tessera" train --sync batch --outer slowmo --epochs 1
expect 2 "--outer-lr and --outer-momentum need --outer" 30 -- \
  "$tessera" train --sync every=4 --outer-lr 2 --epochs 1
expect 2 "--outer bogus: unknown; use none, slowmo or nesterov" 30 -- \
  "$tessera" train --outer bogus
expect 2 "--sync hier:0,4: the counts must be K1,K2" 30 -- "$tessera" train --sync hier:0,4
expect 2 "--sync post-local:2: the counts must be E,K" 30 -- "$tessera" train --sync post-local:2
# --allreduce two-level is refused where a node's ranks cannot be summed first, naming why.
expect 2 "--allreduce ring: expected auto, flat or two-level" 30 -- "$tessera" train --allreduce ring
expect 2 "--node-size 0: expected an integer from 1 to 32768" 30 -- "$tessera" train --node-size 0
expect 2 "--allreduce two-level: async-epoch folds one rank's weights" 60 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --sync async-epoch \
  --allreduce two-level
expect 2 "--allreduce two-level: --shares other than uniform places the chunks' homes" 60 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --shares 1,2 --allreduce two-level
# --bucket-mb packs the chunks of averages: refused where there are none to pack, naming why.
expect 2 "--bucket-mb -1: expected a number of MiB from 0 to 1e6" 30 -- "$tessera" train --bucket-mb -1
expect 2 "--bucket-mb: async-epoch folds whole tiles" 60 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --sync async-epoch --bucket-mb 1

# --grid PrxPc: bad values exit 2 naming the option; a grid run learns, evaluates and logs each
# rank's transfers, and StarPU-MPI's own count of the bytes inside a grid column equals the
# engine's; a language model is refused when the net is built.
expect 2 "--grid 2y1: expected PrxPc" 30 -- "$tessera" train --grid 2y1
expect 2 "--grid 0x2: expected PrxPc" 30 -- "$tessera" train --grid 0x2
expect 2 "--grid 2x2: Pr x Pc = 4 must equal the MPI ranks \(2\)" 60 -- \
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 --grid 2x2
# A language model is not split across a grid column (it corrupted the heap before it was
# refused): every rank exits 1 naming the first sequence layer.
expect 1 "layer 1 \(embed\): a grid .* does not take embedding layers yet" 60 -- \
  "${mpi[@]}" -np 2 "$tessera" train --workers 1 --model gpt:1,32,2,16 \
  --text "$tests_dir/../README.md" --epochs 1 --grid 2x1
expect 0 "2 ranks as a 2x1 grid" 120 -- env STARPU_COMM_STATS=1 "${mpi[@]}" -x STARPU_COMM_STATS \
  -np 2 "$tessera" train --workers 1 --data "$data" --model cnn --train-limit 512 \
  --test-limit 200 --epochs 1 --grid 2x1 --log "$tmp/grid.jsonl"
check_log "CNN --grid 2x1" "$tmp/grid.jsonl" 1 ranks=2 "test_accuracy>0.2"
if /usr/bin/python3 - "$tmp/grid.jsonl" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: grid log"; cat "$tmp/grid.jsonl"; fi
import json, sys
o = [json.loads(l) for l in open(sys.argv[1]) if '"event"' not in l][0]
assert o["grid"] == "2x1" and [r["rank"] for r in o["per_rank"]] == [0, 1], o
# One replica of 2 ranks: the rate of one process, not scaled by the ranks.
assert abs(o["lr"] - 0.01) < 1e-9, o["lr"]
for r in o["per_rank"]:
    assert r["grid_bytes_sent"] > 0 and r["grid_messages_sent"] > 0, r
    assert r["measured_sent_inside"] == r["grid_bytes_sent"], r
sent = sum(r["grid_bytes_sent"] for r in o["per_rank"])
assert sent == sum(r["grid_bytes_received"] for r in o["per_rank"]), o["per_rank"]
PY
# --domain rows: the CNN's convolutions and pooling in bands of image rows learn as well; every
# rank sends halo rows, and StarPU-MPI's count inside the column is still the engine's.
expect 2 "--domain rows splits images over a grid column's ranks: it needs --grid PrxPc with Pr > 1" \
  30 -- "$tessera" train --domain rows
expect 2 "--domain bands: expected none, rows, rows:K .* or auto" 30 -- "$tessera" train --domain bands
expect 2 "--domain auto splits images over a grid column's ranks: it needs --grid PrxPc" 30 -- \
  "$tessera" train --domain auto
expect 0 "2 ranks as a 2x1 grid" 120 -- env STARPU_COMM_STATS=1 "${mpi[@]}" -x STARPU_COMM_STATS \
  -np 2 "$tessera" train --workers 1 --data "$data" --model cnn --train-limit 512 \
  --test-limit 200 --epochs 1 --grid 2x1 --domain rows --log "$tmp/domain.jsonl"
check_log "CNN --grid 2x1 --domain rows" "$tmp/domain.jsonl" 1 ranks=2 "test_accuracy>0.2"
if /usr/bin/python3 - "$tmp/domain.jsonl" "$tmp/grid.jsonl" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: domain log"; cat "$tmp/domain.jsonl"; fi
import json, sys
o, whole = ([json.loads(l) for l in open(f) if '"event"' not in l][0] for f in sys.argv[1:3])
for r in o["per_rank"]:
    assert 0 < r["halo_bytes_sent"] < r["grid_bytes_sent"] and r["halo_messages_sent"] > 0, r
    assert r["measured_sent_inside"] == r["grid_bytes_sent"], r
for r in whole["per_rank"]:
    assert r["halo_bytes_sent"] == 0, r
# The same training: the epoch's loss as the replicated convolutions' (float rounding apart).
assert abs(o["loss"] - whole["loss"]) <= 1e-5 * abs(whole["loss"]), (o["loss"], whole["loss"])
PY
# --domain auto: the run takes what tessera plan --domain auto chooses for the same grid, model,
# samples, batch and workers (the kernel rates cached under $STARPU_HOME: the same on both), says so, and logs
# it as its domain.
expect 0 "--domain auto: .* of 4 convolutions and poolings cut, planned [0-9.]+ ms per step" 120 -- \
  "${mpi[@]}" -np 2 "$tessera" train --workers 1 --data "$data" --model cnn --train-limit 512 \
  --test-limit 200 --epochs 1 --grid 2x1 --domain auto --log "$tmp/auto.jsonl"
check_log "CNN --grid 2x1 --domain auto" "$tmp/auto.jsonl" 1 ranks=2 "test_accuracy>0.2"
banner=$(grep -E "^--domain auto: " <<<"$last")
"$tessera" plan --workers 1 --model cnn --samples 512 --ranks 2 --grid 2x1 --sync batch \
  --domain auto --json >"$tmp/auto-plan.json" 2>"$tmp/auto-plan.err"
if /usr/bin/python3 - "$tmp/auto.jsonl" "$tmp/auto-plan.json" "$banner" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: --domain auto against tessera plan"; cat "$tmp/auto-plan.err"; fi
import json, re, sys
run = json.loads(open(sys.argv[1]).readline())["config"]["domain"]
plan = json.load(open(sys.argv[2]))["plans"][0]
assert plan["grid"] == "2x1" and plan["sync"] == "batch", plan
k, cut = plan["domain_layers"], plan["domain"]
want = "none" if cut == "none" else "rows" if k == 4 else "rows:%d" % k
assert run == want, (run, want, plan)
words = "none" if want == "none" else "all (rows)" if want == "rows" else "the first %d (%s)" % (k, want)
assert sys.argv[3].startswith("--domain auto: %s of 4 " % words), (sys.argv[3], want)
PY
# --shares under a grid: one share per grid column (its ranks take its batch and shard
# together); auto measures each column at its slowest rank's pace (every rank of a column takes
# the same number of steps: on each rank's own clock a column's ranks parted and hung).
expect 2 "--shares: 3 values for the 2 grid columns of --grid 2x2; give one share per grid column" \
  60 -- "${mpi[@]}" -np 4 "$tessera" train "${common[@]}" --epochs 1 --grid 2x2 --shares 1,2,3 \
  --data /nonexistent
expect 0 "column 0 0\.750 \(batch 96\), column 1 0\.250 \(batch 32\)" 120 -- \
  "${mpi[@]}" -np 4 "$tessera" train "${common[@]}" --epochs 1 --grid 2x2 --sync batch \
  --shares 3,1
expect 0 "shares \(auto, measured, re-measured every epoch\): column 0 0\.[0-9]+, column 1" 120 -- \
  "${mpi[@]}" -np 4 "$tessera" train "${common[@]}" --epochs 2 --grid 2x2 --sync epoch \
  --shares auto --weighting steps --log "$tmp/gridshares.jsonl"
if /usr/bin/python3 - "$tmp/gridshares.jsonl" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: --grid 2x2 --shares auto's log"; cat "$tmp/gridshares.jsonl"; fi
import json, sys
epochs = [json.loads(l) for l in open(sys.argv[1]) if '"event"' not in l]
assert len(epochs) == 2, epochs
for o in epochs:
    w = o["work"]
    assert len(w) == 4, w
    for c in (0, 2):  # a column's two ranks: its share, samples and steps
        assert [w[c][k] for k in ("share", "samples", "steps")] == \
            [w[c + 1][k] for k in ("share", "samples", "steps")], w
    assert abs(w[0]["share"] + w[2]["share"] - 1) < 1e-6 and w[0]["samples"] + w[2]["samples"] == 1280, w
PY
# --grid 1x2: two replicas of one rank each, the rate scaled by 2 under batch.
expect 0 "lr 0.01 x 2 ranks" 120 -- "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" --epochs 1 \
  --grid 1x2 --sync batch --log "$tmp/grid12.jsonl"
check_log "--grid 1x2's rate" "$tmp/grid12.jsonl" 1 ranks=2 lr=0.02

echo "$passed passed, $failed failed"
((failed == 0))
