#!/usr/bin/python3
"""Chaos: a deterministic run killed at random times and resumed every time ends where the
uninterrupted run ends, bit for bit.

For each case it first trains once without interruption (`--deterministic --checkpoint REF
--checkpoint-every Nsteps`), then trains the same run again under chaos: it starts the run,
waits a random time, and either sends SIGKILL to one rank drawn at random (one process: the
process) or, 15% of the time (--sigterm), SIGTERM to mpirun (one process: to the process),
waits for every process to end, and starts again with `--resume` from the checkpoint, until
--kills signals were delivered and a last run finished. Then it compares the two final checkpoints' tensors (python/tessera's
read_checkpoint): the weights (and buffers), and every tensor (the optimizer's state too).

When: a tenth of the signals at a random time in the start-up (the time the uninterrupted run
took to its first step), the others once the run's log shows a step drawn at random between the
checkpoint's and twice the steps left / the signals left after it, so that the signals spread
over the whole run whatever the machine's load. A SIGKILL with no rank seen (all starting, or
all ending after the last step) goes to mpirun. Every run writes a step line per step
(--log-every 1): the last one when the signal is sent and when the run ended give the steps
done; the checkpoint the next run resumes from gives the steps kept (epoch x steps an epoch +
step_in_epoch); lost steps are the steps done less the steps kept. A run whose processes have
not all ended --ended seconds after the signal counts as hung and is killed.

  benchmarks/chaos.py                      # every case, 20 signals each (10 minutes here)
  benchmarks/chaos.py --quick              # every case, 4 signals each
  benchmarks/chaos.py --cases 2ranks,gpt --kills 30 --seed 2

It writes into --out (benchmarks/outdir.py): cycles.csv (every run of every case: the signal,
its target, when, the steps done, kept and lost, the exit status), summary.md and summary.csv
(the table), report.txt (what it printed, with the command line and the machine) and a folder
per case (the checkpoints, logs and outputs of its runs). Exit 1
when a case's final tensors differ from the uninterrupted run's or a run failed otherwise.
"""
import argparse
import csv
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
from memory import machine, tessera_processes  # noqa: E402
from outdir import add_out_arguments, resolve_out, tee_stdout  # noqa: E402
from tessera.checkpoint import read_checkpoint  # noqa: E402

# A small model with batchnorm per channel (after a convolution) and per feature.
BN_INI = """[c]
type = conv
filters = 8
kernel = 3
stride = 2
[cbn]
type = batchnorm
activation = relu
[f]
type = flatten
[h]
type = dense
units = 32
[hbn]
type = batchnorm
activation = relu
[out]
type = dense
units = 10
"""

# name: (ranks, options): 60 epochs of 10 steps (the global batch 32 over 320 samples; the GPT
# 16 over 160 windows), so that a SIGTERM, after which the ranks run on for about 2 s to an
# epoch's end (Open MPI passes it on late), leaves epochs to interrupt again; SGD with momentum
# (the default) or AdamW, so that the optimizer's state must come back too.
SMALL = ["--train-limit", "320", "--epochs", "60"]
CASES = {
    "1proc": (1, ["--model", "mlp:128", "--batch", "32"] + SMALL),
    "2ranks": (2, ["--model", "mlp:128", "--batch", "16"] + SMALL),
    "4ranks": (4, ["--model", "mlp:128", "--batch", "8"] + SMALL),
    "grid": (4, ["--model", "mlp:128,64", "--batch", "16", "--grid", "2x2"] + SMALL),
    "batchnorm": (2, ["--model", "BN_INI", "--batch", "16"] + SMALL),
    # weight averaging: a stop between averages writes every rank's weights (docs/checkpoints.md)
    "every4": (2, ["--model", "mlp:128", "--batch", "16", "--sync", "every=4", "--outer",
                   "slowmo"] + SMALL),
    "epoch": (2, ["--model", "mlp:128", "--batch", "16", "--sync", "epoch"] + SMALL),
    "gpt": (2, ["--model", "gpt:1,32,2,16", "--optimizer", "adamw", "--batch", "8",
                "--train-limit", "160", "--epochs", "60"]),
}


