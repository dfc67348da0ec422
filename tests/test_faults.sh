#!/usr/bin/env bash
# Faults under mpirun (2 ranks), as a user meets them, each with the time every process took to
# end: SIGTERM to mpirun during --sync epoch --checkpoint (one line naming the signal, the
# checkpoint it names holds that epoch or step); SIGTERM to rank 1 alone (exit 143, the line names
# rank 1); a SIGTERM that comes in the last epoch (stopped inside it: exit 143, the checkpoint
# holds the step); a second SIGTERM (the rank ends at once, by the signal); a full disk for the checkpoint (the previous one
# intact, one message naming the path and the cause, every rank ending cleanly: no MPI_Abort);
# resuming under another --sync (a note); a run whose test loss alone is not finite (exit 3 on
# every rank, no MPI_Abort). Usage: test_faults.sh PATH/TO/tessera
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
[[ -d $data ]] || { echo "SKIP: no dataset at $data"; exit 77; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tmp=$(mktemp -d)
mounted=
cleanup() {
  [[ -n $mounted ]] && umount "$mounted" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
mpi=(mpirun -np 2 --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT "${mpi_env[@]}")
small=(--data "$data" --workers 1 --test-limit 100 --quiet)
# The runs of at most 2,000 training samples read those alone (lib.sh); the long epochs of 3 and
# 4 the whole files.
few=(--data "$(prefix_data "$data" "$tmp/data" 2000 100)" --workers 1 --test-limit 100 --quiet)
# What Open MPI prints when a rank calls MPI_Abort or its runtime fails: never after a fault
# the ranks agreed on.
noise='MPI_ABORT|ORTE_ERROR_LOG|show_help|stopping every rank'


# start OUT ARGS...: tessera train under mpirun in the background ($pid: mpirun's).
start() {
  out=$1 check_show=$1
  shift
  "${mpi[@]}" "$tessera" train "$@" >"$out" 2>&1 &
  pid=$!
}
# rank_pid Q: the pid of rank Q of the mpirun $pid (empty until it runs).
rank_pid() {
  local p
  for p in $(pgrep -P "$pid"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$p"
  done
}
# wait_for FILE|PATTERN...: until the file exists or the output holds the pattern (30 s at most).
wait_file() { for _ in $(seq 300); do [[ -s $1 ]] && return 0; sleep 0.1; done; return 1; }
wait_line() { for _ in $(seq 300); do grep -qE -- "$1" "$out" && return 0; sleep 0.1; done; return 1; }
# finish NAME [SINCE]: waits for mpirun and every rank; rc, and the seconds since $t0 (the
# signal, or SINCE) into the report.
finish() {
  local ranks
  ranks=$(pgrep -P "$pid")
  wait "$pid"
  rc=$?
  for p in $ranks; do while kill -0 "$p" 2>/dev/null; do sleep 0.02; done; done
  took=$(awk "BEGIN {print $(date +%s.%N) - $t0}")
  printf 'ended: %-38s every process %5.2f s after %s, exit %s\n' "$1" "$took" "${2:-the signal}" \
    "$rc"
}
epoch_of() { "$tessera" inspect "$1" 2>/dev/null | awk '$1 == "epoch" {print $2}'; }
# where_of FILE: where checkpoint FILE stands as the stop's line says it ("epoch 3", or "epoch 3
# step 41": 41 steps into epoch 3).
where_of() {
  "$tessera" inspect "$1" 2>/dev/null | awk '$1 == "epoch" {e = $2} $1 == "step_in_epoch" {s = $2}
    END {if (s > 0) print "epoch " e + 1 " step " s; else print "epoch " e}'
}

# 1. SIGTERM to mpirun: Open MPI sends the ranks SIGCONT, SIGTERM a second later and SIGKILL a
# second after that (odls_base_sigkill_timeout, 1 s), and exits 1 whatever they do; the ranks
# stop a step or two after their SIGTERM. One line, naming the signal and where the checkpoint
# stands, which is where the checkpoint on disk stands.
start "$tmp/1.out" "${few[@]}" --model mlp:64 --train-limit 1000 --epochs 500 --sync epoch \
  --checkpoint "$tmp/1.st"
wait_file "$tmp/1.st"
sleep 0.3
t0=$(date +%s.%N)
kill -TERM "$pid"
finish "SIGTERM to mpirun (--sync epoch)"
check "SIGTERM to mpirun: one line naming the signal on every rank" \
  test "$(grep -cE "^tessera train: SIGTERM on every rank: stopped on request; the checkpoint \
$tmp/1.st holds epoch [0-9]+( step [0-9]+)?: continue with --resume" "$tmp/1.out")" = 1
said=$(grep -oE "holds epoch [0-9]+( step [0-9]+)?" "$tmp/1.out" | sed 's/^holds //')
check "SIGTERM to mpirun: the checkpoint holds where the line says ($said)" \
  test "$(where_of "$tmp/1.st")" = "${said:-none}"
check "SIGTERM to mpirun: exit 1 (Open MPI's for a signalled mpirun) or 143 (got $rc)" \
  test "$rc" = 1 -o "$rc" = 143
check "SIGTERM to mpirun: every process ended within 10 s ($took)" test "${took%.*}" -lt 10

# 1b. SIGTERM to every rank (what docs/checkpoints.md advises instead): mpirun exits 143.
start "$tmp/1b.out" "${few[@]}" --model mlp:64 --train-limit 1000 --epochs 500 --sync epoch \
  --checkpoint "$tmp/1b.st"
wait_file "$tmp/1b.st"
t0=$(date +%s.%N)
kill -TERM $(pgrep -P "$pid")
finish "SIGTERM to every rank"
check "SIGTERM to every rank: exit 143 (got $rc)" test "$rc" = 143
check "SIGTERM to every rank: one line" test "$(grep -cE "^tessera train: SIGTERM on every rank: \
stopped on request; the checkpoint $tmp/1b.st holds epoch [0-9]+( step [0-9]+)?" "$tmp/1b.out")" = 1

# 2. SIGTERM to rank 1 alone: every rank stops a step or two later with 143, and the line names
# rank 1 (rank 0, which got no signal, used to claim SIGINT: 130).
start "$tmp/2.out" "${few[@]}" --model mlp:64 --train-limit 1000 --epochs 500 --sync epoch \
  --checkpoint "$tmp/2.st"
wait_file "$tmp/2.st"
t0=$(date +%s.%N)
kill -TERM "$(rank_pid 1)"
finish "SIGTERM to rank 1"
check "SIGTERM to rank 1: exit 143 (got $rc)" test "$rc" = 143
check "SIGTERM to rank 1: one line naming rank 1" test "$(grep -cE "^tessera train: SIGTERM on \
rank 1: stopped on request; the checkpoint $tmp/2.st holds epoch [0-9]+( step [0-9]+)?" "$tmp/2.out")" = 1
check "SIGTERM to rank 1: no MPI_Abort" bash -c "! grep -qE '$noise' '$tmp/2.out'"
check "SIGTERM to rank 1: every process ended within 10 s ($took)" test "${took%.*}" -lt 10

# 3. A SIGTERM in the last epoch (of 940 steps, 2 to 8 s here): the ranks stop inside it, between
# the weight averages of --sync epoch (exit 143; the checkpoint holds that step of epoch 2).
start "$tmp/3.out" --data "$data" --workers 1 --test-limit 100 --train-limit 30000 --epochs 2 \
  --batch 16 --sync epoch --checkpoint "$tmp/3.st"
wait_line "^epoch 1/2"
t0=$(date +%s.%N)
kill -TERM "$(rank_pid 1)"
finish "SIGTERM to rank 1 in the last epoch"
check "SIGTERM in the last epoch: exit 143 (got $rc)" test "$rc" = 143
said=$(grep -oE "^tessera train: SIGTERM on rank 1: stopped on request; the checkpoint $tmp/3.st \
holds epoch 2 step [0-9]+" "$tmp/3.out" | sed 's/.* holds //')
check "SIGTERM in the last epoch: the checkpoint holds the step of epoch 2 the line names \
(${said:-none})" test "$(where_of "$tmp/3.st")" = "${said:-none}"

# 4. A second SIGTERM ends the rank at once, by the signal (mpirun says so), not after the step
# and the checkpoint the first one waits for (a checkpoint of 2.9 million weights, each rank's).
start "$tmp/4.out" "${small[@]}" --train-limit 60000 --model mlp:1024,1024 --epochs 3 \
  --sync epoch --checkpoint "$tmp/4.st"
wait_file "$tmp/4.st"
r1=$(rank_pid 1)
kill -TERM "$r1"
sleep 0.02
t0=$(date +%s.%N)
kill -TERM "$r1"
while kill -0 "$r1" 2>/dev/null; do sleep 0.02; done
printf 'ended: %-38s rank 1 %5.2f s after the second signal\n' "a second SIGTERM to rank 1" \
  "$(awk "BEGIN {print $(date +%s.%N) - $t0}")"
finish "a second SIGTERM to rank 1"
check "a second SIGTERM: rank 1 ends by the signal" grep -q "exited on signal 15" "$tmp/4.out"
check "a second SIGTERM: no orderly stop" bash -c "! grep -q 'stopped on request' '$tmp/4.out'"
check "a second SIGTERM: every process ended within 10 s ($took)" test "${took%.*}" -lt 10

# 5. A full disk for the checkpoint (a 256 KiB tmpfs filled once the first checkpoint is there):
# the previous checkpoint intact, one message from rank 0 naming the path and the cause, and
# every rank ending cleanly with status 1 (no MPI_Abort).
mkdir -p "$tmp/disk"
if mount -t tmpfs -o size=256k tmpfs "$tmp/disk" 2>/dev/null; then
  mounted=$tmp/disk
  start "$tmp/5.out" "${few[@]}" --model mlp:8 --train-limit 2000 --epochs 100 --sync epoch \
    --checkpoint "$tmp/disk/c.st"
  wait_file "$tmp/disk/c.st"
  dd if=/dev/zero of="$tmp/disk/fill" bs=4k 2>/dev/null
  t0=$(date +%s.%N)
  finish "a full disk for the checkpoint" "the disk filled"
  check "full disk: exit 1 (got $rc)" test "$rc" = 1
  check "full disk: one message naming the path and the cause" test "$(grep -cE \
"^tessera train: rank 0: $tmp/disk/c.st: cannot write: No space left on device" "$tmp/5.out")" = 1
  check "full disk: no MPI_Abort, no Open MPI error log" bash -c "! grep -qE '$noise' '$tmp/5.out'"
  rm -f "$tmp/disk/fill"
  check "full disk: the previous checkpoint loads" "$tessera" inspect "$tmp/disk/c.st" >/dev/null
  umount "$tmp/disk" && mounted=
else
  echo "SKIP: full disk (cannot mount a tmpfs here)"
fi

# 6. Resuming under another --sync than the checkpoint's: a note, never silent.
"${mpi[@]}" "$tessera" train "${few[@]}" --model mlp:64 --train-limit 1000 --sync batch \
  --resume "$tmp/2.st" --epochs "$(($(epoch_of "$tmp/2.st") + 1))" >"$tmp/6.out" 2>&1
rc=$?
out=$tmp/6.out check_show=$tmp/6.out
check "resume under another --sync: exit 0 (got $rc)" test "$rc" = 0
check "resume under another --sync: a note naming both" grep -q "note: $tmp/2.st was written \
under sync epoch on 2 rank(s); this run synchronizes with batch on 2" "$tmp/6.out"

# 7. The test loss alone not finite (a test sample of 3e38, left as it is by --standardize none:
# 64 hidden units of 3e38 times weights of either sign overflow, whatever the init and seed):
# divergence, exit 3 and rank 0's one message on every rank, no MPI_Abort.
mkdir -p "$tmp/csv"
/usr/bin/python3 - "$tmp/csv" <<'PY'
import random, sys
random.seed(1)
d = sys.argv[1]
row = lambda c, x: "%d,%s\n" % (c, ",".join("%.4f" % v for v in x))
with open(d + "/train.csv", "w") as f:
    for i in range(256):
        c = i % 2
        f.write(row(c, [random.gauss(c, 1) for _ in range(4)]))
with open(d + "/test.csv", "w") as f:
    for i in range(32):
        f.write(row(i % 2, [3e38 if i == 5 else random.gauss(i % 2, 1) for _ in range(4)]))
PY
t0=$(date +%s.%N)
"${mpi[@]}" "$tessera" train --data "$tmp/csv" --workers 1 --model mlp:64 --epochs 3 \
  --standardize none --sync batch >"$tmp/7.out" 2>&1 &
pid=$!
finish "test loss not finite" "the start"
out=$tmp/7.out check_show=$tmp/7.out
check "test loss not finite: exit 3 (got $rc)" test "$rc" = 3
check "test loss not finite: the message names the test loss" grep -qE "^tessera train: rank 0: \
training diverged in epoch 1 \(steps 1 to [0-9]+\): the mean test loss is (nan|inf)" "$tmp/7.out"
check "test loss not finite: the training loss was finite" grep -qE "^epoch 1/3  loss [0-9]" \
  "$tmp/7.out"
check "test loss not finite: no MPI_Abort" bash -c "! grep -qE '$noise' '$tmp/7.out'"

echo "$passed passed, $failed failed"
((failed == 0))
