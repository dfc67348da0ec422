#!/usr/bin/python3
"""How fast a model's training amplifies rounding: PyTorch's own float32 against float64.

Issue 24 asks a split run to follow one process's loss within 1e-5 relative over 20 steps.
Where training itself amplifies a difference in the last bits, no split (nor another tiling,
nor another library) can meet that: this program measures the amplification with PyTorch
alone, on a tessera model file (tessera.pytorch.TesseraNet, torch's initialization), from one
initialization and the same batches of random inputs and labels:

  f32-f64     the float32 run against the float64 run (the rounding of float32 itself);
  f64-f64'    the float64 run against float64 started from weights scaled by 1 + 1e-7 u,
              u uniform in [-0.5, 0.5) (a difference of float32's size, grown by the dynamics
              alone, with float64's rounding far below it).

Each step's relative difference of the training loss, |a - b| / |b|, one line a step, then
the largest over the steps and the step where 1e-5 was first passed. Plain SGD (as tessera
train --momentum M), cross-entropy. Usage:

  benchmarks/torch_divergence.py --model models/resnet20.ini --input 3x32x32 --lr 0.01
"""
import argparse
import copy
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import tessera.pytorch  # noqa: E402
from tessera import model as tmodel  # noqa: E402


def losses(net, x, y, batch, lr, momentum, dtype, perturb=0.0):
    """The training loss of each step of a copy of net in dtype (weights scaled by
    1 + perturb u first)."""
    net = copy.deepcopy(net).to(dtype)
    if perturb:
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for p in net.parameters():
                p.mul_(1 + perturb * (torch.rand(p.shape, generator=g, dtype=dtype) - 0.5))
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    out = []
    for s in range(len(x) // batch):
        xb, yb = x[s * batch:(s + 1) * batch].to(dtype), y[s * batch:(s + 1) * batch]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xb), yb)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a tessera INI model file")
    p.add_argument("--input", default="3x32x32", help="sample shape CxHxW [3x32x32]")
    p.add_argument("--classes", type=int, default=10, help="classes [10]")
    p.add_argument("--batch", type=int, default=16, help="batch [16]")
    p.add_argument("--steps", type=int, default=20, help="steps [20]")
    p.add_argument("--lr", type=float, default=0.01, help="SGD's rate [0.01]")
    p.add_argument("--momentum", type=float, default=0.0, help="SGD's momentum [0]")
    p.add_argument("--threads", type=int, default=1, help="torch threads [1]")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    shape = tuple(int(v) for v in args.input.split("x"))
    with open(args.model) as f:
        layers = tmodel.read_ini(f.read(), args.model)
    tmodel.bind_classes(layers, args.classes)
    net = tessera.pytorch.TesseraNet(tmodel.Graph(layers, shape, args.model))
    rows = args.steps * args.batch
    x = torch.rand(rows, *shape) - 0.5
    y = torch.randint(0, args.classes, (rows,))
    run = lambda dtype, perturb=0.0: losses(net, x, y, args.batch, args.lr, args.momentum, dtype,
                                            perturb)
    f64, f32, f64p = run(torch.float64), run(torch.float32), run(torch.float64, 1e-7)
    rel = lambda a, b: [abs(u - v) / abs(v) for u, v in zip(a, b)]
    d32, dp = rel(f32, f64), rel(f64p, f64)
    print("# %s, input %s, batch %d, SGD lr %g momentum %g, torch %s, %d thread(s)"
          % (args.model, args.input, args.batch, args.lr, args.momentum, torch.__version__,
             args.threads))
    print("step  loss (f64)   f32-f64   f64-f64'")
    for s in range(len(f64)):
        print("%4d  %.8f  %.1e   %.1e" % (s + 1, f64[s], d32[s], dp[s]))
    for name, d in (("f32-f64", d32), ("f64-f64'", dp)):
        first = next((s + 1 for s, v in enumerate(d) if v > 1e-5), None)
        print("%-9s largest %.1e; past 1e-5 %s" % (name, max(d),
                                                   "at step %d" % first if first else "never"))


if __name__ == "__main__":
    main()
