#!/usr/bin/env bash
# The installed data files: `meson install --destdir` into a temporary folder, then the installed
# tessera, run from an empty folder, finds the installed model and cluster files by bare name
# (tessera plan --model cnn.ini --cluster ib100), says where it looked when a name is found
# nowhere (the staged share/tessera, not this checkout), and TESSERA_DATA_DIR replaces those
# folders. From the build folder, a bare name finds the checkout's own files.
# Usage: test_install.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/lib.sh"

if ! meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/stage" >"$tmp/install.log" 2>&1; then
  echo "FAIL: meson install --destdir:"
  tail -20 "$tmp/install.log"
  exit 1
fi
exe=$(find "$tmp/stage" -path '*/bin/tessera' -type f | head -1)
share=$(find "$tmp/stage" -path '*/share/tessera' -type d | head -1)
lib=$(dirname "$(find "$tmp/stage" -name 'libtessera.so*' | head -1)")
[[ -x $exe && -f $share/models/cnn.ini && -f $share/clusters/ib100.ini ]] || {
  echo "FAIL: installed tree lacks bin/tessera or share/tessera/{models/cnn.ini,clusters/ib100.ini}:"
  (cd "$tmp/stage" && find . -type f | head -30)
  exit 1
}
mkdir "$tmp/empty"
cd "$tmp/empty" || exit 1
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset TESSERA_DATA_DIR
plan=(plan --batch 64 --ranks 4)

expect 0 "machine: ib100 \(described in $share/clusters/ib100.ini\)" -- \
  "$exe" "${plan[@]}" --model cnn.ini --cluster ib100
expect 0 "machine: eth10 \(described in $share/clusters/eth10.ini\)" -- \
  "$exe" "${plan[@]}" --model residual.ini --cluster eth10.ini
# Every installed model, at an input every one of them fits (AlexNet's windows need 63x63, VGG's
# 32x32; the others also take Fashion-MNIST's 28x28x1), on a described cluster (this machine
# would time every convolution shape of the zoo first).
for m in "$share"/models/*.ini; do
  expect 0 "tessera plan: $(basename "$m")" -- "$exe" "${plan[@]}" --model "$(basename "$m")" \
    --input 64x64x3 --cluster ib100
done
expect 1 "nosuch.ini: no such model file here, nor in $share/models" -- \
  "$exe" "${plan[@]}" --model nosuch.ini
expect 1 "nosuch: no such cluster file here, nor in $share/clusters" -- \
  "$exe" "${plan[@]}" --cluster nosuch
# An installed program does not reach into the checkout it was built from.
out=$("$exe" "${plan[@]}" --cluster nosuch 2>&1)
if grep -q "benchmarks/clusters" <<<"$out"; then
  failed=$((failed + 1)) && echo "FAIL: the installed tessera looked in the checkout: $out"
else
  passed=$((passed + 1))
fi
# A file of that name in the current folder wins; a folder there is refused as one.
printf '[cluster]\nname = local\ncores_per_node = 8\ngflops_per_core = 10\nmem_gbs = 10\nbandwidth_gbits = 10\n' >ib100
expect 0 "machine: local \(described in ib100\)" -- "$exe" "${plan[@]}" --cluster ib100
mkdir cnn.ini
expect 1 "cnn.ini: is a folder, not a model file" -- "$exe" "${plan[@]}" --model cnn.ini
# TESSERA_DATA_DIR replaces the data folders.
mkdir -p "$tmp/data/clusters" "$tmp/data/models"
printf '[cluster]\nname = mine\ncores_per_node = 8\ngflops_per_core = 10\nmem_gbs = 10\nbandwidth_gbits = 10\n' >"$tmp/data/clusters/mine.ini"
expect 0 "machine: mine \(described in $tmp/data/clusters/mine.ini\)" -- \
  env TESSERA_DATA_DIR="$tmp/data" "$exe" "${plan[@]}" --cluster mine
expect 1 "eth10: no such cluster file here, nor in $tmp/data/clusters;" -- \
  env TESSERA_DATA_DIR="$tmp/data" "$exe" "${plan[@]}" --cluster eth10
# tessera train looks model files up the same way.
expect 1 "nosuch.ini: no such model file here, nor in $share/models" -- \
  "$exe" train --model nosuch.ini --data "$tmp/empty" --epochs 1
# From the build folder, the checkout's own files.
mkdir "$tmp/empty2" && cd "$tmp/empty2" || exit 1
expect 0 "machine: ib100 \(described in $src/benchmarks/clusters/ib100.ini\)" -- \
  "$build/tessera" "${plan[@]}" --model mlp.ini --cluster ib100


# The Python package: meson install put it into the prefix's site-packages (wherever this
# Python keeps them), and pip installs it offline into a fresh virtual environment from a copy
# of python/ (pip builds in the tree it is given); either is imported from an empty folder, its
# version is meson's, and load_state_dict is there. A sys.path edit is never needed.
py=/usr/bin/python3
version=$(sed -n "s/^  version : '\(.*\)',$/\1/p" "$src/meson.build")
site=$(dirname "$(find "$tmp/stage" -path '*-packages/tessera/__init__.py' | head -1)")
cd "$tmp/empty2" || exit 1
probe='import tessera, tessera.pytorch as t; print(tessera.__file__, t.VERSION, callable(tessera.load_state_dict))'
if [[ -d $site ]] && out=$(PYTHONPATH=$(dirname "$site") "$py" -c "$probe" 2>&1) &&
  [[ $out == "$site/__init__.py $version True" ]]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)) && echo "FAIL: the package installed by meson (${site:-not found}): ${out:-}"
fi
if "$py" -c "import venv, setuptools, numpy, torch" 2>/dev/null; then
  cp -r "$src/python" "$tmp/pysrc" && rm -rf "$tmp/pysrc/build" "$tmp/pysrc"/*.egg-info
  if "$py" -m venv --system-site-packages "$tmp/venv" >"$tmp/pip.log" 2>&1 &&
    "$tmp/venv/bin/pip" install --no-build-isolation --no-index "$tmp/pysrc" >>"$tmp/pip.log" 2>&1 &&
    out=$("$tmp/venv/bin/python" -c "$probe" 2>&1) &&
    [[ $out == "$tmp/venv/lib/"*"/site-packages/tessera/__init__.py $version True" ]] &&
    [[ $("$tmp/venv/bin/pip" show tessera 2>/dev/null | sed -n 's/^Version: //p') == "$version" ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)) && echo "FAIL: pip install --no-build-isolation ./python: ${out:-}" &&
      tail -5 "$tmp/pip.log"
  fi
else
  echo "note: no venv, setuptools, NumPy or PyTorch for $py: pip install not checked" \
    "(scripts/setup.sh installs python3-venv, python3-setuptools, python3-numpy, python3-torch)"
fi

echo "install: $passed passed, $failed failed"
[[ $failed == 0 ]]
