#!/usr/bin/env bash
# tessera plan as a user meets it: bad options exit 2 naming the option, a
# described cluster plans for 1024 nodes, and the planner's count of the bytes
# and messages a rank sends for averaging matches what real runs under mpirun
# log (bytes_sent, messages_sent of every rank, per epoch) within 5%, for
# batch, every=K and epoch averaging, 2 and 3 ranks, the MLP and the CNN; and
# under --grid, rank 0's transfers inside its grid column and across columns
# (the log's per_rank) against the planner's for row 0, --domain rows included (the CNN,
# ResNet-20, a concat of bands).
# Usage: test_plan_cli.sh PATH/TO/tessera
set -u
tessera=$1
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Every run below takes at most 1,536 training and 100 test samples: those alone (lib.sh).
data=$(prefix_data "$data" "$tmp/data" 1536 100)

expect 2 "--ranks 0" -- "$tessera" plan --ranks 0
expect 2 "--grid 3" -- "$tessera" plan --ranks 4 --grid 3
expect 2 "--grid 2x3: Pr x Pc is 6, but --ranks is 4" -- "$tessera" plan --ranks 4 --grid 2x3
expect 2 "--sync often: expected batch, every=K, epoch or epoch=n" -- "$tessera" plan --sync often
# --sync goes through the policy registry's parse; what the planner does not model is refused
# by name, a bad count as tessera train says it.
expect 2 "--sync every=0: the counts must be a whole number >= 1" -- "$tessera" plan --sync every=0
for policy in hier:2,4 post-local:1,4 async-epoch none; do
  expect 2 "--sync $policy: the planner does not model ${policy%%:*}; it models batch, every=K, \
epoch or epoch=n" -- "$tessera" plan --sync "$policy"
done
expect 0 "\| 1x4 \| every=3 \| flat " -- "$tessera" plan --ranks 4 --grid 1x4 --sync every=3 --workers 1 \
  --cluster "$src/benchmarks/clusters/eth10.ini"
expect 2 "--optimizer" -- "$tessera" plan --optimizer lbfgs
expect 2 "--allreduce ring: expected auto, flat or two-level" -- "$tessera" plan --allreduce ring
expect 0 "\| 1x8 \| batch \| two-level, 2 nodes of 4 " -- "$tessera" plan --ranks 8 --grid 1x8 \
  --sync batch --node-size 4 --cluster "$src/benchmarks/clusters/eth10.ini"
expect 2 "plan: unknown option '--frobnicate'" -- "$tessera" plan --frobnicate
expect 2 "--model 'mlpx'" -- "$tessera" plan --model mlpx
expect 1 "nosuch.ini: cannot open" -- "$tessera" plan --cluster "$tmp/nosuch.ini"
expect 0 "\| 1x8192 \| batch" -- "$tessera" plan --cluster "$src/benchmarks/clusters/eth10.ini" \
  --ranks 8192 --model mlp:4096,4096 --batch 128
expect 0 "\*\*best\*\*" -- "$tessera" plan --cluster "$src/benchmarks/clusters/ib100.ini" \
  --ranks 64 --model cnn

# measured RANKS SYNC MODEL SAMPLES [OPTION...]: a real run's logged bytes and messages against
# the plan, both given the options (--allreduce, --node-size, --bucket-mb, --tile).
mpi=(mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT "${mpi_env[@]}")
measured() {
  local ranks=$1 sync=$2 model=$3 samples=$4 log="$tmp/run.jsonl"
  shift 4
  rm -f "$log"
  if ! timeout 120 "${mpi[@]}" -np "$ranks" "$tessera" train --workers 1 --quiet --epochs 2 \
    --model "$model" --sync "$sync" --batch 32 --train-limit "$samples" --test-limit 100 \
    --data "$data" --log "$log" "$@" >"$tmp/out" 2>&1; then
    failed=$((failed + 1))
    echo "FAIL: training $ranks ranks --sync $sync --model $model $*:"
    head -5 "$tmp/out"
    return
  fi
  if ! "$tessera" plan --workers 1 --ranks "$ranks" --grid "1x$ranks" --sync "$sync" \
    --model "$model" --batch 32 --samples "$samples" --json "$@" >"$tmp/plan.json" 2>"$tmp/out"; then
    failed=$((failed + 1))
    echo "FAIL: tessera plan for $ranks ranks --sync $sync:"
    head -5 "$tmp/out"
    return
  fi
  if out=$(/usr/bin/python3 - "$log" "$tmp/plan.json" "$ranks" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
plan = json.load(open(sys.argv[2]))["plans"][0]
ranks = int(sys.argv[3])
epochs = [l for l in lines if "epoch" in l]
per_rank = next(l for l in lines if l.get("event") == "ranks")["ranks"]
bad = []
# Rank 0 per epoch (the epoch lines), and the busiest rank over the run.
for l in epochs:
    for key, want in (("bytes_sent", plan["sync_bytes_epoch"]), ("messages_sent", plan["sync_messages_epoch"])):
        if abs(l[key] - want) > 0.05 * want:
            bad.append("epoch %d %s: logged %d, planned %.0f" % (l["epoch"], key, l[key], want))
busiest = max(r["bytes_sent"] for r in per_rank) / len(epochs)
want = plan["bytes_epoch"]
if abs(busiest - want) > 0.05 * want:
    bad.append("busiest rank: %.0f bytes per epoch, planned %.0f" % (busiest, want))
print("; ".join(bad) if bad else "rank 0 %d bytes per epoch, planned %.0f" % (epochs[0]["bytes_sent"], plan["sync_bytes_epoch"]))
sys.exit(1 if bad else 0)
PY
  ); then
    passed=$((passed + 1))
    echo "ok: $ranks ranks --sync $sync --model $model $*: $out"
  else
    failed=$((failed + 1))
    echo "FAIL: $ranks ranks --sync $sync --model $model $*: $out"
  fi
}

