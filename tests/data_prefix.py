#!/usr/bin/env python3
"""data_prefix.py [--stamp FILE] SRC DST NTRAIN NTEST: the first NTRAIN training and NTEST test samples of the
IDX dataset in SRC (Fashion-MNIST's four .gz files) written to DST as a dataset of its own.

Why: every tessera process reads and inflates the whole of its --data files (47 MB for
Fashion-MNIST's 70,000 images) before --train-limit and --test-limit keep the first samples; a
test that starts a hundred 2- and 4-rank runs on 1,280 of them spent about half of each launch
there. A run with --train-limit N --test-limit M (N <= NTRAIN, M <= NTEST) on DST trains and
evaluates on the same samples, bit for bit, as on SRC: the loaders keep the first samples in file
order, the standardization is fitted after the limits, and the number of classes (one more than
the largest training label) is the full files' (checked here). Only the first bytes of SRC's
files are inflated. Exit 1, naming the file, when SRC has no such files or too few samples.
With --stamp (the build's prefix for the mpi checks, tests/meson.build) FILE is written at the
end, and a SRC without the dataset only noted (the checks then skip as they did without it).
"""
import gzip
import os
import sys

FILES = (("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"))


def header(raw, path):
    """(dims, header bytes) of an IDX file's start: magic 0 0 8 D, then D big-endian sizes."""
    if len(raw) < 4 or raw[:3] != b"\0\0\x08":
        sys.exit("data_prefix.py: %s: not an IDX file of bytes" % path)
    dims = raw[3]
    return [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)], 4 + 4 * dims


def prefix(src, dst, name, n):
    """Writes the first n records of src/name to dst/name; returns the labels (a labels file)."""
    path = os.path.join(src, name)
    with gzip.open(path) as f:
        head = f.read(4 + 4 * 3)
        dims, size = header(head, path)
        if dims[0] < n:
            sys.exit("data_prefix.py: %s has %d samples, fewer than %d" % (path, dims[0], n))
        record = 1
        for d in dims[1:]:
            record *= d
        body = head[size:] + f.read(size + n * record - len(head))
        body = body[:n * record]
    out = bytearray(head[:size])
    out[4:8] = n.to_bytes(4, "big")
    tmp = os.path.join(dst, name + ".tmp")
    with gzip.open(tmp, "wb", compresslevel=1) as f:
        f.write(bytes(out) + body)
    os.replace(tmp, os.path.join(dst, name))
    return body if len(dims) == 1 else None


def main():
    args, stamp = sys.argv[1:], None
    if args[:1] == ["--stamp"]:
        stamp, args = args[1], args[2:]
    if len(args) != 4:
        sys.exit(__doc__.split("\n")[0])
    src, dst, ntrain, ntest = args[0], args[1], int(args[2]), int(args[3])
    os.makedirs(dst, exist_ok=True)
    if stamp and not os.path.exists(os.path.join(src, FILES[0][0])):
        print("data_prefix.py: no dataset in %s: %s left empty" % (src, dst))
        open(stamp, "w").close()
        return
    for (images, labels), n in zip(FILES, (ntrain, ntest)):
        prefix(src, dst, images, n)
        kept = prefix(src, dst, labels, n)
        if labels.startswith("train"):
            # The classes are one more than the largest training label of the files read.
            with gzip.open(os.path.join(src, labels)) as f:
                every = f.read()[8:]
            if max(kept) != max(every):
                sys.exit("data_prefix.py: the first %d training labels of %s reach %d, the file %d:"
                         " another number of classes" % (n, src, max(kept), max(every)))
    if stamp:
        open(stamp, "w").close()


if __name__ == "__main__":
    main()
