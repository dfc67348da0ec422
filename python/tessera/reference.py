"""A checkpoint's network evaluated in NumPy, in tessera's own layouts (no PyTorch): samples
as rows of h w c values, dense weights (in, out), conv weights (kh kw c_in, c_out) applied to
the lowered input as src/kernels/conv.c does, flatten leaving the storage as it is. It is the
reference the PyTorch conversion is checked against, and what benchmarks/load_checkpoint.py
evaluates with.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import data as _data


def _windows(a, kh, kw, sh, sw):
    """(n, oh, ow, kh, kw, c) windows of a (n, h, w, c) array."""
    v = sliding_window_view(a, (kh, kw), axis=(1, 2))  # (n, h-kh+1, w-kw+1, c, kh, kw)
    return v[:, ::sh, ::sw].transpose(0, 1, 2, 4, 5, 3)


def forward(ckpt, x):
    """The logits (n, classes) of ckpt's network (evaluation: dropout off) on x, rows of
    standardized h w c features (standardize(x, ckpt) gives them)."""
    x = np.asarray(x, dtype=np.float32)
    n = x.shape[0]
    t = ckpt.tensors
    values = {}
    for l in ckpt.layers:
        ins = [values[name] for name in l.inputs] if l.inputs else [x]
        c, h, w = l.in_shapes[0]
        a = ins[0]
        if l.kind == "dense":
            base = "layers.%d.dense." % l.index
            y = a.reshape(n, -1) @ t[base + "weight"] + t[base + "bias"]
        elif l.kind == "conv":
            kh, kw, sh, sw, ph, pw = l.window()
            img = np.pad(a.reshape(n, h, w, c), ((0, 0), (ph, ph), (pw, pw), (0, 0)))
            win = _windows(img, kh, kw, sh, sw)
            oh, ow = win.shape[1:3]
            base = "layers.%d.conv." % l.index
            y = win.reshape(n * oh * ow, kh * kw * c) @ t[base + "weight"] + t[base + "bias"]
            y = y.reshape(n, -1)
        elif l.kind in ("maxpool", "avgpool"):
            kh, kw, sh, sw, ph, pw = l.window()
            fill = -np.inf if l.kind == "maxpool" else 0.0  # padding never wins a max
            img = np.pad(a.reshape(n, h, w, c), ((0, 0), (ph, ph), (pw, pw), (0, 0)),
                         constant_values=fill)
            win = _windows(img, kh, kw, sh, sw)
            y = (win.max(axis=(3, 4)) if l.kind == "maxpool"
                 else win.mean(axis=(3, 4), dtype=np.float32)).reshape(n, -1)
        elif l.kind == "globalavgpool":
            y = a.reshape(n, h * w, c).mean(axis=1, dtype=np.float32)
        elif l.kind == "batchnorm":  # evaluation: the running statistics
            base = "layers.%d.batchnorm." % l.index
            eps = np.float32(l.eps or 1e-5)
            scale = t[base + "weight"].reshape(-1) / np.sqrt(t[base + "running_var"].reshape(-1)
                                                             + eps)
            shift = t[base + "bias"].reshape(-1) - t[base + "running_mean"].reshape(-1) * scale
            y = (a.reshape(n, -1, scale.size) * scale + shift).reshape(n, -1)
        elif l.kind == "relu":
            y = np.maximum(a, 0)
        elif l.kind == "add":
            y = ins[0]
            for b in ins[1:]:
                y = y + b
        elif l.kind == "concat":
            y = np.concatenate([b.reshape(n, h, w, -1) for b in ins], axis=3).reshape(n, -1)
        else:  # flatten, dropout (evaluation)
            y = a
        values[l.name] = np.asarray(y, dtype=np.float32)
    return values[ckpt.graph.output.name]


def standardize(x, ckpt):
    """Rows as tessera reads them, standardized with the checkpoint's input_mean and
    input_std as tessera does."""
    return _data.standardize(np.asarray(x).reshape(len(x), -1), ckpt.input_mean, ckpt.input_std)


def evaluate(ckpt, test):
    """(accuracy, loss, predictions) of ckpt on a Dataset, as `tessera eval` computes them
    (mean softmax cross-entropy; the first of tied maxima is the prediction)."""
    logits = forward(ckpt, standardize(test.x, ckpt)).astype(np.float64)
    m = logits.max(axis=1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    pred = logits.argmax(axis=1)
    loss = float(-logp[np.arange(len(test.y)), test.y].mean())
    return float((pred == test.y).mean()), loss, pred
