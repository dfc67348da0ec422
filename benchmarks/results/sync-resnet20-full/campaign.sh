#!/bin/sh
# Issue 42's averaging study on ResNet-20 with the whole Fashion-MNIST training set, as far as a
# session's time goes, one step after the other on the idle 2-core machine. --keep: a run whose
# log is complete is read, not rerun (the first step's seed-1 runs are from 2026-12-07 09:25).
cd "$(dirname "$0")/../../.."
D=benchmarks/results/sync-resnet20-full
S="/usr/bin/python3 benchmarks/compare_sync.py --epochs 2 --target 0.87 --force --keep"
{ date -u; uptime; grep -m1 "model name" /proc/cpuinfo; } >> $D/machine.txt
# 2 ranks, the four policies, 3 seeds
$S --configs batch,every=8,epoch,post-local:1,8 --seeds 1,2,3 --out $D -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
# 4 ranks (oversubscribed: two a core), one seed
$S --ranks 4 --configs batch,every=8,epoch --seeds 1 --out $D/4-ranks -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
# 2 ranks, SlowMo's outer step on every=8 and epoch, 3 seeds; the summary of all six
$S --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8 --seeds 1,2,3 \
  --out $D -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
# --sync-bn as a variant of three policies, one seed (batch first: the reference of this summary)
$S --configs batch,batch/sync-bn,every=8/sync-bn,epoch/sync-bn --seeds 1 --out $D -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
# the summary of all nine configurations (nothing run: every log is there)
/usr/bin/python3 benchmarks/compare_sync.py --epochs 2 --target 0.87 --force --no-run \
  --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8,batch/sync-bn,every=8/sync-bn,epoch/sync-bn \
  --seeds 1,2,3 --out $D -- --model resnet20
# 2026-12-07 (second session): --bn-recompute 16 (the batchnorm statistics recomputed under the
# averaged weights at each epoch end, over the epoch's first 16 batches a rank), with and
# without --sync-bn; batch, every=8 and epoch are read from the runs above
$S --configs batch,every=8,epoch,every=8/bn-recompute=16,epoch/bn-recompute=16 --seeds 1,2,3 \
  --out $D -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
$S --configs batch,every=8/sync-bn/bn-recompute=16,epoch/sync-bn/bn-recompute=16 --seeds 1 \
  --out $D -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
# the summary of all thirteen configurations (nothing run: every log is there)
/usr/bin/python3 benchmarks/compare_sync.py --epochs 2 --target 0.87 --force --no-run \
  --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8,batch/sync-bn,every=8/sync-bn,epoch/sync-bn,every=8/bn-recompute=16,epoch/bn-recompute=16,every=8/sync-bn/bn-recompute=16,epoch/sync-bn/bn-recompute=16 \
  --seeds 1,2,3 --out $D -- --model resnet20
# 4 ranks: seeds 2 and 3 of batch, every=8 and epoch, hier:2,8,2 (pairs of ranks every 2 steps,
# all every 8) and epoch/bn-recompute=16, seeds 1-3
$S --ranks 4 --configs batch,every=8,epoch,hier:2,8,2,epoch/bn-recompute=16 --seeds 1,2,3 \
  --out $D/4-ranks -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
# 2026-12-07 (third session): 4 ranks, seed 1: SlowMo on every=8 and epoch, post-local:1,8,
# and --sync-bn (batch, and epoch with --bn-recompute 16); 2 ranks, seed 1: async-epoch on the
# build of a006cfc, which folded the batchnorm statistics beside the weights (reverted after this
# run: its log is async/folded-stats.s1.jsonl); the same run on 32ccedd's build, where each
# replica keeps its own statistics, is async/own-stats.s1.jsonl (by hand, beside the test suite)
$S --ranks 4 --configs batch,every=8+slowmo,epoch+slowmo,post-local:1,8,batch/sync-bn,epoch/sync-bn/bn-recompute=16 \
  --seeds 1 --out $D/4-ranks -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
