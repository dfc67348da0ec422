#!/usr/bin/python3
"""Fashion-MNIST in colour, as CIFAR-10 binary files: a learnable colour workload for the
averaging study (issue 42) on a machine that cannot download CIFAR-10.

Each 28x28 image is padded to 32x32 (2 pixels of intensity 0 a side) and coloured: pixel
intensity v (0-1) becomes b + (f - b) v per channel, with a foreground colour f (each channel
uniform in [0.35, 1]) and a background b (each in [0, 0.3]) drawn per image from --seed. The colours carry
nothing of the label: a network must find the garment's shape under any tint. Labels are
Fashion-MNIST's. Written as tessera reads CIFAR-10 (docs/training.md, "Data formats"):
DEST/data_batch_1.bin .. data_batch_5.bin (the 60,000 training images in order, 12,000 a file)
and DEST/test_batch.bin, records of a label byte and 3,072 pixel bytes, channel-major.

  /usr/bin/python3 benchmarks/colour_fashion.py DEST [--data DIR] [--seed S] [--limit N]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tessera  # noqa: E402

SIDE, PAD = 32, 2


def colour(x, rng):
    """(n, 3072) uint8 CIFAR records' pixels of (n, 784) intensities in [0, 1]."""
    n = len(x)
    img = np.zeros((n, SIDE, SIDE), dtype=np.float32)
    img[:, PAD:PAD + 28, PAD:PAD + 28] = x.reshape(n, 28, 28)
    fg = rng.uniform(0.35, 1.0, size=(n, 3, 1, 1)).astype(np.float32)
    bg = rng.uniform(0.0, 0.3, size=(n, 3, 1, 1)).astype(np.float32)
    planes = bg + (fg - bg) * img[:, None, :, :]  # (n, 3, 32, 32): channel-major
    return np.clip(np.rint(planes * 255), 0, 255).astype(np.uint8).reshape(n, -1)


def write(path, x, y, rng):
    rec = np.empty((len(x), 1 + 3 * SIDE * SIDE), dtype=np.uint8)
    rec[:, 0] = y
    rec[:, 1:] = colour(x, rng)
    rec.tofile(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dest", help="the folder to write (made if missing)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit", type=int, default=0,
                   help="the first N training and N test images only (a quick set) [all]")
    args = p.parse_args()
    try:
        train, test = tessera.data.load(args.data)
    except (OSError, ValueError) as e:
        sys.exit("colour_fashion.py: %s" % e)
    if train.shape != (1, 28, 28) or train.classes > 256:
        sys.exit("colour_fashion.py: %s holds %s images, not 28x28 grey ones" % (args.data,
                                                                                 train.shape))
    if args.limit > 0:
        train, test = train.limit(args.limit), test.limit(args.limit)
    os.makedirs(args.dest, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    parts = np.array_split(np.arange(len(train)), 5)
    for k, rows in enumerate(parts, start=1):
        write(os.path.join(args.dest, "data_batch_%d.bin" % k), train.x[rows],
              np.asarray(train.y)[rows], rng)
    write(os.path.join(args.dest, "test_batch.bin"), test.x, np.asarray(test.y), rng)
    print("colour_fashion.py: %d training and %d test images, 32x32x3, in %s"
          % (len(train), len(test), args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
