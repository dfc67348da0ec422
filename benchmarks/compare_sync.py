#!/usr/bin/python3
"""Compares tessera's data-parallel synchronization policies (`train --sync`).

Trains the same model on the same data with the same seed and epochs once per
policy (default batch, every=8, epoch, async-epoch), each as
`mpirun -np RANKS ... tessera train --workers 1 --sync POLICY --log DIR/POLICY.jsonl`,
plus the reference the policies are judged against, `single`: one process
without mpirun on RANKS x WORKERS workers, the batch of one rank. Then from the
rank-0 logs it writes

  DIR/sync.csv  one row per policy and epoch: policy, epoch, wall_time_s
                (cumulative seconds + eval_seconds), seconds, test_accuracy,
                loss, samples_per_s, sync_seconds, bytes_sent, bytes_received
  DIR/sync.png  test accuracy vs epoch and vs wall time, one line per policy
                (matplotlib, else gnuplot)

and prints a table: final accuracy, wall time to reach --target accuracy,
mean epoch time, mean samples/s (across ranks), mean sync seconds and MB sent
per epoch, and each policy's final accuracy against `single`'s. Fields a log
lacks (a run without MPI) count as NaN, or as 0 in the wall time.

  /usr/bin/python3 benchmarks/compare_sync.py                    # 2 ranks, 10 epochs
  /usr/bin/python3 benchmarks/compare_sync.py --epochs 3 --policies batch,epoch -- --train-limit 20000
  /usr/bin/python3 benchmarks/compare_sync.py --dry-run          # print the commands
  /usr/bin/python3 benchmarks/compare_sync.py --no-run --out DIR # re-plot the logs in DIR
"""
import argparse
import csv
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMNS = ["policy", "epoch", "wall_time_s", "seconds", "test_accuracy", "loss",
           "samples_per_s", "sync_seconds", "bytes_sent", "bytes_received"]
NAN = float("nan")


def log_path(out, policy):
    return os.path.join(out, re.sub(r"[^A-Za-z0-9_.-]", "-", policy) + ".jsonl")


def command(args, policy):
    if policy == "single":
        return ([args.tessera, "train", "--workers", str(args.ranks * args.workers),
                 "--epochs", str(args.epochs), "--seed", str(args.seed),
                 "--log", log_path(args.out, policy)] + args.extra)
    return (["mpirun", "-np", str(args.ranks), "--oversubscribe", "--allow-run-as-root",
             "-x", "STARPU_SILENT=1", args.tessera, "train", "--workers", str(args.workers),
             "--sync", policy, "--epochs", str(args.epochs), "--seed", str(args.seed),
             "--log", log_path(args.out, policy)] + args.extra)


def number(record, key):
    value = record.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else NAN


def read_log(path, policy):
    """The rows of sync.csv for one policy's JSONL log."""
    rows, wall = [], 0.0
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            wall += sum(0.0 if math.isnan(v) else v
                        for v in (number(r, "seconds"), number(r, "eval_seconds")))
            row = {k: number(r, k) for k in COLUMNS[3:]}
            rows.append({"policy": policy, "epoch": int(r["epoch"]),
                         "wall_time_s": round(wall, 4), **row})
    return rows


def mean(values):
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else NAN


def summary(policy, rows, target):
    reached = [r["wall_time_s"] for r in rows if r["test_accuracy"] >= target]
    def fmt(value, spec):
        return "-" if math.isnan(value) else format(value, spec)

    return [policy, fmt(rows[-1]["test_accuracy"], ".2%"),
            fmt(reached[0], ".1f") if reached else "-",
            fmt(mean([r["seconds"] for r in rows]), ".2f"),
            fmt(mean([r["samples_per_s"] for r in rows]), ",.0f"),
            fmt(mean([r["sync_seconds"] for r in rows]), ".3f"),
            fmt(mean([r["bytes_sent"] for r in rows]) / 1e6, ".1f")]


