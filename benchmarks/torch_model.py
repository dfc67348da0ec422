#!/usr/bin/python3
"""PyTorch CPU peer for bench_model: trains a tessera model file in PyTorch.

The model is read from the INI text bench_model built (--model-file: the zoo's model with its
class count set) by the tessera Python package (python/tessera) into a graph of torch modules
(tessera.pytorch.TesseraNet: nn.Conv2d, nn.BatchNorm2d, nn.Linear, ... in NCHW, torch's default
initialization), then trained with SGD lr 0.01 momentum 0.9 and cross-entropy, the standard step
(zero_grad, forward, loss, backward, step), on pre-generated inputs (so loading never enters the
measurement). Prints ONE JSON line:

  {"peer": "pytorch", "version": ..., "threads": N, "batch": B, "model": FILE,
   "samples_per_s": X, "steps": n, "peak_rss_mb": M}

--best-threads 1,2 measures each thread count in its own process and prints the best, with all
of them under "runs". Debian's torch is python3-torch for /usr/bin/python3.
"""
import argparse
import json
import os
import resource
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from torch_mlp import best_of, time_training  # noqa: E402
import tessera  # noqa: E402
from tessera import model as tmodel  # noqa: E402


def measure(path, shape, batch, threads, seconds):
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1)
    with open(path) as f:
        graph = tmodel.Graph(tmodel.read_ini(f.read(), path), shape, path)  # classes bound
    net = tessera.pytorch.TesseraNet(graph)
    rows = batch * 4
    x = torch.rand(rows, *shape) - 0.5
    y = torch.randint(0, graph.classes, (rows,))
    steps, elapsed = time_training(net, x, y, batch, seconds, warmup=3)
    # The process's peak resident memory (Linux: KiB), the model, its data and its training.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"peer": "pytorch", "version": torch.__version__, "threads": threads,
            "batch": batch, "model": path, "samples_per_s": steps * batch / elapsed,
            "steps": steps, "peak_rss_mb": peak}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-file", required=True, help="a tessera INI model file")
    p.add_argument("--input", default="3x32x32", help="sample shape CxHxW [3x32x32]")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads [1]")
    p.add_argument("--best-threads", metavar="N,N,...",
                   help="measure each thread count, print the best (all under 'runs')")
    p.add_argument("--seconds", type=float, default=5.0,
                   help="measured training time after 3 warm-up steps [5]")
    p.add_argument("--data", help=argparse.SUPPRESS)  # best_of passes it when set; never here
    args = p.parse_args()
    shape = tuple(int(v) for v in args.input.split("x"))
    if len(shape) != 3 or min(shape) < 1 or args.batch < 1 or args.threads < 1 or args.seconds <= 0:
        p.error("--input CxHxW, --batch, --threads and --seconds must be positive")
    if args.best_threads:
        result = best_of(__file__, ["--model-file", args.model_file, "--input", args.input],
                         args, [int(t) for t in args.best_threads.split(",")])
    else:
        result = measure(args.model_file, shape, args.batch, args.threads, args.seconds)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
