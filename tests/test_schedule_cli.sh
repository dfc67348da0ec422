#!/usr/bin/env bash
# --val-split, --warmup, --lr-schedule step/plateau and --early-stop as a user meets them: bad
# values exit 2 naming the option and the fix; a dataset without a test set trains and
# validates on held-out samples, and the epoch line and the log report validation and test
# apart; early stopping ends a run whose validation loss rises (random labels), with exit 0
# and the reason in the line and the log; plateau's reductions show in the log; a run of 4
# epochs and one of 2 resumed to 4 end bit for bit alike with plateau's and early stopping's
# state (tensors, epoch lines); a resume under another --val-split is refused naming both.
# Usage: test_schedule_cli.sh PATH/TO/tessera [mpi] (mpi: the same on 2 ranks, and the 2-rank
# run holds out the samples the 1-rank run does).
set -u
tessera=$1
mode=${2:-all}
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[[ -n ${TSR_KEEP:-} ]] && trap 'echo "kept $tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mpi=(mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT "${mpi_env[@]}")
run=("$tessera")
[[ $mode == mpi ]] && run=("${mpi[@]}" -np 2 "$tessera")

# 300 samples of 16 random features and random labels, train.csv alone: a net memorizes the
# 240 it trains on and its loss on the 60 held out rises.
mkdir "$tmp/rand"
/usr/bin/python3 -c "
import random
r = random.Random(5)
with open('$tmp/rand/train.csv', 'w') as f:
    for i in range(300):
        f.write(','.join([str(r.randrange(3))] + ['%.3f' % r.uniform(-1, 1) for _ in range(16)]) + '\n')
"
rand=(--data "$tmp/rand" --model mlp:64 --batch 16 --lr 0.1 --workers 1 --val-split 0.2
  --lr-scaling none)

if [[ $mode == all ]]; then
  expect 2 "--val-split 0: expected a fraction in \(0, 1\)" -- "$tessera" train --val-split 0
  expect 2 "--val-split 1: expected a fraction in \(0, 1\)" -- "$tessera" train --val-split 1
  expect 2 "--val-split 0.1x: expected" -- "$tessera" train --val-split 0.1x
  expect 2 "--lr-schedule step:3,2:0.1: the epochs must be strictly increasing" -- \
    "$tessera" train --lr-schedule step:3,2:0.1
  expect 2 "--lr-schedule step:2:0: FACTOR must be a number > 0" -- \
    "$tessera" train --lr-schedule step:2:0
  expect 2 "--lr-schedule step:2:-0.5: FACTOR must be a number > 0" -- \
    "$tessera" train --lr-schedule step:2:-0.5
  expect 2 "--lr-schedule step:2,x:0.1: the epochs must be integers" -- \
    "$tessera" train --lr-schedule step:2,x:0.1
  expect 2 "--lr-schedule plateau:3:1: FACTOR must be a number in \(0, 1\)" -- \
    "$tessera" train --lr-schedule plateau:3:1
  expect 2 "--lr-schedule plateau follows the validation loss: add --val-split F" -- \
    "$tessera" train --lr-schedule plateau
  expect 2 "--early-stop follows the validation loss: add --val-split F" -- \
    "$tessera" train --early-stop 3
  expect 2 "--warmup 0: expected an integer from 1" -- "$tessera" train --warmup 0
  expect 2 "--early-stop 0: expected an integer from 1" -- "$tessera" train --early-stop 0
  # A split that leaves a side empty: known once the data is (exit 1 as the data's problems).
  expect 1 "--val-split 0.001 of 300 training samples holds out 0" -- \
    "$tessera" train "${rand[@]}" --val-split 0.001 --epochs 1
  for o in val-split warmup early-stop; do
    check "--help lists --$o" grep -q -- "--$o" <("$tessera" train --help)
  done
fi

# Held out, no test set: the line says val and no test, the log val_* and test_* null.
"${run[@]}" train "${rand[@]}" --epochs 3 --lr-schedule constant --log "$tmp/v.jsonl" \
  --checkpoint "$tmp/v.st" >"$tmp/v.out" 2>&1