def last_step(log):
    """(the last step line's global step, steps an epoch) of a JSON Lines log; (0, None)."""
    step, per = 0, None
    try:
        with open(log) as f:
            for line in f:
                if '"event":"step"' not in line:
                    continue
                try:
                    o = json.loads(line)
                except ValueError:
                    continue
                step, per = o["step"], o["steps"]
    except OSError:
        pass
    return step, per


def kept_step(path, per):
    """The global step a checkpoint holds: epoch x steps an epoch + step_in_epoch (0: none)."""
    if not os.path.exists(path):
        return 0
    meta = read_checkpoint(path).metadata
    return int(meta["epoch"]) * (per or 0) + int(meta["step_in_epoch"])


def rank_of(pid):
    """OMPI_COMM_WORLD_RANK of a process, None when it has none."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            for var in f.read().split(b"\0"):
                if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return int(var.split(b"=")[1])
    except OSError:
        return None
    return None


class Run:
    """One tessera train (under mpirun when ranks > 1) in its own session, output to a file."""

    def __init__(self, cmd, out, ranks):
        self.ranks, self.out = ranks, out
        self.f = open(out, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.f, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.t0 = time.time()
        self.pids = []

    def processes(self):
        """The tessera processes (rank order), once all are there; [] before."""
        if len(self.pids) < self.ranks:
            pids = tessera_processes(self.proc.pid)
            if len(pids) >= self.ranks:
                self.pids = sorted(pids, key=lambda p: (rank_of(p) or 0, p))
        return self.pids

    def wait(self, timeout):
        """Exit status, None when it ran past timeout."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def end(self):
        """Every process it started ended: SIGKILL to what is left, by pid (its session's
        processes: ranks whose mpirun was killed before they were seen are found too)."""
        for pid in set(self.pids + [self.proc.pid] + session_pids(self.proc.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait()
        for pid in self.pids:
            for _ in range(500):
                if not os.path.exists("/proc/%d" % pid) or _zombie(pid):
                    break
                time.sleep(0.01)
        self.f.close()


def session_pids(sid):
    """The processes of session sid (Run starts each run in a session of its own)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:
                found.append(int(entry))
    return found


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def command(tessera, ranks, opts):
    cmd = [tessera, "train", "--workers", "1" if ranks > 1 else "2"] + opts
    if ranks > 1:
        passed = [a for v in ("STARPU_HOME", "STARPU_SILENT") if v in os.environ
                  for a in ("-x", v)]
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--allow-run-as-root"] + \
            passed + cmd
    return cmd


def compare(ref, got):
    """(weights equal, every tensor equal, names that differ) of two checkpoints' tensors."""
    a, b = read_checkpoint(ref).tensors, read_checkpoint(got).tensors
    differ = sorted(n for n in set(a) | set(b)
                    if n not in a or n not in b or a[n].shape != b[n].shape or
                    a[n].tobytes() != b[n].tobytes())
    weights = [n for n in differ if not n.startswith(("optimizer.", "outer."))]
    return not weights, not differ, differ


def first_step_time(run, log, limit):
    """Seconds from the start until the log's first step line (None: not within limit)."""
    while time.time() - run.t0 < limit and run.proc.poll() is None:
        if last_step(log)[0] > 0:
            return time.time() - run.t0
        time.sleep(0.02)
    return None


def run_case(name, args, rng, folder, writer):
    ranks, opts = CASES[name]
    opts = [os.path.join(folder, "bn.ini") if o == "BN_INI" else o for o in opts]
    common = ["--deterministic", "--test-limit", "200", "--quiet", "--log-every", "1",
              "--checkpoint-every", "%dsteps" % args.every]
    base = command(args.tessera, ranks, opts + common)
    d = os.path.join(folder, name)
    os.makedirs(d, exist_ok=True)
    ref, ck = os.path.join(d, "ref.st"), os.path.join(d, "chaos.st")
    print("%s: %s" % (name, " ".join(shlex.quote(c) for c in base)), flush=True)

    run = Run(base + ["--checkpoint", ref, "--log", os.path.join(d, "ref.jsonl")],
              os.path.join(d, "ref.out"), ranks)
    startup = first_step_time(run, os.path.join(d, "ref.jsonl"), args.timeout)
    rc = run.wait(args.timeout)
    total = time.time() - run.t0
    run.end()
    if rc != 0 or startup is None:
        print("  the uninterrupted run failed (exit %s): %s" % (rc, os.path.join(d, "ref.out")))
        return {"case": name, "ranks": ranks, "error": "reference run exit %s" % rc}
    steps, per = last_step(os.path.join(d, "ref.jsonl"))
    print("  uninterrupted: %.1f s (%.1f s to the first step), %d steps of %d an epoch"
          % (total, startup, steps, per), flush=True)

    t_start, cycle, kills, lost, hung, error = time.time(), 0, [], [], 0, None
    while True:
        cycle += 1
        log = os.path.join(d, "run%02d.jsonl" % cycle)
        cmd = base + ["--checkpoint", ck, "--log", log]
        if os.path.exists(ck):
            cmd += ["--resume", ck]
        before = kept_step(ck, per)
        run = Run(cmd, os.path.join(d, "run%02d.out" % cycle), ranks)
        action, target, delay, at_signal = "none", "", 0.0, ""
        rc = None
        if len(kills) < args.kills:
            action = "SIGTERM mpirun" if rng.random() < args.sigterm else "SIGKILL rank"
            if rng.random() < 0.1:
                rc = run.wait(rng.uniform(0, startup))
            else:
                # a step drawn between the checkpoint's and twice the steps left / the signals
                # left after it; the signal goes once the log shows it done
                want = before + rng.randint(1, max(1, 2 * (steps - before) //
                                                   (args.kills - len(kills))))
                while rc is None and last_step(log)[0] < want:
                    rc = run.wait(0.01) if time.time() - run.t0 < args.timeout else -1
            delay = time.time() - run.t0
        if action != "none" and rc is None:
            pids = run.processes()
            at_signal = last_step(log)[0]
            if action == "SIGKILL rank" and pids:
                q = rng.randrange(len(pids))
                target = "rank %d" % q if ranks > 1 else "the process"
                os.kill(pids[q], signal.SIGKILL)
            else:
                if action == "SIGKILL rank":  # no rank yet: mpirun itself is killed
                    target = "mpirun (ranks not seen)"
                    os.kill(run.proc.pid, signal.SIGKILL)
                else:
                    target = "mpirun" if ranks > 1 else "the process"
                    os.kill(run.proc.pid, signal.SIGTERM)
            t_sig = time.time()
            rc = run.wait(args.ended)
            ended = time.time() - t_sig
            if rc is None:
                hung += 1
            kills.append(action)
        else:
            action = "none"
            if rc is None:
                rc = run.wait(args.timeout)
            ended = None
        run.end()
        done = max(last_step(log)[0], before)
        after = kept_step(ck, per)
        lost_here = max(done - after, 0) if action != "none" else 0
        if action != "none":
            lost.append(lost_here)
        writer.writerow([name, cycle, action, target, "%.2f" % delay, before, at_signal, done,
                         after, lost_here, rc, "" if ended is None else "%.2f" % ended])
        print("  run %2d: %-14s %-22s after %5.2f s: steps %s -> %s (at the signal %s), kept %s, "
              "lost %s, exit %s%s" % (cycle, action, target, delay, before, done, at_signal,
                                      after, lost_here, rc,
                                      "" if ended is None else ", ended %.2f s later" % ended),
              flush=True)
        if action == "none":
            if rc != 0:
                error = "the last run exited %s (%s)" % (rc, os.path.join(d, "run%02d.out"
                                                                            % cycle))
            break
        if after >= steps:
            break  # the checkpoint holds the end: the run finished before or despite the signal
        if cycle > 4 * args.kills + 10:
            error = "no end after %d runs" % cycle
            break
    seconds = time.time() - t_start
    row = {"case": name, "ranks": ranks, "cycles": cycle, "kills": len(kills),
           "sigkill": kills.count("SIGKILL rank"), "sigterm": kills.count("SIGTERM mpirun"),
           "lost_mean": sum(lost) / len(lost) if lost else 0.0,
           "lost_max": max(lost) if lost else 0, "hung": hung, "seconds": seconds,
           "steps": steps, "error": error}
    if error is None and os.path.exists(ck):
        w, t, differ = compare(ref, ck)
        row.update(weights_equal=w, all_equal=t, differ=" ".join(differ[:6]))
        print("  final weights equal: %s; every tensor equal: %s%s" %
              ("yes" if w else "no", "yes" if t else "no",
               "" if t else " (differ: %s)" % " ".join(differ[:6])), flush=True)
    else:
        print("  %s" % error, flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    ap.add_argument("--cases", default=",".join(CASES),
                    help="comma-separated, of: %s" % ", ".join(CASES))
    ap.add_argument("--kills", type=int, default=20, help="signals per case [20]")
    ap.add_argument("--quick", action="store_true", help="4 signals per case")
    ap.add_argument("--sigterm", type=float, default=0.15,
                    help="the fraction of signals that are SIGTERM to mpirun [0.15]")
    ap.add_argument("--every", type=int, default=3, help="--checkpoint-every N steps [3]")
    ap.add_argument("--seed", type=int, default=1, help="the draws of times and targets [1]")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a run may take [300]")
    ap.add_argument("--ended", type=float, default=30,
                    help="seconds every process has to end after a signal before it counts "
                         "as hung (and is killed) [30]")
    add_out_arguments(ap)
    args = ap.parse_args()
    if args.quick:
        args.kills = 4
    resolve_out(ap, args, "chaos")
    tee_stdout(args.out)
    os.environ.setdefault("STARPU_SILENT", "1")
    where = machine()
    print("machine: %s\ndate: %s" % (where, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())))
    with open(os.path.join(args.out, "bn.ini"), "w") as f:
        f.write(BN_INI)
    rng = random.Random(args.seed)
    rows = []
    with open(os.path.join(args.out, "cycles.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["case", "run", "signal", "target", "after_s", "resumed_from_step",
                         "step_at_signal", "steps_done", "step_kept", "lost_steps", "exit",
                         "ended_s"])
        for name in args.cases.split(","):
            rows.append(run_case(name, args, rng, args.out, writer))
            f.flush()
    fields = ["case", "ranks", "steps", "cycles", "kills", "sigkill", "sigterm", "lost_mean",
              "lost_max", "hung", "weights_equal", "all_equal", "differ", "seconds", "error"]
    with open(os.path.join(args.out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    yn = {True: "yes", False: "no", None: "-"}
    table = ["| case | processes | steps | runs | signals (SIGKILL a rank / SIGTERM mpirun) | "
             "lost steps per signal (mean, max) | hung | final weights equal | every tensor "
             "equal | seconds |",
             "| --- | --: | --: | --: | --- | --- | --: | --- | --- | --: |"]
    for r in rows:
        if "cycles" not in r:
            table.append("| %s | %d | | | | | | %s | | |" % (r["case"], r["ranks"], r["error"]))
            continue
        table.append("| %s | %d | %d | %d | %d (%d / %d) | %.1f, %d | %d | %s | %s | %.0f |" % (
            r["case"], r["ranks"], r["steps"], r["cycles"], r["kills"], r["sigkill"],
            r["sigterm"], r["lost_mean"], r["lost_max"], r["hung"],
            yn[r.get("weights_equal")] if not r["error"] else r["error"],
            yn[r.get("all_equal")], r["seconds"]))
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("Measured with `%s` on %s (before the runs), %s.\n\n" % (
            " ".join(shlex.quote(a) for a in sys.argv), where,
            time.strftime("%Y-%m-%d", time.gmtime())))
        f.write("\n".join(table) + "\n")
    print("\n".join(table))
    print("written: %s" % args.out)
    bad = [r["case"] for r in rows if r.get("error") or not r.get("all_equal")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
