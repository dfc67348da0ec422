#!/usr/bin/env bash
# The whole test suite built with AddressSanitizer and UndefinedBehaviorSanitizer, leak
# detection on: scripts/run-sanitized.sh [meson test options], e.g. scripts/run-sanitized.sh
# data, or --suite mpi. Builds in build-san/ (TSR_SAN_BUILD_DIR, absolute or relative to the
# repository), configured -Dsanitize=true with debug information so that reports name lines.
#
# Any invalid memory access, undefined behaviour or leak fails the test it happens in, every
# rank of an mpirun included (the MPI tests pass these options on with -x). Leaks that Open MPI,
# PMIx, hwloc and StarPU make inside themselves are suppressed by library (tests/lsan.supp says
# why each line is there, and what such suppressions cannot tell apart). GCC by default; with
# CC=clang the folder also gets -Db_lundef=false (clang links the runtime into executables only).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TSR_SAN_BUILD_DIR:-build-san}
[[ $build == /* ]] || build="$root/$build"

# fast_unwind_on_malloc=0: Debian's libraries have no frame pointers, so the fast unwinder stops
# at their first frame; the slow one walks through them to the frames the suppressions name
# (an Open MPI component unloaded at MPI_Finalize has no name left, its callers do).
# allocator_may_return_null=1: an impossible request returns NULL as glibc's malloc does, so
# the out-of-memory paths run as they would without the sanitizer. The caller's own settings
# come after these, so they win.
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

# The sanitizers slow tests down several times: longer timeouts.
export TSR_BUILD_DIR=$build
export TSR_MESON_OPTIONS="-Dsanitize=true -Dbuildtype=debugoptimized"
if "${CC:-cc}" --version 2>/dev/null | grep -q clang; then
  TSR_MESON_OPTIONS+=" -Db_lundef=false"
fi
exec "$root/scripts/run-tests.sh" --timeout-multiplier "${TSR_SAN_TIMEOUT_MULTIPLIER:-6}" "$@"
