#!/usr/bin/python3
"""A tessera checkpoint evaluated in Python (NumPy only) with the tessera package (python/).

Reads the checkpoint (python/tessera/checkpoint.py: safetensors, CRC-32 of every tensor, the
model from its metadata), and evaluates its network, whatever its layers, in tessera's own
layouts (python/tessera/reference.py) on the test set of a data folder, standardized as the
checkpoint's training data was. Prints the accuracy and loss `tessera eval` prints, as JSON
with --json. For PyTorch, see tessera.to_torch (docs/python.md).

  /usr/bin/python3 benchmarks/load_checkpoint.py CHECKPOINT [--data DIR] [--test-limit N]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tessera  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    try:
        ckpt = tessera.read_checkpoint(args.checkpoint)
        _, test = tessera.data.load(args.data)
    except (OSError, ValueError) as e:
        sys.exit("load_checkpoint.py: %s" % e)
    test = test.limit(args.test_limit)
    accuracy, loss, _ = tessera.reference.evaluate(ckpt, test)
    if args.json:
        print(json.dumps({"checkpoint": args.checkpoint, "samples": len(test),
                          "accuracy": accuracy, "loss": loss}))
    else:
        print("%s: %d test samples, accuracy %.2f%%, loss %.4f"
              % (args.checkpoint, len(test), 100 * accuracy, loss))
    return 0


if __name__ == "__main__":
    sys.exit(main())
