#!/usr/bin/python3
"""Time-to-accuracy peer: trains a tessera model file with PyTorch on real Fashion-MNIST with
tessera's recipe, and prints one JSON line per epoch with the test accuracy and the seconds spent
training and evaluating, so that the wall time to a target accuracy compares with `tessera train
--log` on the same recipe (benchmarks/time_to_accuracy.py runs both).

The recipe, as tessera trains: the model built from the INI text by the tessera package's torch
modules (tessera.pytorch.TesseraNet, PyTorch's default initialization); the images x / 255
standardized with one mean and std over all training pixels (tessera's default for one-channel
images, the package's tessera.data.standardization); SGD with momentum and L2 weight decay; the learning rate decayed by a cosine from lr to
0 over every step of the run, step by step (tessera's cosine); each epoch a new random order;
training batches augmented as torchvision's RandomCrop(28, padding=P) then
RandomHorizontalFlip(), the padding black in the raw pixels (standardized as the images are),
drawn per sample with torch's generator; evaluation on the 10,000 test images after every
epoch. The run's threads: --threads (default 2, one per core of the project's machine).
With --max-seconds S the run ends after the first epoch at which its training and evaluation
seconds add up to S or more, with a last line {"event": "stopped", ...} saying so (the
time-to-accuracy driver passes tessera's time to the target: past it, PyTorch is the slower
whatever its later epochs reach).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import tessera  # noqa: E402
from tessera import data as tdata  # noqa: E402
from tessera import model as tmodel  # noqa: E402


def load(folder):
    """Train and test images (N, 1, 28, 28) standardized as tessera does (the package's
    standardization: one mean and std over every training pixel), labels, and the standardized
    value of a black pixel."""
    train, test = tdata.load(folder)
    _, mean, std = tdata.standardization(train)
    shape = train.shape
    def images(ds):
        return torch.from_numpy(tdata.to_nchw(tdata.standardize(ds.x, mean, std), shape))
    black = float(tdata.standardize(np.float32(0), mean, std))
    return (images(train), torch.from_numpy(train.y), images(test), torch.from_numpy(test.y),
            black, shape)


def augment(x, pad, flip, fill, gen):
    """A random crop of each image padded by `pad` pixels of `fill` (its size kept), then a
    mirror with probability 1/2, per sample."""
    n, c, h, w = x.shape
    if pad > 0:
        padded = torch.full((n, c, h + 2 * pad, w + 2 * pad), fill)
        padded[:, :, pad:pad + h, pad:pad + w] = x
        dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
        dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
        rows = (dy[:, None] + torch.arange(h)[None, :])  # (n, h)
        cols = (dx[:, None] + torch.arange(w)[None, :])  # (n, w)
        x = padded[torch.arange(n)[:, None, None, None], torch.arange(c)[None, :, None, None],
                   rows[:, None, :, None], cols[:, None, None, :]]
    if flip:
        mirror = torch.rand(n, generator=gen) < 0.5
        x = torch.where(mirror[:, None, None, None], x.flip(3), x)
    return x


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-file", required=True, help="a tessera INI model file")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", metavar="DIR")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--crop-padding", type=int, default=4, help="RandomCrop's padding [4]")
    p.add_argument("--no-flip", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-limit", type=int, default=0, help="the first N training images [all]")
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="end after the epoch that brings the seconds to S [0: every epoch]")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x, y, xt, yt, black, shape = load(args.data)
    if args.train_limit > 0:
        x, y = x[:args.train_limit], y[:args.train_limit]
    with open(args.model_file) as f:
        layers = tmodel.bind_classes(tmodel.read_ini(f.read(), args.model_file), 10)
    graph = tmodel.Graph(layers, shape, args.model_file)
    net = tessera.pytorch.TesseraNet(graph)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay)
    steps = math.ceil(x.shape[0] / args.batch) * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.5 * (1.0 + math.cos(math.pi * t / steps)))
    loss_fn = nn.CrossEntropyLoss()
    print(json.dumps({"peer": "pytorch", "version": torch.__version__, "threads": args.threads,
                      "model": args.model_file, "batch": args.batch, "lr": args.lr,
                      "epochs": args.epochs}), flush=True)
    spent = 0.0
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        net.train()
        order = torch.randperm(x.shape[0], generator=gen)
        total, seen = 0.0, 0
        for i in range(0, x.shape[0], args.batch):  # the short last batch included
            idx = order[i:i + args.batch]
            xb = augment(x[idx], args.crop_padding, not args.no_flip, black, gen)
            opt.zero_grad()
            loss = loss_fn(net(xb), y[idx])
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
            seen += len(idx)
        trained = time.perf_counter()
        net.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, xt.shape[0], 1000):
                correct += (net(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item()
        done = time.perf_counter()
        print(json.dumps({"epoch": epoch, "loss": round(total / seen, 5),
                          "test_accuracy": correct / xt.shape[0],
                          "seconds": round(trained - start, 3),
                          "eval_seconds": round(done - trained, 3)}), flush=True)
        spent += done - start
        if args.max_seconds > 0 and spent >= args.max_seconds and epoch < args.epochs:
            print(json.dumps({"event": "stopped", "epoch": epoch, "seconds": round(spent, 3),
                              "max_seconds": args.max_seconds}), flush=True)
            break


if __name__ == "__main__":
    main()
