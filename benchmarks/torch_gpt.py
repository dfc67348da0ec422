#!/usr/bin/python3
"""PyTorch CPU peer for bench_gpt: trains tessera's language model gpt:L,D,H,T in PyTorch.

The model is tessera.gpt.GPT (python/tessera: nanoGPT's modules, nn.Embedding, nn.LayerNorm,
nn.Linear projections, causal attention as softmax(q k^T / sqrt(dh) + mask) v, GELU tanh, the
head tied to the token embedding) built from the same shorthand, GPT-2's initialization, trained
with AdamW (lr 1e-3, weight decay 0.1 on the embedding tables and projection weights, as
tessera decays them) and the cross-entropy at every position, the standard step (zero_grad,
forward, loss, backward, step), on pre-generated random tokens (loading never enters the
measurement). Prints ONE JSON line:

  {"peer": "pytorch", "version": ..., "threads": N, "batch": B, "model": "gpt:...",
   "samples_per_s": X, "tokens_per_s": X T, "steps": n}

--best-threads 1,2 measures each thread count in its own process and prints the best, with all
of them under "runs". Debian's torch is python3-torch for /usr/bin/python3.
"""
import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from torch_mlp import best_of  # noqa: E402
from tessera.gpt import GPT  # noqa: E402


def measure(model, vocab, batch, threads, seconds, warmup=3):
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1)
    net = GPT.from_spec(model, vocab, init="gpt2").train()
    t = net.config["positions"]
    rows = batch * 4
    x = torch.randint(0, vocab, (rows, t))
    y = torch.randint(0, vocab, (rows, t))
    opt = torch.optim.AdamW(net.param_groups(0.1), lr=1e-3)

    def step(k):
        i = (k % 4) * batch
        opt.zero_grad()
        net.loss(x[i:i + batch], y[i:i + batch]).backward()
        opt.step()

    for k in range(warmup):
        step(k)
    steps, start = 0, time.perf_counter()
    while True:
        step(warmup + steps)
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    rate = steps * batch / elapsed
    return {"peer": "pytorch", "version": torch.__version__, "threads": threads, "batch": batch,
            "model": model, "samples_per_s": rate, "tokens_per_s": rate * t, "steps": steps}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt:4,256,4,128", help="gpt:L,D,H,T [gpt:4,256,4,128]")
    p.add_argument("--vocab", type=int, default=256, help="tokens [256: bytes]")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads [1]")
    p.add_argument("--best-threads", metavar="N,N,...",
                   help="measure each thread count, print the best (all under 'runs')")
    p.add_argument("--seconds", type=float, default=5.0,
                   help="measured training time after 3 warm-up steps [5]")
    p.add_argument("--data", help=argparse.SUPPRESS)  # best_of passes it when set; never here
    args = p.parse_args()
    if args.batch < 1 or args.threads < 1 or args.seconds <= 0 or args.vocab < 2:
        p.error("--batch, --threads and --seconds must be positive, --vocab at least 2")
    if args.best_threads:
        result = best_of(__file__, ["--model", args.model, "--vocab", str(args.vocab)], args,
                         [int(t) for t in args.best_threads.split(",")])
    else:
        result = measure(args.model, args.vocab, args.batch, args.threads, args.seconds)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
