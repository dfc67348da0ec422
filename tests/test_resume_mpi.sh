#!/usr/bin/env bash
# Checkpoints that lose nothing, on 2 ranks under mpirun: for every --sync policy (and the
# outer optimizers), a run of 4 epochs stopped after 2 (`--epochs 2`, then `--resume
# --epochs 4`) ends bit for bit where the uninterrupted one does with --deterministic, a
# constant schedule and SGD with momentum: every tensor of the final checkpoints (weights,
# every rank's optimizer state, the outer momentum) and the epochs' lines. Where a checkpoint
# cannot give everything back (a finished run's final average off the schedule, another number
# of ranks), --deterministic refuses the resume with one line saying why, and a run without it
# says so in a note.
# Usage: test_resume_mpi.sh PATH/TO/tessera; TSR_RESUME_CASES="every slowmo ..." runs only those
# resume cases (their folder names below) and the checks after them that need nothing else.
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Every run below takes 512 training and 200 test samples: those alone (lib.sh).
data=$(prefix_data "$data" "$tmp/data" 512 200)
mpi=(mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT "${mpi_env[@]}")
# 512 samples, 2 ranks of batch 64: 4 steps per epoch, so every=2, hier:1,2 and post-local:1,2
# average at every epoch end.
common=(--workers 1 --train-limit 512 --test-limit 200 --data "$data" --model mlp:32
  --lr-schedule constant --momentum 0.9 --deterministic)


# epoch_lines OUT: the epochs' numbers, without the times.
epoch_lines() {
  grep -E "^epoch +[34]/4" "$1" | sed -E 's/\)  .*/)/'
}

only=" ${TSR_RESUME_CASES:-} "
wanted() { [[ $only == "  " || $only == *" $1 "* ]]; }

