#!/usr/bin/env bash
# tessera train's --crop and --flip as a user meets them: a short run on a 28x28 Fashion-MNIST
# subset trains, is bitwise repeatable, differs from the run without; the log's run line and the
# checkpoint record the settings; a resumed run ends where the uninterrupted one does, a resume
# under other settings is noted (refused with --deterministic); the refusals, exit 2 before
# training. Usage: test_augment.sh PATH/TO/tessera.
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [[ ! -f $data/train-labels-idx1-ubyte.gz && ! -f $data/train-labels-idx1-ubyte ]]; then
  echo "SKIP: Fashion-MNIST not found in $data (install dataset-fashion-mnist)"
  exit 77
fi

pass() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}
# The epoch lines' digits: loss, train and test accuracy, test loss (no times).
digits() { grep '^epoch' "$1" | sed -E 's/  [0-9.]+ s .*//'; }

small=(--data "$data" --train-limit 1000 --test-limit 300 --model mlp:64 --batch 50
  --lr-schedule constant)
run() { # run OUT ARGS...: the epoch lines into OUT
  local out=$1
  shift
  "$tessera" train "${small[@]}" "$@" >"$out" 2>"$out.err"
}

# A run with --crop 28:4 --flip: twice the same digits, others than without, and learning.
run "$tmp/a1" --epochs 2 --crop 28:4 --flip --log "$tmp/a1.jsonl" || fail "augmented run: $(cat "$tmp/a1.err")"
run "$tmp/a2" --epochs 2 --crop 28:4 --flip || fail "augmented run again"
run "$tmp/p" --epochs 2 || fail "plain run"
if [[ -n $(digits "$tmp/a1") && "$(digits "$tmp/a1")" == "$(digits "$tmp/a2")" ]]; then pass; else
  fail "two augmented runs differ: $(digits "$tmp/a1") / $(digits "$tmp/a2")"
fi
if [[ "$(digits "$tmp/a1")" != "$(digits "$tmp/p")" ]]; then pass; else
  fail "--crop 28:4 --flip trained exactly as without"
fi
if grep -qE 'augmented: crop 28x28:4 flip' "$tmp/a1"; then pass; else fail "banner: $(head -1 "$tmp/a1")"; fi
acc=$(sed -nE 's/^epoch 2\/2 .*test ([0-9.]+)%.*/\1/p' "$tmp/a1")
if [[ -n $acc ]] && awk "BEGIN { exit !($acc > 60) }"; then pass; else fail "augmented test accuracy $acc%"; fi
# The log's run line says what was asked, from the option table.
if python3 - "$tmp/a1.jsonl" <<'EOF'; then pass; else fail "the run line's crop and flip"; fi
import json, sys
run = json.loads(open(sys.argv[1]).readline())
cfg = run["config"]
sys.exit(0 if cfg["crop"] == "28:4" and cfg["flip"] is True else 1)
EOF
run "$tmp/f" --epochs 1 --flip || fail "--flip alone"
run "$tmp/c" --epochs 1 --crop 28x28:2 || fail "--crop HxW:P"

# Checkpoints: the settings recorded; --epochs 2 then --resume --epochs 3 is --epochs 3.
run "$tmp/r3" --epochs 3 --crop 28:4 --flip || fail "3 epochs"
run "$tmp/r2" --epochs 2 --crop 28:4 --flip --checkpoint "$tmp/c.st" || fail "2 epochs"
expect 0 '"?augment"?.*crop 28x28:4 flip' -- "$tessera" inspect "$tmp/c.st"
run "$tmp/rr" --epochs 3 --crop 28:4 --flip --resume "$tmp/c.st" --checkpoint "$tmp/c2.st" ||
  fail "resume: $(cat "$tmp/rr.err")"
if [[ "$(digits "$tmp/rr" | tail -1)" == "$(digits "$tmp/r3" | tail -1)" ]]; then pass; else
  fail "resumed epoch 3 differs: $(digits "$tmp/rr" | tail -1) / $(digits "$tmp/r3" | tail -1)"
fi
cp "$tmp/c.st" "$tmp/d.st"
expect 0 'note: --resume .*augmentation crop 28x28:4 flip and this run augments with flip' -- \
  "$tessera" train "${small[@]}" --epochs 3 --flip --resume "$tmp/d.st"
expect 1 'deterministic: the checkpoint was trained with augmentation crop 28x28:4 flip and this run augments with none' -- \
  "$tessera" train "${small[@]}" --epochs 3 --deterministic --resume "$tmp/c.st"

# Refusals, exit 2: no images, crop sizes, syntax, a standardization without a black pixel.
printf '%s\n' "0,1,2,3,4" "1,2,3,4,5" "0,0,1,0,1" "1,5,4,3,2" >"$tmp/train.csv"
expect 2 '^tessera train: --flip: .*need images, but the samples are rows of 4 features' -- \
  "$tessera" train --data "$tmp" --flip --epochs 1
expect 2 '^tessera train: --crop 2:1: .*need images' -- "$tessera" train --data "$tmp" --crop 2:1
expect 2 "crop of 24x24 from 28x28 images .* crop to the image's size, 28x28" -- \
  "$tessera" train "${small[@]}" --crop 24:4
expect 2 'crop of 40x40 does not fit in the 28x28 image padded by 4 on each side \(36x36\)' -- \
  "$tessera" train "${small[@]}" --crop 40:4
for bad in 28 28:-1 :4 28:x 0:4 28x:4 x28:4 28:4:1 28:99999; do
  expect 2 "^tessera train: --crop $bad: expected S:P or HxW:P" -- "$tessera" train --crop "$bad"
done
expect 2 '^tessera train: --crop 28:4: .*column standardization gives black pixels' -- \
  "$tessera" train "${small[@]}" --crop 28:4 --standardize column
expect 0 'epoch 1/1' -- "$tessera" train "${small[@]}" --epochs 1 --flip --standardize column

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
