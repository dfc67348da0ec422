#!/usr/bin/env bash
# A stop agreed inside an epoch, on 2 ranks under mpirun: SIGTERM to mpirun in the middle of an
# epoch of several seconds (Open MPI sends the ranks SIGCONT, then SIGTERM a second later and
# SIGKILL a second after that) ends every process within 1.5 s of the signal, each rank exiting
# 143 with one line from rank 0; the checkpoint holds a step inside the epoch, and --resume from it
# ends bit for bit where the uninterrupted run does (--deterministic), for --sync batch, every=4
# --outer slowmo and epoch (the last two stopped between weight averages: the checkpoint holds
# every rank's weights, the anchor and the counts since the last average).
# Usage: test_stop_mpi.sh PATH/TO/tessera; TSR_STOP_CASES="batch slowmo epoch" runs only those;
# TSR_STOP_BATCH=B trains with batch B per rank (default 16), for measuring the stop in a long
# epoch: 4 gives every=4 and epoch epochs of 16 to 17 s here, batch needs 2 for as long.
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap '[[ -n ${TSR_KEEP-} ]] || rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mpi=(mpirun --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT -x STATUS_DIR
  "${mpi_env[@]}")
# One epoch of 60,000 samples, 2 ranks of batch 16: 1875 short steps (2 to 8 s here).
batch=${TSR_STOP_BATCH:-16}
steps=$(((60000 + 2 * batch - 1) / (2 * batch)))
common=(--workers 1 --train-limit 60000 --test-limit 200 --data "$data" --model mlp:32 --batch "$batch"
  --lr-schedule constant --momentum 0.9 --deterministic --epochs 1)
# Each rank under a shell that records its exit status (mpirun's own is 1 whatever the ranks do:
# Open MPI sets it before they see the signal); the shell waits out the signals mpirun sends its
# process group, which reach the rank.
cat >"$tmp/rank.sh" <<'EOF'
#!/bin/sh
trap : TERM INT CONT
"$@"
echo $? >"$STATUS_DIR/status.$OMPI_COMM_WORLD_RANK"
EOF
export STATUS_DIR

meta() { "$tessera" inspect "$1" 2>/dev/null | awk -v k="$2" '$1 == k {print $2}'; }

only=" ${TSR_STOP_CASES:-} "
stop_case() {
  local name=$1 dir=$tmp/$1 pid t0 took rc out
  [[ $only == "  " || $only == *" $name "* ]] || return 0
  shift
  mkdir -p "$dir"
  STATUS_DIR=$dir
  check_show=$dir/part.out
  # The interrupted run first, its SIGTERM once the log has a step line (step 100 of the epoch:
  # the ranks see the signal a second later, some 300 steps on).
  "${mpi[@]}" -np 2 sh "$tmp/rank.sh" "$tessera" train "${common[@]}" "$@" \
    --checkpoint "$dir/part.st" --log "$dir/part.jsonl" --log-every 100 >"$dir/part.out" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q '"event": *"step"' "$dir/part.jsonl" 2>/dev/null && break; sleep 0.05; done
  t0=$(date +%s.%N)
  kill -TERM "$pid"
  wait "$pid"
  while pgrep -f "$dir/part.st" >/dev/null; do sleep 0.02; done
  took=$(awk "BEGIN {printf \"%.2f\", $(date +%s.%N) - $t0}")
  echo "$name: every process ended $took s after SIGTERM to mpirun"
  check "$name: every process ended within 1.5 s of the signal ($took s)" \
    awk "BEGIN {exit !($took < 1.5)}"
  # Once a rank has exited, the aborting mpirun kills the other at once (its checkpoint agreed
  # and written, the line said): the ranks that had time to record a status say 143.
  local statuses
  statuses=$(cat "$dir"/status.* 2>/dev/null | sort -u | tr '\n' ' ')
  check "$name: the ranks exited 143 (${statuses:-none recorded})" test "$statuses" == "143 "
  check "$name: one line naming the signal and the checkpoint" \
    test "$(grep -cE '^tessera train: SIGTERM on every rank: stopped on request; the checkpoint .* holds epoch 1 step [0-9]+' "$dir/part.out")" == 1
  local step
  step=$(meta "$dir/part.st" step_in_epoch)
  check "$name: the checkpoint holds a step inside the epoch (step ${step:-none} of $steps)" \
    test "${step:-0}" -gt 0 -a "${step:-0}" -lt $steps
  # The uninterrupted run, and the resumed one, to the end of the epoch.
  check_show=$dir/full.out
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" "$@" --checkpoint "$dir/full.st" \
    >"$dir/full.out" 2>&1
  rc=$?
  check "$name: the uninterrupted run (exit $rc)" test $rc == 0
  echo "$name: the uninterrupted epoch took $(grep -oE '[0-9.]+ s ' "$dir/full.out" | head -1)"

  check_show=$dir/resumed.out
  "${mpi[@]}" -np 2 "$tessera" train "${common[@]}" "$@" --resume "$dir/part.st" \
    --checkpoint "$dir/resumed.st" >"$dir/resumed.out" 2>&1
  rc=$?
  check "$name: the resumed run (exit $rc)" test $rc == 0
  if out=$(same_tensors "$dir/full.st" "$dir/resumed.st" 2>&1); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: the resumed run's final weights are not the uninterrupted run's: ${out##*$'\n'}"
  fi
}

stop_case batch --sync batch
stop_case slowmo --sync every=4 --outer slowmo
stop_case epoch --sync epoch

echo "stop-mpi: $passed passed, $failed failed"
[[ $failed == 0 ]]
