#!/usr/bin/python3
"""Checks `tessera plan` against measured runs on this machine.

For each configuration (model, grid PrxPc, sync policy, batch per replica) it
trains with `tessera train` (one process for 1x1, `mpirun -np P` otherwise;
grids other than 1xP with `--grid`, when this build has it) for --epochs
epochs on --samples training images, takes the measured time per step from
the rank-0 log (the last epoch's training seconds over its steps: the first
epoch, with StarPU's start and its calibration, is the warm-up), and runs
`tessera plan --json` for the same configuration on this machine (all plans
first, so that the kernel timings of a first plan never share the cores with
the script's own training runs) (kernel
rates timed here, alpha and beta from `tessera plan --calibrate` when it has
been run). It writes

  OUT/runs.csv     one row per configuration: predicted and measured seconds
                   per step, the error, predicted and logged bytes per epoch
  OUT/summary.md   the same as a Markdown table, the median and largest
                   absolute error, and the command line
  OUT/plan.png     predicted against measured time per step (log-log)

and prints the table. Grids the build cannot run are listed as "not measurable
(no --grid)" and left out of the errors.

  /usr/bin/python3 benchmarks/validate_plan.py                  # the 14 default configurations
  /usr/bin/python3 benchmarks/validate_plan.py --only mlp512     # those whose name contains it
  /usr/bin/python3 benchmarks/validate_plan.py --dry-run         # print the commands
  /usr/bin/python3 benchmarks/validate_plan.py --zoo --only 1x   # ResNet-20, VGG-11 at 32x32x3
  /usr/bin/python3 benchmarks/validate_plan.py --imagenet --only "x"  # the four CNNs of Castello
                               # et al. at 224x224x3, batch 8: 1 process, 2x1 and 1x2 (issue 42)
  /usr/bin/python3 benchmarks/validate_plan.py --node-size 2 --only two-level
                               # also 4 ranks in nodes of 2, --allreduce two-level
  /usr/bin/python3 benchmarks/validate_plan.py --crossover --only alexnet --samples 96 --epochs 3
                               # issue 42's grid crossover: AlexNet, global batch 4, 2x1 with
                               # --domain rows:8 against 1x2, in the order A B B A

A sync written batch@two-level:G trains and plans --sync batch --allreduce two-level
--node-size G.
"""
import argparse
import csv
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

from outdir import add_out_arguments, resolve_out
from plotting import add_title_arguments, finish

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"mlp512": "mlp:512,512", "mlp4096": "mlp:4096,4096", "cnn": "cnn",
          "resnet20": "resnet20", "vgg11": "vgg11", "alexnet": "alexnet", "vgg16": "vgg16",
          "resnet50": "resnet50", "googlenet": "googlenet"}
# Training images per configuration: enough steps for a steady epoch, a few seconds a run here
# (the ImageNet-shaped CNNs: 4 steps of 8, 10 to 60 s an epoch on 2 cores).
SAMPLES = {"mlp512": 12800, "mlp4096": 4096, "cnn": 4096, "resnet20": 1024, "vgg11": 512,
           "alexnet": 32, "vgg16": 32, "resnet50": 32, "googlenet": 32}
# The zoo's models train on synthetic images of their shape (a .npz the script writes: the
# content does not change the work); the others on Fashion-MNIST.
ZOO_INPUT = {"resnet20": (32, 32, 3), "vgg11": (32, 32, 3), "alexnet": (224, 224, 3),
             "vgg16": (224, 224, 3), "resnet50": (224, 224, 3), "googlenet": (224, 224, 3)}


def zoo_configs():
    """--zoo: ResNet-20 and VGG-11 at 32x32x3, batch 64, on 1 rank and on 2 with batch
    averaging."""
    return [(m, g, "batch", 64) for m in ("resnet20", "vgg11") for g in ("1x1", "1x2")]


def imagenet_configs():
    """--imagenet: AlexNet, VGG-16, ResNet-50 and GoogLeNet at 224x224x3 (Castello et al.'s
    four), batch 8 per replica: one process, a 2x1 grid (model parallelism in the dense layers)
    and 1x2 (data parallelism, batch averaging)."""
    return [(m, g, "batch", 8) for m in ("alexnet", "vgg16", "resnet50", "googlenet")
            for g in ("1x1", "2x1", "1x2")]


def crossover_configs():
    """--crossover: issue 42's smallest configuration where the planner puts a grid with domain
    parallelism ahead of pure data parallelism here: AlexNet at 224x224x3 on 2 ranks, a global
    batch of 4, as a 2x1 grid with its first 8 convolutions and poolings cut into bands of image
    rows (--domain rows:8, batch 4) and as 1x2 with batch averaging (batch 2 per replica), run
    in both orders (A B B A)."""
    grid, data = ("alexnet", "2x1+rows:8", "batch", 4), ("alexnet", "1x2", "batch", 2)
    return [grid, data, data, grid]