$S --configs batch,async-epoch --seeds 1 --out $D -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
# the summaries of every configuration (nothing run: every log is there)
/usr/bin/python3 benchmarks/compare_sync.py --epochs 2 --target 0.87 --force --no-run \
  --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8,batch/sync-bn,every=8/sync-bn,epoch/sync-bn,every=8/bn-recompute=16,epoch/bn-recompute=16,every=8/sync-bn/bn-recompute=16,epoch/sync-bn/bn-recompute=16 \
  --seeds 1,2,3 --out $D -- --model resnet20
/usr/bin/python3 benchmarks/compare_sync.py --ranks 4 --epochs 2 --target 0.87 --force --no-run \
  --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8,hier:2,8,2,batch/sync-bn,epoch/bn-recompute=16,epoch/sync-bn/bn-recompute=16 \
  --seeds 1,2,3 --out $D/4-ranks -- --model resnet20
# 2026-12-08: the 4-rank logs read again at 85%, the target every policy reaches there (nothing
# run; summary-85.md beside summary.md)
/usr/bin/python3 benchmarks/compare_sync.py --ranks 4 --epochs 2 --target 0.85 --force --no-run \
  --summary summary-85 \
  --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8,hier:2,8,2,batch/sync-bn,epoch/bn-recompute=16,epoch/sync-bn/bn-recompute=16 \
  --seeds 1,2,3 --out $D/4-ranks -- --model resnet20
# 2026-12-08, 00:43-01:09 UTC, the 2-core Intel Xeon (commit 67151b9): seeds 2 and 3 of the four
# --sync-bn configurations at 2 ranks (batch and seed 1 read, not rerun), then the summary of all
# thirteen again, plotted with both machines named
$S --configs batch,batch/sync-bn,every=8/sync-bn,epoch/sync-bn,every=8/sync-bn/bn-recompute=16,epoch/sync-bn/bn-recompute=16 \
  --seeds 1,2,3 --out $D -- --model resnet20
{ date -u; uptime; } >> $D/machine.txt
/usr/bin/python3 benchmarks/compare_sync.py --epochs 2 --target 0.87 --force --no-run \
  --machine "2 cores, AMD EPYC Zen 3, vm; seeds 2-3 of the --sync-bn runs on a 2-core Intel Xeon" \
  --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8,batch/sync-bn,every=8/sync-bn,epoch/sync-bn,every=8/bn-recompute=16,epoch/bn-recompute=16,every=8/sync-bn/bn-recompute=16,epoch/sync-bn/bn-recompute=16 \
  --seeds 1,2,3 --out $D -- --model resnet20
# 2026-12-08, 01:11-01:39 UTC, the 2-core Intel Xeon (commit 67151b9): 4 ranks, seeds 2 and 3 of
# the third part's five configurations (batch and seed 1 read), then both 4-rank summaries again
$S --ranks 4 --summary summary-xeon-seeds \
  --configs batch,post-local:1,8,every=8+slowmo,epoch+slowmo,batch/sync-bn,epoch/sync-bn/bn-recompute=16 \
  --seeds 1,2,3 --out $D/4-ranks -- --model resnet20
rm -f $D/4-ranks/summary-xeon-seeds.*
{ date -u; uptime; } >> $D/machine.txt
for t in 0.87:summary 0.85:summary-85; do
  /usr/bin/python3 benchmarks/compare_sync.py --ranks 4 --epochs 2 --target ${t%%:*} --force --no-run \
    --summary ${t##*:} \
    --machine "2 cores, AMD EPYC Zen 3, vm; seeds 2-3 of slowmo, post-local and sync-bn on a 2-core Intel Xeon" \
    --configs batch,every=8,every=8+slowmo,epoch,epoch+slowmo,post-local:1,8,hier:2,8,2,batch/sync-bn,epoch/bn-recompute=16,epoch/sync-bn/bn-recompute=16 \
    --seeds 1,2,3 --out $D/4-ranks -- --model resnet20
done
