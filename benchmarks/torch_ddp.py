#!/usr/bin/python3
"""PyTorch CPU peer for tessera's data-parallel benchmark (`--sync`).

P processes (torch.multiprocessing, default 2), gloo on loopback, 1 thread
each, each training tessera's default MLP (784-512-512-10, He-uniform init
with the same seed on every rank, SGD lr 0.01 momentum 0.9, constant rate,
batch 64 per rank) on its own shard (every P-th sample) of Fashion-MNIST,
prepared as tessera prepares it, or of synthetic data (--synthetic):

  --mode ddp        DistributedDataParallel: gradients all-reduced every batch
                    (tessera's `--sync batch`)
  --mode epoch-avg  local training; weights and biases all-reduced and averaged
                    at each epoch end (tessera's `--sync epoch`)

Per epoch, rank 0 prints one JSON line:
  {"peer": "pytorch", "mode": ..., "ranks": P, "epoch": e, "loss": ...,
   "test_accuracy": ..., "seconds": ..., "eval_seconds": ..., "samples_per_s": ...}
`seconds` is training time (epoch-end averaging included), samples_per_s counts
all ranks; the test set is evaluated in shards on all ranks. With --seconds S
it measures S seconds of training after 20 warm-up steps (no evaluation) and
prints one line {"peer": "pytorch", "mode": ..., "ranks": P, "batch": 64,
"samples_per_s": X, ...}.

  /usr/bin/python3 benchmarks/torch_ddp.py --mode ddp --epochs 10
  /usr/bin/python3 benchmarks/torch_ddp.py --mode epoch-avg --seconds 5 --synthetic

Debian's torch is python3-torch for /usr/bin/python3.
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torch_mlp import CLASSES, FEATURES, load_fashion_mnist, make_mlp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(args):
    """(x, y, xt, yt): the whole training and test sets, identical on all ranks."""
    if args.synthetic:
        g = torch.Generator().manual_seed(args.seed)
        return (torch.randn(60000, FEATURES, generator=g),
                torch.randint(0, CLASSES, (60000,), generator=g),
                torch.randn(10000, FEATURES, generator=g),
                torch.randint(0, CLASSES, (10000,), generator=g))
    x, y, mean, std = load_fashion_mnist(args.data, "train")
    xt, yt, _, _ = load_fashion_mnist(args.data, "test", mean, std)
    return x, y, xt, yt


def all_sum(value, op=dist.ReduceOp.SUM):
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return t.item()


def average_weights(model, ranks):
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p)
            p /= ranks


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    P, B = args.ranks, args.batch

    x, y, xt, yt = load(args)
    n = x.shape[0] // P  # equal shards: every rank takes the same number of steps
    x, y = x[rank::P][:n].contiguous(), y[rank::P][:n].contiguous()
    xt, yt = xt[rank::P], yt[rank::P]
    steps_per_epoch = (n + B - 1) // B

    torch.manual_seed(args.seed)  # same initial weights on every rank
    model = make_mlp([int(w) for w in args.widths.split(",") if w])
    net = DistributedDataParallel(model) if args.mode == "ddp" else model
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad()
        loss = loss_fn(net(xb), yb)
        loss.backward()
        opt.step()
        return loss.item()

    def emit(record):
        if rank == 0:
            print(json.dumps({"peer": "pytorch", "mode": args.mode, "ranks": P, **record}),
                  flush=True)

    if args.seconds:  # throughput: contiguous slices, no shuffling, no eval
        k = 0

        def run(count):
            nonlocal k
            for _ in range(count):
                i = (k % steps_per_epoch) * B
                step(x[i : i + B], y[i : i + B])
                k += 1
                if args.mode == "epoch-avg" and k % steps_per_epoch == 0:
                    average_weights(model, P)

        run(20)
        dist.barrier()
        steps, start = 0, time.perf_counter()
        while True:  # chunks of 10 steps; all ranks stop at the same chunk
            run(10)
            steps += 10
            elapsed = time.perf_counter() - start
            if all_sum(elapsed >= args.seconds, dist.ReduceOp.MAX):
                break
        elapsed = all_sum(elapsed, dist.ReduceOp.MAX)
        emit({"batch": B, "samples_per_s": steps * B * P / elapsed, "steps": steps,
              "seconds": elapsed, "version": torch.__version__})
    else:
        for epoch in range(1, args.epochs + 1):
            g = torch.Generator().manual_seed(args.seed * 100003 + epoch * 1009 + rank)
            order = torch.randperm(n, generator=g)
            dist.barrier()
            start = time.perf_counter()
            model.train()
            total = 0.0
            for i in range(0, n, B):  # the short last batch included
                idx = order[i : i + B]
                total += step(x[idx], y[idx]) * len(idx)
            if args.mode == "epoch-avg":
                average_weights(model, P)
            seconds = all_sum(time.perf_counter() - start, dist.ReduceOp.MAX)

            start = time.perf_counter()
            model.eval()
            with torch.no_grad():
                correct = (model(xt).argmax(1) == yt).sum().item()
            correct, tested = all_sum(correct), all_sum(len(yt))
            loss = all_sum(total) / (n * P)
            emit({"epoch": epoch, "loss": round(loss, 5),
                  "test_accuracy": round(correct / tested, 5),
                  "seconds": round(seconds, 4),
                  "eval_seconds": round(time.perf_counter() - start, 4),
                  "samples_per_s": round(n * P / seconds, 1)})
    net = None  # free the DDP reducer first: freeing it with the group deadlocked at exit
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["ddp", "epoch-avg"], default="ddp")
    p.add_argument("--ranks", type=int, default=2, help="processes [2]")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seconds", type=float, default=0,
                   help="throughput mode: measure S seconds of training, no eval")
    p.add_argument("--batch", type=int, default=64, help="samples per step per rank [64]")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--widths", default="512,512")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", metavar="DIR")
    p.add_argument("--synthetic", action="store_true", help="random inputs and labels")
    args = p.parse_args()
    if args.ranks < 1 or args.epochs < 1 or args.batch < 1 or args.seconds < 0:
        p.error("--ranks, --epochs and --batch must be positive, --seconds not negative")
    mp.spawn(worker, args=(args, free_port()), nprocs=args.ranks)


if __name__ == "__main__":
    main()
