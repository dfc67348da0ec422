#!/usr/bin/python3
"""PyTorch CPU peer of a language-model training run: tessera.gpt.GPT (the same gpt:L,D,H,T,
GPT-2's initialization) trained with AdamW (weight decay on what tessera decays) on the windows
`tessera train --text` reads (tessera.data.load_text: the same files, stride T, the last tenth
the test set), shuffled every epoch, batch B, for a wall-clock budget; then the test loss in
nats per token and bits per byte. Prints ONE JSON line. The comparison in docs/language-models.md
runs it next to `tessera train` on the same model, data and budget:

  /usr/bin/python3 benchmarks/torch_gpt_train.py --model gpt:4,256,4,128 --seconds 240
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from tessera.data import load_text  # noqa: E402
from tessera.gpt import GPT  # noqa: E402

DEFAULT_TEXT = "/usr/share/games/fortunes"


def default_files():
    """The default corpus as tessera reads it: the folder's files without an extension, sorted."""
    return sorted(p for p in glob.glob(os.path.join(DEFAULT_TEXT, "*"))
                  if os.path.isfile(p) and "." not in os.path.basename(p))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt:4,256,4,128")
    p.add_argument("--text", help="FILE[,FILE...] [the fortunes corpus]")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--seconds", type=float, default=240.0, help="training budget [240]")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    net = GPT.from_spec(a.model, 256, init="gpt2").train()
    t = net.config["positions"]
    files = a.text.split(",") if a.text else default_files()
    train, test = load_text(files, t)
    x = torch.as_tensor(train.x).long()
    y = torch.as_tensor(train.y).long()
    opt = torch.optim.AdamW(net.param_groups(a.weight_decay), lr=a.lr)
    steps, start, epoch = 0, time.perf_counter(), 0
    while time.perf_counter() - start < a.seconds:
        order = torch.randperm(len(x))
        for i in range(0, len(x) - a.batch + 1, a.batch):
            idx = order[i:i + a.batch]
            opt.zero_grad()
            net.loss(x[idx], y[idx]).backward()
            opt.step()
            steps += 1
            if time.perf_counter() - start >= a.seconds:
                break
        epoch += 1
    elapsed = time.perf_counter() - start
    net.eval()
    tx, ty = torch.as_tensor(test.x).long(), torch.as_tensor(test.y).long()
    with torch.no_grad():
        total = sum(float(net.loss(tx[i:i + 64], ty[i:i + 64])) * len(tx[i:i + 64])
                    for i in range(0, len(tx), 64))
    loss = total / len(tx)
    print(json.dumps({"peer": "pytorch", "version": torch.__version__, "model": a.model,
                      "threads": a.threads, "batch": a.batch, "steps": steps,
                      "tokens": steps * a.batch * t, "seconds": elapsed,
                      "tokens_per_s": steps * a.batch * t / elapsed, "test_loss": loss,
                      "test_bpb": loss / math.log(2)}))


if __name__ == "__main__":
    sys.exit(main())
