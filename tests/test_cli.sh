#!/usr/bin/env bash
# The tessera command as a user meets it: bad options and bad files end with a
# non-zero exit and a message naming the problem, never a crash; a short run
# writes a valid JSON Lines log. Usage: test_cli.sh PATH/TO/tessera
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

# expect CODE PATTERN -- ARGS...: exit code CODE and stderr+stdout matching PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$("$tessera" "$@" 2>&1)
  rc=$?
  if [[ $rc == "$code" ]] && grep -qE -- "$pattern" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: tessera $* -> exit $rc (want $code), output:"
    echo "$out" | head -5
    echo "  (wanted /$pattern/)"
  fi
}

expect 0 "usage: tessera train" -- train --help
expect 0 "usage: tessera <command>" -- --help
expect 2 "unknown command 'trian'" -- trian
expect 2 "usage:" --
expect 2 "--epochs abc: expected an integer" -- train --epochs abc
expect 2 "--batch 0: expected an integer >= 1" -- train --batch 0
expect 2 "--lr -1: expected a number > 0" -- train --lr -1
expect 2 "--momentum 1.5" -- train --momentum 1.5
expect 2 "--optimizer rmsprop: expected sgd or adam" -- train --optimizer rmsprop
expect 2 "--tile 0x4" -- train --tile 0x4
expect 2 "--lr-schedule step" -- train --lr-schedule step
expect 2 "unexpected argument 'extra'" -- train extra
expect 2 "unknown policy" -- train --sched nosuch
expect 2 "  lws +locality" -- train --sched nosuch
expect 1 "/nonexistent" -- train --data /nonexistent --epochs 1
expect 1 "--model 'mlp:0'" -- train --model mlp:0 --epochs 1 --data "$data"
expect 1 "$tmp/missing.ini: cannot open" -- train --model "$tmp/missing.ini" --data "$data"
expect 0 "scheduler" -- info
expect 0 "lws" -- info --sched-list

# A folder with a truncated image file: rejected, naming the file.
mkdir "$tmp/bad"
printf '\x00\x00\x08\x03\x00\x00\x00\x0a\x00\x00\x00\x1c\x00\x00\x00\x1c\x01\x02' >"$tmp/bad/train-images-idx3-ubyte"
printf '\x00\x00\x08\x01\x00\x00\x00\x0a\x01\x02\x03\x04\x05\x06\x07\x08\x09\x00' >"$tmp/bad/train-labels-idx1-ubyte"
cp "$tmp/bad/train-images-idx3-ubyte" "$tmp/bad/t10k-images-idx3-ubyte"
cp "$tmp/bad/train-labels-idx1-ubyte" "$tmp/bad/t10k-labels-idx1-ubyte"
expect 1 "train-images-idx3-ubyte: truncated" -- train --data "$tmp/bad"

# A CSV dataset and an INI model train end to end and log one JSON object per epoch.
mkdir "$tmp/csv"
for f in train test; do
  for i in $(seq 0 59); do
    c=$((i % 3))
    echo "$c,$((c * 2)).5,$((i % 7)),-$c"
  done >"$tmp/csv/$f.csv"
done
printf '[h]\ntype = dense\nunits = 8\nactivation = relu\n[out]\ntype = dense\nunits = 3\n' >"$tmp/m.ini"
expect 0 "epoch 3/3" -- train --data "$tmp/csv" --model "$tmp/m.ini" --epochs 3 --batch 16 \
  --log "$tmp/log.jsonl"
if [[ -d $data ]]; then
  expect 0 "epoch 2/2" -- train --epochs 2 --train-limit 1000 --test-limit 500 --tile 32x100 \
    --optimizer adam --log "$tmp/log2.jsonl"
  expect 0 "conv3x3/32p1x1" -- train --model cnn --epochs 1 --train-limit 256 --test-limit 128
fi
for log in "$tmp"/log*.jsonl; do
  if /usr/bin/python3 - "$log" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $log"; cat "$log"; fi
import json, sys
lines = open(sys.argv[1]).read().splitlines()
objs = [json.loads(l) for l in lines]
assert len(objs) >= 2, "one object per epoch"
for i, o in enumerate(objs, 1):
    assert o["epoch"] == i
    for k in ("loss", "train_accuracy", "test_accuracy", "seconds", "samples_per_s"):
        assert isinstance(o[k], (int, float)) and o[k] >= 0, k
    assert o["sched"] and o["model"] and o["batch"] > 0
PY
  done

echo "$passed passed, $failed failed"
((failed == 0))
