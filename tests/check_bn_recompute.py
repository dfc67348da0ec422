#!/usr/bin/python3
"""A checkpoint's batchnorm running statistics against the batch statistics of the first N
training samples under its own weights, in float64 (NumPy; tests/test_batchnorm.sh, for
`tessera train --bn-recompute`). For runs whose recomputation passes cover exactly those N
samples in one batch (or, under --sync-bn, one batch a rank): each layer's statistics are then
the whole set's, whatever the order the run drew them in. The statistics of a layer are of its
input in a training forward pass, each batchnorm before it normalizing with its batch's own
(biased variance); the running variance is the unbiased one. Exits 1 naming the first layer
and channel that differ.

  check_bn_recompute.py CHECKPOINT DATA_DIR N
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tessera  # noqa: E402
from tessera import reference  # noqa: E402


def main():
    path, data, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ckpt = tessera.read_checkpoint(path)
    train, _ = tessera.data.load(data)
    t = ckpt.tensors
    values, checked = {}, 0
    x = reference.standardize(train.x[:n], ckpt).astype(np.float64)
    for l in ckpt.layers:
        a = values[l.inputs[0]] if l.inputs else x
        c, h, w = l.in_shapes[0]
        if l.kind == "conv":
            kh, kw, sh, sw, ph, pw = l.window()
            img = np.pad(a.reshape(n, h, w, c), ((0, 0), (ph, ph), (pw, pw), (0, 0)))
            win = reference._windows(img, kh, kw, sh, sw)
            base = "layers.%d.conv." % l.index
            y = win.reshape(-1, kh * kw * c) @ t[base + "weight"] + t[base + "bias"]
        elif l.kind == "dense":
            base = "layers.%d.dense." % l.index
            y = a.reshape(n, -1) @ t[base + "weight"] + t[base + "bias"]
        elif l.kind == "batchnorm":
            base = "layers.%d.batchnorm." % l.index
            k = t[base + "weight"].size
            v = a.reshape(-1, k)
            mean, var = v.mean(axis=0), v.var(axis=0)
            unbiased = var * len(v) / (len(v) - 1)
            for name, want in (("running_mean", mean), ("running_var", unbiased)):
                got = t[base + name].reshape(-1).astype(np.float64)
                bad = ~np.isclose(got, want, rtol=1e-3, atol=1e-4)
                if bad.any():
                    ch = int(np.argmax(bad))
                    sys.exit("%s: %s%s[%d] = %.6g, the %d samples' statistics give %.6g"
                             % (path, base, name, ch, got[ch], n, want[ch]))
            checked += 1
            eps = l.eps or 1e-5
            y = (v - mean) / np.sqrt(var + eps) * t[base + "weight"].reshape(-1) \
                + t[base + "bias"].reshape(-1)
        elif l.kind == "relu":
            y = np.maximum(a, 0)
        elif l.kind == "flatten":
            y = a
        else:
            break  # past what this check models: the statistics before it are checked
        values[l.name] = np.asarray(y, dtype=np.float64).reshape(n, -1)
    if checked == 0:
        sys.exit("%s: no batchnorm layer checked" % path)
    print("%s: %d batchnorm layers hold the statistics of the first %d samples"
          % (path, checked, n))


if __name__ == "__main__":
    main()