# grid RANKS GRID SYNC MODEL SAMPLES [OPTION...]: a grid run's rank 0 (row 0, the one the planner costs),
# per epoch, inside its column and across columns, against the plan. No test set: evaluation's
# forward transfers are not part of a training epoch's plan.
grid() {
  local ranks=$1 g=$2 sync=$3 model=$4 samples=$5 log="$tmp/grid.jsonl"
  shift 5
  rm -f "$log"
  if ! timeout 120 "${mpi[@]}" -np "$ranks" "$tessera" train --workers 1 --quiet --epochs 2 \
    --grid "$g" --model "$model" --sync "$sync" --batch 32 --train-limit "$samples" \
    --test-limit 0 --data "$data" --log "$log" "$@" >"$tmp/out" 2>&1 ||
    ! "$tessera" plan --workers 1 --ranks "$ranks" --grid "$g" --sync "$sync" --model "$model" \
      --batch 32 --samples "$samples" --json "$@" >"$tmp/plan.json" 2>>"$tmp/out"; then
    failed=$((failed + 1))
    echo "FAIL: --grid $g --sync $sync --model $model $*:"
    head -5 "$tmp/out"
    return
  fi
  if out=$(/usr/bin/python3 - "$log" "$tmp/plan.json" <<'PY'
import json, sys
epochs = [json.loads(l) for l in open(sys.argv[1])]
epochs = [l for l in epochs if "epoch" in l]
plan = json.load(open(sys.argv[2]))["plans"][0]
inside = plan["grid_bytes_step"] * plan["steps_per_epoch"]
bad, seen = [], []
for l in epochs:
    r0 = l["per_rank"][0]
    for key, want in (("grid_bytes_sent", inside), ("sync_bytes_sent", plan["sync_bytes_epoch"]),
                      ("sync_messages_sent", plan["sync_messages_epoch"])):
        seen.append("%s %d (planned %.0f)" % (key, r0[key], want))
        if abs(r0[key] - want) > 0.05 * want:
            bad.append("epoch %d rank 0 %s: logged %d, planned %.0f" % (l["epoch"], key, r0[key], want))
if inside <= 0:
    bad.append("the plan moves nothing inside the column")
print("; ".join(bad) if bad else ", ".join(seen[:3]))
sys.exit(1 if bad else 0)
PY
  ); then
    passed=$((passed + 1))
    echo "ok: --grid $g --sync $sync --model $model $*: $out"
  else
    failed=$((failed + 1))
    echo "FAIL: --grid $g --sync $sync --model $model $*: $out"
  fi
}

measured 2 batch mlp:64 1280
measured 2 every=4 mlp:64 1280
measured 2 epoch mlp:64 1280
measured 3 batch mlp:128,64 1536
measured 2 batch cnn 256
measured 4 batch mlp:128,64 1536 --node-size 2 --allreduce two-level
measured 4 every=4 mlp:128,64 1536 --node-size 2 --allreduce two-level
measured 4 batch mlp:128,64 1536 --tile 16 --bucket-mb 0.01
measured 3 every=4 mlp:128,64 1536 --tile 16 --bucket-mb 25
measured 4 batch mlp:128,64 1536 --tile 16 --node-size 2 --allreduce two-level --bucket-mb 0.01
grid 2 2x1 batch mlp:128,64 1280
grid 4 2x2 batch mlp:128,64 1280
# each grid row on its own 2 nodes of 2 (two whole columns a node)
grid 8 2x4 batch mlp:128,64 1280 --node-size 4 --allreduce two-level
grid 8 2x4 every=2 mlp:128,64 1280 --node-size 4 --allreduce two-level
grid 8 2x4 batch mlp:128,64 1280 --allreduce flat
grid 6 2x3 batch mlp:128,64 1280 --allreduce flat
# each row's chunks in its own buckets, flat and over its nodes
grid 8 2x4 batch mlp:128,64 1280 --allreduce flat --bucket-mb 0.01
grid 8 2x4 batch mlp:128,64 1280 --node-size 4 --allreduce two-level --bucket-mb 25
grid 2 2x1 batch cnn 256
grid 2 2x1 batch cnn 256 --domain rows
grid 2 2x1 batch cnn 256 --domain rows:2
grid 4 4x1 batch resnet20 128 --domain rows
# a concat of bands (an inception-like block): its bands stay where they are, nothing moves
cat >"$tmp/inception.ini" <<'INI'
[c1]
type = conv
filters = 8
kernel = 3
padding = 1
activation = relu
[a]
type = conv
filters = 4
kernel = 1
input = c1.relu
[b]
type = conv
filters = 6
kernel = 3
padding = 1
input = c1.relu
[cat]
type = concat
inputs = a, b
[c2]
type = conv
filters = 8
kernel = 3
padding = 1
stride = 2
[out]
type = dense
units = 10
INI
grid 2 2x1 batch "$tmp/inception.ini" 256 --domain rows

echo "plan-cli: $passed passed, $failed failed"
[[ $failed == 0 ]]
