#!/bin/bash
# Issue 38's figures on the 2-core Intel Xeon (AVX-512), idle, rerun on 2026-12-08 with the tree of 67151b9: the networks, the MLPs and the GPT
# against Debian's PyTorch 1.13 and the newest from PyPI ($TSR_PEER_PYTHON) in the same run, a
# 10-epoch default run, the MLPs with a nice 19 busy process per core beside them, and the
# kernels against oneDNN (bench_conv, bench_pool).
cd "$(dirname "$0")/../../../.."
export STARPU_HOME=${STARPU_HOME:-/tmp/sph}
out=${OUT:-$(dirname "$0")}; mkdir -p "$out"
run() { local name=$1; shift; { echo "\$ $*"; echo "# $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"; "$@"; echo "# done $(date -u +%T) loadavg $(cat /proc/loadavg)"; } > "$out/$name.txt" 2>&1; }
mlps=(--config 512,512:64 --config 1024,1024:128 --config 256,256,256,256:32)
run resnet20 build/benchmarks/bench_model --model resnet20 --batch 128 --seconds 5 --rounds 3
run vgg11 build/benchmarks/bench_model --model vgg11 --batch 64 --seconds 5 --rounds 3
run cnn64 build/benchmarks/bench_cnn --batch 64 --seconds 5 --rounds 3
run cnn128 build/benchmarks/bench_cnn --batch 128 --seconds 5 --rounds 3
run mlp build/benchmarks/bench_train "${mlps[@]}" --seconds 4 --rounds 5
run gpt build/benchmarks/bench_gpt --model gpt:4,256,4,128 --batch 16 --seconds 5 --rounds 3
run resnet50 build/benchmarks/bench_model --model resnet50 --input 224x224x3 --classes 1000 --batch 8 --seconds 10 --rounds 2
run googlenet build/benchmarks/bench_model --model googlenet --input 224x224x3 --classes 1000 --batch 8 --seconds 10 --rounds 2
run default10 build/tessera train --epochs 10
nice -n 19 sh -c 'while :; do :; done' & b1=$!
nice -n 19 sh -c 'while :; do :; done' & b2=$!
run loaded-mlp build/benchmarks/bench_train "${mlps[@]}" --seconds 4 --rounds 5
kill $b1 $b2
run pool build/benchmarks/bench_pool
run conv build/benchmarks/bench_conv --rounds 2 --seconds 0.1
echo finished > "$out/FINISHED"
# Run by hand after the campaign (00:33-00:40 UTC), on a build of 67151b9 whose filter_by_gemm
# (src/kernels/conv_dnnl.c) began with `if (getenv("TSR_NOGEMM")) return false;` (not committed):
#   TSR_NOGEMM=1 bench_conv --rounds 2 --seconds 0.1 > conv-filter-primitive.txt
#   bench_conv --rounds 2 --seconds 0.1 > conv-filter-gemm.txt
