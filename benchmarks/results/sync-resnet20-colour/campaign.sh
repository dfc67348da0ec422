#!/bin/sh
# Issue 42's averaging study on a colour workload: Fashion-MNIST in colour
# (benchmarks/colour_fashion.py: 32x32x3, a foreground and a background tint drawn per image),
# ResNet-20, 2 ranks, 2 epochs, one seed, one run after the other on the idle 2-core machine.
# The images (210 MB) are written to $COLOUR_DATA (default /tmp/colour-fashion), not committed.
cd "$(dirname "$0")/../../.."
D=benchmarks/results/sync-resnet20-colour
DATA=${COLOUR_DATA:-/tmp/colour-fashion}
/usr/bin/python3 benchmarks/colour_fashion.py "$DATA"
{ date -u; uptime; grep -m1 "model name" /proc/cpuinfo; } >> $D/machine.txt
/usr/bin/python3 benchmarks/compare_sync.py --epochs 2 --target 0.85 --force --keep \
  --configs batch,every=8,epoch --seeds 1 --out $D -- --model resnet20 --data "$DATA"
{ date -u; uptime; } >> $D/machine.txt
# 2026-12-07 (a later session, 20:32-21:50): seeds 2 and 3 of the three policies; 4 ranks (oversubscribed: two
# a core), one seed; the other policies and --bn-recompute 16 on 2 ranks, seed 1 (--keep: seed
# 1's three runs above are read, not rerun)
S="/usr/bin/python3 benchmarks/compare_sync.py --epochs 2 --target 0.85 --force --keep"
$S --configs batch,every=8,epoch --seeds 1,2,3 --out $D -- --model resnet20 --data "$DATA"
{ date -u; uptime; } >> $D/machine.txt
$S --ranks 4 --configs batch,every=8,epoch --seeds 1 --out $D/4-ranks -- --model resnet20 \
  --data "$DATA"
{ date -u; uptime; } >> $D/machine.txt
$S --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8,epoch/bn-recompute=16 \
  --seeds 1 --out $D -- --model resnet20 --data "$DATA"
{ date -u; uptime; } >> $D/machine.txt
# the summary of all seven configurations (nothing run: every log is there)
/usr/bin/python3 benchmarks/compare_sync.py --epochs 2 --target 0.85 --force --no-run \
  --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8,epoch/bn-recompute=16 \
  --seeds 1,2,3 --out $D -- --model resnet20 --data "$DATA"
