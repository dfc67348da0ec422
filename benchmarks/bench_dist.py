#!/usr/bin/python3
"""Data-parallel throughput: tessera under mpirun against PyTorch, same run.

On P ranks x 1 worker (default 2 x 1, the 2-core machine's cores), default MLP,
batch 64 per rank, it measures samples/s across all ranks of
  tessera --sync batch   vs  PyTorch DDP (gloo on loopback, 1 thread/process)
  tessera --sync epoch   vs  PyTorch with per-epoch weight averaging
and prints the ratios. tessera trains one epoch on --samples training images
(its log's samples_per_s, epoch-end averaging included); PyTorch trains for
--seconds after warm-up (benchmarks/torch_ddp.py --seconds). Both use
constant learning rates; throughput does not depend on the data.

tessera's StarPU-MPI progress mode is its default (auto) unless
--mpi-progress names one; the log says which ran.

  /usr/bin/python3 benchmarks/bench_dist.py [--ranks 2] [--samples 30000] [--seconds 10]
                                            [--mpi-progress auto|thread|worker]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from outdir import add_out_arguments, resolve_out, tee_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def tessera(args, policy):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cmd = ["mpirun", "-np", str(args.ranks), "--oversubscribe", "--allow-run-as-root",
               "-x", "STARPU_SILENT=1", args.tessera, "train", "--workers", "1",
               "--sync", policy, "--epochs", str(args.epochs), "--train-limit",
               str(args.samples), "--test-limit", "1000", "--lr-schedule", "constant",
               "--mpi-progress", args.mpi_progress, "--quiet", "--log", log]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        lines = [json.loads(line) for line in open(log)]
    # The last epoch: calibration and warm-up happen in the first.
    return lines[-1]["samples_per_s"], lines[-1]


def torch(args, mode):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_ddp.py"), "--mode", mode,
           "--ranks", str(args.ranks), "--seconds", str(args.seconds), "--synthetic"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--samples", type=int, default=30000, help="tessera training images [30000]")
    p.add_argument("--epochs", type=int, default=2, help="tessera epochs; the last is reported")
    p.add_argument("--seconds", type=float, default=10, help="PyTorch measuring time [10]")
    p.add_argument("--mpi-progress", default="auto", choices=["auto", "thread", "worker"])
    p.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    add_out_arguments(p)
    args = p.parse_args()
    resolve_out(p, args, "dist")
    tee_stdout(args.out)
    rows = []
    for policy, mode in (("batch", "ddp"), ("epoch", "epoch-avg")):
        ours, line = tessera(args, policy)
        theirs = torch(args, mode)
        rows.append((policy, mode, ours, theirs, line))
    progress = rows[0][4].get("mpi_progress", "?")
    print(f"{args.ranks} ranks x 1 worker/thread, MLP 784-512-512-10, batch 64 per rank, "
          f"tessera MPI progress: {progress}")
    print(f"{'tessera':<10} {'samples/s':>10}  {'PyTorch':<10} {'samples/s':>10}  {'ratio':>6}"
          f"  {'sync s/epoch':>12}  {'MB sent/epoch':>13}")
    for policy, mode, ours, theirs, line in rows:
        print(f"{policy:<10} {ours:>10.0f}  {mode:<10} {theirs:>10.0f}  {ours / theirs:>5.2f}x"
              f"  {line.get('sync_seconds', 0):>12.3f}  {line.get('bytes_sent', 0) / 1e6:>13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
