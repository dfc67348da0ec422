#!/bin/bash
# The second issue-38/40 campaign of 2026-12-06, idle machine: --kernels tuned against the
# default on ResNet-20, VGG-11 and the GPT (with both PyTorches beside the tuned runs), then the
# portable build (build/) against -Dmarch=native (build-native/) with compare_builds.py.
cd "$(dirname "$0")/../../../.."
export STARPU_HOME=${STARPU_HOME:-/tmp/sph}  # TSR_PEER_PYTHON: the newer PyTorch's python
out=${OUT:-$(dirname "$0")}; mkdir -p "$out"
run() { local name=$1; shift; { echo "\$ $*"; echo "# $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"; "$@"; echo "# done $(date -u +%T) loadavg $(cat /proc/loadavg)"; } > "$out/$name.txt" 2>&1; }
run resnet20-tuned build/benchmarks/bench_model --model resnet20 --batch 128 --seconds 5 --rounds 3 --kernels tuned
run vgg11-tuned build/benchmarks/bench_model --model vgg11 --batch 64 --seconds 5 --rounds 3 --kernels tuned
run gpt-tuned build/benchmarks/bench_gpt --model gpt:4,256,4,128 --batch 16 --seconds 5 --rounds 3 --kernels tuned
for k in auto tuned auto tuned; do
  run "kernels-$k-resnet20" build/benchmarks/bench_model --model resnet20 --batch 128 --seconds 5 --rounds 3 --no-torch --kernels $k
  run "kernels-$k-vgg11" build/benchmarks/bench_model --model vgg11 --batch 64 --seconds 5 --rounds 3 --no-torch --kernels $k
  run "kernels-$k-gpt" build/benchmarks/bench_gpt --seconds 5 --rounds 3 --no-torch --kernels $k
done
run portable /usr/bin/python3 benchmarks/compare_builds.py build-native build --rounds 3 --seconds 3 --only mlp64,mlp256,cnn,resnet20,gpt --out "$out/compare" --force
echo finished
