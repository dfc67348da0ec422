#!/usr/bin/python3
"""A checkpoint's batchnorm running statistics against the batch statistics of the first N
training samples under its own weights (NumPy: the reference forward pass of
python/tessera/reference.py with its batchnorms in training mode, statistics in float64;
tests/test_batchnorm.sh, for `tessera train --bn-recompute`). For runs whose recomputation
passes cover exactly those N samples in one batch (or, under --sync-bn, one batch a rank): each
layer's statistics are then the whole set's, whatever the order the run drew them in. Exits 1
naming the first layer and channel that differ.

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
    stats = {}
    reference.forward(ckpt, reference.standardize(train.x[:n], ckpt), batch_stats=stats)
    if not stats:
        sys.exit("%s: no batchnorm layer checked" % path)
    for base, wants in stats.items():
        for name, want in zip(("running_mean", "running_var"), wants):
            got = ckpt.tensors[base + name].reshape(-1).astype(np.float64)
            bad = ~np.isclose(got, want, rtol=1e-3, atol=1e-4)
            if bad.any():
                ch = int(np.argmax(bad))
                sys.exit("%s: %s%s[%d] = %.6g, the %d samples' statistics give %.6g"
                         % (path, base, name, ch, got[ch], n, want[ch]))
    print("%s: %d batchnorm layers hold the statistics of the first %d samples"
          % (path, len(stats), n))


if __name__ == "__main__":
    main()
