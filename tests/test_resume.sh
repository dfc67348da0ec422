#!/usr/bin/env bash
# Runs that continue as users expect (issue 40; docs/checkpoints.md, "Writing and resuming"):
# 2 epochs resumed with --epochs 4 keep the checkpoint's cosine horizon and end bit for bit where
# the uninterrupted --epochs 4 --schedule-epochs 2 run does (--deterministic); --resume without
# --model takes the checkpoint's model and settings; a given option that differs is refused in
# one line naming the option, both values; --schedule-epochs on resume is a note, refused under
# --deterministic; a checkpoint of before the settings were recorded resumes with a note; the log
# grows (both parts' epochs, the resumed run line saying where it went on from); --resume auto
# twice in a row starts, then continues; model files' errors name the line, an unknown shorthand
# gets the nearest name, a last layer of the wrong width names the file, the layer and the fix.
# Usage: test_resume.sh PATH/TO/tessera
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
[[ -d $data ]] || { echo "SKIP: no dataset at $data"; exit 77; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 600 samples at batch 50: 12 steps an epoch, under a second each.
small=(--data "$data" --train-limit 600 --test-limit 200 --workers 2 --deterministic)

# epoch_lines OUT: epochs 3 and 4's lines without the times.
epoch_lines() { grep -E "^epoch +[34]/4" "$1" | sed -E 's/\)  .*/)/'; }

# The horizon rule, bitwise: 2 epochs, then --resume with --epochs 4 and no --model (the
# checkpoint's mlp:32, batch 50, lr 0.05), against one uninterrupted run of the same horizon.
"$tessera" train "${small[@]}" --model mlp:32 --batch 50 --lr 0.05 --epochs 2 \
  --checkpoint "$tmp/a.st" --log "$tmp/a.jsonl" >"$tmp/a.out" 2>&1
cp "$tmp/a.st" "$tmp/a0.st"
"$tessera" train "${small[@]}" --epochs 4 --resume "$tmp/a.st" --checkpoint "$tmp/a.st" \
  --log "$tmp/a.jsonl" >"$tmp/r.out" 2>&1
check_show=$tmp/r.out
check "--resume without --model takes the checkpoint's model" grep -q "^tessera: model 784-32-relu-10" "$tmp/r.out"
check "and says the cosine keeps its horizon of 2 epochs" \
  grep -q "note: --resume .*horizon of 2 epochs; epochs 3 to 4 go past it" "$tmp/r.out"
"$tessera" train "${small[@]}" --model mlp:32 --batch 50 --lr 0.05 --epochs 4 --schedule-epochs 2 \
  --checkpoint "$tmp/u.st" >"$tmp/u.out" 2>&1
check_show=$tmp/u.out
check "--epochs 4 --schedule-epochs 2 trains" test -s "$tmp/u.st"
check_show=
check "2 epochs resumed to 4 end bit for bit where --epochs 4 --schedule-epochs 2 does" \
  same_tensors "$tmp/a.st" "$tmp/u.st"
check "and print the same epochs 3 and 4" \
  test -n "$(epoch_lines "$tmp/u.out")" -a "$(epoch_lines "$tmp/u.out")" == "$(epoch_lines "$tmp/r.out")"

# The log grew: both parts' epochs, the second run line saying where it went on from.
check "the resumed log holds every epoch of both parts" /usr/bin/python3 -c "
import json
lines = [json.loads(l) for l in open('$tmp/a.jsonl')]
runs = [o for o in lines if o.get('event') == 'run']
epochs = [o['epoch'] for o in lines if 'event' not in o]
assert epochs == [1, 2, 3, 4], epochs
assert len(runs) == 2 and 'resumed' not in runs[0], runs
r = runs[1]['resumed']
assert r['checkpoint'] == '$tmp/a.st' and r['epoch'] == 2 and r['step_in_epoch'] == 0, r
assert runs[1]['config']['schedule-epochs'] == 2 and runs[1]['config']['batch'] == 50, runs[1]['config']
assert lines.index(runs[1]) == 3, [o.get('event', o.get('epoch')) for o in lines]"

# Options that would change the run: refused, one line each, before anything trains.
expect 2 "^tessera train: --resume .*a0.st: --batch 100, but its run has 50; leave --batch out" -- \
  "$tessera" train "${small[@]}" --epochs 4 --resume "$tmp/a0.st" --batch 100
expect 2 "--lr-schedule constant, but its run has cosine" -- \
  "$tessera" train "${small[@]}" --epochs 4 --resume "$tmp/a0.st" --lr-schedule constant
expect 2 "--lr 0.1, but its run has 0.05" -- \
  "$tessera" train "${small[@]}" --epochs 4 --resume "$tmp/a0.st" --lr 0.1
expect 2 "--optimizer adam, but its run has sgd" -- \
  "$tessera" train "${small[@]}" --epochs 4 --resume "$tmp/a0.st" --optimizer adam
expect 2 "--seed 7, but its run has 1" -- \
  "$tessera" train "${small[@]}" --epochs 4 --resume "$tmp/a0.st" --seed 7
expect 2 "--schedule-epochs 4, but its run's schedule has a horizon of 2 epochs.*--deterministic" -- \
  "$tessera" train "${small[@]}" --epochs 4 --resume "$tmp/a0.st" --schedule-epochs 4
expect 0 "note: --resume .*--schedule-epochs 3, but its run's schedule has a horizon of 2" -- \
  "$tessera" train --data "$data" --train-limit 600 --test-limit 200 --workers 2 --quiet \
  --epochs 3 --resume "$tmp/a0.st" --schedule-epochs 3
# A checkpoint of before the settings were recorded (tests/checkpoints/, issue 19's build).
expect 0 "note: --resume .*v1-mlp8-sgd.st was written before checkpoints recorded the schedule's horizon" -- \
  "$tessera" train --data "$data" --train-limit 2000 --test-limit 100 --quiet --epochs 2 \
  --resume "$here/checkpoints/v1-mlp8-sgd.st"

# --resume auto twice in a row: a new run (no checkpoint yet), then its continuation.
expect 0 "--resume auto: no checkpoint .*auto.st yet: a new run" -- \
  "$tessera" train "${small[@]}" --model mlp:16 --epochs 1 --checkpoint "$tmp/auto.st" \
  --resume auto --log "$tmp/auto.jsonl"
expect 0 "resuming .*auto.st after epoch 1" -- \
  "$tessera" train "${small[@]}" --epochs 2 --checkpoint "$tmp/auto.st" --resume auto \
  --log "$tmp/auto.jsonl"
check "--resume auto: the second run continued the first (epochs 1 and 2, one model)" \
  /usr/bin/python3 -c "
import json
lines = [json.loads(l) for l in open('$tmp/auto.jsonl')]
assert [o['epoch'] for o in lines if 'event' not in o] == [1, 2], lines
assert {o['model'] for o in lines if 'event' not in o} == {'784-16-relu-10'}, lines"
expect 2 "--resume auto resumes from the --checkpoint FILE when it exists: give --checkpoint" -- \
  "$tessera" train --resume auto

# Model files and shorthands.
printf '%s\n' "[hidden]" "type = dense" "units = 32" "activation = relu" "" "[output" \
  "type = dense" "units = classes" >"$tmp/bracket.ini"
expect 1 "bracket.ini:6: section header \[output has no closing '\]'" -- \
  "$tessera" train --model "$tmp/bracket.ini" --data "$data" --epochs 1
printf '%s\n' "[hidden]" "type = dense" "units = 32" "[out]" "type = dense" "units = 8" >"$tmp/eight.ini"
expect 1 "eight.ini: the last layer \[out\] \(dense\) has 8 units, but the data has 10 classes: give it units = classes" -- \
  "$tessera" train --model "$tmp/eight.ini" --data "$data" --train-limit 100 --epochs 1
expect 2 "--model 'mpl': unknown model \(did you mean mlp\?\)" -- "$tessera" train --model mpl
expect 2 "--model 'mpl:64': unknown model \(did you mean mlp:64\?\)" -- "$tessera" train --model mpl:64

echo "$passed passed, $failed failed"
((failed == 0))
