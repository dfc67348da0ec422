#!/usr/bin/env bash
# Gets a checkout ready to run: installs the Debian packages tessera needs when
# any is missing, configures build/ once, and builds. Cheap to rerun: with
# everything in place it costs one dpkg-query and a no-op ninja.
#
# Environment:
#   CI=true              configure with -Dwerror_ci=true (warnings are errors)
#   TSR_BUILD_DIR=DIR    build folder, absolute or relative to the repository
#                        (default: build)
#   TSR_MESON_OPTIONS="-Dx=y ..."  meson options the build folder must have (set
#                        when it is configured, applied when it was configured
#                        without them), e.g. scripts/run-sanitized.sh's
#   TSR_SETUP_DRY_RUN=1  say what would be installed and run, change nothing
#   TSR_WITH_PEERS=1     also make a virtual environment with the newest PyTorch pip
#                        gives (from PyPI), the benchmarks' second peer beside Debian's
#                        PyTorch 1.13: TSR_PEER_VENV (default .venv-peers); the benchmarks
#                        use it with TSR_PEER_PYTHON=$TSR_PEER_VENV/bin/python (not for CI)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${TSR_BUILD_DIR:-build}
dry_run=${TSR_SETUP_DRY_RUN:-0}

# clang and libclang-rt-dev (its runtimes, libFuzzer's included) build tests/fuzz/. The OpenCL
# codelets (meson -Dopencl, auto) need the ICD loader and CLBlast; PoCL gives an OpenCL device on
# the CPU, so their tests run on any machine. NumPy and PyTorch test the Python package
# (python/tessera, tests/test_python.sh) and are the benchmarks' peer; matplotlib draws the plots.
# tests/test_slurm.sh starts a Slurm cluster on this machine (slurm-wlm: slurmctld, slurmd, srun;
# munge authenticates them) and runs tessera under srun --mpi=pmix: Slurm's PMIx plugin loads the
# unversioned libpmix.so, which is in libpmix-dev. fortunes' plain files are the default text of a
# language model (tessera train --model gpt:..., /usr/share/games/fortunes, about 2.5 MB).
# oneDNN (libdnnl-dev, the library PyTorch's CPU convolutions use) runs the convolutions
# (src/kernels/conv_dnnl.c); without it they fall back to the lowered BLIS GEMMs.
# python3-venv and python3-setuptools: pip install --no-build-isolation ./python, offline.
packages=(meson ninja-build pkg-config libstarpu-dev libopenmpi-dev openmpi-bin libblis-dev
  libcriterion-dev libhwloc-dev zlib1g-dev libcjson-dev libinih-dev dataset-fashion-mnist
  clang-format g++ python3-numpy python3-torch python3-matplotlib clang libclang-rt-dev
  pocl-opencl-icd libclblast-dev ocl-icd-opencl-dev slurm-wlm munge libpmix-dev fortunes
  libdnnl-dev python3-venv python3-setuptools)

say() { echo "setup: $*" >&2; }

# Runs a command, or only prints it in a dry run.
run() {
  if [[ $dry_run == 1 ]]; then
    say "would run: $*"
  else
    "$@"
  fi
}

missing_packages() {
  # One dpkg-query for all: it prints the packages it knows (and complains on
  # stderr about the others); anything not reported "installed" is missing.
  local installed
  installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null |
    awk '$2 == "installed" { print $1 }' || true)
  local p
  for p in "${packages[@]}"; do
    grep -qxF "$p" <<<"$installed" || echo "$p"
  done
}

install_packages() {
  if ! command -v dpkg-query >/dev/null; then
    say "not a Debian system: install the equivalents of these yourself: ${packages[*]}"
    return
  fi
  local missing
  mapfile -t missing < <(missing_packages)
  if ((${#missing[@]} == 0)); then
    return
  fi
  say "installing missing packages: ${missing[*]}"
  local sudo=()
  if ((EUID != 0)); then
    if ! command -v sudo >/dev/null; then
      say "not root and no sudo; as root run: apt-get install ${missing[*]}"
      exit 1
    fi
    sudo=(sudo)
  fi
  run "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  run "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

configure() {
  local opts=() extra=()
  [[ ${CI:-} == true ]] && opts+=(-Dwerror_ci=true)
  read -r -a extra <<<"${TSR_MESON_OPTIONS:-}"
  # A failed `meson setup` leaves no coredata, so this also retries those.
  if [[ ! -f $build_dir/meson-private/coredata.dat ]]; then
    say "configuring $build_dir"
    run meson setup "$build_dir" "${opts[@]}" "${extra[@]}"
    return
  fi
  if ((${#opts[@]} > 0)) && ! meson configure "$build_dir" | grep -Eq '^\s*werror_ci\s+true\b'; then
    # A build folder configured before CI turned warnings into errors.
    run meson configure "$build_dir" "${opts[@]}"
  fi
  # A folder configured before oneDNN was installed looked for it then (-Ddnnl=auto): look again.
  if [[ -f /usr/include/oneapi/dnnl/dnnl.h && -f $build_dir/build.ninja ]] &&
    ! grep -q TSR_HAVE_DNNL "$build_dir/build.ninja" &&
    ! meson configure "$build_dir" | grep -Eq '^\s*dnnl\s+disabled\b'; then
    run meson setup --reconfigure "$build_dir"
  fi
  if ((${#extra[@]} > 0)); then
    # Only the options the folder lacks: a folder that has them all is left as it is.
    local current o missing=()
    current=$(meson configure "$build_dir" | awk '{ print "-D" $1 "=" $2 }')
    for o in "${extra[@]}"; do
      grep -qxF -- "$o" <<<"$current" || missing+=("$o")
    done
    ((${#missing[@]} == 0)) || run meson configure "$build_dir" "${missing[@]}"
  fi
}

# The benchmarks' second PyTorch (TSR_WITH_PEERS=1): a virtual environment over Debian's
# python3 with torch and numpy from PyPI, made once.
peers() {
  local venv=${TSR_PEER_VENV:-.venv-peers}
  if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    say "making $venv with the newest PyTorch from PyPI (a few GB, several minutes)"
    run /usr/bin/python3 -m venv "$venv"
    run "$venv/bin/pip" install -q --upgrade torch numpy
  fi
  say "the second peer: export TSR_PEER_PYTHON=$(cd "$venv" 2>/dev/null && pwd || echo "$venv")/bin/python"
}

install_packages
configure
run ninja -C "$build_dir"
if [[ ${TSR_WITH_PEERS:-0} == 1 ]]; then
  peers
fi
