#!/usr/bin/env bash
# Builds what changed, then runs the test suites: scripts/run-tests.sh [meson test options],
# e.g. scripts/run-tests.sh data, or --suite mpi.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TSR_BUILD_DIR:-build}
[[ $build == /* ]] || build="$root/$build"
"$root/scripts/setup.sh"

# StarPU keeps calibration data in $STARPU_HOME (default ~/.starpu): keep the
# tests' inside the build folder, away from a user's own.
export STARPU_HOME=${STARPU_HOME:-$build/starpu-home}
mkdir -p "$STARPU_HOME"
# Open MPI refuses to start as root (CI containers) unless told it is fine.
if ((EUID == 0)); then
  export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
  export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
fi
# The tests share a calibration folder (tests/meson.build): calibrate its bus once now, so
# that tests starting together never read the files while another writes them.
bus="$build/tests/starpu-home/.starpu/sampling/bus"
STARPU_HOME="$build/tests/starpu-home" STARPU_NOPENCL=0 STARPU_SILENT=1 "$build/tessera" info \
  >/dev/null
before=$(cat "$bus"/* 2>/dev/null | cksum)
status=0
meson test -C "$build" --print-errorlogs "$@" || status=$?
# A test that made StarPU benchmark the bus again (another set of devices) rewrote those files
# while others read them: a crash that comes and goes. Say so every time instead.
if [[ $(cat "$bus"/* 2>/dev/null | cksum) != "$before" ]]; then
  echo "run-tests: a test recalibrated the shared StarPU bus files in $bus; give it a" \
    "STARPU_HOME of its own (tests/meson.build, opencl_env)" >&2
  status=1
fi
exit "$status"