check "a dataset without a test set trains on 240 and validates on 60" \
  grep -qE "240 train / 60 validation / 0 test samples" "$tmp/v.out"
check "the epoch line reports validation" grep -qE "^epoch 3/3 .* val [0-9.]+% \(loss [0-9.]+\)" \
  "$tmp/v.out"
check "and no test" bash -c "! grep -qE '^epoch.* test ' '$tmp/v.out'"
check_log "the log's val_loss and val_accuracy" "$tmp/v.jsonl" 3 test_loss=null val_loss\>0 \
  val_accuracy\>0

# tessera eval --validation draws the same samples again: the last epoch's numbers.
val=$(grep -oE "^epoch 3/3 .* val [0-9.]+% \(loss [0-9.]+\)" "$tmp/v.out" | grep -oE "val .*")
got=$("$tessera" eval --checkpoint "$tmp/v.st" --data "$tmp/rand" --validation --workers 1 2>&1 |
  head -1 | sed -E 's/.*: 60 validation samples, accuracy ([0-9.]+%), loss ([0-9.]+)$/val \1 (loss \2)/')
check "eval --validation gives the last epoch's validation numbers ($val, $got)" \
  test -n "$val" -a "$val" = "$got"
expect 1 "--validation: the training set in .* is not the one .*v.st was trained on" -- \
  "$tessera" eval --checkpoint "$tmp/v.st" --data "$data" --validation

# A test set beside it: both, apart.
"${run[@]}" train --data "$data" --train-limit 600 --test-limit 200 --model mlp:32 --batch 32 \
  --workers 1 --epochs 2 --val-split 0.1 --warmup 10 --lr-schedule step:1:0.5 --lr-scaling none \
  --log "$tmp/vt.jsonl" --checkpoint "$tmp/vt.st" >"$tmp/vt.out" 2>&1
check "validation and test apart on the line" \
  grep -qE "^epoch 2/2 .* val [0-9.]+% \(loss [0-9.]+\)  test [0-9.]+% \(loss [0-9.]+\)" "$tmp/vt.out"
check_log "validation and test apart in the log" "$tmp/vt.jsonl" 2 val_loss\>0 test_loss\>0 \
  test_accuracy\>0.3 lr_end=0.005
check "the run line says the schedule" grep -q '"lr-schedule":"step:1:0.5"' "$tmp/vt.jsonl"

# Warm-up of 4 steps on a constant 0.1: the step lines' rates 0.025, 0.05, 0.075, then 0.1.
"${run[@]}" train "${rand[@]}" --epochs 1 --lr-schedule constant --warmup 4 --log "$tmp/w.jsonl" \
  --log-every 1 >"$tmp/w.out" 2>&1
check "the warm-up's rates per step" /usr/bin/python3 -c "
import json
o = [x for x in map(json.loads, open('$tmp/w.jsonl')) if x.get('event') == 'step']
got = [x['lr'] for x in o[:6]]
assert [round(v, 7) for v in got] == [0.025, 0.05, 0.075, 0.1, 0.1, 0.1], got
"

"$tessera" train --data "$tmp/rand" --model mlp:64 --batch 16 --workers 1 --epochs 1 \
  --checkpoint "$tmp/none.st" >/dev/null 2>&1
expect 1 "--validation: .*none.st was written by a run without --val-split" -- \
  "$tessera" eval --checkpoint "$tmp/none.st" --data "$tmp/rand" --validation

# Early stopping: the validation loss rises from epoch 2, so --early-stop 2 ends the run after
# epoch 3 of 30, exit 0, saying why; plateau:0:0.5 halves the rate at each bad epoch.
out=$("${run[@]}" train "${rand[@]}" --epochs 30 --lr-schedule plateau:0:0.5 --early-stop 2 \
  --log "$tmp/e.jsonl" 2>&1)
