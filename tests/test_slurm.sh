#!/usr/bin/env bash
# tessera under Slurm, for real: starts a Slurm cluster of two nodes, n1 and n2, that are both this
# machine (munged, slurmctld and one slurmd per node from Debian's slurm-wlm, in the foreground of
# background jobs, with a generated slurm.conf and their own ports, socket and folders in a
# temporary folder; the comments above each part say why it is there), then checks
#   1. srun --mpi=pmix -N 2 --ntasks-per-node=2 tessera info, unbound: each of the 4 ranks says
#      rank r of 4, node-local rank r%2 of 2 (from MPI_Comm_split_type: srun sets no
#      OMPI_COMM_WORLD_LOCAL_*, and world ranks 2 and 3 are not node-local ones), and tessera put
#      the workers of a node's two ranks on different PUs;
#   2. the same bound with --cpu-bind=cores (as scripts/tessera.sbatch asks): each rank's worker
#      inside its own core;
#   3. srun --mpi=pmix -N 1 -n 2 tessera train --sync batch: one 2-rank job (ranks=2, both ranks
#      did their half), its loss falls, its test accuracy passes a floor, and its per-epoch losses
#      are mpirun -np 2's;
#   4. sbatch --wait scripts/tessera.sbatch (the documented batch script) on 2 nodes x 1 rank of
#      2 cores: 2 workers each, the log says 2 ranks;
# and stops every daemon and job it started, whatever happens. Skipped (77) only where Slurm
# cannot run: not root (slurmd must be), no Slurm or munge installed (scripts/setup.sh installs
# them), no loopback network, fewer than 2 CPUs. About 30 s. Usage: test_slurm.sh PATH/TO/tessera
set -u
tessera=$(realpath "$1")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. "$root/tests/lib.sh"

skip() {
  echo "SKIP: $*"
  exit 77
}
((EUID == 0)) || skip "slurmd must run as root to start jobs (SlurmUser=root here); run as root"
for c in munged munge unmunge slurmctld slurmd srun sbatch squeue scancel sinfo mpirun; do
  command -v "$c" >/dev/null ||
    skip "$c not found: install slurm-wlm, munge and openmpi-bin (scripts/setup.sh does)"
done
/usr/bin/python3 -c 'import socket; socket.socket().bind(("127.0.0.1", 0))' 2>/dev/null ||
  skip "no loopback network: cannot bind a TCP port on 127.0.0.1 for slurmctld and slurmd"
node=$(slurmd -C | head -1) # NodeName=HOST CPUs=... RealMemory=..., as slurmd sees this machine
[[ $node =~ CPUs=([0-9]+) ]] && ((BASH_REMATCH[1] >= 2)) ||
  skip "2 ranks per node need 2 CPUs; slurmd -C says: $node"
host=$(hostname -s)

# Anything of an enclosing Slurm job or MPI launcher would redirect srun or the ranks.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN|PMIX|PMI|OMPI_COMM_WORLD)_')

# munged checks that its socket's folder and every folder above are not writable by others
# (unless sticky, as /tmp is) and searchable by all; a socket path must stay short (108 bytes).
tmp=$(mktemp -d /tmp/tsr-slurm.XXXXXX) || exit 1
chmod 755 "$tmp"
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/jobs" "$tmp"/n{1,2}/{spool,tmp}
chmod 755 "$tmp/munge"
export SLURM_CONF=$tmp/slurm.conf STARPU_SILENT=1 STARPU_HOME=${STARPU_HOME:-$tmp/starpu}
# Every process this test starts carries this in its environment (jobs too: srun passes it on).
export TSR_SLURM_TEST=$tmp
daemons=()

