#!/usr/bin/python3
"""The planner's step layer by layer against a traced run of the same step: where a plan's
per-step time is off, which layers it misprices.

    /usr/bin/python3 benchmarks/plan_layers.py --model googlenet --input 224x224x3 --batch 8
    /usr/bin/python3 benchmarks/plan_layers.py --model resnet20 --input 32x32x3 --batch 64

One process on this machine. `tessera plan --layers --json` gives each layer's seconds of tasks
on the rank per step (forward and backward, the workers' tasks added up, before they are spread
over the workers); `tessera train --trace` runs --steps steps on random images (a .npz of uint8
images, labels i mod 10) and the trace's tasks of each layer (a task's "layer" is the plan's
index) are added up the same way over the steps after the first --skip, per step. Tasks of no
planned layer (the batch's assembly, layer 0; the loss) are shown as one line. Writes, in --out:
plan.json, the trace, layers.md (the table, with the commands) and layers.json.
"""
import argparse
import collections
import json
import os
import subprocess
import sys

from outdir import add_out_arguments, resolve_out

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def write_images(path, n, shape):
    """n random uint8 images of shape (h, w, c) with labels i mod 10, as x_train/y_train."""
    import numpy as np
    rng = np.random.default_rng(1)
    np.savez(path, x_train=rng.integers(0, 256, (n,) + shape, dtype=np.uint8),
             y_train=(np.arange(n) % 10).astype(np.uint8))


def measured_per_layer(trace_path, skip):
    """{layer: seconds per step} of the training steps after the first `skip`, and the steps."""
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    total, steps = collections.defaultdict(float), set()
    for e in events:
        a = e.get("args") or {}
        if e.get("cat") != "task" or a.get("step", 0) <= skip:
            continue
        total[a.get("layer", -1)] += e["dur"] * 1e-6
        steps.add(a["step"])
    n = len(steps)
    return {k: v / n for k, v in total.items()} if n else {}, n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a zoo model or a model file")
    p.add_argument("--input", required=True, help="HxWxC, e.g. 224x224x3")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=12, help="training steps traced [12]")
    p.add_argument("--skip", type=int, default=2, help="first steps left out (warm-up) [2]")
    p.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    add_out_arguments(p)
    args = p.parse_args()
    if args.steps <= args.skip:
        p.error("--steps must exceed --skip")
    resolve_out(p, args, "plan-layers")
    h, w, c = (int(x) for x in args.input.split("x"))
    samples = args.steps * args.batch
    plan_cmd = [args.tessera, "plan", "--model", args.model, "--input", args.input, "--batch",
                str(args.batch), "--ranks", "1", "--sync", "batch", "--samples", str(samples),
                "--layers", "--json"]
    print("$", " ".join(plan_cmd), flush=True)
    plan = json.loads(subprocess.run(plan_cmd, check=True, capture_output=True,
                                     text=True).stdout)
    with open(os.path.join(args.out, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    row = next(r for r in plan["plans"] if r.get("best"))
    data = os.path.join(args.out, "images.npz")
    write_images(data, samples, (h, w, c))
    trace = os.path.join(args.out, "trace.json")
    train_cmd = [args.tessera, "train", "--model", args.model, "--data", data, "--batch",
                 str(args.batch), "--epochs", "1", "--train-limit", str(samples), "--test-limit",
                 "0", "--quiet", "--trace", trace]
    print("$", " ".join(train_cmd), flush=True)
    env = dict(os.environ)
    env.setdefault("STARPU_SILENT", "1")
    subprocess.run(train_cmd, check=True, env=env)
    os.remove(data)
    got, steps = measured_per_layer(trace, args.skip)
    rows, planned_all, measured_all = [], 0.0, 0.0
    for l in row["layers"]:
        planned = l["forward_s"] + l["backward_s"]
        measured = got.pop(l["index"], 0.0)
        planned_all += planned
        measured_all += measured
        rows.append({"index": l["index"], "name": l["name"], "type": l["type"],
                     "planned_s": planned, "measured_s": measured, "gflop": l["flops"] * 1e-9})
    other = sum(got.values())
    measured_all += other
    lines = ["%d steps traced after %d left out; seconds of tasks per step, the workers' added up"
             % (steps, args.skip), "",
             "| # | layer | type | GFLOP | planned ms | measured ms | measured / planned |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ratio = r["measured_s"] / r["planned_s"] if r["planned_s"] > 0 else float("nan")
        lines.append("| %d | %s | %s | %.3f | %.2f | %.2f | %.2f |" % (
            r["index"], r["name"], r["type"], r["gflop"], 1e3 * r["planned_s"],
            1e3 * r["measured_s"], ratio))
    lines.append("| | (batch assembly, loss) | | | | %.2f | |" % (1e3 * other))
    lines.append("| | all | | | %.2f | %.2f | %.2f |" % (
        1e3 * planned_all, 1e3 * measured_all,
        measured_all / planned_all if planned_all > 0 else float("nan")))
    lines += ["", "The step: planned %.2f ms (compute %.2f ms on %s); commands:" % (
        1e3 * row["step_s"], 1e3 * row["compute_s"], plan["machine"]["name"]), "",
        "    " + " ".join(plan_cmd), "    " + " ".join(train_cmd)]
    with open(os.path.join(args.out, "layers.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "layers.json"), "w") as f:
        json.dump({"steps": steps, "skip": args.skip, "layers": rows, "other_s": other}, f,
                  indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
