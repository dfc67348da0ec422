#!/usr/bin/env bash
# Traces people can read (issue 21), as a user meets them: task events named by codelet with
# layer, step, tile, priority, id and dependencies in args; --trace-steps A-B keeps exactly the
# tasks of those steps (tasks per step x steps) and the waits that overlap them, and refuses
# bad ranges; tessera trace-summary's busy times add up to the workers' executing time of
# --stats within 1%, its critical path is a real chain of the step, and files that are not
# tessera traces are refused with the file named. With `mpi`, the same on 2 ranks: the issue's
# run (mpirun -np 2, --sync batch, 2,000 samples), flows from the task that produced a tile on
# one rank to the task that read it on the other, each start matched by a finish.
# Usage: test_trace.sh PATH/TO/tessera [mpi]
set -u
tessera=$1 mode=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
checker=$tests_dir/check_trace.py

# check NAME CMD...: CMD exits 0.
check() {
  local name=$1 out rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  if ((rc == 0)); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: $* -> exit $rc"
    echo "$out" | tail -5
  fi
}

if [[ $mode == mpi ]]; then
  mpi=(mpirun -np 2 --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT
    "${mpi_env[@]}")
  run=(train --workers 1 --sync batch --epochs 1 --train-limit 2000 --stats)
  check "2-rank traced run" "${mpi[@]}" "$tessera" "${run[@]}" --trace "$tmp/t.json" \
    --log "$tmp/l.jsonl"
  check "2-rank events" /usr/bin/python3 "$checker" events "$tmp/t.json" "$tmp/l.jsonl"
  check "2-rank flows" /usr/bin/python3 "$checker" flows "$tmp/t.json" "$tmp/l.jsonl"
  "$tessera" trace-summary --json "$tmp/t.json" >"$tmp/s.json" 2>"$tmp/s.err" || {
    failed=$((failed + 1)) && echo "FAIL: trace-summary --json: $(cat "$tmp/s.err")"; }
  check "2-rank summary against --stats" /usr/bin/python3 "$checker" summary "$tmp/s.json" \
    "$tmp/t.json" "$tmp/l.jsonl"
  check "2-rank --trace-steps run" "${mpi[@]}" "$tessera" "${run[@]}" --trace "$tmp/w.json" \
    --trace-steps 3-5 --log "$tmp/w.jsonl"
  check "2-rank --trace-steps 3-5" /usr/bin/python3 "$checker" window "$tmp/t.json" "$tmp/w.json" 3 5
  echo "$passed passed, $failed failed"
  ((failed == 0))
  exit
fi

# --trace-steps: A-B with 1 <= A <= B, and only with --trace; exit 2 before any data loads.
for bad in 3-2 0-4 4 x-5 5- -5; do
  expect 2 "--trace-steps $bad: expected A-B" -- "$tessera" train --data /nonexistent \
    --trace "$tmp/x.json" --trace-steps "$bad"
done
expect 2 "--trace-steps needs --trace" -- "$tessera" train --data /nonexistent --trace-steps 2-3

# A short run traced whole, then steps 3-5 of the same run (640 samples: 10 steps).
short=(train --epochs 1 --train-limit 640 --test-limit 100 --quiet --workers 2 --stats)
check "traced run" "$tessera" "${short[@]}" --trace "$tmp/full.json" --log "$tmp/full.jsonl"
check "events named by codelet, args" /usr/bin/python3 "$checker" events "$tmp/full.json" \
  "$tmp/full.jsonl"
check "--trace-steps run" "$tessera" "${short[@]}" --trace "$tmp/win.json" --trace-steps 3-5 \
  --log "$tmp/win.jsonl"
check "--trace-steps 3-5: those steps' tasks only" /usr/bin/python3 "$checker" window \
  "$tmp/full.json" "$tmp/win.json" 3 5
check "--trace-steps: events" /usr/bin/python3 "$checker" events "$tmp/win.json" "$tmp/win.jsonl"
expect 0 "--trace-steps 20-30: the run's last step was 10; the trace holds no task" \
  -- "$tessera" "${short[@]}" --trace "$tmp/none.json" --trace-steps 20-30

# The summary: JSON against the statistics, and the tables.
if "$tessera" trace-summary --json "$tmp/full.json" >"$tmp/s.json" 2>"$tmp/s.err"; then
  check "summary against --stats" /usr/bin/python3 "$checker" summary "$tmp/s.json" \
    "$tmp/full.json" "$tmp/full.jsonl"
