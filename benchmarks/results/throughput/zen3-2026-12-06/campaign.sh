#!/bin/bash
# The issue-38 campaign on an idle machine, then the same with one nice -n 19 busy loop per core.
cd "$(dirname "$0")/../../../.."
export STARPU_HOME=${STARPU_HOME:-/tmp/sph}  # TSR_PEER_PYTHON: the newer PyTorch's python
out=${OUT:-/tmp/meas2}; mkdir -p "$out"
run() { local name=$1; shift; { echo "\$ $*"; echo "# $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"; "$@"; echo "# done $(date -u +%T) loadavg $(cat /proc/loadavg)"; } > "$out/$name.txt" 2>&1; }
run resnet20 build/benchmarks/bench_model --model resnet20 --batch 128 --seconds 5 --rounds 3
run vgg11 build/benchmarks/bench_model --model vgg11 --batch 64 --seconds 5 --rounds 3
run cnn64 build/benchmarks/bench_cnn --batch 64 --seconds 5 --rounds 3
run cnn128 build/benchmarks/bench_cnn --batch 128 --seconds 5 --rounds 3
run mlp build/benchmarks/bench_train --config 512,512:64 --config 1024,1024:128 --config 256,256,256,256:32 --seconds 4 --rounds 5
run gpt build/benchmarks/bench_gpt --model gpt:4,256,4,128 --batch 16 --seconds 5 --rounds 3
run resnet50 build/benchmarks/bench_model --model resnet50 --input 224x224x3 --classes 1000 --batch 8 --seconds 10 --rounds 2
run default10 build/tessera train --epochs 10
for i in 1 2 3; do run "resnet20-dmda$i" build/benchmarks/bench_model --model resnet20 --batch 128 --seconds 5 --rounds 3 --no-torch --sched dmda; done
for cfg in "--sched dmdas" "--kernels onednn" "--kernels blis" "--sched lws"; do
  run "resnet20-$(echo $cfg | tr -d ' -')" build/benchmarks/bench_model --model resnet20 --batch 128 --seconds 5 --rounds 3 --no-torch $cfg
done
# loaded: one nice -n 19 busy loop per core beside both
nice -n 19 sh -c 'while :; do :; done' & b1=$!
nice -n 19 sh -c 'while :; do :; done' & b2=$!
run loaded-mlp build/benchmarks/bench_train --config 512,512:64 --config 1024,1024:128 --config 256,256,256,256:32 --seconds 4 --rounds 5
run loaded-resnet20 build/benchmarks/bench_model --model resnet20 --batch 128 --seconds 5 --rounds 3
run loaded-cnn64 build/benchmarks/bench_cnn --batch 64 --seconds 5 --rounds 3
run loaded-default10 build/tessera train --epochs 10
kill $b1 $b2
run conv build/benchmarks/bench_conv --rounds 2 --seconds 0.1
echo finished > $out/FINISHED
