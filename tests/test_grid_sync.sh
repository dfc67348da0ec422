#!/usr/bin/env bash
# The --sync policies and outer optimizers a grid with several columns takes beyond batch
# (issue 24): the grid's Pc columns are Pc replicas that see the samples Pc ranks without a grid
# see, so --grid 2x2 on 4 ranks must train as 2 ranks do. The MLP 784-128-64-10, batch 32 per
# replica, 1,280 samples (20 steps an epoch), --deterministic, a constant rate, both runs in
# the grid's own tiles (--tile 32x64: without --tile the grid cuts features by the widest layer
# / Pr, 64, 2 ranks take 1024, and that other order of the GEMMs' sums alone, amplified by
# slowmo over an inner momentum, moved the test loss by 1e-4 in 2 epochs; in the same tiles it
# is equal to the digit). For each case the grid run against the 2 ranks':
#   - every epoch's training and test loss within 1e-5 relative;
#   - with --checkpoint, every tensor of the two checkpoints (weights, the outer momentum, and
#     with SGD's momentum each replica's own state: the grid's optimizer.column<q>. against the
#     2 ranks' optimizer.rank<q>.) within 1e-6.
#   Measured: equal in every case, losses to the digit and tensors bit for bit (the same sums in
#   the same order); the outer momentum of slowmo is the weights' difference / lr, so a run in
#   other tiles differs there by 1e-6 where the weights differ by 1e-8.
# Cases: post-local:1,2 (one epoch of batch, then local SGD averaged every 2 steps), every=4
# --outer slowmo, epoch --outer nesterov, and a CNN (its convolutions replicated on every grid
# row) under every=4 --outer slowmo; async-epoch (each tile folded by its grid row, column 0's
# fold first, as rank 0's is first without a grid), with the inner momentum, without it, with
# --outer slowmo (a column's share 1/Pc of the pseudo-gradient) and on the CNN (every row folds
# its own copy of the convolutions), each 3 epochs (2 for the CNN) so that a replica continues
# from its fold's result; measured equal too. A 2x2 checkpoint of every=4 --outer slowmo resumed on 2x2
# is the uninterrupted run bit for bit (the outer momentum written back to its chunks' homes in
# each grid row, the anchors taken from the weights). What stays refused exits 2 with its
# reason: two levels on nodes the grid rows lie on unevenly. hier: groups of
# whole columns, 2x2 as 2 ranks (one group) and 2x4 in groups of 2 columns as 4 ranks in groups
# of 2, measured equal. Usage: test_grid_sync.sh PATH/TO/tessera
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
[[ -d $data ]] || { echo "SKIP: no dataset at $data"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Every run below takes at most 1,280 training and 200 test samples: those alone (lib.sh).
data=$(prefix_data "$data" "$tmp/data" 1280 200)
mpi=(mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT "${mpi_env[@]}")
run=(train --data "$data" --train-limit 1280 --test-limit 200 --workers 1 --deterministic
  --lr-schedule constant --lr-scaling none --batch 32 --tile 32x64 --quiet)
mlp=(--model mlp:128,64)
check_show=$tmp/out

# NAME GRID|-|-N EPOCHS [options]: a run logging to NAME.jsonl, NAME in the options replaced by
# NAME (GRID PrxPc: Pr Pc ranks; -: 2 ranks without --grid, -N N ranks).
train() {
  local name=$1 grid=$2 epochs=$3 np
  shift 3
  local cmd=("$tessera" "${run[@]}" --epochs "$epochs" --log "$tmp/$name.jsonl" "${@//NAME/$name}")
  if [[ $grid != -* ]]; then
    np=$((${grid%x*} * ${grid#*x}))
    cmd=("${mpi[@]}" -np "$np" "${cmd[@]}" --grid "$grid")
  else
    np=${grid#-}
    cmd=("${mpi[@]}" -np "${np:-2}" "${cmd[@]}")
  fi
  check "$name: trains" timeout 300 "${cmd[@]}" >"$tmp/out" 2>&1
}

# compare A B TOLERANCE [STATE_TOLERANCE]: every epoch's loss and test loss of logs A and B
# within 1e-5 relative (TOLERANCE 0: equal); with checkpoints A.st and B.st, every tensor within
# TOLERANCE (0: bit for bit).
compare() {
  check "$1 against $2 (within $3)" env PYTHONPATH="$here" /usr/bin/python3 - "$tmp" "$@" <<'PY'
import json, os, sys
import st_floats
tmp, a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def tensors(name):
    # Each replica's own optimizer state: a grid column's under a grid, a rank's without.
    t = st_floats.tensors("%s/%s.st" % (tmp, name))
    return {k.replace("optimizer.column", "optimizer.rank"): v for k, v in t.items()}
def epochs(name):
    return [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, name)) if '"event"' not in l]
ea, eb = epochs(a), epochs(b)
# By epoch: a resumed run logs the epochs it ran.
by = {y["epoch"]: y for y in eb}
pairs = [(x, by[x["epoch"]]) for x in ea if x["epoch"] in by]
assert pairs and ea[-1]["epoch"] == eb[-1]["epoch"], ([x["epoch"] for x in ea], sorted(by))
rel = max(abs(x[key] - y[key]) / abs(y[key]) for x, y in pairs for key in ("loss", "test_loss"))
line = "  %s vs %s: %d epochs, losses max relative diff %.3g (last test loss %.7f vs %.7f)" % (
    a, b, len(pairs), rel, ea[-1]["test_loss"], eb[-1]["test_loss"])
worst = 0.0
if os.path.exists("%s/%s.st" % (tmp, a)):
    ta, tb = tensors(a), tensors(b)
    assert ta.keys() == tb.keys(), sorted(ta.keys() ^ tb.keys())
    worst = max(max(abs(x - y) for x, y in zip(ta[k], tb[k])) for k in ta)
    outer = [k for k in ta if k.startswith("outer.")]
    line += ", %d tensors (%d outer) max |diff| %.3g" % (len(ta), len(outer), worst)
    if tol == 0:
        assert all(ta[k].tobytes() == tb[k].tobytes() for k in ta), "not bit for bit"
print(line)
assert rel <= (1e-5 if tol > 0 else 0.0), rel
assert worst <= tol, worst
PY
}

# CASE OPTIONS...: the grid and 2 ranks with OPTIONS, compared.
both() {
  local name=$1 epochs=$2 tol=$3
  shift 3
  train "${name}22" 2x2 "$epochs" "$@"
  train "${name}2" - "$epochs" "$@"
  compare "${name}22" "${name}2" "$tol"
}

# post-local with SGD's momentum (shared by the columns' homes, then each column's own), and
# without it, checkpointed.
both post 3 1e-6 "${mlp[@]}" --sync post-local:1,2 --checkpoint "$tmp/NAME.st"
both post0 3 1e-6 "${mlp[@]}" --sync post-local:1,2 --momentum 0 --checkpoint "$tmp/NAME.st"
# Outer optimizers, with the inner momentum and without it (checkpointed with their momentum).
both slowmo 2 1e-6 "${mlp[@]}" --sync every=4 --outer slowmo --checkpoint "$tmp/NAME.st"
both slowmo0 2 1e-6 "${mlp[@]}" --sync every=4 --outer slowmo --momentum 0 \
  --checkpoint "$tmp/NAME.st"
both nesterov0 2 1e-6 "${mlp[@]}" --sync epoch --outer nesterov --momentum 0 \
  --checkpoint "$tmp/NAME.st"
# Convolutions are replicated on every grid row: each row averages them and steps their outer
# state alike.
both cnn0 1 1e-6 --model cnn --train-limit 512 --sync every=4 --outer slowmo --momentum 0 \
  --checkpoint "$tmp/NAME.st"
# With SGD's momentum each column's state of the replicated convolutions is whole on each of its
# ranks, that of the dense layers spread: the checkpoint holds both, column by column.
both cnn 1 1e-6 --model cnn --train-limit 512 --sync every=4 --checkpoint "$tmp/NAME.st"

# async-epoch: at each epoch end each column folds its tiles into the global copy, row by row,
# and continues from its own fold's result; the last epoch ends in a uniform average.
both async 3 1e-6 "${mlp[@]}" --sync async-epoch --checkpoint "$tmp/NAME.st"
both async0 3 1e-6 "${mlp[@]}" --sync async-epoch --momentum 0 --checkpoint "$tmp/NAME.st"
both asyncslowmo0 3 1e-6 "${mlp[@]}" --sync async-epoch --outer slowmo --momentum 0 \
  --checkpoint "$tmp/NAME.st"
both asynccnn0 2 1e-6 --model cnn --train-limit 512 --sync async-epoch --momentum 0 \
  --checkpoint "$tmp/NAME.st"
both asynccnnslowmo0 2 1e-6 --model cnn --train-limit 512 --sync async-epoch --outer slowmo \
  --momentum 0 --checkpoint "$tmp/NAME.st"

# hier: groups of whole grid columns, each rank averaging its slice with its grid row's ranks of
# the group's other columns: 2x2 with every column in one group (the nodes: one machine) as 2
# ranks, and 2x4 in groups of 2 columns (hier:1,3,2) as 4 ranks in groups of 2.
both hier0 2 1e-6 "${mlp[@]}" --sync hier:1,3 --momentum 0 --checkpoint "$tmp/NAME.st"
train hier0g24 2x4 2 "${mlp[@]}" --sync hier:1,3,2 --momentum 0 --checkpoint "$tmp/NAME.st"
train hier0g4 -4 2 "${mlp[@]}" --sync hier:1,3,2 --momentum 0 --checkpoint "$tmp/NAME.st"
compare hier0g24 hier0g4 1e-6

# Two levels (--allreduce two-level): each grid row averages its slice over its own nodes.
# --grid 2x4 with --node-size 4 (each node two whole grid columns: each row has 2 ranks on each
# of 2 nodes) trains as 4 ranks without a grid in nodes of 2, bit for bit (the same sums in the
# same order), under batch with SGD's momentum, every=4 --outer slowmo, post-local and the CNN
# (its convolutions replicated on both rows, each row averaging its own copy) under every=4;
# and it is not flat's average (the node order changes some bits, within 1e-6).
lv() {
  local name=$1 epochs=$2
  shift 2
  train "${name}24" 2x4 "$epochs" "$@" --node-size 4 --allreduce two-level \
    --checkpoint "$tmp/NAME.st"
  train "${name}4" -4 "$epochs" "$@" --node-size 2 --allreduce two-level --checkpoint "$tmp/NAME.st"
  compare "${name}24" "${name}4" 0
}
lv lvbatch 1 "${mlp[@]}"
lv lvslowmo 2 "${mlp[@]}" --sync every=4 --outer slowmo
lv lvpost 2 "${mlp[@]}" --sync post-local:1,2
lv lvcnn 1 --model cnn --train-limit 512 --sync every=4
# Buckets (--bucket-mb): each row packs its own chunks into its own buckets, flat on 2x2 as 2
# ranks, over the row's nodes on 2x4 as 4 ranks in nodes of 2 (every rank making as many bucket
# descriptors as the row with the most): the same bits as without.
both bucket 1 0 "${mlp[@]}" --bucket-mb 0.01 --checkpoint "$tmp/NAME.st"
lv lvbucket 2 "${mlp[@]}" --sync every=4 --outer slowmo --bucket-mb 0.01
lv lvbucket25 1 "${mlp[@]}" --bucket-mb 25
compare lvbucket2524 lvbatch24 0
train lvflat24 2x4 1 "${mlp[@]}" --node-size 4 --allreduce flat --checkpoint "$tmp/NAME.st"
compare lvbatch24 lvflat24 1e-6
check "two levels change some bits against flat" env PYTHONPATH="$here" /usr/bin/python3 -c "
import sys, st_floats
a, b = (st_floats.tensors('$tmp/%s.st' % n) for n in ('lvbatch24', 'lvflat24'))
sys.exit(all(a[k].tobytes() == b[k].tobytes() for k in a))"

# A 2x2 checkpoint after epoch 1 of every=4 --outer slowmo (its last step averaged, so the end
# took no extra average) resumed on 2x2: the uninterrupted run's weights, outer momentum and log.
train slowmo0r22 2x2 1 "${mlp[@]}" --sync every=4 --outer slowmo --momentum 0 \
  --checkpoint "$tmp/NAME.st"
train slowmo0r22 2x2 2 "${mlp[@]}" --sync every=4 --outer slowmo --momentum 0 \
  --checkpoint "$tmp/NAME.st" --resume "$tmp/NAME.st"
compare slowmo022 slowmo0r22 0

# What stays refused, before anything loads, with its reason.
grid=("${mpi[@]}" -np 4 "$tessera" "${run[@]}" "${mlp[@]}" --epochs 1 --grid 2x2)
expect 2 "--allreduce two-level: the grid rows lie on the nodes unevenly \(row 1 on 1 node with at most 2 of its ranks on one, row 2 on 2 with at most 1\)" \
  -- timeout 60 "${grid[@]}" --allreduce two-level --node-size 3

echo "$passed passed, $failed failed"
((failed == 0))
