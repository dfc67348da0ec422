#!/usr/bin/python3
"""Predictions of `tessera plan` for big clusters, as a Markdown table.

For each cluster description, model, node count and batch per replica it runs
`tessera plan --json --cluster FILE --ranks NODES x RANKS_PER_NODE` (every grid
shape, policies batch, every=8 and epoch) and reports seconds per epoch of
pure data parallelism with batch averaging, flat and two-level (1xP batch; the
default --allreduce auto is two-level on these nodes of 8 ranks) with the busiest
rank's messages per step of each, the best grid with
batch averaging (the Pr x Pc that Gholami et al. predict can beat both ends),
pure data parallelism with epoch averaging (1xP epoch), and which is fastest.
Writes OUT/table.md and OUT/plans.csv and prints the table.

  /usr/bin/python3 benchmarks/plan_table.py                  # benchmarks/out/plan-table-TIME/table.md
  /usr/bin/python3 benchmarks/plan_table.py --nodes 16,64 --batches 64
  /usr/bin/python3 benchmarks/plan_table.py --models alexnet,vgg16,resnet50,googlenet \
      --batches 64 --samples 1281167                   # the zoo on ImageNet (docs/planning.md)
"""
import argparse
import csv
import json
import os
import shlex
import subprocess
import sys

from outdir import add_out_arguments, resolve_out

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# name: (--model, --input or None for Fashion-MNIST's 28x28x1, --classes)
MODELS = {"mlp4096": ("mlp:4096,4096", None, 10), "cnn": ("cnn", None, 10)}
# the zoo (models/*.ini): the CIFAR ResNets at 32x32x3 in 10 classes, the others at ImageNet's
for _name in ("resnet20", "resnet32", "resnet56"):
    MODELS[_name] = (_name, "32x32x3", 10)
for _name in ("resnet18", "resnet50", "vgg11", "vgg16", "alexnet", "googlenet"):
    MODELS[_name] = (_name, "224x224x3", 1000)


def ranks_per_node(path):
    for line in open(path):
        k, _, v = line.partition("=")
        if k.strip() == "ranks_per_node":
            return int(v.split(";")[0])
    return 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    ap.add_argument("--clusters", default="ib100,eth10")
    ap.add_argument("--models", default="mlp4096,cnn", help="comma-separated: " + ",".join(MODELS))
    ap.add_argument("--nodes", default="16,64,1024")
    ap.add_argument("--batches", default="32,128,512", help="samples per step of one replica")
    ap.add_argument("--samples", type=int, default=10_000_000,
                    help="samples per epoch (default 10 M: 1024 nodes still take steps)")
    add_out_arguments(ap)
    args = ap.parse_args()
    resolve_out(ap, args, "plan-table")
    rows = []
    for cl in args.clusters.split(","):
        path = os.path.join(REPO, "benchmarks", "clusters", cl + ".ini")
        rpn = ranks_per_node(path)
        for model in args.models.split(","):
            for nodes in (int(n) for n in args.nodes.split(",")):
                for batch in (int(b) for b in args.batches.split(",")):
                    spec, shape, classes = MODELS[model]
                    cmd = [args.tessera, "plan", "--json", "--cluster", path, "--model", spec,
                           "--ranks", str(nodes * rpn), "--batch", str(batch),
                           "--samples", str(args.samples), "--classes", str(classes)]
                    if shape:
                        cmd += ["--input", shape]
                    plans = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                                      check=True).stdout)["plans"]
                    dp = next(p for p in plans if p["pr"] == 1 and p["sync"] == "batch")
                    flat = json.loads(subprocess.run(
                        cmd + ["--grid", "1x%d" % (nodes * rpn), "--sync", "batch", "--allreduce", "flat"],
                        capture_output=True, text=True, check=True).stdout)["plans"][0]
                    dpe = next(p for p in plans if p["pr"] == 1 and p["sync"] == "epoch")
                    grid = min((p for p in plans if p["sync"] == "batch"), key=lambda p: p["epoch_s"])
                    best = min(plans, key=lambda p: p["epoch_s"])
                    rows.append({"cluster": cl, "model": model, "nodes": nodes, "ranks": nodes * rpn,
                                 "batch": batch, "dp_flat_s": flat["epoch_s"],
                                 "dp_flat_messages": flat["sync_messages_step"],
                                 "dp_batch_s": dp["epoch_s"], "dp_allreduce": dp["allreduce"],
                                 "dp_messages": dp["sync_messages_step"],
                                 "best_grid": grid["grid"], "grid_batch_s": grid["epoch_s"],
                                 "dp_epoch_s": dpe["epoch_s"],
                                 "best": "%s %s" % (best["grid"], best["sync"]), "best_s": best["epoch_s"],
                                 "dp_batch_step_ms": 1e3 * dp["step_s"],
                                 "grid_step_ms": 1e3 * grid["step_s"]})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "plans.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    cmdline = " ".join(shlex.quote(a) for a in ["/usr/bin/python3", os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
    lines = ["`%s` (%d samples per epoch; seconds per epoch)" % (cmdline, args.samples), "",
             "| cluster | model | nodes (ranks) | batch per replica | 1xP batch, flat (messages) "
             "| 1xP batch, two-level (messages) | best grid, batch | 1xP epoch | fastest |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        g = "%s %.2f" % (r["best_grid"], r["grid_batch_s"])
        if r["grid_batch_s"] < r["dp_batch_s"] * 0.99:
            g = "**%s**" % g
        e = "%.2f" % r["dp_epoch_s"]
        if r["dp_epoch_s"] < r["dp_batch_s"] * 0.99:
            e = "**%s**" % e
        two = "%.2f (%d)" % (r["dp_batch_s"], r["dp_messages"])
        if r["dp_batch_s"] < r["dp_flat_s"] * 0.99:
            two = "**%s**" % two
        lines.append("| %s | %s | %d (%d) | %d | %.2f (%d) | %s | %s | %s | %s |" %
                     (r["cluster"], r["model"], r["nodes"], r["ranks"], r["batch"], r["dp_flat_s"],
                      r["dp_flat_messages"], two, g, e, r["best"]))
    text = "\n".join(lines) + "\n"
    open(os.path.join(args.out, "table.md"), "w").write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
