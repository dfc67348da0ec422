#!/usr/bin/python3
"""Accuracy reference: trains tessera's default MLP (784-512-512-10, ReLU,
SGD lr 0.01 momentum 0.9, batch 64, constant learning rate) with PyTorch on
real Fashion-MNIST, data prepared as tessera prepares it (x / 255, then one
mean and std over all training pixels). Prints one JSON line per epoch with
the test accuracy.

Debian's torch is python3-torch for /usr/bin/python3.
"""
import argparse
import json
import time

import torch
from torch import nn

from torch_mlp import load_fashion_mnist, make_mlp


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", metavar="DIR")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--widths", default="512,512")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y, mean, std = load_fashion_mnist(args.data, "train")
    xt, yt, _, _ = load_fashion_mnist(args.data, "test", mean, std)

    model = make_mlp([int(w) for w in args.widths.split(",") if w])
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        model.train()
        order = torch.randperm(x.shape[0])
        total, seen = 0.0, 0
        for i in range(0, x.shape[0], args.batch):  # the short last batch included
            idx = order[i : i + args.batch]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            seen += len(idx)
        model.eval()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        print(json.dumps({"epoch": epoch, "train_loss": round(total / seen, 5),
                          "test_acc": round(acc, 5),
                          "seconds": round(time.perf_counter() - start, 2)}), flush=True)


if __name__ == "__main__":
    main()
