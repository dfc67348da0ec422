#!/usr/bin/python3
"""CPU workers alone against CPU workers plus OpenCL devices: runs `tessera
train` on the same model and data twice (--devices none, then --devices
opencl[:N]) and prints per model the last epoch's throughput and test
accuracy of each, the ratio of throughputs, and where the tasks ran and how
many bytes crossed between memory nodes (from --stats in the log).

The reference is measured in the same run: the CPU-only run on the same
workers. Each run gets a scratch STARPU_HOME, so both start from uncalibrated
performance models (pass --starpu-home DIR to keep calibrations between
invocations, which is what dmda needs to settle on a good split).

  /usr/bin/python3 benchmarks/compare_devices.py --models mlp,cnn --epochs 3
  STARPU_OPENCL_ON_CPUS=1 /usr/bin/python3 benchmarks/compare_devices.py   # PoCL
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from outdir import add_out_arguments, resolve_out, tee_stdout


def run(args, model, devices, home, log):
    cmd = [args.tessera, "train", "--model", model, "--epochs", str(args.epochs), "--devices",
           devices, "--stats", "--log", log, "--quiet", "--sched", args.sched]
    if args.train_limit:
        cmd += ["--train-limit", str(args.train_limit)]
    if args.test_limit:
        cmd += ["--test-limit", str(args.test_limit)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    env = dict(os.environ, STARPU_HOME=home, STARPU_SILENT="1")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("%s failed (%d):\n%s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    lines = [json.loads(l) for l in open(log)]
    epochs = [l for l in lines if "epoch" in l and l.get("event") is None]
    stats = [l for l in lines if l.get("event") == "stats"]
    last = epochs[-1]
    kinds = {}
    for w in stats[-1]["workers"] if stats else []:
        kind = w["name"].split()[0]
        kinds[kind] = kinds.get(kind, 0) + w["tasks"]
    moved = sum(b["bytes"] for b in stats[-1]["buses"]) if stats else 0
    return {"samples_per_s": last["samples_per_s"], "test_accuracy": last.get("test_accuracy"),
            "workers": last["workers"], "kinds": kinds, "bytes": moved}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tessera", default="build/tessera")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-limit", type=int, default=10000)
    p.add_argument("--test-limit", type=int, default=2000)
    p.add_argument("--workers", type=int, default=0, help="CPU workers (0: StarPU's default)")
    p.add_argument("--devices", default="opencl", help="opencl or opencl:N")
    p.add_argument("--sched", default="dmda")
    p.add_argument("--starpu-home", default="", metavar="DIR",
                   help="calibration folder shared by the runs (default: a scratch one each)")
    add_out_arguments(p)
    args = p.parse_args()
    resolve_out(p, args, "devices")
    tee_stdout(args.out)

    print("model  devices        workers  samples/s  test acc  tasks by worker kind          MB moved")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            res = {}
            for devices in ("none", args.devices):
                home = args.starpu_home or os.path.join(tmp, "home-%s-%s" % (model, devices))
                log = os.path.join(tmp, "%s-%s.jsonl" % (model, devices.replace(":", "")))
                r = res[devices] = run(args, model, devices, home, log)
                kinds = ", ".join("%s %d" % kv for kv in sorted(r["kinds"].items()))
                print("%-6s %-14s %7d %10.0f %8.2f%%  %-29s %8.1f" %
                      (model, devices, r["workers"], r["samples_per_s"],
                       100 * (r["test_accuracy"] or 0), kinds, r["bytes"] / 1e6))
            ratio = res[args.devices]["samples_per_s"] / res["none"]["samples_per_s"]
            print("%-6s with %s: %.2fx the CPU-only throughput" % (model, args.devices, ratio))


if __name__ == "__main__":
    main()
