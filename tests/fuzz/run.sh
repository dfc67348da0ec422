#!/usr/bin/env bash
# Runs the libFuzzer harnesses of tests/fuzz/ (one per parser: IDX, CSV, CIFAR, .npy, .npz, text,
# model files, cluster files, tessera train's options, safetensors checkpoints and the state a
# resume reads from them, trace-summary's traces), each for SECONDS (default 10), one after the
# other:
#
#   tests/fuzz/run.sh [SECONDS] [NAME...]        e.g. tests/fuzz/run.sh 600 idx csv
#
# Builds them first in a folder of their own (TSR_FUZZ_BUILD_DIR, default build-fuzz/ in the
# repository), configured with clang and -Dfuzz=true: the library compiled with coverage, ASan
# and UBSan, apart from the normal build. Each harness starts from its seeds (corpus/NAME/, in
# the tree, only read) and what earlier runs found (FOLDER/corpus/NAME/, kept between runs). A
# crash, leak, undefined behaviour, broken promise, timeout or out-of-memory fails the run and
# leaves the input that did it in FOLDER/findings/NAME/; `FOLDER/tests/fuzz/fuzz_NAME FILE`
# replays it. The last line of each harness's log, printed, gives executions per second and
# coverage (cov: edges, ft: features).
#
# Exits 77 (skipped) with a message when clang cannot build a libFuzzer program here (Debian:
# clang and libclang-rt-dev, which scripts/setup.sh installs).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${1:-10}
shift $(($# > 0 ? 1 : 0))
build=${TSR_FUZZ_BUILD_DIR:-build-fuzz}
[[ $build == /* ]] || build="$root/$build"
clang=${TSR_FUZZ_CC:-clang}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return !d && n; }' \
  >"$tmp/probe.c"
if ! command -v "$clang" >/dev/null 2>&1 ||
  ! "$clang" -fsanitize=fuzzer,address,undefined "$tmp/probe.c" -o "$tmp/probe" 2>"$tmp/probe.log"; then
  echo "SKIP: $clang cannot build a libFuzzer program here; install clang and libclang-rt-dev" \
    "(scripts/setup.sh does)"
  sed 's/^/  /' "$tmp/probe.log" 2>/dev/null | head -5
  exit 77
fi

if [[ ! -f $build/meson-private/coredata.dat ]]; then
  # b_lundef=false: clang links the sanitizers' runtime into executables only, so the shared
  # library has undefined references to it until an executable loads it.
  CC=$clang meson setup "$build" "$root" -Dfuzz=true -Dbuildtype=debugoptimized -Db_lundef=false \
    >"$tmp/setup.log" 2>&1 ||
    { cat "$tmp/setup.log"; exit 1; }
fi
ninja -C "$build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }

names=("$@")
if ((${#names[@]} == 0)); then
  for exe in "$build"/tests/fuzz/fuzz_*; do
    [[ -x $exe && -f $exe ]] && names+=("${exe##*/fuzz_}")
  done
  ((${#names[@]} > 0)) || { echo "no harness in $build/tests/fuzz/"; exit 1; }
fi

# The sanitizers' settings for the harnesses, whatever the caller's: the harness processes load
# Open MPI and StarPU (not started), whose own leaks at exit tests/lsan.supp names.
export ASAN_OPTIONS=detect_leaks=1
export LSAN_OPTIONS=suppressions=$root/tests/lsan.supp
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

status=0
for name in "${names[@]}"; do
  exe=$build/tests/fuzz/fuzz_$name
  if [[ ! -x $exe ]]; then
    echo "$name: no harness $exe"
    status=1
    continue
  fi
  corpus=$build/corpus/$name findings=$build/findings/$name
  mkdir -p "$corpus" "$findings"
  log=$build/findings/$name.log
  "$exe" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" "$here/corpus/$name" >"$log" 2>&1
  rc=$?
  done_line=$(grep -E '^#[0-9]+\s+DONE' "$log" | tail -1)
  rate=$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{ print $2 }')
  if ((rc == 0)); then
    echo "$name: ${seconds}s, ${rate:-?} exec/s, ${done_line:-no DONE line}"
  else
    status=1
    echo "$name: FAILED (exit $rc); inputs in $findings/, log $log:"
    grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse|INITED|RELOAD)' "$log" | tail -40
  fi
done
exit $status
