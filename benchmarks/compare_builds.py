#!/usr/bin/python3
"""Throughput of two builds of tessera, alternating runs in one session.

For a refactor that promises no slowdown: builds A (e.g. the previous main,
checked out with `git worktree add` and built in its own folder) and B (this
tree) run the same measurements in turns, A B A B ..., so drift in the
machine's speed affects both alike. Measurements (tessera only, no peers):
  mlp64   bench_train --config 512,512:64  (samples/s)
  mlp256  bench_train --config 512,512:256
  mlp1024 bench_train --config 1024,1024:128
  mlp256x4  bench_train --config 256,256,256,256:32
  cnn     bench_cnn                          (median of its rounds)
  resnet20  bench_model --model resnet20 --batch 128  (median of its rounds)
  gpt     bench_gpt --model gpt:4,256,4,128 --batch 16 (tokens/s)
  batch   mpirun -np 2 tessera train --workers 1 --sync batch  (the log's samples/s)
  epoch   the same with --sync epoch
Prints each measurement's runs, the medians and B / A.

  /usr/bin/python3 benchmarks/compare_builds.py BUILD_A BUILD_B [--rounds 5] [--seconds 3]
                                                [--only mlp64,cnn]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

from outdir import add_out_arguments, resolve_out, tee_stdout


def bench_train(build, config, seconds):
    out = subprocess.run([os.path.join(build, "benchmarks", "bench_train"), "--config", config,
                          "--seconds", str(seconds), "--no-torch"], check=True,
                         capture_output=True, text=True).stdout
    row = [l for l in out.splitlines() if l.startswith(config.split(":")[0] + " ")][0]
    return float(row.split()[4])


def bench_cnn(build, seconds):
    out = subprocess.run([os.path.join(build, "benchmarks", "bench_cnn"), "--seconds",
                          str(seconds), "--rounds", "1", "--no-torch"], check=True,
                         capture_output=True, text=True).stdout
    return float(re.search(r"tessera ([\d.]+) samples/s \(median\)", out).group(1))


def bench_named(build, program, args, seconds, unit):
    out = subprocess.run([os.path.join(build, "benchmarks", program)] + args +
                         ["--seconds", str(seconds), "--rounds", "1", "--no-torch"], check=True,
                         capture_output=True, text=True).stdout
    return float(re.search(r"tessera ([\d.]+) %s \(median\)" % unit, out).group(1))


def dist(build, policy, samples):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        subprocess.run(["mpirun", "-np", "2", "--oversubscribe", "--allow-run-as-root", "-x",
                        "STARPU_SILENT=1", os.path.join(build, "tessera"), "train", "--workers",
                        "1", "--sync", policy, "--epochs", "2", "--train-limit", str(samples),
                        "--test-limit", "1000", "--lr-schedule", "constant", "--quiet", "--log",
                        log], check=True, stdout=subprocess.DEVNULL)
        # The last epoch's line (a run of several ranks ends with the ranks' totals).
        epochs = [json.loads(l) for l in open(log) if '"samples_per_s"' in l]
        return epochs[-1]["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--only", default="mlp64,mlp256,cnn,batch,epoch")
    add_out_arguments(ap)
    args = ap.parse_args()
    resolve_out(ap, args, "builds")
    tee_stdout(args.out)
    os.environ.setdefault("STARPU_SILENT", "1")
    measures = {
        "mlp64": lambda b: bench_train(b, "512,512:64", args.seconds),
        "mlp256": lambda b: bench_train(b, "512,512:256", args.seconds),
        "mlp1024": lambda b: bench_train(b, "1024,1024:128", args.seconds),
        "mlp256x4": lambda b: bench_train(b, "256,256,256,256:32", args.seconds),
        "cnn": lambda b: bench_cnn(b, args.seconds),
        "resnet20": lambda b: bench_named(b, "bench_model", ["--model", "resnet20", "--batch",
                                                             "128"], args.seconds, "samples/s"),
        "gpt": lambda b: bench_named(b, "bench_gpt", [], args.seconds, "tokens/s"),
        "batch": lambda b: dist(b, "batch", args.samples),
        "epoch": lambda b: dist(b, "epoch", args.samples),
    }
    names = args.only.split(",")
    runs = {(n, w): [] for n in names for w in "ab"}
    for r in range(args.rounds):
        for n in names:
            for w, build in (("a", args.a), ("b", args.b)):
                runs[(n, w)].append(measures[n](build))
        print("round %d done" % (r + 1), flush=True)
    print("\n%-8s %-50s %-50s %9s %9s %6s" % ("measure", "A runs", "B runs", "A median",
                                              "B median", "B/A"))
    for n in names:
        a, b = runs[(n, "a")], runs[(n, "b")]
        ma, mb = statistics.median(a), statistics.median(b)
        print("%-8s %-50s %-50s %9.0f %9.0f %6.3f" % (n, " ".join("%.0f" % x for x in a),
                                                      " ".join("%.0f" % x for x in b), ma, mb,
                                                      mb / ma))


if __name__ == "__main__":
    main()
