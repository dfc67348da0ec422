#!/usr/bin/python3
"""Scheduling policies x tile sizes x worker counts on the MLP and the CNN.

Runs `tessera train` (and benchmarks/custom_sched for the example policy
`critical-first`) once per configuration with --stats and --log, takes the
median epoch time of the epochs after the first (the first warms caches and
calibrates the performance models dm* policies use), and the workers'
utilization (time executing / time profiled) from the statistics line.
Writes sweep.csv and PNG plots to the output folder.

    /usr/bin/python3 benchmarks/sweep_sched.py --out benchmarks/results/schedulers --force

Timings on a shared machine move between runs: --repeat N runs each
configuration N times, interleaved, and keeps the fastest.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

from outdir import add_out_arguments, resolve_out
from plotting import add_title_arguments, finish

POLICIES = ["lws", "ws", "eager", "prio", "dmda", "dmdas", "heteroprio", "modular-heft",
            "critical-first"]
WORKLOADS = {
    # name: (model, train samples, tiles)
    "mlp": ("mlp", 6000, ["64x128", "64x256", "64x512"]),
    "cnn": ("cnn", 1000, ["16x128", "32x128", "64x128"]),
}


def run(args, workload, policy, tile, workers, tmp):
    model, limit, _ = WORKLOADS[workload]
    exe = args.custom if policy == "critical-first" else args.tessera
    log = os.path.join(tmp, "run.jsonl")
    if os.path.exists(log):  # a log grows: each run reads its own lines
        os.remove(log)
    cmd = [exe, "train", "--model", model, "--sched", policy, "--tile", tile, "--workers",
           str(workers), "--epochs", str(args.epochs), "--train-limit", str(limit),
           "--test-limit", "0", "--stats", "--log", log, "--quiet"]
    if args.no_priorities:
        cmd.append("--no-priorities")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        print("FAILED:", " ".join(cmd), p.stderr.strip()[-300:], file=sys.stderr)
        return None
    lines = [json.loads(l) for l in open(log)]
    epochs = [o for o in lines if "epoch" in o]
    st = next(o for o in lines if o.get("event") == "stats")
    secs = [o["seconds"] for o in epochs[1:]] or [epochs[0]["seconds"]]
    total = sum(w["seconds"] for w in st["workers"])
    frac = lambda k: sum(w[k] for w in st["workers"]) / total if total else 0.0
    return {"epoch_s": statistics.median(secs), "samples_per_s": limit / statistics.median(secs),
            "utilization": frac("executing"), "idle": frac("idle"), "overhead": frac("overhead"),
            "tasks": sum(w["tasks"] for w in st["workers"])}


def plot(rows, out, machine=None, command=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for workload in WORKLOADS:
        if not any(r["workload"] == workload for r in rows):
            continue
        tiles = WORKLOADS[workload][2]
        wmax = max(r["workers"] for r in rows if r["workload"] == workload)
        pols = [p for p in POLICIES if any(r["policy"] == p and r["workload"] == workload
                                           for r in rows)]
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        width = 0.8 / len(tiles)
        for k, tile in enumerate(tiles):
            ys = []
            for p in pols:
                r = [r for r in rows if (r["workload"], r["policy"], r["tile"], r["workers"]) ==
                     (workload, p, tile, wmax)]
                ys.append(r[0]["epoch_s"] if r else 0)
            axes[0].bar([i + k * width for i in range(len(pols))], ys, width, label="tile " + tile)
        axes[0].set_xticks([i + 0.4 - width / 2 for i in range(len(pols))])
        axes[0].set_xticklabels(pols, rotation=30, ha="right")
        axes[0].set_ylabel("epoch time (s)")
        axes[0].set_xlabel("StarPU scheduling policy (--sched)")
        axes[0].set_ylim(0, max(r["epoch_s"] for r in rows if r["workload"] == workload) * 1.25)
        axes[0].set_title(f"{workload}: epoch time, {wmax} workers "
                          f"({WORKLOADS[workload][1]} samples)")
        axes[0].legend(fontsize=8, loc="upper center", ncol=len(tiles))
        workers = sorted({r["workers"] for r in rows if r["workload"] == workload})
        width = 0.8 / len(workers)
        for k, w in enumerate(workers):
            best = []
            for p in pols:
                rs = [r for r in rows if (r["workload"], r["policy"], r["workers"]) ==
                      (workload, p, w)]
                r = min(rs, key=lambda r: r["epoch_s"]) if rs else None
                best.append(100 * r["utilization"] if r else 0)
            axes[1].bar([i + k * width for i in range(len(pols))], best, width,
                        label=f"{w} worker{'s' if w > 1 else ''}")
        axes[1].set_xticks([i + 0.4 - width / 2 for i in range(len(pols))])
        axes[1].set_xticklabels(pols, rotation=30, ha="right")
        axes[1].set_ylabel("worker utilization (% of time executing)")
        axes[1].set_ylim(0, 120)
        axes[1].set_yticks(range(0, 101, 20))
        axes[1].set_xlabel("StarPU scheduling policy (--sched)")
        axes[1].set_title(f"{workload}: utilization at each policy's best tile")
        axes[1].legend(fontsize=8, loc="upper center", ncol=len(workers))
        finish(fig, os.path.join(out, f"sweep_{workload}.png"),
               f"StarPU scheduling policies on the {workload}, tessera train", machine, command)
        plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", default="build/tessera")
    ap.add_argument("--custom", default="build/benchmarks/custom_sched")
    add_out_arguments(ap)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--workloads", default="mlp,cnn")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-priorities", action="store_true")
    ap.add_argument("--plot-only", action="store_true", help="replot OUT/sweep.csv")
    add_title_arguments(ap)
    args = ap.parse_args()
    resolve_out(ap, args, "schedulers")
    path = os.path.join(args.out, "sweep.csv")
    fields = ["workload", "policy", "tile", "workers", "epoch_s", "samples_per_s", "utilization",
              "idle", "overhead", "tasks"]
    if args.plot_only:
        rows = list(csv.DictReader(open(path)))
        for r in rows:
            for k in fields[3:]:
                r[k] = float(r[k])
            r["workers"] = int(r["workers"])
        plot(rows, args.out, args.machine, args.command)
        return
    configs = [(w, p, t, int(n)) for w in args.workloads.split(",")
               for t in WORKLOADS[w][2] for n in args.workers.split(",")
               for p in args.policies.split(",")]
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            for c in configs:
                r = run(args, *c, tmp)
                if r and (c not in best or r["epoch_s"] < best[c]["epoch_s"]):
                    best[c] = r
                if r:
                    print(f"{c[0]:4} {c[1]:15} tile {c[2]:7} {c[3]} workers: "
                          f"{r['epoch_s']:.3f} s/epoch, utilization {100 * r['utilization']:.0f}%",
                          flush=True)
    rows = [dict(zip(fields[:4], c), **best[c]) for c in configs if c in best]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.5g}" if isinstance(v, float) else v) for k, v in r.items()})
    plot(rows, args.out, args.machine, args.command)
    for workload in args.workloads.split(","):
        rs = sorted((r for r in rows if r["workload"] == workload), key=lambda r: r["epoch_s"])
        if rs:
            b, wst = rs[0], rs[-1]
            print(f"{workload}: best {b['policy']} tile {b['tile']} {b['workers']} workers "
                  f"{b['epoch_s']:.3f} s; worst {wst['policy']} tile {wst['tile']} "
                  f"{wst['workers']} workers {wst['epoch_s']:.3f} s")


if __name__ == "__main__":
    main()
