#!/bin/sh
# ResNet-20 on Fashion-MNIST to 93.5% test accuracy, tessera then PyTorch 1.13 (Debian) and the
# newest PyTorch from PyPI (TSR_PEER_PYTHON), one after the other on an idle machine; each
# PyTorch run is stopped once its own seconds reach tessera's time to the target.
cd "$(dirname "$0")/../../../.."
D=benchmarks/results/time-to-accuracy/zen3-2026-12-06
{ date -u; uptime; grep -m1 "model name" /proc/cpuinfo; } > $D/machine.txt
TSR_PEER_PYTHON=${TSR_PEER_PYTHON:-.venv-peers/bin/python} /usr/bin/python3 \
  benchmarks/time_to_accuracy.py --model resnet20 --epochs 20 --target 0.935 --out $D --force
{ date -u; uptime; } >> $D/machine.txt
