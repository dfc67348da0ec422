#!/bin/sh
# PyTorch 2.15 (PyPI) added to the comparison of ../zen3-2026-12-06/: the same recipe, stopped once
# its own seconds reach the time tessera needed to 93.5% in that run (its log, read again here).
# On the same 2-core AMD EPYC Zen 3, idle.
cd "$(dirname "$0")/../../../.."
D=benchmarks/results/time-to-accuracy/zen3-2026-12-07
{ date -u; uptime; grep -m1 "model name" /proc/cpuinfo; } > $D/machine.txt
TSR_PEER_PYTHON=${TSR_PEER_PYTHON:-/work/torch-venv/bin/python} /usr/bin/python3 \
  benchmarks/time_to_accuracy.py --model resnet20 --epochs 20 --target 0.935 --no-debian-peer \
  --tessera-log benchmarks/results/time-to-accuracy/zen3-2026-12-06/tessera.jsonl --out $D --force
{ date -u; uptime; } >> $D/machine.txt
