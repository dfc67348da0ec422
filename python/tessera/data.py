"""Datasets as tessera reads them (src/data/), so that Python sees the same numbers.

IDX folders (MNIST, Fashion-MNIST: train-images-idx3-ubyte[.gz], ... t10k-labels-idx1-ubyte[.gz])
give pixels p / 255 as float32 (correctly rounded); CSV folders (train.csv, test.csv: the label
first, then the features; an optional header line) give the numbers as written. Samples are rows
of h w c features (channels last), labels are ints.

tessera standardizes with the training set's statistics (after --train-limit), as --standardize
says: IDX images by default with one mean and one standard deviation over every feature of every
training sample (scalar), CSV data by default with a mean and deviation per feature column
(column), in double precision, rounded to float32; then each feature becomes (x - mean) * (1 /
std) in float32 (the mean alone is removed when std is 0). A checkpoint records them as
input_mean and input_std (one number, or one per column, space-separated) and, when not scalar,
the kind as input_standardize; its `data` key is a fingerprint of the training set that
`train --resume` compares.
"""
import gzip
import os
import struct

import numpy as np

IDX_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")


def read_idx(path):
    """The array of an IDX file (.gz or plain), uint8 as stored."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] or data[1] or data[2] != 8:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise ValueError("%s: %d bytes of data for shape %s" % (path, body.size, shape))
    return body.reshape(shape)


def _find(folder, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    return None


def _read_csv(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            fields = line.split(",")
            try:
                values = [float(v) for v in fields]
            except ValueError:
                if number == 1 and not rows:
                    continue  # a header: its first field is not a number
                raise ValueError("%s:%d: not a row of numbers" % (path, number)) from None
            rows.append(values)
    a = np.array(rows, dtype=np.float64)
    return a[:, 1:].astype(np.float32), a[:, 0].astype(np.int64)


class Dataset:
    """x: (n, features) float32, as tessera reads them (not standardized); y: (n,) int64 (a
    text's: (n, T), the next token at each position);
    classes: 1 + the largest label of the whole file (a limit keeps it); shape: (c, h, w);
    images: read from IDX images (True) or a CSV table (False)."""

    def __init__(self, x, y, classes, shape, images=False):
        self.x, self.y, self.classes, self.shape, self.images = x, y, classes, shape, images

    def __len__(self):
        return len(self.y)

    def limit(self, n):
        """The first n samples (all if n is None or 0, as tessera's --train-limit)."""
        if not n or n >= len(self.y):
            return self
        return Dataset(self.x[:n], self.y[:n], self.classes, self.shape, self.images)


def load_text(paths, context, test_fraction=0.1):
    """(train, test) Datasets of text files as tessera's --text reads them (src/data/text.c):
    the files' bytes concatenated in order, cut into windows of `context` tokens at stride
    `context`: window i's x the bytes [i T, i T + T) as float32, its y (int64, (n, T)) the
    bytes one further, the next byte at each position; the last floor(n test_fraction) windows,
    contiguous, the test set. paths: a path or a list of them. classes 256, shape (1, T, 1).
    Raises ValueError for a text shorter than context + 1 bytes."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    data = b""
    for p in paths:
        with open(p, "rb") as f:
            data += f.read()
    if len(data) < context + 1:
        raise ValueError("%s: the context (%d tokens) is longer than the text (%d bytes)"
                         % (",".join(paths), context, len(data)))
    b = np.frombuffer(data, dtype=np.uint8)
    n = (len(b) - 1) // context
    n_test = int(np.floor(n * test_fraction + 1e-9))
    x = b[:n * context].reshape(n, context).astype(np.float32)
    y = b[1:n * context + 1].reshape(n, context).astype(np.int64)
    shape = (1, context, 1)
    return (Dataset(x[:n - n_test], y[:n - n_test], 256, shape),
            Dataset(x[n - n_test:], y[n - n_test:], 256, shape))


def load(folder):
    """(train, test) Datasets of a folder, IDX files first, then train.csv and test.csv."""
    idx = [_find(folder, n) for n in IDX_NAMES]
    if all(idx):
        sets = []
        for images, labels in ((idx[0], idx[1]), (idx[2], idx[3])):
            pix, lab = read_idx(images), read_idx(labels)
            n = pix.shape[0]
            x = pix.reshape(n, -1).astype(np.float32) / np.float32(255)
            shape = (1,) + tuple(pix.shape[1:3]) if pix.ndim == 3 else default_shape(x.shape[1])
            sets.append(Dataset(x, lab.astype(np.int64), int(lab.max()) + 1, shape, True))
        sets[1].classes = sets[0].classes
        return sets[0], sets[1]
    train_csv, test_csv = os.path.join(folder, "train.csv"), os.path.join(folder, "test.csv")
    if os.path.isfile(train_csv):
        x, y = _read_csv(train_csv)
        train = Dataset(x, y, int(y.max()) + 1, default_shape(x.shape[1]))
        test = None
        if os.path.isfile(test_csv):
            tx, ty = _read_csv(test_csv)
            test = Dataset(tx, ty, train.classes, train.shape)
        return train, test
    raise FileNotFoundError("%s: no dataset found: expected %s[.gz] or train.csv"
                            % (folder, "[.gz], ".join(IDX_NAMES)))


def default_shape(features):
    """tessera's (c, h, w) of a sample with no known geometry (model.default_input_shape)."""
    from .model import default_input_shape
    return default_input_shape(features)


def _sequential_sum(values, start=0.0, chunk=1 << 20):
    """The sum of values in double, added one after the other as a C loop does (numpy's own
    sum is pairwise and can differ in the last bits)."""
    total = np.float64(start)
    flat = np.asarray(values).reshape(-1)
    for k in range(0, flat.size, chunk):
        part = np.concatenate(([total], flat[k:k + chunk].astype(np.float64)))
        total = np.add.accumulate(part)[-1]
    return float(total)


def stats(x):
    """(mean, std) of every feature of every sample of x as tessera computes them
    (tsr_dataset_stats: two passes in double, rounded to float32)."""
    x = np.asarray(x, dtype=np.float32)
    if x.size == 0:
        return np.float32(0), np.float32(0)
    m = _sequential_sum(x) / x.size
    var = 0.0
    flat = x.reshape(-1)
    for k in range(0, flat.size, 1 << 20):
        d = flat[k:k + (1 << 20)].astype(np.float64) - m
        var = _sequential_sum(d * d, var)
    return np.float32(m), np.float32(np.sqrt(var / x.size))


def column_stats(x):
    """(mean, std) per feature column of x as tessera computes them (--standardize column:
    per column, two passes in double over the samples in order, rounded to float32)."""
    x = np.asarray(x, dtype=np.float32)
    n = x.shape[0]
    if n == 0:
        z = np.zeros(x.shape[1], dtype=np.float32)
        return z, z
    xd = x.astype(np.float64)
    m = np.add.accumulate(xd, axis=0)[-1] / n
    d = xd - m
    var = np.add.accumulate(d * d, axis=0)[-1] / n
    return m.astype(np.float32), np.sqrt(var).astype(np.float32)


def default_standardize(train):
    """tessera's default --standardize for a Dataset: scalar for images (IDX), column for
    tabular data (CSV)."""
    return "scalar" if getattr(train, "images", False) else "column"


def standardization(train, kind=None):
    """(kind, mean, std) that tessera fits to a training set with --standardize kind (default
    default_standardize(train)): scalars for scalar, per-column arrays for column, 0 and 1 for
    none."""
    kind = kind or default_standardize(train)
    if kind == "scalar":
        mean, std = stats(train.x)
    elif kind == "column":
        mean, std = column_stats(train.x)
    elif kind == "none":
        mean, std = np.float32(0), np.float32(1)
    else:
        raise ValueError("standardization %r: expected column, scalar or none" % kind)
    return kind, mean, std


def standardize(x, mean, std):
    """x standardized as tessera does it (tsr_dataset_normalize), float32: (x - mean) *
    (1 / std), or x - mean when std is 0 or not finite. mean and std: scalars or per-feature
    arrays."""
    x = np.asarray(x, dtype=np.float32)
    mean = np.asarray(mean, dtype=np.float32)
    std = np.asarray(std, dtype=np.float32)
    ok = (std > 0) & np.isfinite(std)
    scale = np.where(ok, np.float32(1) / np.where(ok, std, np.float32(1)), np.float32(1))
    return (x - mean) * scale.astype(np.float32)


def fingerprint(train):
    """The `data` metadata tessera records for a training set (tsr_dataset_fingerprint):
    "N x F, C classes, checksum S", S the sum of every 997th value and every 7th label."""
    n, f = train.x.shape
    total = _sequential_sum(train.x.reshape(-1)[::997])
    total = _sequential_sum(train.y[::7].astype(np.float64), total)
    return "%d x %d, %d classes, checksum %.9g" % (n, f, train.classes, total)


def describe(train, kind=None):
    """(data, input_mean, input_std): what a checkpoint records of a training set, for
    from_torch. train: a Dataset as tessera trains on it (after --train-limit); kind: its
    --standardize (default default_standardize(train))."""
    _, mean, std = standardization(train, kind)
    return fingerprint(train), mean, std


def to_nchw(x, shape):
    """Rows of h w c features (tessera's layout) as an (n, c, h, w) array (torch's)."""
    c, h, w = shape
    return np.ascontiguousarray(np.asarray(x).reshape(-1, h, w, c).transpose(0, 3, 1, 2))


def from_nchw(x):
    """An (n, c, h, w) array as rows of h w c features."""
    x = np.asarray(x)
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1).reshape(x.shape[0], -1))
