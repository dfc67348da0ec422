#!/usr/bin/python3
"""Whether a long run's memory stays flat: each process's resident set size (RSS) at the end of
every epoch, one process and under mpirun.

It starts `tessera train` (or `mpirun -np P ... tessera train`), finds the tessera processes
(the command's own process, or mpirun's children named tessera), and polls each one's VmRSS in
/proc/PID/status every 10 ms while reading rank 0's epoch lines ("epoch N/M ...") from stdout,
so nothing in tessera is changed or asked. For each epoch and rank it keeps two figures:

  at the line   the RSS read right after the epoch's line appears (the epoch's steps done, its
                evaluation done; the next epoch's first steps may have started);
  peak          the largest RSS polled during the epoch (from the previous line to this one).

Growth is (later - earlier) / earlier of a rank's figure between two epochs, the largest over
the ranks; a leak of B bytes a step shows in both figures, by B x steps between the two epochs.
The later epoch is never the run's last: a run of --epochs N trains N + 1 epochs, because after
the last epoch's line the run ends (it frees, gathers its statistics, writes its checkpoint) and
the RSS read at that line, under mpirun where the line comes through mpirun, caught that
(-5.4% and +1.4% on the 2-rank MLP, against +0.03% for the epoch before).

  benchmarks/memory.py                        # the long table: MLP, CNN, ResNet-20, GPT; 1 and 2
                                              # ranks; epoch 2 against epoch 50
  benchmarks/memory.py --quick                # every case for 6 epochs (a minute or two)
  benchmarks/memory.py --cases mlp --ranks 2 --epochs 20
  benchmarks/memory.py --check 2 --slack-mb 1 --cases mlp --epochs 12   # exit 1 when it grows

It writes into --out (benchmarks/outdir.py): epochs.csv (every epoch, rank and figure),
summary.csv and summary.md (the table: epoch 2 against the last epoch), report.txt (what it
printed, with the command line and the machine). tests/test_memory.py runs `--check` on short
runs in the suite.
"""
import argparse
import csv
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from outdir import add_out_arguments, resolve_out, tee_stdout  # noqa: E402

# name: (options of tessera train, epochs of the long run). The subsets keep an epoch short, so
# that 50 epochs take minutes; the test set is small, as evaluation runs at every epoch end.
CASES = {
    "mlp": (["--model", "mlp", "--train-limit", "2000", "--test-limit", "500"], 50),
    "cnn": (["--model", "cnn", "--train-limit", "1000", "--test-limit", "250"], 50),
    "resnet20": (["--model", "resnet20", "--train-limit", "256", "--test-limit", "64",
                  "--batch", "32"], 50),
    "gpt": (["--model", "gpt:2,64,2,32", "--train-limit", "1024", "--test-limit", "256",
             "--batch", "32"], 50),
}
EPOCH_LINE = re.compile(r"^epoch\s+(\d+)/(\d+)\s")
POLL_S = 0.01


def rss_kb(pid):
    """VmRSS of a process in KiB, None when it is gone (or a zombie, which has no VmRSS)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _stat(pid):
    """(command name, parent pid) from /proc/PID/stat, None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    return name, int(text[text.rindex(")") + 2:].split()[1])


def tessera_processes(root):
    """The tessera processes at or below pid root: [pid, ...], sorted (under mpirun, rank order
    is launch order, which is pid order on one machine)."""
    parents, names = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st:
                names[int(entry)], parents[int(entry)] = st
    found = []
    for pid, name in names.items():
        if name != "tessera":
            continue
        p = pid
        while p and p != root and p in parents:
            p = parents[p]
        if p == root:
            found.append(pid)
    return sorted(found)