def split_grid(grid):
    """"2x1+rows:8": the grid and its --domain ("" for none)."""
    shape, _, domain = grid.partition("+")
    return shape, domain


def zoo_data(tmp, model):
    """The .npz of synthetic images a zoo model trains on (one file per shape, in tmp)."""
    return os.path.join(tmp, "zoo%dx%dx%d.npz" % ZOO_INPUT[model])


def write_zoo_data(path, n, shape):
    """n random uint8 images of shape (h, w, c) with labels i mod 10, as x_train/y_train in a
    .npz."""
    import numpy as np
    rng = np.random.default_rng(1)
    np.savez(path, x_train=rng.integers(0, 256, (n,) + shape, dtype=np.uint8),
             y_train=(np.arange(n) % 10).astype(np.uint8))


def default_configs():
    """(model, grid, sync, batch): 1x1 for every model and batch, 1x2 with batch and epoch
    averaging, and 2x1 (model parallelism) where --grid exists."""
    out = []
    for model in ("mlp512", "mlp4096", "cnn"):
        for batch in (64, 512):
            out.append((model, "1x1", "batch", batch))
    for model, batch in (("mlp512", 64), ("mlp512", 512), ("mlp4096", 512), ("cnn", 64)):
        for sync in ("batch", "epoch"):
            out.append((model, "1x2", sync, batch))
    for model, batch in (("mlp512", 64), ("mlp4096", 512), ("cnn", 64)):
        out.append((model, "2x1", "batch", batch))
    return out


def env():
    e = dict(os.environ)
    e.setdefault("STARPU_SILENT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return e


def has_grid(tessera):
    out = subprocess.run([tessera, "train", "--help"], capture_output=True, text=True).stdout
    return "--grid" in out


def travel(sync):
    """--sync and the options of how its averages travel: batch@two-level:2 is --sync batch
    --allreduce two-level --node-size 2."""
    sync, _, how = sync.partition("@")
    allreduce, _, nodes = how.partition(":")
    return ["--sync", sync] + (["--allreduce", allreduce] if allreduce else []) + \
        (["--node-size", nodes] if nodes else [])


def train_cmd(args, model, grid, sync, batch, log):
    grid, domain = split_grid(grid)
    pr, pc = (int(x) for x in grid.split("x"))
    ranks = pr * pc
    cmd = [args.tessera, "train", "--model", MODELS[model], "--batch", str(batch),
           "--epochs", str(args.epochs), "--train-limit", str(args.samples or SAMPLES[model]),
           "--test-limit", "0", "--quiet", "--log", log]
    if model in ZOO_INPUT:
        cmd += ["--data", zoo_data(args.tmp, model)]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "-x", "STARPU_HOME",
               "-x", "STARPU_SILENT"] + cmd + travel(sync)
        if pr > 1:
            cmd += ["--grid", grid] + (["--domain", domain] if domain else [])
    return cmd


def plan_cmd(args, model, grid, sync, batch):
    grid, domain = split_grid(grid)
    pr, pc = (int(x) for x in grid.split("x"))
    cmd = [args.tessera, "plan", "--json", "--model", MODELS[model], "--batch", str(batch),
           "--ranks", str(pr * pc), "--grid", grid] + (["--domain", domain] if domain else []) + \
        travel(sync) + [
           "--samples", str(args.samples or SAMPLES[model])]
    if model in ZOO_INPUT:
        cmd += ["--input", "%dx%dx%d" % ZOO_INPUT[model]]
    if args.cluster:
        cmd += ["--cluster", args.cluster]
    return cmd


def load_note(before, after, cores):
    """Whether the times can validate anything: the load before the first run says what else
    was running (the runs themselves keep the cores busy, so the load at the end counts them)."""
    head = "Load average %.1f before the runs and %.1f at the end, on %d cores: " % (before, after, cores)
    if before < 0.75 * cores:
        return head + "the machine was quiet when the runs began."
    return head + "other processes were using the cores, so the times are not a validation."


