#!/usr/bin/env bash
# Benchmarks write where --out says, by default a new folder benchmarks/out/NAME-TIMESTAMP, and
# never over the committed results in benchmarks/results/ without --force: every script that
# writes (uses args.out) goes through benchmarks/outdir.py; the default path's logic; a real
# run of plan_table.py into a temporary --out; the same run pointed into benchmarks/results/
# refused (exit 2) with the committed files left byte for byte as they were; the four plots
# (scaling, sync, hetero, plan) redrawn from their committed CSVs are readable alone.
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

echo "benchmarks: $passed passed, $failed failed"
[[ $failed == 0 ]]
