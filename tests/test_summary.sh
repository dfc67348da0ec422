#!/usr/bin/env bash
# tessera summary as a user meets it: the layer table and totals of a shorthand and of zoo
# models found by bare name (--model resnet20), its JSON, bad options (exit 2) and files (exit
# 1); the zoo by name in plan (--input HxWxC) and train's option check.
# Usage: test_summary.sh PATH/TO/tessera
set -u
tessera=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

expect 0 "usage: tessera summary" -- "$tessera" summary --help
expect 0 "usage: tessera summary" -- "$tessera" summary -h
# The CNN at 28x28x1: 320 + 18,496 + 401,536 + 1,290 parameters.
expect 0 "total: 6 layers, 421642 parameters" -- "$tessera" summary --model cnn
expect 0 "conv\+relu +28x28x32 +320 +501760" -- "$tessera" summary --model cnn
expect 0 "^fc +dense +1x1x10 +650 " -- "$tessera" summary --model resnet20 --input 32x32x3
expect 0 "total: .* 273258 parameters" -- "$tessera" summary --model resnet20 --input 32x32x3
expect 0 "total: .* 61100840 parameters" -- "$tessera" summary --model alexnet --input 224x224x3 \
  --classes 1000
# The same through the file's path, and the classes bound to the file's units = classes.
expect 0 "^fc +dense +1x1x100 " -- "$tessera" summary --model "$(dirname "$0")/../models/resnet20.ini" \
  --input 32x32x3 --classes 100
"$tessera" summary --model resnet20 --input 32x32x3 --json >"$tmp/s.json"
check "summary --json" /usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["params"] == 273258 and s["input"] == [32, 32, 3], s["params"]
assert sum(l["params"] for l in s["layers"]) == s["params"]
assert abs(sum(l["flops"] for l in s["layers"]) - s["flops"]) < 1
assert s["layers"][-1]["output"] == [1, 1, 10] and s["layers"][-2]["type"] == "globalavgpool"
' "$tmp/s.json"
expect 2 "--input 32x32: expected HxWxC" -- "$tessera" summary --input 32x32
expect 2 "--input 0x32x3: expected HxWxC" -- "$tessera" summary --input 0x32x3
expect 2 "--classes 1: expected an integer from 2" -- "$tessera" summary --classes 1
expect 2 "unknown option '--modle'; did you mean '--model'" -- "$tessera" summary --modle cnn
expect 2 "'resnet21': unknown model \(did you mean resnet20\?\); .*a model of the zoo" -- "$tessera" summary --model resnet21
expect 1 "nosuch.ini: no such model file" -- "$tessera" summary --model nosuch.ini
# A window that does not fit: VGG-16's five poolings need 32x32 at least.
expect 1 "larger than its input" -- "$tessera" summary --model vgg16 --input 16x16x3
# The planner and train find the zoo by name too.
expect 0 "resnet20" -- "$tessera" plan --model resnet20 --input 32x32x3 --ranks 4 --sync batch \
  --cluster ib100
expect 2 "--input 3: expected HxWxC" -- "$tessera" plan --model resnet20 --input 3
expect 2 "unknown model" -- "$tessera" train --model resnet21 --epochs 1
# The Python package reads the layer types from the library: python/tessera/layer_types.py is
# what --layer-types says (scripts/layer_types.py writes it).
"$tessera" summary --layer-types >"$tmp/types.json"
check "python/tessera/layer_types.py is the registry's" /usr/bin/python3 -c '
import json, runpy, sys
want = json.load(open(sys.argv[1]))
have = runpy.run_path(sys.argv[2])["TYPES"]
assert have == want, "it differs from tessera summary --layer-types: run scripts/layer_types.py"
assert [t["name"] for t in want][:3] == ["dense", "relu", "conv"], want
' "$tmp/types.json" "$(dirname "$0")/../python/tessera/layer_types.py"

echo "$passed passed, $failed failed"
((failed == 0))
