#!/bin/bash
# Issue 38: 1x1 filter gradients by dnnl_sgemm. old = the tree before the change (ccff8b7, built
# apart: git clone . /tmp/oldclone && git -C /tmp/oldclone checkout ccff8b7 && (cd /tmp/oldclone
# && meson setup build && ninja -C build)), new = the change (build/). Same machine, idle, old and
# new alternating; PyTorch 1.13 and 2.15 (best of 1 and 2 threads) in the last new run of each.
# usage (from anywhere): campaign.sh [OUT], run on 2026-12-07 with OUT a scratch folder.
set -u
cd "$(dirname "$0")/../../../.."
NEW=build/benchmarks OLD=${OLD:-/tmp/oldclone/build/benchmarks}
OUT=$(realpath "${1:-benchmarks/results/throughput/zen3-2026-12-07b}")
export TSR_PEER_PYTHON=${TSR_PEER_PYTHON:-/work/torch-venv/bin/python}
stamp() { echo "# $(date -u +%FT%TZ) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"; }
run() { # file, binary dir, bench, args...
  local f=$1 dir=$2 b=$3; shift 3
  { stamp; echo "\$ $dir/$b $*"; "$dir/$b" "$@"; } >> "$OUT/$f" 2>&1
}
R50="--model resnet50 --input 224x224x3 --classes 1000 --batch 8 --seconds 15 --rounds 2"
GOO="--model googlenet --input 224x224x3 --classes 1000 --batch 8 --seconds 15 --rounds 2"
GPT="--model gpt:4,256,4,128 --batch 16 --seconds 5 --rounds 3"
for r in 1 2 3; do
  run resnet50-old.txt $OLD bench_model $R50 --no-torch
  if [ $r = 3 ]; then run resnet50.txt $NEW bench_model $R50; else run resnet50.txt $NEW bench_model $R50 --no-torch; fi
done
for r in 1 2 3; do
  run googlenet-old.txt $OLD bench_model $GOO --no-torch
  if [ $r = 3 ]; then run googlenet.txt $NEW bench_model $GOO; else run googlenet.txt $NEW bench_model $GOO --no-torch; fi
done
for r in 1 2 3; do
  run gpt-old.txt $OLD bench_gpt $GPT --no-torch
  if [ $r = 3 ]; then run gpt.txt $NEW bench_gpt $GPT; else run gpt.txt $NEW bench_gpt $GPT --no-torch; fi
done
stamp >> "$OUT/done"
