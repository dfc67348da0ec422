#!/usr/bin/env bash
# Builds what changed, then trains: scripts/run-main.sh [tessera train options].
# Paths in the options are taken relative to where you call it from.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TSR_BUILD_DIR:-build}
[[ $build == /* ]] || build="$root/$build"
# Setup talks on stderr so that stdout carries only what tessera prints.
"$root/scripts/setup.sh" >&2
exec "$build/tessera" train "$@"
