#!/usr/bin/env bash
# Scheduler experiments and observability, as a user meets them: an unknown
# policy is rejected with the list; every listed policy (and the example
# custom policy of benchmarks/custom_sched.c) completes a short training run
# that learns, its log naming the policy;
# a trace from a short run is trace-event JSON with one event per executed
# task, non-overlapping on each worker, whose task count matches the
# statistics. With `mpi` as third argument, the trace of a 2-rank run merges
# both ranks.
# Usage: test_sched.sh PATH/TO/tessera PATH/TO/custom_sched [mpi]
set -u
tessera=$1 custom=$2 mode=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# He's initialization (--init he, the default before issue 20): in these 10 steps it learns
# far more than PyTorch's (seed 1: loss 2.262, test accuracy 0.30), which the floors below need.
short=(--init he --epochs 1 --train-limit 600 --test-limit 100 --quiet)

# check NAME CMD...: CMD exits 0.
check() {
  local name=$1
  shift
  local out
  if out=$("$@" 2>&1); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: $*"
    echo "$out" | tail -5
  fi
}

# validate_trace TRACE LOG RANKS: the trace against the statistics in LOG.
validate_trace() {
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
from collections import defaultdict
trace, log, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
doc = json.load(open(trace))  # valid JSON
events = doc["traceEvents"]
assert isinstance(events, list) and events
for e in events:
    assert e["ph"] in ("X", "M", "s", "f"), e  # s, f: transfers between ranks (flows)
    assert isinstance(e["pid"], int) and e["name"]
    if e["ph"] == "X":
        assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and isinstance(e["tid"], int), e
tasks = [e for e in events if e["ph"] == "X" and e["cat"] in ("task", "mpi")]
stats = [json.loads(l) for l in open(log)]
stats = [o for o in stats if o.get("event") == "stats"]
assert len(stats) == 1, "one stats object in the log"
st = stats[0]
executed = sum(w["tasks"] for w in st["workers"])  # StarPU's own count
by_codelet = sum(sum(w["codelets"].values()) for w in st["workers"])
assert len(tasks) == executed == by_codelet == st["trace_events"], \
    (len(tasks), executed, by_codelet, st["trace_events"])
assert st["trace_dropped"] == 0
# One track per worker per rank, each named; no two events overlap on a track.
named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
tracks = defaultdict(list)
for e in tasks:
    assert (e["pid"], e["tid"]) in named, e
    # Named by codelet (a viewer groups a codelet's tasks); the rest in args.
    # (a codelet with several CPU implementations: "gemm:onednn" in the statistics, and
    # args.impl says which ran)
    name = e["name"] + (":" + e["args"]["impl"] if "impl" in e["args"] else "")
    assert any(name in w["codelets"] for w in st["workers"]), name
    assert set(e["args"]) - {"impl"} == {"layer", "step", "tile", "priority", "mpi", "id", "deps"}, e
    tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
for k, spans in tracks.items():
    spans.sort()
    for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
        assert s1 >= e0 - 0.002, ("overlap on", k, (s0, e0), (s1, e1))
assert {p for p, _ in tracks} == set(range(ranks)), sorted(tracks)
per_rank = defaultdict(int)
for w in st["workers"]:
    per_rank[w["rank"]] += w["tasks"]
for r in range(ranks):
    assert per_rank[r] == sum(1 for e in tasks if e["pid"] == r), r
for w in st["workers"]:
    assert abs(w["executing"] + w["idle"] + w["overhead"] - w["seconds"]) < 1e-6 * max(1, w["seconds"])
PY
}

if [[ $mode == mpi ]]; then
  mpirun=(mpirun -np 2 --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT
    "${mpi_env[@]}")
  check "mpi trace run" "${mpirun[@]}" "$tessera" train --workers 1 "${short[@]}" --stats \
    --trace "$tmp/mpi.json" --log "$tmp/mpi.jsonl"
  check "mpi trace valid, both ranks merged" validate_trace "$tmp/mpi.json" "$tmp/mpi.jsonl" 2
  echo "$passed passed, $failed failed"
  ((failed == 0))
  exit
fi

# An unknown policy: exit 2 and the list of what this StarPU offers.
out=$("$tessera" train --sched nosuch 2>&1)
if [[ $? == 2 ]] && grep -q "unknown policy" <<<"$out" && grep -qE "^  eager " <<<"$out" &&
  grep -qE "^  dmda " <<<"$out"; then passed=$((passed + 1)); else
  failed=$((failed + 1)); echo "FAIL: unknown policy: $out"; fi

# Every listed policy completes a short run that learns (those marked as not
# working are refused with the reason instead). The policy changes only the
# order tasks run in: with seed 1 every policy measured loss 1.708 and test
# accuracy 0.66; seeds 1-6 gave loss 1.68-1.84 (ln 10 = 2.303 is a uniform
# guess) and accuracy 0.60-0.67 (chance: 0.1).
learned=("loss<2.303" "test_accuracy>0.45")
policies=$("$tessera" info --sched-list | awk '!/does not work/ {print $1}')
[[ -n $policies ]] || { failed=$((failed + 1)); echo "FAIL: empty --sched-list"; }
for p in $policies; do
  check "policy $p" "$tessera" train --sched "$p" "${short[@]}" --log "$tmp/$p.jsonl"
  check_log "policy $p" "$tmp/$p.jsonl" 1 "sched=$p" priorities=true "${learned[@]}"
done
broken=$("$tessera" info --sched-list | awk '/does not work/ {print $1}')
for p in $broken; do
  out=$("$tessera" train --sched "$p" "${short[@]}" 2>&1)
  if [[ $? != 0 ]] && grep -q "choose another" <<<"$out"; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: broken policy $p not refused: $out"; fi
done
check "priorities off" "$tessera" train --no-priorities --sched prio "${short[@]}" \
  --log "$tmp/noprio.jsonl"
check_log "priorities off" "$tmp/noprio.jsonl" 1 sched=prio priorities=false "${learned[@]}"

# The example custom policy, through the command line it carries. Seeds 1-3:
# loss 1.68-1.72 -> 0.70-0.76, test accuracy 0.67-0.70 after epoch 2.
check "custom policy" "$custom" train --sched critical-first --epochs 2 --train-limit 600 \
  --test-limit 100 --quiet --log "$tmp/custom.jsonl"
check_log "custom policy" "$tmp/custom.jsonl" 2 sched=critical-first "${learned[@]}"
out=$("$custom" info --sched-list 2>&1)
grep -q "critical-first" <<<"$out" && passed=$((passed + 1)) || {
  failed=$((failed + 1)); echo "FAIL: custom policy not listed"; }

# A trace and statistics of a short run, with a policy that uses priorities.
check "trace run" "$tessera" train --sched dmdas "${short[@]}" --stats --trace "$tmp/t.json" \
  --log "$tmp/t.jsonl"
check "trace valid" validate_trace "$tmp/t.json" "$tmp/t.jsonl" 1
check "trace run (custom policy)" "$custom" train --sched critical-first "${short[@]}" --stats \
  --trace "$tmp/c.json" --log "$tmp/c.jsonl"
check "trace valid (custom policy)" validate_trace "$tmp/c.json" "$tmp/c.jsonl" 1
out=$("$tessera" train --trace "$tmp/t.txt" 2>&1)
[[ $? == 2 ]] && grep -q -- "--trace" <<<"$out" && passed=$((passed + 1)) || {
  failed=$((failed + 1)); echo "FAIL: --trace without .json: $out"; }

echo "$passed passed, $failed failed"
((failed == 0))
