#!/usr/bin/python3
"""Data-parallel scaling on whatever node it runs on: tessera and PyTorch, same run.

For each number of ranks P (default 1, 2, 4, 8, 16, those that fit the node's
cores with --workers W each), trains the default MLP (batch 64 per rank,
constant rate) and reports samples/s over all ranks for
  tessera --sync batch, every=K, epoch   (mpirun -np P tessera train ...)
  PyTorch DDP and per-epoch averaging    (benchmarks/torch_ddp.py, when torch is installed)
and each one's efficiency: samples/s / (P x the 1-rank rate of the same
engine). tessera trains --epochs epochs on --samples images and reports its
last epoch (epoch-end averaging and calibration included in epoch 1 and not
in the last); PyTorch trains for --seconds after warm-up on synthetic data.

A policy may name how its averages travel: batch@two-level:4 runs --sync batch
--allreduce two-level --node-size 4 (nodes of 4 ranks on this one machine),
batch@flat --allreduce flat, batch@bucket:25 --allreduce flat --bucket-mb 25;
without @ the engine's default (auto).

--tiles R1xC1,R2xC2,... also runs tessera --sync epoch at the largest P with
each tile and reports the default tile's rate against the best of them.

Writes OUT/scaling.csv, OUT/scaling.md (the table) and, with matplotlib,
OUT/scaling.png (samples/s and efficiency against ranks).

  /usr/bin/python3 benchmarks/scaling.py [--ranks 1,2,4,8,16] [--workers 1]
      [--policies batch,every=8,epoch,batch@two-level:4,batch@bucket:25] [--samples 30000] [--epochs 2] [--seconds 8]
      [--tiles 32x256,64x256,64x1024] [--out DIR] [--force] [--plot-only]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

from outdir import add_out_arguments, resolve_out
from plotting import add_title_arguments, finish

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def tessera(args, ranks, policy, tile=None):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--allow-run-as-root", "-x",
               "STARPU_SILENT=1", args.tessera, "train", "--workers", str(args.workers),
               "--epochs", str(args.epochs), "--train-limit", str(args.samples),
               "--test-limit", "1000", "--lr-schedule", "constant", "--quiet", "--log", log]
        if ranks > 1:
            sync, _, travel = policy.partition("@")
            cmd += ["--sync", sync]
            if travel.startswith("bucket:"):
                cmd += ["--allreduce", "flat", "--bucket-mb", travel.partition(":")[2]]
            elif travel:
                allreduce, _, nodes = travel.partition(":")
                cmd += ["--allreduce", allreduce] + (["--node-size", nodes] if nodes else [])
        if tile:
            cmd += ["--tile", tile]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        lines = [json.loads(line) for line in open(log)]
    epochs = [o for o in lines if "event" not in o]
    return epochs[-1]["samples_per_s"]


def have_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                          capture_output=True).returncode == 0


def pytorch(args, ranks, mode):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_ddp.py"), "--mode", mode, "--ranks",
           str(ranks), "--seconds", str(args.seconds), "--synthetic"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def plot(rows, path, machine=None, command=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.8))
    ranks = sorted({int(r["ranks"]) for r in rows})
    for name in sorted({r["engine"] + " " + r["policy"] for r in rows}):
        pts = sorted((int(r["ranks"]), float(r["samples_per_s"]), float(r["efficiency"]))
                     for r in rows if r["engine"] + " " + r["policy"] == name)
        style = "-o" if name.startswith("tessera") else "--s"
        a.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name)
        b.plot([p[0] for p in pts], [p[2] for p in pts], style, label=name)
    a.set_xlabel("ranks (MPI processes)"), a.set_ylabel("throughput (samples/s, all ranks)")
    a.set_title("throughput", fontsize=9)
    b.set_xlabel("ranks (MPI processes)")
    b.set_ylabel("efficiency: samples/s / (P x 1 rank's samples/s)")
    b.set_title("scaling efficiency (1 = linear)", fontsize=9)
    top = max([1.2] + [float(r["efficiency"]) * 1.1 for r in rows])
    a.set_ylim(0, max(float(r["samples_per_s"]) for r in rows) * 1.15)
    b.set_ylim(0, top), b.axhline(1.0, color="grey", lw=0.5)
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ranks, [str(r) for r in ranks])
        ax.margins(x=0.08)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    workers = sorted({r.get("workers", "?") for r in rows})
    finish(fig, path, "Default MLP, batch 64 per rank, %s StarPU worker(s) per rank: tessera's "
           "policies against PyTorch's" % "/".join(str(w) for w in workers), machine, command)
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="1,2,4,8,16")
    p.add_argument("--workers", type=int, default=1, help="StarPU workers per rank [1]")
    p.add_argument("--policies", default="batch,every=8,epoch")
    p.add_argument("--samples", type=int, default=30000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seconds", type=float, default=8, help="PyTorch measuring time [8]")
    p.add_argument("--tiles", default="", help="tile sweep at the largest P (--sync epoch)")
    add_out_arguments(p)
    p.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    p.add_argument("--plot-only", metavar="CSV", help="only plot CSV (a scaling.csv) into --out")
    add_title_arguments(p)
    args = p.parse_args()
    resolve_out(p, args, "scaling")
    if args.plot_only:
        rows = list(csv.DictReader(open(args.plot_only)))
        png = os.path.join(args.out, "scaling.png")
        if not plot(rows, png, args.machine, args.command):
            sys.exit("scaling.py: --plot-only needs matplotlib (apt-get install python3-matplotlib)")
        print("plot:", png)
        return 0
    cores = os.cpu_count() or 1
    ranks = [r for r in (int(x) for x in args.ranks.split(",")) if r * args.workers <= cores]
    if 1 not in ranks:
        ranks = [1] + ranks
    policies = args.policies.split(",")
    peers = have_torch()
    if not peers:
        print("PyTorch not installed (scripts/setup.sh installs python3-torch): tessera only",
              file=sys.stderr)
    rows = []

    def add(engine, policy, r, rate):
        rows.append({"engine": engine, "policy": policy, "ranks": r, "workers": args.workers,
                     "samples_per_s": round(rate)})
        print(f"{engine:8} {policy:10} {r:3} ranks x {args.workers}: {rate:9.0f} samples/s",
              flush=True)

    for r in ranks:
        for policy in policies if r > 1 else ["single"]:
            add("tessera", policy, r, tessera(args, r, policy))
        if peers:
            for mode in ("ddp", "epoch-avg"):
                add("pytorch", mode, r, pytorch(args, r, mode))
    # tessera's 1-rank run has no synchronization and serves every policy; each PyTorch mode
    # has its own 1-process run.
    one = {(row["engine"], row["policy"]): row["samples_per_s"] for row in rows
           if row["ranks"] == 1}
    for row in rows:
        base = one[("tessera", "single")] if row["engine"] == "tessera" else one[
            (row["engine"], row["policy"])]
        row["efficiency"] = round(row["samples_per_s"] / (row["ranks"] * base), 3)
    # The 1-rank row stands for every policy's P = 1 point.
    for row in [x for x in rows if x["ranks"] == 1 and x["engine"] == "tessera"]:
        for policy in policies:
            rows.append(dict(row, policy=policy))
        rows.remove(row)
    tiles = []
    if args.tiles:
        top = max(ranks)
        default = tessera(args, top, "epoch")
        swept = {t: tessera(args, top, "epoch", t) for t in args.tiles.split(",")}
        best = max(swept, key=swept.get)
        tiles = [f"{top} ranks x {args.workers} workers, --sync epoch: default tiles "
                 f"{default:.0f} samples/s; " +
                 ", ".join(f"{t} {v:.0f}" for t, v in swept.items()) +
                 f"; default / best ({best}) = {default / swept[best]:.3f}"]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "scaling.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(sorted(rows, key=lambda x: (x["engine"], x["policy"], x["ranks"])))
    lines = [f"{cores} cores, {args.workers} worker(s) per rank, default MLP, batch 64 per rank",
             "", "| engine | policy | " + " | ".join(f"{r} ranks" for r in ranks) + " |",
             "| --- | --- |" + " --- |" * len(ranks)]
    for name in sorted({(x["engine"], x["policy"]) for x in rows}):
        cells = []
        for r in ranks:
            hit = [x for x in rows if (x["engine"], x["policy"]) == name and x["ranks"] == r]
            cells.append(f"{hit[0]['samples_per_s']:,} ({hit[0]['efficiency']:.0%})" if hit
                         else "")
        lines.append(f"| {name[0]} | {name[1]} | " + " | ".join(cells) + " |")
    lines += [""] + tiles
    with open(os.path.join(args.out, "scaling.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if plot(rows, os.path.join(args.out, "scaling.png"), args.machine, args.command):
        print("plot:", os.path.join(args.out, "scaling.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
