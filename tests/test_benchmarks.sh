#!/usr/bin/env bash
# Benchmarks write where --out says, by default a new folder benchmarks/out/NAME-TIMESTAMP, and
# never over the committed results in benchmarks/results/ without --force: every script that
# writes (uses args.out) goes through benchmarks/outdir.py; the default path's logic; a real
# run of plan_table.py into a temporary --out; the same run pointed into benchmarks/results/
# refused (exit 2) with the committed files left byte for byte as they were; the four plots
# (scaling, sync, hetero, plan) redrawn from their committed CSVs are readable alone;
# colour_fashion.py's files as tessera reads CIFAR-10.
# Usage: test_benchmarks.sh PATH/TO/tessera
set -u
tessera=$1
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/lib.sh"
python=/usr/bin/python3
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)) && echo "FAIL: $*"; }

for f in "$src"/benchmarks/*.py; do
  [[ $(basename "$f") == outdir.py ]] && continue
  if grep -q 'add_argument("--out"' "$f" || { grep -q "args\.out" "$f" && ! grep -q "resolve_out(" "$f"; }; then
    fail "$(basename "$f") has an --out of its own, or writes to args.out without outdir.resolve_out"
  else
    pass
  fi
done

if PYTHONPATH="$src/benchmarks" "$python" - "$src" <<'PY'; then pass; else fail "outdir's default path and refusal"; fi
import argparse, os, re, sys
import outdir
src = sys.argv[1]
out = os.path.join(src, "benchmarks", "out")
p = outdir.default_out("scaling", now=0)
assert p == os.path.join(out, "scaling-19700101-000000"), p
assert outdir.is_committed(os.path.join(src, "benchmarks", "results"))
assert outdir.is_committed(os.path.join(src, "benchmarks", "results", "sync", "x"))
assert not outdir.is_committed(os.path.join(src, "benchmarks", "results-mine"))
assert not outdir.is_committed(p)
ap = argparse.ArgumentParser()
outdir.add_out_arguments(ap)
args = ap.parse_args([])
outdir.resolve_out(ap, args, "x", create=False)
assert re.fullmatch(re.escape(out) + r"/x-\d{8}-\d{6}(-\d+)?", args.out), args.out
args = ap.parse_args(["--out", os.path.join(src, "benchmarks", "results", "plan"), "--force"])
outdir.resolve_out(ap, args, "x", create=False)  # allowed on purpose
args = ap.parse_args(["--out", os.path.join(src, "benchmarks", "results", "plan")])
try:
    outdir.resolve_out(ap, args, "x", create=False)
except SystemExit as e:
    assert e.code == 2
else:
    raise AssertionError("--out into benchmarks/results accepted without --force")
PY

small=(--tessera "$tessera" --clusters eth10 --models cnn --nodes 16 --batches 32)
if "$python" "$src/benchmarks/plan_table.py" "${small[@]}" --out "$tmp/plan" >"$tmp/out.txt" 2>&1 &&
  [[ -s $tmp/plan/table.md && -s $tmp/plan/plans.csv ]]; then
  pass
else
  fail "plan_table.py --out $tmp/plan: $(tail -3 "$tmp/out.txt")"
fi
before=$(cd "$src/benchmarks/results" && find . -type f -exec sha1sum {} + | sort)
out=$("$python" "$src/benchmarks/plan_table.py" "${small[@]}" --out "$src/benchmarks/results/plan" 2>&1)
rc=$?
after=$(cd "$src/benchmarks/results" && find . -type f -exec sha1sum {} + | sort)
if [[ $rc == 2 ]] && grep -q "inside benchmarks/results/, the committed results" <<<"$out" &&
  [[ $before == "$after" ]]; then
  pass
else
  fail "plan_table.py --out benchmarks/results/plan: exit $rc ($out); committed files changed: $([[ $before == "$after" ]] && echo no || echo yes)"
fi

# The plots, redrawn from the committed CSVs into $tmp: readable alone (tests/check_plots.py).
"$python" "$src/tests/check_plots.py" "$src" "$tmp/plots" >"$tmp/plots.txt" 2>&1
case $? in
  0) pass ;;
  77) echo "SKIP (plots): $(cat "$tmp/plots.txt")" ;;
  *) fail "plots: $(cat "$tmp/plots.txt")" ;;
esac

# colour_fashion.py (the averaging study's colour workload): 40 images each way as CIFAR-10
# binaries, 3,073 bytes a record, labelled as Fashion-MNIST's, that tessera trains on as
# 32 x 32 x 3 images (3,072 inputs).
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
if [[ -d $data ]]; then
  if "$python" "$src/benchmarks/colour_fashion.py" "$tmp/colour" --data "$data" --limit 40 \
    >"$tmp/colour.txt" 2>&1 &&
    "$python" - "$src/python" "$tmp/colour" "$data" >>"$tmp/colour.txt" 2>&1 <<'PY' &&
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import tessera
train, test = tessera.data.load(sys.argv[3])
b = np.fromfile(os.path.join(sys.argv[2], "data_batch_1.bin"), dtype=np.uint8).reshape(-1, 3073)
t = np.fromfile(os.path.join(sys.argv[2], "test_batch.bin"), dtype=np.uint8).reshape(-1, 3073)
assert len(b) == 8 and len(t) == 40, (len(b), len(t))
assert (b[:, 0] == np.asarray(train.y[:8])).all() and (t[:, 0] == np.asarray(test.y[:40])).all()
PY
    "$tessera" train --data "$tmp/colour" --model cnn --epochs 1 >>"$tmp/colour.txt" 2>&1 &&
    grep -q "model 3072-conv" "$tmp/colour.txt"; then
    pass
  else
    fail "colour_fashion.py: $(tail -3 "$tmp/colour.txt")"
  fi
fi

echo "benchmarks: $passed passed, $failed failed"
[[ $failed == 0 ]]
