#!/usr/bin/env python3
"""Writes one small colour image set in every format tessera reads, from the Python standard
library alone (no NumPy here: the .npy headers are written as np.save writes them, and the .npz
archives with zipfile and zip64 forced, as np.savez does):

    make_colour_data.py OUT [N_PER_BATCH]

OUT/cifar/       data_batch_1.bin .. data_batch_5.bin, test_batch.bin (CIFAR-10 binary)
OUT/cifar100/    train.bin, test.bin (CIFAR-100: coarse and fine label bytes)
OUT/npy/         x_train.npy (N, 32, 32, 3) uint8, y_train.npy (N, 1) uint8, x_test.npy,
                 y_test.npy int64
OUT/nchw.npz     the same, x_* (N, 3, 32, 32) float32 pixel / 255, deflated
OUT/nhwc.npz     the same, uint8 NHWC, stored
OUT/numpy.npz    written by NumPy's own np.savez_compressed where NumPy is installed

Image i (0-based over train then test) has pixel (r, c) channel k = (i*31 + r*7 + c*3 + k*101)
% 256 and label i % 10; the red channel is brighter for odd labels, so a net can learn it."""
import os
import struct
import sys
import zipfile

SIDE, CH = 32, 3


def pixel(i, r, c, k):
    v = (i * 31 + r * 7 + c * 3 + k * 101) % 256
    if k == 0 and (i % 10) % 2 == 1:
        v = min(255, v // 2 + 128)
    return v


def image_hwc(i):
    return bytes(pixel(i, r, c, k) for r in range(SIDE) for c in range(SIDE) for k in range(CH))


def image_chw(i):
    return bytes(pixel(i, r, c, k) for k in range(CH) for r in range(SIDE) for c in range(SIDE))


def npy(descr, shape, data):
    """A .npy file, version 1.0, as numpy.lib.format writes it (header padded to 64 bytes)."""
    shape_text = "(%s)" % (", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def npz(path, arrays, compression):
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        for name, blob in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                f.write(blob)


def main():
    out = sys.argv[1]
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    n_train, n_test = 5 * per, per
    train, test = range(n_train), range(n_train, n_train + n_test)
    for d in ("cifar", "cifar100", "npy"):
        os.makedirs(os.path.join(out, d), exist_ok=True)

    def records(ids, coarse):
        return b"".join(
            (bytes([i % 20]) if coarse else b"") + bytes([i % 10]) + image_chw(i) for i in ids)

    for b in range(5):
        with open(os.path.join(out, "cifar", "data_batch_%d.bin" % (b + 1)), "wb") as f:
            f.write(records(range(b * per, (b + 1) * per), False))
    with open(os.path.join(out, "cifar", "test_batch.bin"), "wb") as f:
        f.write(records(test, False))
    with open(os.path.join(out, "cifar100", "train.bin"), "wb") as f:
        f.write(records(train, True))
    with open(os.path.join(out, "cifar100", "test.bin"), "wb") as f:
        f.write(records(test, True))

    def hwc(ids):
        return b"".join(image_hwc(i) for i in ids)

    def chw_f4(ids):
        return b"".join(struct.pack("<%df" % (SIDE * SIDE * CH), *[p / 255 for p in image_chw(i)])
                        for i in ids)

    def labels(ids, fmt):
        return b"".join(struct.pack(fmt, i % 10) for i in ids)

    nhwc = {"x_train": npy("|u1", (n_train, SIDE, SIDE, CH), hwc(train)),
            "y_train": npy("|u1", (n_train, 1), labels(train, "<B")),
            "x_test": npy("|u1", (n_test, SIDE, SIDE, CH), hwc(test)),
            "y_test": npy("<i8", (n_test,), labels(test, "<q"))}
    for name, blob in nhwc.items():
        with open(os.path.join(out, "npy", name + ".npy"), "wb") as f:
            f.write(blob)
    npz(os.path.join(out, "nhwc.npz"), nhwc, zipfile.ZIP_STORED)
    nchw = {"x_train": npy("<f4", (n_train, CH, SIDE, SIDE), chw_f4(train)),
            "y_train": npy("<i4", (n_train,), labels(train, "<i")),
            "x_test": npy("<f4", (n_test, CH, SIDE, SIDE), chw_f4(test)),
            "y_test": npy("<i4", (n_test,), labels(test, "<i"))}
    npz(os.path.join(out, "nchw.npz"), nchw, zipfile.ZIP_DEFLATED)
    try:
        import numpy as np
    except ImportError:
        return
    x = np.frombuffer(hwc(train), np.uint8).reshape(n_train, SIDE, SIDE, CH)
    xt = np.frombuffer(hwc(test), np.uint8).reshape(n_test, SIDE, SIDE, CH)
    np.savez_compressed(os.path.join(out, "numpy.npz"), x_train=x,
                        y_train=np.arange(n_train) % 10, x_test=xt,
                        y_test=np.arange(n_train, n_train + n_test) % 10)


if __name__ == "__main__":
    main()
