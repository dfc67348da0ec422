#!/bin/sh
# Issue 38, 2026-12-07: the fused SGD step (gemm_sgd) on the three MLPs of the issue, on the
# idle 2-core AMD EPYC Zen 3. Run from the repository root after building build/.
set -e
D=benchmarks/results/throughput/zen3-2026-12-07
export STARPU_SILENT=1
MLPS="--config 512,512:64 --config 1024,1024:128 --config 256,256,256,256:32"
# The step fused against the steps as tasks, in the same process each round.
build/benchmarks/bench_train $MLPS --seconds 3 --rounds 6 --no-torch --compare-steps \
  > $D/compare-steps.txt 2>&1
# Against both PyTorches (TSR_PEER_PYTHON: PyTorch 2.15 from PyPI), five rounds.
TSR_PEER_PYTHON=${TSR_PEER_PYTHON:-/work/torch-venv/bin/python} \
  build/benchmarks/bench_train $MLPS --seconds 3 --rounds 5 > $D/mlps.txt 2>&1
