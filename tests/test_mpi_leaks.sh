#!/usr/bin/env bash
# tessera train on 2 ranks under LeakSanitizer: any memory tessera allocates and never frees
# fails the test, with LeakSanitizer's report (the allocating stack). Leaks inside Open MPI,
# PMIx, hwloc and StarPU are suppressed by library (tests/lsan.supp). Runs that cover the
# synchronization code: --sync batch (tasks every rank submits but one runs) with statistics
# and a trace (the observer's callbacks), --sync epoch, and the policies and outer optimizers of
# issue 15.
#
# A normal build gets the standalone LeakSanitizer runtime that GCC ships (liblsan) preloaded
# into each rank: no rebuild, a few seconds a run. A -Dsanitize=true build has the leak checker
# built in (AddressSanitizer's). Skipped (77) when neither is there.
# Usage: test_mpi_leaks.sh PATH/TO/tessera
set -u
tessera=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
[[ -d $data ]] || { echo "SKIP: no dataset at $data"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$here/lib.sh"

# fast_unwind_on_malloc=0: Debian's libraries have no frame pointers, and the suppressions need
# the frames past them (an Open MPI component unloaded at MPI_Finalize has no name left).
lsan_opts="suppressions=$here/lsan.supp:fast_unwind_on_malloc=0:exitcode=23"
rank_env=()
if ldd "$tessera" | grep -q libasan; then
  export ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:allocator_may_return_null=1
  export LSAN_OPTIONS=$lsan_opts
  rank_env=(-x ASAN_OPTIONS -x LSAN_OPTIONS)
else
  lsan=$(gcc -print-file-name=liblsan.so 2>/dev/null)
  [[ -f $lsan ]] || lsan=$(/sbin/ldconfig -p 2>/dev/null | awk '/liblsan\.so\.0 .*x86-64|liblsan\.so\.0 / { print $NF; exit }')
  if [[ -z $lsan || ! -f $lsan ]]; then
    echo "SKIP: no LeakSanitizer runtime (liblsan, from GCC) to preload"
    exit 77
  fi
  rank_env=(-x "LD_PRELOAD=$lsan" -x "LSAN_OPTIONS=$lsan_opts")
fi
mpi=(mpirun -np 2 --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT
  "${rank_env[@]}")
common=(--workers 1 --data "$data" --train-limit 640 --test-limit 100 --epochs 2 --quiet)

# run NAME ARGS...: 2 ranks train; exit 0 and no report.
run() {
  local name=$1 out rc
  shift
  out=$(timeout 300 "${mpi[@]}" "$tessera" train "${common[@]}" "$@" 2>&1)
  rc=$?
  if ((rc == 0)) && ! grep -q "LeakSanitizer" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name (exit $rc): tessera train $*"
    grep -E "LeakSanitizer|leak of|^    #|SUMMARY" <<<"$out" | head -40
  fi
}

run "batch, stats and trace" --sync batch --stats --trace "$tmp/trace.json" --log "$tmp/b.jsonl"
run "epoch" --sync epoch --log "$tmp/e.jsonl"
# The outer optimizer's state, the switch of post-local, hier's group accumulators.
run "post-local with an outer optimizer" --sync post-local:1,2 --outer nesterov
run "hier with outer steps" --sync hier:2,3 --outer slowmo
run "async-epoch with outer folds" --sync async-epoch --outer slowmo
echo "$passed passed, $failed failed"
((failed == 0))