resume_case() {
  local name=$1 dir=$tmp/$2 out
  wanted "$2" || return 0
  shift 2
  mkdir -p "$dir"
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" "$@" --epochs 4 --checkpoint "$dir/full.st" \
    --log "$dir/full.jsonl" >"$dir/full.out" 2>&1 &&
    "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" "$@" --epochs 2 --checkpoint "$dir/part.st" \
      >"$dir/part.out" 2>&1 &&
    "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" "$@" --epochs 4 --resume "$dir/part.st" \
      --checkpoint "$dir/part.st" >"$dir/resumed.out" 2>&1
  local rc=$?
  if [[ $rc != 0 ]]; then
    failed=$((failed + 1))
    echo "FAIL: $name: exit $rc"
    tail -4 "$dir"/*.out
    return
  fi
  if ! out=$(same_tensors "$dir/full.st" "$dir/part.st" 2>&1); then
    failed=$((failed + 1))
    echo "FAIL: $name: the resumed run's final checkpoint is not the uninterrupted run's: ${out##*$'\n'}"
  elif [[ "$(epoch_lines "$dir/full.out")" != "$(epoch_lines "$dir/resumed.out")" ]] ||
    [[ -z "$(epoch_lines "$dir/full.out")" ]]; then
    failed=$((failed + 1))
    echo "FAIL: $name: epochs 3 and 4 differ:"
    diff <(epoch_lines "$dir/full.out") <(epoch_lines "$dir/resumed.out")
  else
    passed=$((passed + 1))
  fi
}

resume_case "batch" batch --sync batch
resume_case "every=2" every --sync every=2
resume_case "every=2 --weighting steps" fednova --sync every=2 --weighting steps
resume_case "epoch" epoch --sync epoch
resume_case "epoch=2" epoch2 --sync epoch=2
resume_case "post-local:1,2" post --sync post-local:1,2
resume_case "hier:1,2" hier --sync hier:1,2
resume_case "every=2 --outer slowmo" slowmo --sync every=2 --outer slowmo
resume_case "epoch --outer nesterov" nesterov --sync epoch --outer nesterov
resume_case "hier:1,2 --outer nesterov" hiern --sync hier:1,2 --outer nesterov

# The checkpoint holds every rank's optimizer state and the outer momentum, by name.
if ! wanted slowmo; then
  :
elif /usr/bin/python3 - "$tmp/slowmo/full.st" <<'PY'; then
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
head = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
meta = head["__metadata__"]
names = set(head) - {"__metadata__"}
assert "optimizer.layers.0.dense.weight.momentum_buffer" in names, names
assert "optimizer.rank1.layers.0.dense.weight.momentum_buffer" in names, names
assert "outer.layers.0.dense.weight.momentum" in names, names
assert meta["optimizer_state"] == "per-rank" and meta["outer_state"] == "momentum", meta
# The two ranks' momenta differ (local SGD): the second is not a copy of the first.
def data(k):
    o = head[k]["data_offsets"]; base = 8 + struct.unpack("<Q", raw[:8])[0]
    return raw[base + o[0]:base + o[1]]
assert data("optimizer.layers.0.dense.weight.momentum_buffer") != data("optimizer.rank1.layers.0.dense.weight.momentum_buffer")
PY
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: the tensors of a local SGD checkpoint"
fi

# The checkpoint records the training set's standardization (mean and deviation: their ratio
# is the raw subset's, whatever the scale), and `tessera eval` of the final checkpoint gives
# the log's last test accuracy exactly (and its loss but for the evaluation's batch): under
# batch, after local SGD's final average, and in one process.
"$tessera" train "${common[@]}" --epochs 1 --checkpoint "$tmp/one.st" --log "$tmp/one.jsonl" \
  >"$tmp/one.out" 2>&1
for run in batch/full every/full slowmo/full one; do
  wanted "${run%/full}" || [[ $run == one ]] || continue
  if "$tessera" eval --checkpoint "$tmp/$run.st" --data "$data" --test-limit 200 --json \
    >"$tmp/eval.json" 2>"$tmp/eval.err" &&
    /usr/bin/python3 - "$tmp/$run.st" "${tmp}/$run.jsonl" "$tmp/eval.json" "$data" <<'PY'; then
import gzip, json, struct, sys
ckpt, log, ev, data = sys.argv[1:5]
raw = open(ckpt, "rb").read()
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
last = [json.loads(l) for l in open(log) if '"event"' not in l][-1]
e = json.load(open(ev))
assert e["accuracy"] == last["test_accuracy"], (e["accuracy"], last["test_accuracy"])
assert abs(e["loss"] - last["test_loss"]) <= 1e-5 * abs(last["test_loss"]), (e["loss"], last["test_loss"])
def ratio(path, n):
    b = gzip.open(path).read()[16:16 + n * 784]
    m = sum(b) / len(b)
    return (sum((x - m) ** 2 for x in b) / len(b)) ** 0.5 / m
want = ratio(data + "/train-images-idx3-ubyte.gz", 512)
got = float(meta["input_std"]) / float(meta["input_mean"])
assert abs(got - want) <= 1e-5 * want, ("std/mean", got, "want the training subset's", want)
PY
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: eval of $run's final checkpoint is not the log's last test accuracy, or its standardization is not the training set's"
    cat "$tmp/eval.err"
  fi
done

# Where the checkpoint cannot give everything back, --deterministic refuses, saying why.
# async-epoch's checkpoint is its final uniform average; epoch=3 stopped after 2 averaged at
# the end, off its count.
refuse_case() {
  local name=$1 pattern=$2 dir=$tmp/$3 out rc
  wanted "$3" || return 0
  shift 3
  mkdir -p "$dir"
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" "$@" --epochs 2 --checkpoint "$dir/part.st" \
    >"$dir/part.out" 2>&1
  out=$("${mpi[@]}" -np 2 "$tessera" train "${common[@]}" "$@" --epochs 4 --resume "$dir/part.st" 2>&1)
  rc=$?
  if [[ $rc != 0 ]] && grep -qE -- "$pattern" <<<"$out" && ! grep -q "^epoch 3" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: exit $rc, want a refusal /$pattern/:"
    grep -v '^\[' <<<"$out" | head -5
  fi
}
refuse_case "async-epoch" "--deterministic: the checkpoint holds the final average of a finished run \(--sync async-epoch\)" \
  async --sync async-epoch
refuse_case "epoch=3 after 2" "final average of a finished run \(--sync epoch=3\)" epoch3 --sync epoch=3
# Another number of ranks: rank 1's state has no rank to go to.
wanted every || { echo "resume-mpi: $passed passed, $failed failed"; [[ $failed == 0 ]]; exit; }
out=$("${mpi[@]}" -np 1 "$tessera" train "${common[@]}" --sync every=2 --epochs 4 \
  --resume "$tmp/every/part.st" 2>&1)
rc=$?
if [[ $rc != 0 ]] && grep -q "holds the optimizer states of its 2 replicas (ranks), which a run of 1 replica cannot" <<<"$out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: a 2-rank local SGD checkpoint resumed on 1 rank with --deterministic: exit $rc"
  grep -v '^\[' <<<"$out" | head -5
fi
# Without --deterministic the same resume runs, with a note (part.st holds 4 epochs by now).
nodet=()
for a in "${common[@]}"; do [[ $a != --deterministic ]] && nodet+=("$a"); done
out=$("$tessera" train "${nodet[@]}" --epochs 5 --resume "$tmp/every/part.st" 2>&1)
rc=$?
if [[ $rc == 0 ]] && grep -q "note: --resume .*: the checkpoint holds the optimizer states of its 2 replicas (ranks)" <<<"$out" &&
  grep -q "^epoch 5/5" <<<"$out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: the same resume without --deterministic: exit $rc"
  grep -v '^\[' <<<"$out" | head -5
fi

echo "resume-mpi: $passed passed, $failed failed"
[[ $failed == 0 ]]
