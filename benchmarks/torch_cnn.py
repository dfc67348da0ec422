#!/usr/bin/python3
"""PyTorch CPU peer for tessera's CNN throughput benchmark.

Trains tessera's default CNN (`--model cnn`) on 28x28 one-channel images:
conv 3x3 32 - ReLU - maxpool 2 - conv 3x3 64 - ReLU - maxpool 2 - dense 128 -
ReLU - dense 10 (stride 1, padding 1, so 1x28x28 -> 32x28x28 -> 32x14x14 ->
64x14x14 -> 64x7x7 = 3136 -> 128 -> 10; --padding 0 gives the unpadded
variant, 1600 features after the convolutions), SGD lr 0.01 momentum 0.9,
cross-entropy, with the standard step (zero_grad, forward, loss, backward,
step), and prints ONE JSON line:

  {"peer": "pytorch", "version": ..., "threads": N, "batch": B,
   "model": "cnn", "samples_per_s": X, "steps": n}

Inputs are pre-generated tensors (60000 x 1 x 28 x 28 float32, labels 0-9)
sliced cyclically, so loading speed never enters the measurement; --data uses
real Fashion-MNIST instead. --best-threads 1,2 measures each thread count in
its own process and prints the best result, with all of them under "runs".

Debian's torch is python3-torch for /usr/bin/python3.
"""
import argparse
import json
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_mlp import best_of, load_fashion_mnist, time_training  # noqa: E402

ROWS, CLASSES = 60000, 10


def make_cnn(padding):
    """tessera's default CNN, initialized as tessera does: He-uniform weights
    (bound sqrt(6 / fan_in)), zero biases."""
    side = ((28 + 2 * padding - 2) // 2 + 2 * padding - 2) // 2
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=padding), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=padding), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * side * side, 128), nn.ReLU(), nn.Linear(128, CLASSES))
    for m in model:
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model


def measure(batch, threads, seconds, data, padding):
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1)
    if data:
        x, y, _, _ = load_fashion_mnist(data)
        x = x.reshape(-1, 1, 28, 28)
    else:
        x = torch.randn(ROWS, 1, 28, 28)
        y = torch.randint(0, CLASSES, (ROWS,))
    steps, elapsed = time_training(make_cnn(padding), x, y, batch, seconds)
    return {"peer": "pytorch", "version": torch.__version__, "threads": threads,
            "batch": batch, "model": "cnn", "padding": padding,
            "samples_per_s": steps * batch / elapsed,
            "steps": steps}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads [1]")
    p.add_argument("--best-threads", metavar="N,N,...",
                   help="measure each thread count, print the best (all under 'runs')")
    p.add_argument("--seconds", type=float, default=5.0,
                   help="measured training time after 20 warm-up steps [5]")
    p.add_argument("--padding", type=int, default=1, choices=(0, 1),
                   help="zero padding of both convolutions [1, tessera's default]")
    p.add_argument("--data", metavar="DIR",
                   help="Fashion-MNIST IDX folder (default: synthetic inputs)")
    args = p.parse_args()
    if args.batch < 1 or args.threads < 1 or args.seconds <= 0:
        p.error("--batch, --threads and --seconds must be positive")

    if args.best_threads:
        result = best_of(__file__, ["--padding", str(args.padding)], args,
                         [int(t) for t in args.best_threads.split(",")])
    else:
        result = measure(args.batch, args.threads, args.seconds, args.data, args.padding)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
