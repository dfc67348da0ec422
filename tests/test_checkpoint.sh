#!/usr/bin/env bash
# Checkpoints as a user meets them: --checkpoint writes one that `tessera
# inspect` lists and `tessera eval` evaluates (and the Python package's NumPy
# reader, benchmarks/load_checkpoint.py, agrees with it); --resume continues and
# refuses another model or other data; a damaged or cut file is refused;
# SIGTERM stops a run with a checkpoint and exit 143; kill -9 while a
# checkpoint is written leaves the previous one loadable (20 kills); a 2-rank
# checkpoint resumes on 1 rank and on 3. Usage: test_checkpoint.sh PATH/TO/tessera
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
[[ -d $data ]] || { echo "SKIP: no dataset at $data"; exit 77; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=(--train-limit 2000 --test-limit 500 --data "$data" --quiet)
mpi=(mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT)

# check NAME CONDITION-COMMAND...: counts one check.
check() {
  local name=$1
  shift
  if "$@"; then passed=$((passed + 1)); else
    failed=$((failed + 1))
    echo "FAIL: $name"
  fi
}

# A checkpoint, listed and evaluated.
"$tessera" train "${small[@]}" --epochs 2 --checkpoint "$tmp/a.st" >"$tmp/out" 2>&1
check "train --checkpoint writes it" test -s "$tmp/a.st"
"$tessera" inspect "$tmp/a.st" >"$tmp/inspect" 2>&1
check "inspect lists tensors and the training state" \
  grep -q "layers.0.dense.weight .*\[784, 512\]" "$tmp/inspect"
check "inspect shows the epoch" grep -qE "^  epoch +2$" "$tmp/inspect"
"$tessera" eval --checkpoint "$tmp/a.st" --data "$data" --test-limit 1000 --json >"$tmp/eval.json"
check "eval --json" /usr/bin/python3 -c "
import json, sys
e = json.load(open('$tmp/eval.json'))
assert e['samples'] == 1000 and 0.6 < e['accuracy'] <= 1, e
assert len(e['per_class']) == 10 and sum(map(sum, e['confusion'])) == 1000, e
assert abs(sum(e['confusion'][c][c] for c in range(10)) / 1000 - e['accuracy']) < 1e-9, e"
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  /usr/bin/python3 "$here/../benchmarks/load_checkpoint.py" "$tmp/a.st" --data "$data" \
    --test-limit 1000 --json >"$tmp/py.json"
  check "the Python reader agrees with tessera eval" /usr/bin/python3 -c "
import json
a, b = json.load(open('$tmp/eval.json')), json.load(open('$tmp/py.json'))
assert a['accuracy'] == b['accuracy'], (a['accuracy'], b['accuracy'])"
else
  echo "SKIP: numpy missing, the Python reader is not compared (scripts/setup.sh installs it)"
fi

# Resuming: the epochs left, nothing when none are, and refusals.
"$tessera" train "${small[@]}" --epochs 3 --resume "$tmp/a.st" --log "$tmp/r.jsonl" >"$tmp/out" 2>&1
check "resume runs epoch 3 only" /usr/bin/python3 -c "
import json
epochs = [json.loads(l)['epoch'] for l in open('$tmp/r.jsonl')]
assert epochs == [3], epochs"
out=$("$tessera" train "${small[@]}" --epochs 2 --resume "$tmp/a.st" 2>&1)
check "resume with nothing left says so" grep -q "nothing to train" <<<"$out"
out=$("$tessera" train "${small[@]}" --model mlp:64 --epochs 3 --resume "$tmp/a.st" 2>&1)
check "another model is refused, both named" \
  grep -q "written for model 784-512-relu-512-relu-10; this run builds 784-64-relu-10" <<<"$out"
out=$("$tessera" train --train-limit 1000 --test-limit 500 --data "$data" --epochs 3 \
  --resume "$tmp/a.st" 2>&1)
check "other data is refused" grep -q "was trained on data 2000 x 784.*this run has 1000 x 784" <<<"$out"

# Damaged files: a flipped byte, a cut file.
cp "$tmp/a.st" "$tmp/flip.st"
size=$(stat -c %s "$tmp/flip.st")
printf '\x7f' | dd of="$tmp/flip.st" bs=1 seek=$((size - 100)) conv=notrunc status=none
out=$("$tessera" inspect "$tmp/flip.st" 2>&1)
check "a flipped byte is caught by its tensor's checksum" grep -q "is damaged" <<<"$out"
head -c 1000 "$tmp/a.st" >"$tmp/cut.st"
out=$("$tessera" eval --checkpoint "$tmp/cut.st" --data "$data" 2>&1)
check "a cut file is refused" grep -q "not a valid safetensors file" <<<"$out"

# SIGTERM: the run stops after the step in flight, writes its checkpoint, exits 143.
"$tessera" train --train-limit 30000 --test-limit 500 --data "$data" --quiet --epochs 20 \
  --checkpoint "$tmp/s.st" --checkpoint-every 50steps >"$tmp/sig.out" 2>&1 &
pid=$!
for _ in $(seq 100); do [[ -s $tmp/s.st ]] && break; sleep 0.1; done
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM exits 143 (got $rc)" test "$rc" = 143
check "and says how to resume" grep -q -- "--resume $tmp/s.st" "$tmp/sig.out"
check "the checkpoint it wrote loads" "$tessera" inspect "$tmp/s.st" >/dev/null

# kill -9 at random times while checkpoints are written every 5 steps: the
# file is always a whole checkpoint (the old one or the new one).
loadable=0
for i in $(seq 20); do
  rm -f "$tmp/k.st"
  "$tessera" train --train-limit 4000 --test-limit 100 --data "$data" --quiet --epochs 50 \
    --checkpoint "$tmp/k.st" --checkpoint-every 5steps >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do [[ -s $tmp/k.st ]] && break; sleep 0.05; done
  sleep "0.$((RANDOM % 40))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  "$tessera" inspect "$tmp/k.st" >/dev/null 2>&1 && loadable=$((loadable + 1))
done
check "20 kills -9 left 20 loadable checkpoints ($loadable)" test "$loadable" = 20
# A kill between the temporary file's creation and its rename leaves it behind: the next write
# of the same checkpoint removes it (a pid that no longer runs).
: >"$tmp/k.st.tmp.2147483647.a1B2c3"
left=$(ls "$tmp" | grep -c '^k\.st\.tmp\.')
"$tessera" train --train-limit 500 --test-limit 100 --data "$data" --quiet --epochs 1 \
  --checkpoint "$tmp/k.st" >/dev/null 2>&1
check "the next write removed the $left temporary files the kills left" \
  test "$(ls "$tmp" | grep -c '^k\.st\.tmp\.')" = 0

# Across rank counts: a 2-rank checkpoint resumes on 1 rank and on 3.
if command -v mpirun >/dev/null; then
  "${mpi[@]}" -np 2 "$tessera" train "${small[@]}" --workers 1 --epochs 1 \
    --checkpoint "$tmp/m.st" >/dev/null 2>&1
  check "2 ranks write a checkpoint" grep -qE "^  ranks +2$" <("$tessera" inspect "$tmp/m.st")
  "$tessera" train "${small[@]}" --epochs 2 --resume "$tmp/m.st" --log "$tmp/m1.jsonl" \
    >/dev/null 2>&1
  check "the 2-rank checkpoint resumed on 1 rank" /usr/bin/python3 -c "
import json
o = [json.loads(l) for l in open('$tmp/m1.jsonl')]
assert [x['epoch'] for x in o] == [2] and o[0]['ranks'] == 1 and o[0]['test_accuracy'] > 0.5, o"
  "${mpi[@]}" -np 3 "$tessera" train "${small[@]}" --workers 1 --epochs 2 --resume "$tmp/m.st" \
    --log "$tmp/m3.jsonl" >/dev/null 2>&1
  check "and on 3 ranks" /usr/bin/python3 -c "
import json
o = [json.loads(l) for l in open('$tmp/m3.jsonl') if 'event' not in l]
assert [x['epoch'] for x in o] == [2] and o[0]['ranks'] == 3 and o[0]['test_accuracy'] > 0.5, o"
fi

echo "$passed passed, $failed failed"
((failed == 0))