# Stops what this test started: the jobs, then the daemons by their ids, then whatever process
# still carries the marker or runs in $tmp (slurmstepd runs in slurmd's folder, with an
# environment of its own); names those it had to kill, and fails if there were any.
cleanup() {
  local p e w left=()
  if ((${#daemons[@]})); then
    scancel --quiet --full $(squeue -h -o %A 2>/dev/null) 2>/dev/null
    for w in $(seq 10); do
      [[ -z $(squeue -h -o %A 2>/dev/null) ]] && break
      sleep 0.5
    done
    for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${daemons[@]}"; do
      for w in $(seq 10); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.3
      done
      kill -9 "$p" 2>/dev/null
      wait "$p" 2>/dev/null
    done
    daemons=()
  fi
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    ((p == $$ || p == BASHPID)) && continue
    e=()
    { mapfile -d '' -t e <"/proc/$p/environ"; } 2>/dev/null
    if [[ " ${e[*]-} " == *" TSR_SLURM_TEST=$tmp "* ||
      $(readlink "/proc/$p/cwd" 2>/dev/null) == "$tmp"* ]]; then
      kill -9 "$p" 2>/dev/null && left+=("$p")
    fi
  done
  rm -rf "$tmp"
  ((${#left[@]} == 0)) || echo "cleanup: killed leftover processes ${left[*]}"
  ((${#left[@]} == 0))
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}
ok() { passed=$((passed + 1)); }
show_logs() {
  local f
  for f in "$tmp"/*.out "$tmp"/n?/slurmd.log; do
    [[ -f $f ]] || continue
    echo "--- $f"
    tail -n 15 "$f"
  done
}

# Free ports for slurmctld and the two slurmds: this cluster never meets a real one on the
# default 6817/6818.
read -r ctld_port port1 port2 < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

# A munge key of its own (munged wants it readable by its owner only).
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"

# Both nodes are this machine, each with its real CPUs and memory (slurmd -C's line without its
# name), each with its own slurmd, port and folders (%n: the node's name).
hw=${node#NodeName=* }
cat >"$SLURM_CONF" <<EOF
ClusterName=tessera-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdSpoolDir=$tmp/%n/spool
SlurmdPidFile=$tmp/%n/slurmd.pid
SlurmdLogFile=$tmp/%n/slurmd.log
TmpFS=$tmp/%n/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
ReturnToService=2
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$port1 $hw State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$port2 $hw State=UNKNOWN
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=5 State=UP
EOF

# The daemons in the foreground (-F, -D) of background jobs: their ids are theirs, and they log
# to their .out files. They run in $tmp, which marks slurmstepd for the cleanup. Each under
# timeout: a test killed outright (SIGKILL, no cleanup) leaves no daemon for long.
(cd "$tmp" && exec timeout 300 munged -F --socket="$tmp/munge/socket" \
  --key-file="$tmp/munge/munge.key" --pid-file="$tmp/munge/pid" --seed-file="$tmp/munge/seed" \
  --log-file="$tmp/munge/log") >"$tmp/munged.out" 2>&1 &
daemons+=($!)
for w in $(seq 50); do
  [[ -S $tmp/munge/socket ]] && break
  sleep 0.1
done
if ! munge -S "$tmp/munge/socket" -n | unmunge -S "$tmp/munge/socket" >/dev/null 2>&1; then
  fail "munged did not start"
  show_logs
  exit 1
fi
(cd "$tmp" && exec timeout 300 slurmctld -D -f "$SLURM_CONF") >"$tmp/slurmctld.out" 2>&1 &
daemons+=($!)
for n in n1 n2; do
  (cd "$tmp" && exec timeout 300 slurmd -D -f "$SLURM_CONF" -N $n) >"$tmp/slurmd-$n.out" 2>&1 &
  daemons+=($!)
done
idle=
for w in $(seq 100); do
  idle=$(sinfo -h -t idle -o %D 2>/dev/null)
  [[ $idle == 2 ]] && break
  sleep 0.2
done
if [[ $idle != 2 ]]; then
  fail "the nodes did not come up: $(sinfo -h -o '%N %t' 2>&1 | tr '\n' ' ')"
  show_logs
  exit 1
fi
if srun --mpi=list 2>&1 | grep -qw pmix; then ok; else
  fail "srun --mpi=list has no pmix (Slurm's PMIx plugin loads libpmix.so, from libpmix-dev:" \
    "scripts/setup.sh installs it): $(srun --mpi=list 2>&1 | tr '\n' ' ')"
fi

# srun under a time bound: a step that hangs (ranks that never meet) must not hang the suite.
run() {
  local limit=$1
  shift
  timeout -k 5 "$limit" srun --mpi=pmix --time=2 --kill-on-bad-exit=1 "$@"
}
# Ranks on n1 and n2 share this machine's memory, but Open MPI takes them for ranks of two
# nodes and would open the same shared-memory segments for both (its names hold the host name,
# the job and the node-local rank: the ranks crash). TCP over the loopback between all ranks
# instead; on a real cluster nothing of this is needed.
two_nodes=(env OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo)

# StarPU measures this machine's buses once per STARPU_HOME: done here, not by 4 ranks at once
# (which race to write the files; scripts/tessera.sbatch does the same).
"$tessera" info --workers 1 >/dev/null 2>&1 || fail "tessera info (alone) failed"

# 1 and 2. Each rank's rank and node-local rank, and the cores its worker got.
# check_info BIND: srun -N 2 --ntasks-per-node=2 --cpu-bind=BIND tessera info on 4 ranks.
check_info() {
  local bind=$1 out rc msg
  out=$("${two_nodes[@]}" timeout -k 5 60 srun --mpi=pmix --time=2 --kill-on-bad-exit=1 \
    -N 2 --ntasks-per-node=2 --cpu-bind="$bind" -l "$tessera" info --workers 1 2>&1)
  rc=$?
  if msg=$(/usr/bin/python3 "$tmp/check_info.py" "$bind" <<<"$out" 2>&1); then ok; else
    fail "srun -N 2 --ntasks-per-node=2 --cpu-bind=$bind tessera info (exit $rc): $msg"
    grep -E "this process|on PU|binding|rror" <<<"$out" | sort | head -16
  fi
}
cat >"$tmp/check_info.py" <<'PY'
import re, sys
bind, out = sys.argv[1], sys.stdin.read()
def pus(s):  # "0-2,5" -> {0, 1, 2, 5}
    return {p for a, _, b in (x.partition("-") for x in s.split(",")) for p in range(int(a), int(b or a) + 1)}
bad, worker, bound = [], {}, {}
for r in range(4):
    want = r"^%d: +this process +rank %d of 4 on \S+, node-local rank %d of 2$" % (r, r, r % 2)
    if not re.search(want, out, re.M):
        bad.append("rank %d: no 'rank %d of 4 on HOST, node-local rank %d of 2'" % (r, r, r % 2))
    m = re.search(r"^%d: +0 +CPU 0 +CPU +on PU (\S+)" % r, out, re.M)
    worker[r] = pus(m.group(1)) if m else None
    m = re.search(r"^%d: +binding +(?:PUs (\S+)|none)" % r, out, re.M)
    bound[r] = pus(m.group(1)) if m and m.group(1) else None
if not bad:
    for a, b in ((0, 1), (2, 3)):  # a node's two ranks
        if worker[a] is None or worker[b] is None or worker[a] & worker[b]:
            bad.append("ranks %d and %d (one node): workers on PUs %s and %s, want different ones"
                       % (a, b, worker[a], worker[b]))
    for r in range(4):
        if bind == "none" and bound[r] is not None:
            bad.append("rank %d: bound to PUs %s with --cpu-bind=none" % (r, bound[r]))
        if bind == "cores" and (bound[r] is None or not worker[r] or not worker[r] <= bound[r]):
            bad.append("rank %d: worker on PUs %s, binding %s: want it inside its binding"
                       % (r, worker[r], bound[r]))
if bad:
    sys.exit("; ".join(bad))
PY
check_info none
check_info cores
# srun itself gives the ranks no Open MPI node-local variables: the node-local ranks above came
# from MPI.
if run 30 -N 2 --ntasks-per-node=2 env | grep -q '^OMPI_COMM_WORLD_LOCAL'; then
  fail "srun set OMPI_COMM_WORLD_LOCAL_*: the test no longer shows where tessera takes them from"
else ok; fi

# 3. One 2-rank training job on one node, as mpirun would run it.
train=(train --data "$data" --workers 1 --sync batch --epochs 2 --train-limit 2000
  --test-limit 500)
out=$(cd "$tmp/jobs" && run 120 -N 1 -n 2 "$tessera" "${train[@]}" --log "$tmp/jobs/srun.jsonl" 2>&1)
rc=$?
if ((rc == 0)); then ok; else
  fail "srun -N 1 -n 2 tessera train: exit $rc:"
  grep -v '^\[' <<<"$out" | tail -8
fi
# Test accuracy 0.678 from PyTorch's initialization (the default since issue 20; chance 0.1);
# He's, before, passed 0.7.
check_log "srun train" "$tmp/jobs/srun.jsonl" 2 ranks=2 sync=batch test_accuracy\>0.55
timeout -k 5 120 mpirun -np 2 --oversubscribe --allow-run-as-root -x STARPU_HOME -x STARPU_SILENT \
  "$tessera" "${train[@]}" --log "$tmp/jobs/mpirun.jsonl" >/dev/null 2>&1 ||
  fail "mpirun -np 2 tessera train failed"
if /usr/bin/python3 - "$tmp/jobs/srun.jsonl" "$tmp/jobs/mpirun.jsonl" <<'PY'; then ok; else fail "srun train against mpirun's"; fi
import json, sys
def read(path):
    try:
        return [json.loads(l) for l in open(path)]
    except (OSError, ValueError) as e:
        sys.exit("cannot read %s: %s" % (path, e))
srun, mpirun = read(sys.argv[1]), read(sys.argv[2])
ranks = [o for o in srun if o.get("event") == "ranks"][-1]["ranks"]
got = [(r["rank"], r["samples"], r["bytes_sent"] > 0) for r in ranks]
if got != [(0, 2000, True), (1, 2000, True)]:
    sys.exit("want ranks 0 and 1, 2 x 1000 samples each, both sending; got %s" % got)
# The same training: the per-epoch losses of a 2-rank run under mpirun (one rank alone, or ranks
# that split the data otherwise, differ in the second digit).
a = [o["loss"] for o in srun if "event" not in o]
b = [o["loss"] for o in mpirun if "event" not in o]
if len(a) != len(b) or any(abs(x - y) > 1e-4 * abs(y) for x, y in zip(a, b)):
    sys.exit("losses under srun %s, under mpirun %s" % (a, b))
PY

# 4. The documented batch script on 2 nodes x 1 rank of 2 cores, with no --workers: each rank
# gets a worker per core it was given (srun was told --cpus-per-task again). Not 2 x 2 here: with
# 4 ranks training over TCP on one machine, Open MPI 4.1.4's TCP transport crashed 2 runs of 19
# ("failed to TCP connect ... Operation now in progress (115)"); steps 1 and 2
# have 2 ranks per node, and step 3 trains 2 ranks on one node.
what="sbatch --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 scripts/tessera.sbatch"
out=$(cd "$tmp/jobs" && "${two_nodes[@]}" TESSERA="$tessera" TSR_DATA_DIR="$data" \
  timeout -k 5 120 sbatch --wait --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 \
  --time=2 "$root/scripts/tessera.sbatch" --epochs 1 --train-limit 2000 --test-limit 500 2>&1)
rc=$?
job=${out##*$'\n'}
f=$tmp/jobs/tessera-$job.out
if ((rc == 0)) && [[ -f $tmp/jobs/tessera-$job.jsonl ]]; then
  ok
  # 0.568 from PyTorch's initialization (He's passed 0.6)
  check_log "$what" "$tmp/jobs/tessera-$job.jsonl" 1 ranks=2 workers=2 test_accuracy\>0.45
  if grep -q "tessera: job $job, 2 node(s) (n\[1-2\]), 2 rank(s), 2 core(s) each" "$f" &&
    ! grep -qi "error\|lacks support" "$f"; then ok; else
    fail "$what: tessera-$job.out lacks the script's line, or has errors:"
    head -8 "$f"
  fi
else
  fail "$what: exit $rc ($out):"
  tail -8 "$tmp/jobs"/*.out 2>/dev/null
fi

if cleanup; then ok; else fail "processes were left after the daemons stopped"; fi
trap - EXIT
echo "$passed passed, $failed failed"
((failed == 0))
