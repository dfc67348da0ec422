#!/usr/bin/env bash
# Batch normalization from the command: a model file with per-channel and per-feature batchnorm
# trains (a short last batch each epoch); its checkpoint holds the running statistics under
# PyTorch's names (running_mean, running_var, num_batches_tracked, counted per step) and
# resumes; --bn-recompute leaves training as it was, bit for bit, and recomputes the statistics
# (one process, and 2 ranks under --sync-bn, against float64); tessera eval reads it; --stats
# names every conv_fwd task's implementation; a per-feature batchnorm at --batch 1, --sync-bn on
# one process and --sync-bn with a model without batchnorm are refused before training (status
# 2), --bn-recompute with one when training starts (status 1); 2 ranks train with --sync-bn,
# with --shares 3,1, and under --sync epoch with an empty step on one rank, and 4 as a 2x2 grid
# (one grid column refused). (Resuming bit for bit: test_checkpoint.c.)
# Usage: test_batchnorm.sh PATH/TO/tessera
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
[[ -d $data ]] || { echo "SKIP: no dataset at $data"; exit 77; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/bn.ini" <<'INI'
[c]
type = conv
filters = 4
kernel = 3
stride = 2
[cbn]
type = batchnorm
activation = relu
[f]
type = flatten
[h]
type = dense
units = 16
[hbn]
type = batchnorm
activation = relu
momentum = 0.2
[out]
type = dense
units = 10
INI
# 300 samples at batch 64: 5 steps an epoch, the last of 44 samples.
small=(--model "$tmp/bn.ini" --train-limit 300 --test-limit 200 --data "$data" --quiet)

"$tessera" train "${small[@]}" --epochs 4 --checkpoint "$tmp/whole.st" >"$tmp/out" 2>&1
check "a batchnorm model trains 4 epochs" test -s "$tmp/whole.st"
"$tessera" inspect "$tmp/whole.st" >"$tmp/inspect" 2>&1
check "the checkpoint holds running_mean" grep -q "layers.1.batchnorm.running_mean .*\[4\]" "$tmp/inspect"
check "and running_var" grep -q "layers.5.batchnorm.running_var .*\[16\]" "$tmp/inspect"
check "and num_batches_tracked" grep -q "layers.5.batchnorm.num_batches_tracked .*\[\]" "$tmp/inspect"
"$tessera" train "${small[@]}" --epochs 2 --checkpoint "$tmp/half.st" >"$tmp/out" 2>&1
"$tessera" train "${small[@]}" --epochs 4 --resume "$tmp/half.st" --checkpoint "$tmp/resumed.st" \
  >"$tmp/out" 2>&1
check "resumed after 2 of 4 epochs" test -s "$tmp/resumed.st"
check "the running statistics moved and were counted: 5 steps an epoch" /usr/bin/python3 -c "
import json, struct
def tensors(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop('__metadata__', None)
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items()}
for path, steps in (('$tmp/whole.st', 20), ('$tmp/half.st', 10), ('$tmp/resumed.st', 20)):
    t = tensors(path)
    for layer, c in ((1, 4), (5, 16)):
        got = struct.unpack('<f', t['layers.%d.batchnorm.num_batches_tracked' % layer])[0]
        assert got == steps, (path, layer, got)
        var = struct.unpack('<%df' % c, t['layers.%d.batchnorm.running_var' % layer])
        assert all(v > 0 for v in var) and any(abs(v - 1) > 1e-3 for v in var), var"
# --bn-recompute: training is the same bit for bit (half.st's 2 epochs again, with 3 passes at
# each epoch end), only the statistics differ, counted; on one batch an epoch they are that
# batch's under the final weights (tests/check_bn_recompute.py, float64), as without it they are
# not (the check can fail); a model without batchnorm is refused.
"$tessera" train "${small[@]}" --epochs 2 --bn-recompute 3 --checkpoint "$tmp/rec.st" \
  >"$tmp/out" 2>&1
check "--bn-recompute: the same weights and optimizer state, other statistics" /usr/bin/python3 -c "
import sys
sys.path.insert(0, '$here')
from st_floats import tensors
a, b = tensors('$tmp/half.st'), tensors('$tmp/rec.st')
assert a.keys() == b.keys()
stats = [k for k in a if 'running_' in k]
assert len(stats) == 4 and all(a[k].tobytes() != b[k].tobytes() for k in stats), stats
trained = [k for k in a if 'running_' not in k and 'num_batches' not in k]
assert all(a[k].tobytes() == b[k].tobytes() for k in trained)
assert b['layers.1.batchnorm.num_batches_tracked'][0] == 10 + 2 * 3"
one=(--model "$tmp/bn.ini" --train-limit 64 --test-limit 200 --data "$data" --quiet --epochs 2)
"$tessera" train "${one[@]}" --bn-recompute 1 --checkpoint "$tmp/rec1.st" >"$tmp/out" 2>&1
check "--bn-recompute 1 on one batch: its statistics under the final weights" \
  "$here/check_bn_recompute.py" "$tmp/rec1.st" "$data" 64
"$tessera" train "${one[@]}" --checkpoint "$tmp/norec1.st" >"$tmp/out" 2>&1
check "without it the running statistics are not those (the check can fail)" \
  bash -c '! "$1" "$2" "$3" 64 >/dev/null 2>&1' _ "$here/check_bn_recompute.py" \
  "$tmp/norec1.st" "$data"
expect 1 "bn-recompute: the model has no batchnorm layer" -- \
  "$tessera" train --train-limit 300 --data "$data" --quiet --epochs 1 --bn-recompute 2
"$tessera" eval --checkpoint "$tmp/whole.st" --data "$data" --test-limit 500 --json >"$tmp/eval.json" 2>&1
check "eval reads it and normalizes with the running statistics" /usr/bin/python3 -c "
import json
e = json.load(open('$tmp/eval.json'))
assert e['samples'] == 500 and 0.3 < e['accuracy'] <= 1, e"
# --stats names the implementation of every convolution task, those that gather the statistics of
# the batchnorm after them (conv c, cbn) included: no conv_fwd counted without its implementation.
"$tessera" train "${small[@]}" --epochs 1 --stats >"$tmp/stats" 2>&1
check "--stats names the implementation of every conv_fwd task" bash -c \
  'grep -q "conv_fwd:[a-z]* [0-9]" "$1" && ! grep -q "conv_fwd [0-9]" "$1"' _ "$tmp/stats"
expect 2 "batchnorm over 16 features\): a batch of 1 sample" -- \
  "$tessera" train "${small[@]}" --epochs 1 --batch 1
expect 2 "sync-bn reduces batchnorm statistics across MPI ranks, and this run has one" -- \
  "$tessera" train "${small[@]}" --epochs 1 --sync-bn
if command -v mpirun >/dev/null; then
  expect 2 "sync-bn: model 784-512-relu-512-relu-10 has no batchnorm layer" -- \
    mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT -np 2 \
    "$tessera" train --train-limit 300 --data "$data" --quiet --epochs 1 --sync-bn
  mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT -np 2 \
    "$tessera" train "${small[@]}" --epochs 1 --workers 1 --sync-bn --log "$tmp/sbn.jsonl" \
    >"$tmp/out" 2>&1
  check "2 ranks train with --sync-bn" test -s "$tmp/sbn.jsonl"
  # Under a grid the statistics are combined along the grid's rows (test_mpi_syncbn syncbngrid checks
  # the numbers): 4 ranks as 2x2 with the images in bands learn; one column is refused.
  cat >"$tmp/grid.ini" <<'INI'
[c1]
type = conv
filters = 8
kernel = 3
padding = 1
[bn1]
type = batchnorm
activation = relu
[p1]
type = maxpool
kernel = 2
[c2]
type = conv
filters = 8
kernel = 3
padding = 1
[bn2]
type = batchnorm
activation = relu
[out]
type = dense
units = 10
INI
  grid=(--model "$tmp/grid.ini" --train-limit 600 --test-limit 200 --data "$data" --epochs 1
    --workers 1 --sync-bn)
  expect 2 "sync-bn --grid 2x1: one grid column, whose batchnorm statistics are already" -- \
    mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT -np 2 \
    "$tessera" train "${grid[@]}" --grid 2x1
  mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT -np 4 \
    "$tessera" train "${grid[@]}" --grid 2x2 --domain rows --log "$tmp/gsbn.jsonl" >"$tmp/out" 2>&1
  check_log "4 ranks as 2x2 --domain rows learn with --sync-bn" "$tmp/gsbn.jsonl" 1 ranks=4 \
    "test_accuracy>0.25"
  # --shares with --sync-bn: batches of 75 and 25 (test_mpi_syncbn syncbn checks the numbers).
  mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT -np 2 \
    "$tessera" train "${grid[@]}" --batch 50 --shares 3,1 --log "$tmp/ssbn.jsonl" >"$tmp/out" 2>&1
  check_log "2 ranks with --shares 3,1 learn with --sync-bn" "$tmp/ssbn.jsonl" 1 ranks=2 \
    "test_accuracy>0.25"
  # Weight averaging with --sync-bn: 601 samples are shards of 300 and 301 at batch 100, so rank
  # 0 has no sample in the fourth step; it takes the step without an update, its statistics
  # (none) exchanged with rank 1's (skipping it left rank 1 waiting for ever).
  timeout 120 mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT -np 2 \
    "$tessera" train "${grid[@]}" --train-limit 601 --batch 100 --sync epoch \
    --log "$tmp/esbn.jsonl" >"$tmp/out" 2>&1
  check_log "--sync epoch --sync-bn with an empty step ends" "$tmp/esbn.jsonl" 1 ranks=2 \
    "test_accuracy>0.25"
  # --bn-recompute under --sync epoch --sync-bn: after the epoch's average, one batch a rank (64
  # each of 128 samples) pooled: both ranks' batches' statistics, the whole set's.
  mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT -np 2 \
    "$tessera" train "${one[@]}" --train-limit 128 --workers 1 --sync epoch --sync-bn \
    --bn-recompute 1 --checkpoint "$tmp/rec2.st" >"$tmp/out" 2>&1
  check "2 ranks, --sync epoch --sync-bn --bn-recompute 1: both ranks' batches' statistics" \
    "$here/check_bn_recompute.py" "$tmp/rec2.st" "$data" 128
fi
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
