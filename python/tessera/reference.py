"""A checkpoint's network evaluated in NumPy, in tessera's own layouts (no PyTorch): samples
as rows of h w c values, dense weights (in, out), conv weights (kh kw c_in, c_out) applied to
the lowered input as src/kernels/conv.c does, flatten leaving the storage as it is; a
sequence (T x 1 x C) as T rows of C channels for the language model's layers (embedding,
layernorm, gelu, attention, lmhead). It is the reference the PyTorch conversion is checked
against, and what benchmarks/load_checkpoint.py evaluates with.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import data as _data


def _windows(a, kh, kw, sh, sw):
    """(n, oh, ow, kh, kw, c) windows of a (n, h, w, c) array."""
    v = sliding_window_view(a, (kh, kw), axis=(1, 2))  # (n, h-kh+1, w-kw+1, c, kh, kw)
    return v[:, ::sh, ::sw].transpose(0, 1, 2, 4, 5, 3)


def forward(ckpt, x, batch_stats=None):
    """The logits (n, classes) of ckpt's network (evaluation: dropout off) on x, rows of
    standardized h w c features (standardize(x, ckpt) gives them); of a language model (an
    lmhead last; x (n, T) token ids) (n, T, vocab), the logits at each position. With a dict
    batch_stats, each batchnorm normalizes as in training, with x's own statistics (biased
    variance), and batch_stats["layers.N.batchnorm."] gets them as the running statistics
    would take them: (mean, unbiased variance), float64."""
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
            mean, var = t[base + "running_mean"].reshape(-1), t[base + "running_var"].reshape(-1)
            if batch_stats is not None:  # training: the batch's own
                v = a.reshape(-1, mean.size).astype(np.float64)
                mean, biased = v.mean(axis=0), v.var(axis=0)
                batch_stats[base] = (mean, biased * len(v) / (len(v) - 1))
                var = biased
            scale = t[base + "weight"].reshape(-1) / np.sqrt(var + eps)
            shift = t[base + "bias"].reshape(-1) - mean * scale
            y = (a.reshape(n, -1, scale.size) * scale + shift).reshape(n, -1)
        elif l.kind == "embedding":  # token ids (exact integers in float) -> wte rows + wpe
            base = "layers.%d.embedding." % l.index
            tok = a.reshape(n, h).astype(np.int64)
            y = t[base + "weight"][tok]
            if l.context:
                y = y + t[base + "position"].reshape(l.context, -1)[:h]
            y = y.reshape(n, -1)
        elif l.kind == "layernorm":  # per position over its c channels, biased variance
            base = "layers.%d.layernorm." % l.index
            y = layernorm(a.reshape(n, h * w, c), t[base + "weight"], t[base + "bias"],
                          l.eps or 1e-5).reshape(n, -1)
        elif l.kind == "gelu":
            y = gelu(a)
        elif l.kind == "attention":
            y = attention(a.reshape(n, h * w, c), l.heads).reshape(n, -1)
        elif l.kind == "lmhead":  # tied: the embedding's token table, transposed
            emb = ckpt.graph.embedding
            y = a.reshape(n, h * w, c) @ t["layers.%d.embedding.weight" % emb.index].T
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


def layernorm(x, weight, bias, eps=1e-5):
    """Layer normalization over the last axis (PyTorch's: biased variance, eps a float32), the
    scale and shift (C) applied; float64."""
    v = np.asarray(x, dtype=np.float64)
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    z = (v - mean) / np.sqrt(var + np.float64(np.float32(eps)))
    return z * np.asarray(weight).reshape(-1) + np.asarray(bias).reshape(-1)


def gelu(x):
    """GELU's tanh approximation (GPT-2's, PyTorch's approximate='tanh'), float64."""
    v = np.asarray(x, dtype=np.float64)
    return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))


def attention(qkv, heads):
    """Causal multi-head self-attention of (n, T, 3D) [q | k | v] rows (head h: columns
    h D/H .. (h + 1) D/H - 1 of each) -> (n, T, D): softmax(q k^T / sqrt(D/H) + mask) v per
    head, the mask -inf above the diagonal. Float64, the whole T x T matrix (a reference)."""
    qkv = np.asarray(qkv, dtype=np.float64)
    n, T, c3 = qkv.shape
    d = c3 // 3
    dh = d // heads
    q, k, v = (qkv[:, :, i * d:(i + 1) * d].reshape(n, T, heads, dh).transpose(0, 2, 1, 3)
               for i in range(3))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)  # (n, H, T, T)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=3, keepdims=True))
    p /= p.sum(axis=3, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(n, T, d)


def standardize(x, ckpt):
    """Rows as tessera reads them, standardized with the checkpoint's input_mean and
    input_std as tessera does."""
    return _data.standardize(np.asarray(x).reshape(len(x), -1), ckpt.input_mean, ckpt.input_std)


def evaluate(ckpt, test):
    """(accuracy, loss, predictions) of ckpt on a Dataset, as `tessera eval` computes them
    (mean softmax cross-entropy; the first of tied maxima is the prediction). A language model
    (an lmhead last): test.y is (n, T), the next token at each position; the loss and accuracy
    are averaged over every token, the predictions (n, T)."""
    logits = forward(ckpt, standardize(test.x, ckpt)).astype(np.float64)
    y = np.asarray(test.y, dtype=np.int64).reshape(-1)
    logits = logits.reshape(len(y), -1)
    m = logits.max(axis=1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    pred = logits.argmax(axis=1)
    loss = float(-logp[np.arange(len(y)), y].mean())
    return float((pred == y).mean()), loss, pred.reshape(np.shape(test.y))
