#!/bin/bash
# Padded rows and the tile GEMMs through oneDNN's dnnl_sgemm (issue 38), idle machine: the
# kernels alone (bench_gemm), then the networks and the MLPs against both PyTorches, then the
# commit before (OLD: a build of it) against this one, BLIS's GEMMs and oneDNN's, peers left out.
cd "$(dirname "$0")/../../../.."
export STARPU_HOME=${STARPU_HOME:-/tmp/sph}  # TSR_PEER_PYTHON: the newer PyTorch's python
out=${OUT:-$(dirname "$0")}; mkdir -p "$out"
old=${OLD:?a build directory of the commit before}
run() { local name=$1; shift; { echo "\$ $*"; echo "# $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"; "$@"; echo "# done $(date -u +%T) loadavg $(cat /proc/loadavg)"; } > "$out/$name.txt" 2>&1; }
mlps=(--config 512,512:64 --config 1024,1024:128 --config 256,256,256,256:32)
run gemm build/benchmarks/bench_gemm
for i in 1 2; do
  run "before-mlp-$i" "$old/benchmarks/bench_train" "${mlps[@]}" --seconds 4 --rounds 3 --no-torch
  run "blis-mlp-$i" build/benchmarks/bench_train "${mlps[@]}" --seconds 4 --rounds 3 --no-torch --kernels blis
  run "after-mlp-$i" build/benchmarks/bench_train "${mlps[@]}" --seconds 4 --rounds 3 --no-torch
  run "before-vgg11-$i" "$old/benchmarks/bench_model" --model vgg11 --batch 64 --seconds 5 --rounds 2 --no-torch --kernels tuned
  run "after-vgg11-$i" build/benchmarks/bench_model --model vgg11 --batch 64 --seconds 5 --rounds 2 --no-torch --kernels tuned
done
run mlp build/benchmarks/bench_train "${mlps[@]}" --seconds 4 --rounds 5
run vgg11-tuned build/benchmarks/bench_model --model vgg11 --batch 64 --seconds 5 --rounds 3 --kernels tuned
run resnet20-tuned build/benchmarks/bench_model --model resnet20 --batch 128 --seconds 5 --rounds 3 --kernels tuned
run default10 build/tessera train --epochs 10
nice -n 19 sh -c 'while :; do :; done' & b1=$!
nice -n 19 sh -c 'while :; do :; done' & b2=$!
run loaded-mlp build/benchmarks/bench_train "${mlps[@]}" --seconds 4 --rounds 5
kill $b1 $b2
echo finished > "$out/FINISHED"