else
  failed=$((failed + 1)) && echo "FAIL: trace-summary --json: $(cat "$tmp/s.err")"
fi
out=$("$tessera" trace-summary "$tmp/full.json" 2>&1)
for section in "busy time per codelet and worker kind" "^  gemm(:[a-z]+)? +CPU" "workers: busy, and idle" \
  "longest waits of the main thread" "critical path of step 6: [0-9]+ tasks on 1 rank"; do
  grep -qE -- "$section" <<<"$out" && passed=$((passed + 1)) || {
    failed=$((failed + 1)) && echo "FAIL: trace-summary's tables lack /$section/: $out"; }
done
expect 0 "critical path of step 7" -- "$tessera" trace-summary --step 7 "$tmp/full.json"

# A codelet with several implementations (the convolutions and the tile GEMMs, --kernels): each
# task's args say which ran, and trace-summary's busy time splits by it. Under dmda both may run,
# shape by shape.
cnn=(train --model cnn --epochs 1 --train-limit 256 --test-limit 64 --quiet --workers 2)
check "traced CNN, --kernels blis" "$tessera" "${cnn[@]}" --kernels blis --trace "$tmp/cnn.json"
if /usr/bin/python3 - "$tmp/cnn.json" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)) && echo "FAIL: the CNN trace's impl args"; fi
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and "args" in e]
several = ("conv_", "gemm")
conv = [e for e in ev if e["name"].startswith(several)]
assert conv and all(e["args"].get("impl") == "blis" for e in conv), conv[:2]
assert {e["name"] for e in conv} >= {"conv_fwd", "gemm", "gemm_ep"}, {e["name"] for e in conv}
assert all("impl" not in e["args"] for e in ev if not e["name"].startswith(several))
PY
expect 0 "^  conv_fwd:blis +CPU" -- "$tessera" trace-summary "$tmp/cnn.json"
expect 0 "critical path of step 4" -- "$tessera" trace-summary "$tmp/win.json"

# What is not a tessera trace, or not a whole one.
expect 2 "expected one trace file" -- "$tessera" trace-summary
expect 2 "--top x: expected" -- "$tessera" trace-summary --top x "$tmp/full.json"
expect 2 "step 99: the trace holds steps 1-10 only" -- "$tessera" trace-summary --step 99 \
  "$tmp/full.json"
expect 1 "$tmp/missing.json: cannot open: No such file" -- "$tessera" trace-summary \
  "$tmp/missing.json"
printf '{"traceEvents": [' >"$tmp/cut.json"
expect 1 "$tmp/cut.json: not JSON" -- "$tessera" trace-summary "$tmp/cut.json"
printf '{"traceEvents": [], "otherData": {"source": "chrome"}}\n' >"$tmp/other.json"
expect 1 "$tmp/other.json: not a tessera trace" -- "$tessera" trace-summary "$tmp/other.json"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
doc = json.load(open(tmp + "/full.json"))
k = next(i for i, e in enumerate(doc["traceEvents"]) if e["ph"] == "X" and e["cat"] == "task")
del doc["traceEvents"][k]["dur"]
json.dump(doc, open(tmp + "/nodur.json", "w"))
doc = json.load(open(tmp + "/full.json"))
t = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "task")
t["args"]["deps"] = [10 ** 9]
json.dump(doc, open(tmp + "/baddep.json", "w"))
doc = json.load(open(tmp + "/full.json"))
doc["traceEvents"].append({"name": "transfer", "cat": "mpi", "ph": "s", "id": 1, "ts": t["ts"],
                           "pid": 0, "tid": t["tid"], "args": {"task": t["args"]["id"], "tag": 1}})
json.dump(doc, open(tmp + "/halfflow.json", "w"))
PY
expect 1 "nodur.json: event [0-9]+: a complete event \(ph X\) needs name, cat, pid" \
  -- "$tessera" trace-summary "$tmp/nodur.json"
expect 1 "baddep.json: task [0-9]+ of rank 0 depends on an id, which is not a task" \
  -- "$tessera" trace-summary "$tmp/baddep.json"
expect 1 "halfflow.json: (flow 1: its start and finish|1 flow starts but 0 finishes)" \
  -- "$tessera" trace-summary "$tmp/halfflow.json"

echo "$passed passed, $failed failed"
((failed == 0))
