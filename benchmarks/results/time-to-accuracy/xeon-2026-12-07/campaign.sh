#!/bin/sh
# ResNet-20 on Fashion-MNIST to 93.5% test accuracy on the 2-core Intel Xeon: tessera, then the
# newest PyTorch from PyPI (TSR_PEER_PYTHON) alone, on an idle machine: the run against Debian's
# 1.13 was made on the Zen 3 (../zen3-2026-12-06), the one against 2.15 was cut short there; 1.13
# is left out for time. The PyTorch run is stopped once its own seconds reach tessera's time to
# the target.
cd "$(dirname "$0")/../../../.."
D=benchmarks/results/time-to-accuracy/xeon-2026-12-07
{ date -u; uptime; grep -m1 "model name" /proc/cpuinfo; } > $D/machine.txt
TSR_PEER_PYTHON=${TSR_PEER_PYTHON:-.venv-peers/bin/python} /usr/bin/python3 \
  benchmarks/time_to_accuracy.py --model resnet20 --epochs 20 --target 0.935 --no-debian-peer \
  --out $D --force
{ date -u; uptime; } >> $D/machine.txt
