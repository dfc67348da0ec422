# Shared by the shell test suites (sourced): pass/fail counters, check and check_log.
# check NAME COMMAND...: COMMAND's exit status counted as one check named NAME; on a failure the
# first lines of the file $check_show names (the run's output, where a suite sets it) follow.
# expect CODE PATTERN -- COMMAND...: COMMAND exits CODE and its output (stdout and stderr)
# matches the extended regex PATTERN, counted as one check.
# check_log NAME LOG EPOCHS [KEY=V|KEY<V|KEY>V ...]: tests/check_log.py on LOG,
# counted as one check named NAME.
passed=0 failed=0
tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

check() {
  local name=$1
  shift
  if "$@"; then passed=$((passed + 1)); else
    failed=$((failed + 1))
    echo "FAIL: $name"
    [[ -f ${check_show-} ]] && grep -v '^\[' "$check_show" | head -12
  fi
}

expect() {
  local code=$1 pattern=$2 out rc
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc == "$code" ]] && grep -qE -- "$pattern" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $* -> exit $rc (want $code, /$pattern/):"
    echo "$out" | head -5
  fi
}

check_log() {
  local name=$1 out
  shift
  if out=$(/usr/bin/python3 "$tests_dir/check_log.py" "$@" 2>&1); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: $out"
  fi
}

# Arguments that give every mpirun rank the sanitizers' options when they are set (a build with
# -Dsanitize=true run by scripts/run-sanitized.sh): mpirun passes on what -x names, so ranks read
# the same leak suppressions as everything else. Empty otherwise.
mpi_env=()
for _v in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
  [[ -n ${!_v-} ]] && mpi_env+=(-x "$_v")
done
unset _v

# same_tensors A B [KEY...]: every tensor of checkpoint A equals B's bit for bit, the same names
# in both, and each metadata KEY given the same in both.
same_tensors() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    body = raw[8 + n:]
    return meta, {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items()}
(ma, a), (mb, b) = tensors(sys.argv[1]), tensors(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
bad = [k for k in a if a[k] != b[k]]
assert not bad, "differ: " + ", ".join(bad)
for k in sys.argv[3:]:
    assert ma.get(k) == mb.get(k), (k, ma.get(k), mb.get(k))
PY
}

# prefix_data SRC DIR NTRAIN NTEST: the first NTRAIN training and NTEST test samples of the IDX
# dataset in SRC written to DIR (tests/data_prefix.py), and DIR echoed; SRC echoed where it holds
# no IDX files (a CSV folder in TSR_DATA_DIR). Runs whose --train-limit and --test-limit are at
# most NTRAIN and NTEST train on DIR as on SRC, bit for bit, without inflating 70,000 images in
# every rank of every launch first.
prefix_data() {
  if [[ -f $1/train-images-idx3-ubyte.gz ]]; then
    /usr/bin/python3 "$tests_dir/data_prefix.py" "$@" >&2 && echo "$2"
  else
    echo "$1"
  fi
}