def measure(args, cfg, tmp):
    model, grid, sync, batch = cfg
    log = os.path.join(tmp, "%s-%s-%s-%d.jsonl" % cfg)
    cmd = train_cmd(args, model, grid, sync, batch, log)
    if args.dry_run:
        print(" ".join(shlex.quote(c) for c in cmd))
        return None
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=1200)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), r.returncode, r.stderr[-500:]))
    lines = [json.loads(l) for l in open(log)]
    epochs = [l for l in lines if "epoch" in l]
    last = epochs[-1]
    samples = args.samples or SAMPLES[model]
    pr, pc = (int(x) for x in split_grid(grid)[0].split("x"))
    shard = -(-samples // pc)
    steps = -(-shard // batch)
    # Rank 0's bytes: averaging across columns, and under a grid its transfers inside its column.
    inside = last["per_rank"][0]["grid_bytes_sent"] if "per_rank" in last else 0
    return {"seconds_step": last["seconds"] / steps,
            "bytes_epoch": last.get("bytes_sent", 0) + inside, "steps": steps}


def predict(args, cfg):
    cmd = plan_cmd(args, *cfg)
    if args.dry_run:
        print(" ".join(shlex.quote(c) for c in cmd))
        return None
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), check=True)
    p = json.loads(r.stdout)["plans"][0]
    inside = p["grid_bytes_step"] * p["steps_per_epoch"]  # row 0's, as rank 0 logs them
    return {"seconds_step": p["epoch_s"] / p["steps_per_epoch"],
            "bytes_epoch": p["sync_bytes_epoch"] + inside,
            "compute_s": p["compute_s"], "sync_s": p["exposed_sync_s"] + p["average_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    add_out_arguments(ap)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=0, help="training images (default: per model)")
    ap.add_argument("--cluster", help="predict with this machine file instead of measuring here")
    ap.add_argument("--only", help="only configurations whose name contains this")
    ap.add_argument("--zoo", action="store_true", help="also ResNet-20 and VGG-11 at 32x32x3 "
                    "(synthetic images), 1 and 2 ranks")
    ap.add_argument("--imagenet", action="store_true", help="also AlexNet, VGG-16, ResNet-50 "
                    "and GoogLeNet at 224x224x3 (synthetic images), batch 8: 1x1, 2x1, 1x2")
    ap.add_argument("--crossover", action="store_true", help="also issue 42's grid crossover: "
                    "AlexNet, global batch 4, 2x1 with --domain rows:8 against 1x2, both orders")
    ap.add_argument("--node-size", type=int, default=0,
                    help="also 2 nodes of this many ranks with --allreduce two-level")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--plot-only", metavar="CSV", help="only plot CSV (a runs.csv) as plan.png "
                    "in --out")
    add_title_arguments(ap)
    args = ap.parse_args()
    resolve_out(ap, args, "validate-plan")
    if args.plot_only:
        plot(read_runs_csv(args.plot_only), os.path.join(args.out, "plan.png"), args.machine,
             args.command)
        return 0
    grid_ok = has_grid(args.tessera)
    load_before = os.getloadavg()[0]
    rows = []
    configs = default_configs() + (zoo_configs() if args.zoo else []) + \
        (imagenet_configs() if args.imagenet else []) + \
        (crossover_configs() if args.crossover else [])
    if args.node_size:
        configs += [(m, "1x%d" % (2 * args.node_size), "%s@two-level:%d" % (s, args.node_size), b)
                    for m, b in (("mlp512", 64), ("mlp4096", 512)) for s in ("batch", "epoch")]
    configs = [c for c in configs if not args.only or args.only in "%s %s %s b%d" % c]
    # Predictions first: the first plan of a shape times its kernels here, which must not share
    # the cores with this script's own training runs.
    predicted = {}
    for cfg in configs:
        try:
            predicted[cfg] = predict(args, cfg)
        except subprocess.CalledProcessError as e:
            predicted[cfg] = e
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = tmp
        for model in sorted({c[0] for c in configs if c[0] in ZOO_INPUT}):
            if not args.dry_run and not os.path.exists(zoo_data(tmp, model)):
                n = max(SAMPLES[m] for m in ZOO_INPUT if ZOO_INPUT[m] == ZOO_INPUT[model])
                write_zoo_data(zoo_data(tmp, model), max(n, args.samples), ZOO_INPUT[model])
        for cfg in configs:
            name = "%s %s %s b%d" % cfg
            if cfg[1].split("x")[0] != "1" and not grid_ok:
                rows.append({"config": name, "model": cfg[0], "grid": cfg[1], "sync": cfg[2],
                             "batch": cfg[3], "status": "not measurable (no --grid)"})
                print("%-28s not measurable (no --grid)" % name, flush=True)
                continue
            try:
                p = predicted[cfg]
                if isinstance(p, Exception):
                    raise p
                m = measure(args, cfg, tmp)
            except (RuntimeError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                rows.append({"config": name, "model": cfg[0], "grid": cfg[1], "sync": cfg[2],
                             "batch": cfg[3], "status": "failed: %s" % str(e)[:200]})
                print("%-28s failed: %s" % (name, e), flush=True)
                continue
            if args.dry_run:
                continue
            err = (p["seconds_step"] - m["seconds_step"]) / m["seconds_step"]
            row = {"config": name, "model": cfg[0], "grid": cfg[1], "sync": cfg[2], "batch": cfg[3],
                   "status": "ok", "predicted_ms": 1e3 * p["seconds_step"],
                   "measured_ms": 1e3 * m["seconds_step"], "error": err,
                   "predicted_bytes_epoch": p["bytes_epoch"], "logged_bytes_epoch": m["bytes_epoch"]}
            rows.append(row)
            print("%-28s predicted %8.3f ms  measured %8.3f ms  error %+6.1f%%" %
                  (name, row["predicted_ms"], row["measured_ms"], 100 * err), flush=True)
    if args.dry_run:
        return 0
    os.makedirs(args.out, exist_ok=True)
    keys = ["config", "model", "grid", "sync", "batch", "status", "predicted_ms", "measured_ms",
            "error", "predicted_bytes_epoch", "logged_bytes_epoch"]
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in keys})
    ok = [r for r in rows if r["status"] == "ok"]
    errs = [abs(r["error"]) for r in ok]
    med = statistics.median(errs) if errs else float("nan")
    worst = max(errs) if errs else float("nan")
    lines = ["# tessera plan against measured runs", "",
             "`%s`" % " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
             "", "| configuration | predicted ms/step | measured ms/step | error | bytes/epoch planned | logged |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["status"] != "ok":
            lines.append("| %s | %s | | | | |" % (r["config"], r["status"]))
        else:
            lines.append("| %s | %.3f | %.3f | %+.1f%% | %.0f | %.0f |" %
                         (r["config"], r["predicted_ms"], r["measured_ms"], 100 * r["error"],
                          r["predicted_bytes_epoch"], r["logged_bytes_epoch"]))
    lines += ["", "%d configurations measured: median absolute error %.1f%%, largest %.1f%% "
              "(targets: median <= 20%%, none over 35%%)." % (len(ok), 100 * med, 100 * worst),
              "", load_note(load_before, os.getloadavg()[0], os.cpu_count())]
    text = "\n".join(lines) + "\n"
    open(os.path.join(args.out, "summary.md"), "w").write(text)
    print()
    print(text)
    plot(ok, os.path.join(args.out, "plan.png"), args.machine, args.command)
    return 0


def plot(ok, png, machine=None, command=None):
    """Predicted against measured step time, one marker per model; ok: the runs that ran."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    errors = sorted(abs(r["error"]) for r in ok)
    med = statistics.median(errors) if errors else float("nan")
    worst = max(errors) if errors else float("nan")
    fig, ax = plt.subplots(figsize=(7.5, 7.5))
    for model, mark in (("mlp512", "o"), ("mlp4096", "s"), ("cnn", "^"), ("resnet20", "v"),
                        ("vgg11", "<"), ("alexnet", ">"), ("vgg16", "D"), ("resnet50", "P"),
                        ("googlenet", "X")):
        pts = [r for r in ok if r["model"] == model]
        ax.scatter([r["measured_ms"] for r in pts], [r["predicted_ms"] for r in pts],
                   marker=mark, label="%s (%d runs)" % (model, len(pts)))
    if ok:
        lo = min(min(r["measured_ms"], r["predicted_ms"]) for r in ok) / 1.5
        hi = max(max(r["measured_ms"], r["predicted_ms"]) for r in ok) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="exact")
        ax.plot([lo, hi], [lo * 1.2, hi * 1.2], "k:", lw=0.8, label="±20%")
        ax.plot([lo, hi], [lo / 1.2, hi / 1.2], "k:", lw=0.8)
        ax.set_xlim(lo, hi), ax.set_ylim(lo, hi)
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel("measured time per training step (ms)")
    ax.set_ylabel("tessera plan's predicted time per step (ms)")
    ax.set_title("median |error| %.1f%%, max %.1f%%" % (100 * med, 100 * worst), fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    finish(fig, png, "tessera plan against measured runs (grids, syncs, batches)", machine,
           command)


def read_runs_csv(path):
    """The runs that ran, from a runs.csv this script wrote."""
    out = []
    for r in csv.DictReader(open(path)):
        if r["status"] == "ok":
            out.append(dict(r, predicted_ms=float(r["predicted_ms"]),
                            measured_ms=float(r["measured_ms"]), error=float(r["error"])))
    return out


if __name__ == "__main__":
    sys.exit(main())
