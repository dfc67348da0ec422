#!/usr/bin/python3
"""A tessera checkpoint read with plain json and numpy, no tessera code.

Reads the safetensors file (8-byte little-endian header length, JSON header,
raw float32 tensors), the model from its metadata (an INI model file), and
evaluates a multilayer perceptron (dense layers, ReLU, dropout as identity)
on the test set of an IDX folder, standardized as the checkpoint's training
data was. Prints the accuracy `tessera eval` prints, as JSON with --json.

  /usr/bin/python3 benchmarks/load_checkpoint.py CHECKPOINT [--data DIR] [--test-limit N]
"""
import argparse
import configparser
import gzip
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    buf = blob[8 + n:]
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", t
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(buf[begin:end], dtype="<f4").reshape(t["shape"])
    return tensors, meta


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data[4 + 4 * dims:], dtype=np.uint8).reshape(shape)


def find(folder, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.exists(path):
            return path
    sys.exit(f"{folder}: no {name}[.gz]")


def layers(meta):
    """The model's sections in order, from the metadata's INI text."""
    ini = configparser.ConfigParser()
    ini.read_string(meta["model_ini"])
    return [dict(ini[s]) for s in ini.sections()]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    tensors, meta = read_safetensors(args.checkpoint)
    x = read_idx(find(args.data, "t10k-images-idx3-ubyte")).astype(np.float32) / np.float32(255)
    y = read_idx(find(args.data, "t10k-labels-idx1-ubyte")).astype(np.int64)
    if args.test_limit:
        x, y = x[:args.test_limit], y[:args.test_limit]
    a = x.reshape(len(x), -1)
    a = (a - np.float32(meta["input_mean"])) / np.float32(meta["input_std"])
    for i, layer in enumerate(layers(meta)):
        kind = layer["type"]
        if kind == "dense":
            w = tensors[f"layers.{i}.dense.weight"]
            b = tensors[f"layers.{i}.dense.bias"]
            a = a @ w + b
        elif kind == "relu":
            a = np.maximum(a, 0)
        elif kind in ("dropout", "flatten"):
            pass  # identity at evaluation; flatten keeps the storage
        else:
            sys.exit(f"layer {i}: {kind} is beyond this example (dense, relu, dropout only)")
    predicted = a.argmax(axis=1)  # the first of tied maxima, as tessera counts
    accuracy = float((predicted == y).mean())
    if args.json:
        print(json.dumps({"checkpoint": args.checkpoint, "samples": len(y), "accuracy": accuracy}))
    else:
        print(f"{args.checkpoint}: {len(y)} test samples, accuracy {100 * accuracy:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