rc=$?
check "early stopping exits 0 (exit $rc)" test "$rc" = 0
check "and says why after the epoch line" grep -qE "^stopped after epoch [0-9]+ of 30: early stopping: no validation loss below" <<<"$out"
check "plateau says its reductions" grep -qE "^plateau: the validation loss stopped falling; from epoch [0-9]+ the rate is 0.5 x" <<<"$out"
check "the log's last line says why and the factor" /usr/bin/python3 -c "
import json
o = [x for x in map(json.loads, open('$tmp/e.jsonl')) if 'event' not in x]
assert 2 < len(o) < 30, len(o)
assert o[-1]['stopped'].startswith('early stopping'), o[-1]
assert all('stopped' not in x for x in o[:-1])
assert o[-1]['lr_factor'] < 1, o[-1]
assert o[-1]['lr_end'] < o[0]['lr_end'], (o[0]['lr_end'], o[-1]['lr_end'])
"

# Resumed bit for bit: plateau's best and bad epochs and early stopping's count come back from
# the checkpoint; losing any changes the rate (plateau) or the epoch the run stops at.
epoch_lines() { sed -En '/^epoch +3\/4/,$p' "$1" | sed -E 's/  [0-9.]+ s  .*//'; }
resume_case() {
  local name=$1 dir=$tmp/$2
  shift 2
  mkdir -p "$dir"
  local args=("${rand[@]}" --lr-schedule plateau:0:0.5 --momentum 0.9 "$@")
  [[ $mode == mpi ]] && args+=(--deterministic --lr-scaling none)
  "${run[@]}" train "${args[@]}" --epochs 4 --checkpoint "$dir/full.st" >"$dir/full.out" 2>&1 &&
    "${run[@]}" train "${args[@]}" --epochs 2 --checkpoint "$dir/part.st" >"$dir/part.out" 2>&1 &&
    "${run[@]}" train "${args[@]}" --epochs 4 --resume "$dir/part.st" --checkpoint "$dir/part.st" \
      >"$dir/resumed.out" 2>&1
  local rc=$?
  if [[ $rc != 0 ]]; then
    failed=$((failed + 1))
    echo "FAIL: $name: exit $rc"
    tail -3 "$dir"/*.out
  elif ! out=$(same_tensors "$dir/full.st" "$dir/part.st" schedule_state val_split val_data \
    epoch 2>&1); then
    failed=$((failed + 1))
    echo "FAIL: $name: the resumed run's checkpoint is not the uninterrupted run's: ${out##*$'\n'}"
  elif [[ "$(epoch_lines "$dir/full.out")" != "$(epoch_lines "$dir/resumed.out")" ]] ||
    [[ -z "$(epoch_lines "$dir/full.out")" ]]; then
    failed=$((failed + 1))
    echo "FAIL: $name: the epochs after the resume differ:"
    diff <(epoch_lines "$dir/full.out") <(epoch_lines "$dir/resumed.out")
  else
    passed=$((passed + 1))
  fi
}
resume_case "resumed bitwise with plateau's state" plateau --early-stop 3
# On 2 ranks the validation loss falls once more before it rises: a patience of 1 stops it.
patience=2
[[ $mode == mpi ]] && patience=1
resume_case "resumed bitwise with early stopping's count (stops before epoch 4)" early \
  --early-stop $patience
check "the uninterrupted run stopped before epoch 4" grep -qE "^stopped after epoch [23] of 4" \
  "$tmp/early/full.out"
expect 2 "--resume .*part.st: --val-split 0.1, but its run has 0.2; leave --val-split out" -- \
  "${run[@]}" train --data "$tmp/rand" --model mlp:64 --batch 16 --workers 1 --epochs 4 \
  --val-split 0.1 --resume "$tmp/plateau/part.st"

# The ranks hold out what one process does: the checkpoints' fingerprints of the held-out
# samples agree.
if [[ $mode == mpi ]]; then
  "$tessera" train "${rand[@]}" --epochs 1 --checkpoint "$tmp/one.st" >/dev/null 2>&1
  check "2 ranks hold out the samples 1 rank does" /usr/bin/python3 -c "
import json, struct
def meta(p):
    raw = open(p, 'rb').read()
    return json.loads(raw[8:8 + struct.unpack('<Q', raw[:8])[0]])['__metadata__']
a, b = meta('$tmp/one.st'), meta('$tmp/early/full.st')
assert a['val_data'] == b['val_data'] and a['val_samples'] == '60', (a['val_data'], b['val_data'])
"
fi

echo "$passed passed, $failed failed"
((failed == 0))
