#!/usr/bin/python3
"""PyTorch CPU peer for tessera's MLP throughput benchmark.

Trains a ReLU MLP (784 -> widths -> 10, SGD lr 0.01 momentum 0.9,
cross-entropy) with the standard step (zero_grad, forward, loss, backward,
step) and prints ONE JSON line:

  {"peer": "pytorch", "version": ..., "threads": N, "batch": B,
   "widths": [...], "samples_per_s": X, "steps": n}

Inputs are pre-generated tensors (60000 x 784 float32, standardized, labels
0-9) sliced cyclically, so loading speed never enters the measurement; --data
uses real Fashion-MNIST instead. --best-threads 1,2 measures each thread count
in its own process and prints the best result, with all of them under "runs".

Debian's torch is python3-torch for /usr/bin/python3.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
from torch import nn

FEATURES, CLASSES, ROWS = 784, 10, 60000


def read_idx(path):
    """An IDX file (plain or gzip) as a numpy array of its stored shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_fashion_mnist(folder, split="train", mean=None, std=None):
    """(x (n, 784) float32, y (n,) int64, mean, std) the way tessera prepares
    them: x / 255, then standardized with one mean and std over all pixels of
    the training set (pass the training set's mean and std for the test set)."""
    prefix = "train" if split == "train" else "t10k"

    def path(kind):
        base = os.path.join(folder, f"{prefix}-{kind}")
        return base + ".gz" if os.path.exists(base + ".gz") else base

    x = read_idx(path("images-idx3-ubyte")).reshape(-1, FEATURES).astype(np.float32) / 255.0
    y = read_idx(path("labels-idx1-ubyte")).astype(np.int64)
    if mean is None:
        mean, std = float(x.mean(dtype=np.float64)), float(x.std(dtype=np.float64))
    x = (x - mean) / std
    return torch.from_numpy(x), torch.from_numpy(y), mean, std


def make_mlp(widths):
    """784 -> widths -> 10 with ReLU between, initialized as tessera does:
    He-uniform weights (bound sqrt(6 / fan_in)), zero biases."""
    dims = [FEATURES, *widths, CLASSES]
    layers = []
    for fin, fout in zip(dims[:-1], dims[1:]):
        lin = nn.Linear(fin, fout)
        nn.init.kaiming_uniform_(lin.weight, nonlinearity="relu")
        nn.init.zeros_(lin.bias)
        layers += [lin, nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def time_training(model, x, y, batch, seconds, warmup=20):
    """(steps, seconds) of SGD momentum 0.9 steps over x, y for about `seconds`
    after `warmup` warm-up steps; batches are views, so loading costs nothing."""
    nbatches = x.shape[0] // batch
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(k):
        i = (k % nbatches) * batch
        opt.zero_grad()
        loss = loss_fn(model(x[i : i + batch]), y[i : i + batch])
        loss.backward()
        opt.step()

    for k in range(warmup):
        step(k)
    steps, start = 0, time.perf_counter()
    while True:
        step(warmup + steps)
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps, elapsed


def measure(widths, batch, threads, seconds, data):
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1)
    if data:
        x, y, _, _ = load_fashion_mnist(data)
    else:
        x = torch.randn(ROWS, FEATURES)
        y = torch.randint(0, CLASSES, (ROWS,))
    steps, elapsed = time_training(make_mlp(widths), x, y, batch, seconds)
    return {"peer": "pytorch", "version": torch.__version__, "threads": threads,
            "batch": batch, "widths": list(widths),
            "samples_per_s": steps * batch / elapsed, "steps": steps}


def best_of(script, options, args, counts):
    """Runs `script options --threads T` for each thread count in a fresh
    process (the inter-op pool can be sized only once per process, and runs
    should not share warm caches); returns the fastest, with all under "runs"."""
    runs = []
    for t in counts:
        cmd = [sys.executable, os.path.abspath(script), *options, "--batch", str(args.batch),
               "--threads", str(t), "--seconds", str(args.seconds)]
        if args.data:
            cmd += ["--data", args.data]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    best = dict(max(runs, key=lambda r: r["samples_per_s"]))
    best["runs"] = [{"threads": r["threads"], "samples_per_s": r["samples_per_s"],
                     "steps": r["steps"]} for r in runs]
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--widths", default="512,512", help="hidden layer widths [512,512]")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads [1]")
    p.add_argument("--best-threads", metavar="N,N,...",
                   help="measure each thread count, print the best (all under 'runs')")
    p.add_argument("--seconds", type=float, default=5.0,
                   help="measured training time after 20 warm-up steps [5]")
    p.add_argument("--data", metavar="DIR",
                   help="Fashion-MNIST IDX folder (default: synthetic inputs)")
    args = p.parse_args()
    widths = [int(w) for w in args.widths.split(",") if w]
    if args.batch < 1 or args.threads < 1 or args.seconds <= 0 or any(w < 1 for w in widths):
        p.error("--batch, --threads, --seconds and every width must be positive")

    if args.best_threads:
        result = best_of(__file__, ["--widths", args.widths], args,
                         [int(t) for t in args.best_threads.split(",")])
    else:
        result = measure(widths, args.batch, args.threads, args.seconds, args.data)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