def plot_matplotlib(runs, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for policy, rows in runs.items():
        acc = [r["test_accuracy"] for r in rows]
        a.plot([r["epoch"] for r in rows], acc, marker="o", label=policy)
        b.plot([r["wall_time_s"] for r in rows], acc, marker="o", label=policy)
    for ax, xlabel in ((a, "epoch"), (b, "wall time (s)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("tessera data-parallel synchronization policies")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def plot_gnuplot(runs, png):
    cairo = subprocess.run(["gnuplot", "-e", "set terminal pngcairo"], capture_output=True)
    term = "pngcairo" if cairo.returncode == 0 else "png"
    lines = [f"set terminal {term} size 1100,420", f"set output {json.dumps(png)}",
             "set key bottom right", "set grid", "set ylabel 'test accuracy'",
             "set multiplot layout 1,2 title 'tessera data-parallel synchronization policies'"]
    for xcol, xlabel in (("epoch", "epoch"), ("wall_time_s", "wall time (s)")):
        lines.append(f"set xlabel '{xlabel}'")
        lines.append("plot " + ", ".join(f"'-' using 1:2 with linespoints title {json.dumps(p)}"
                                         for p in runs))
        for rows in runs.values():
            lines += [f"{r[xcol]} {r['test_accuracy']}" for r in rows] + ["e"]
    lines.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(lines) + "\n", text=True, check=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="%(prog)s [options] [-- extra tessera train args]")
    p.add_argument("--policies", default="single,batch,every=8,epoch,async-epoch",
                   help="policies to run; single: one process, the reference "
                        "[single,batch,every=8,epoch,async-epoch]")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--ranks", type=int, default=2, help="MPI ranks [2]")
    p.add_argument("--workers", type=int, default=1, help="StarPU CPU workers per rank [1]")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--target", type=float, default=0.88, help="accuracy to time [0.88]")
    p.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"), metavar="PATH")
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "sync"),
                   metavar="DIR")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--no-run", action="store_true", help="only read the logs already in DIR")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    args.extra = argv[split + 1:]
    policies = [s for s in args.policies.split(",") if s]
    if not policies or args.epochs < 1 or args.ranks < 1 or args.workers < 1:
        p.error("--policies must name a policy; --epochs, --ranks, --workers must be positive")

    if args.dry_run:
        for policy in policies:
            print(shlex.join(command(args, policy)))
        return 0
    os.makedirs(args.out, exist_ok=True)
    failed = []
    if not args.no_run:
        for policy in policies:
            cmd = command(args, policy)
            print(f"== {policy}: {shlex.join(cmd)}", flush=True)
            if os.path.exists(log_path(args.out, policy)):
                os.remove(log_path(args.out, policy))
            rc = subprocess.run(cmd).returncode
            if rc != 0:
                print(f"compare_sync: {policy}: exit status {rc}", file=sys.stderr)
                failed.append(policy)

    runs = {}
    for policy in policies:
        path = log_path(args.out, policy)
        if os.path.exists(path):
            runs[policy] = read_log(path, policy)
        if not runs.get(policy):
            print(f"compare_sync: {policy}: no epochs in {path}", file=sys.stderr)
            runs.pop(policy, None)
    if not runs:
        return 1

    with open(os.path.join(args.out, "sync.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        for rows in runs.values():
            w.writerows(rows)
    png = os.path.join(args.out, "sync.png")
    try:
        plot_matplotlib(runs, png)
    except ImportError:
        if shutil.which("gnuplot"):
            plot_gnuplot(runs, png)
        else:
            print("compare_sync: no matplotlib and no gnuplot: no sync.png", file=sys.stderr)

    head = ["policy", "final acc", f"time to {args.target:.1%} (s)", "epoch s",
            "samples/s", "sync s/epoch", "MB sent/epoch"]
    table = [head] + [summary(policy, rows, args.target) for policy, rows in runs.items()]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        print("  ".join(c.ljust(wd) if i == 0 else c.rjust(wd)
                        for i, (c, wd) in enumerate(zip(r, widths))))
    if "single" in runs:
        ref = runs["single"][-1]["test_accuracy"]
        for policy, rows in runs.items():
            if policy != "single":
                diff = (rows[-1]["test_accuracy"] - ref) * 100
                print(f"{policy}: {diff:+.2f} points against one process")
    print(f"wrote {os.path.join(args.out, 'sync.csv')} and {png}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