def watch(cmd, nprocs, env=None, echo=False, timeout=None):
    """Runs cmd (its stdout read here), waits for nprocs tessera processes below it, and returns
    (exit status, {epoch: [(rss at the line, peak during the epoch) per process, in KiB]}, the
    output's lines)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, bufsize=1)
    lock = threading.Lock()
    state = {"pids": [], "peak": {}, "stop": False}

    def poll():
        while not state["stop"]:
            if len(state["pids"]) < nprocs:
                pids = tessera_processes(proc.pid)
                if len(pids) >= nprocs:
                    with lock:
                        state["pids"] = pids[:nprocs]
            for pid in state["pids"]:
                kb = rss_kb(pid)
                if kb is not None:
                    with lock:
                        state["peak"][pid] = max(state["peak"].get(pid, 0), kb)
            time.sleep(POLL_S)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    epochs, lines = {}, []
    timer = None
    if timeout:
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if echo:
            sys.stdout.write(line)
        m = EPOCH_LINE.match(line)
        if not m:
            continue
        with lock:
            pids = list(state["pids"])
            row = []
            for pid in pids:
                now = rss_kb(pid) or 0
                row.append((now, max(state["peak"].get(pid, 0), now)))
                state["peak"][pid] = 0
        if len(pids) == nprocs:
            epochs[int(m.group(1))] = row
    rc = proc.wait()
    if timer:
        timer.cancel()
    state["stop"] = True
    poller.join()
    return rc, epochs, lines


def command(tessera, opts, ranks, workers):
    """The tessera train command line of a run: under mpirun when ranks > 1."""
    cmd = [tessera, "train", "--workers", str(workers)] + opts
    if ranks > 1:
        passed = [a for v in ("STARPU_HOME", "STARPU_SILENT") if v in os.environ
                  for a in ("-x", v)]
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--allow-run-as-root"] + passed + cmd
    return cmd


def growth(epochs, first, last):
    """The largest relative and absolute growth (at the line and peak) over the processes between
    two epochs: {"line": (fraction, KiB), "peak": (fraction, KiB)}."""
    out = {}
    for k, name in enumerate(("line", "peak")):
        worst = (float("-inf"), 0)
        for a, b in zip(epochs[first], epochs[last]):
            d = b[k] - a[k]
            worst = max(worst, (d / a[k] if a[k] else float("inf"), d))
        out[name] = worst
    return out


def machine():
    """The CPU model and its cores, and the load average before the run."""
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg()
    return "%s, %d cores; load average %.2f %.2f %.2f" % (model, os.cpu_count(), *load)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    ap.add_argument("--cases", default=",".join(CASES),
                    help="comma-separated, of: %s" % ", ".join(CASES))
    ap.add_argument("--ranks", default="1,2", help="comma-separated process counts [1,2]")
    ap.add_argument("--workers", type=int, default=None,
                    help="CPU workers per process [2 for one process, 1 per rank under mpirun]")
    ap.add_argument("--epochs", type=int, default=None,
                    help="the later epoch compared, of every case (the run trains one more) "
                         "[each case's own, 50 today]")
    ap.add_argument("--quick", action="store_true", help="epoch 6 of every case")
    ap.add_argument("--from-epoch", type=int, default=2, help="the earlier epoch [2]")
    ap.add_argument("--check", type=float, metavar="PCT", default=None,
                    help="exit 1 when a run's RSS grows by more than PCT%% plus --slack-mb "
                         "between --from-epoch and the last epoch (at the line and at the peak)")
    ap.add_argument("--slack-mb", type=float, default=0.0,
                    help="with --check, absolute growth allowed besides PCT (allocator noise)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds a run may take")
    ap.add_argument("--echo", action="store_true", help="print tessera's output too")
    ap.add_argument("extra", nargs="*", help="after --: more options of tessera train")
    add_out_arguments(ap)
    args = ap.parse_args()
    resolve_out(ap, args, "memory")
    tee_stdout(args.out)
    os.environ.setdefault("STARPU_SILENT", "1")
    env = dict(os.environ)
    where = machine()
    print("machine: %s" % where)
    print("tessera: %s" % args.tessera)

    rows, failed = [], []
    with open(os.path.join(args.out, "epochs.csv"), "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["case", "ranks", "epoch", "rank", "rss_line_kb", "rss_peak_kb"])
        for case in args.cases.split(","):
            opts, long_epochs = CASES[case]
            epochs = args.epochs or (6 if args.quick else long_epochs)
            for ranks in (int(r) for r in args.ranks.split(",")):
                workers = args.workers or (1 if ranks > 1 else 2)
                cmd = command(args.tessera, opts + ["--epochs", str(epochs + 1)] + args.extra,
                              ranks, workers)
                print("$ %s" % " ".join(shlex.quote(c) for c in cmd), flush=True)
                t0 = time.time()
                rc, seen, lines = watch(cmd, ranks, env=env, echo=args.echo,
                                        timeout=args.timeout)
                took = time.time() - t0
                for e in sorted(seen):
                    for r, (line, peak) in enumerate(seen[e]):
                        out.writerow([case, ranks, e, r, line, peak])
                if rc != 0 or args.from_epoch not in seen or epochs not in seen:
                    print("  failed: exit %d, epochs seen %s\n  %s" %
                          (rc, sorted(seen), "\n  ".join(lines[-10:])))
                    failed.append("%s x%d" % (case, ranks))
                    continue
                g = growth(seen, args.from_epoch, epochs)
                first = max(p[0] for p in seen[args.from_epoch])
                row = {"case": case, "ranks": ranks, "workers": workers,
                       "from": args.from_epoch, "to": epochs, "seconds": took,
                       "rss_mb": first / 1024.0,
                       "line_pct": 100 * g["line"][0], "line_mb": g["line"][1] / 1024.0,
                       "peak_pct": 100 * g["peak"][0], "peak_mb": g["peak"][1] / 1024.0}
                rows.append(row)
                print("  %.0f s; RSS at epoch %d's line %.1f MB; to epoch %d: %+.2f%% "
                      "(%+.2f MB) at the line, %+.2f%% (%+.2f MB) at the peak" %
                      (took, args.from_epoch, row["rss_mb"], epochs, row["line_pct"],
                       row["line_mb"], row["peak_pct"], row["peak_mb"]), flush=True)
                if args.check is not None:
                    for k in ("line", "peak"):
                        allowed = args.check / 100.0 * first / 1024.0 + args.slack_mb
                        if g[k][1] / 1024.0 > allowed:
                            failed.append("%s x%d: %s RSS grew %.2f MB (%.2f%%), over %.2f MB"
                                          % (case, ranks, k, g[k][1] / 1024.0,
                                             100 * g[k][0], allowed))
    fields = ["case", "ranks", "workers", "from", "to", "seconds", "rss_mb", "line_pct",
              "line_mb", "peak_pct", "peak_mb"]
    with open(os.path.join(args.out, "summary.csv"), "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=fields)
        out.writeheader()
        for r in rows:
            out.writerow({k: ("%.3f" % v if isinstance(v, float) else v) for k, v in r.items()})
    table = ["| model | processes | epochs | RSS at epoch %d (MB, largest rank) | growth at the "
             "line | growth of the epoch's peak | seconds |" % args.from_epoch,
             "| --- | --: | --- | --: | --: | --: | --: |"]
    for r in rows:
        table.append("| %s | %d | %d -> %d | %.1f | %+.2f%% (%+.2f MB) | %+.2f%% (%+.2f MB) | "
                     "%.0f |" % (r["case"], r["ranks"], r["from"], r["to"], r["rss_mb"],
                                 r["line_pct"], r["line_mb"], r["peak_pct"], r["peak_mb"],
                                 r["seconds"]))
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("Measured with `%s`; %s (before the runs).\n\n"
                % (" ".join(shlex.quote(a) for a in sys.argv), where))
        f.write("\n".join(table) + "\n")
    print("\n".join(table))
    print("written: %s" % args.out)
    for f in failed:
        print("FAILED: %s" % f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
