"""tessera checkpoints to and from PyTorch (torch.nn modules and torch.optim state).

to_torch(ckpt) builds a TesseraNet, a torch.nn.Module that runs the checkpoint's model (a graph
of layers; a stack is the common case) with its weights; to_torch_optimizer(ckpt, net) the
torch optimizer with tessera's optimizer state. from_torch(module, path, ...) writes a
tessera checkpoint from a TesseraNet or an nn.Sequential of Linear, ReLU, Conv2d, MaxPool2d,
AvgPool2d, Flatten and Dropout, and optionally a torch optimizer's state.

Layouts (tessera -> torch):
  dense   layers.N.dense.weight (in, out)           -> Linear.weight (out, in): transposed
  conv    layers.N.conv.weight (kh kw c_in, c_out)  -> Conv2d.weight (c_out, c_in, kh, kw);
          tessera's rows are ordered (ky, kx, ci)
  biases  layers.N.*.bias (out,)                    -> .bias (out,), as they are
  inputs  a sample is h w c values (channels last)  -> (c, h, w) (channels first)
tessera flattens a spatial activation in (h, w, c) order, torch in (c, h, w) order: the rows
of a dense layer that reads a flattened (or, without a flatten layer, a spatial) c > 1 tensor
are permuted accordingly, and so are its optimizer state tensors. Every conversion only moves
float32 values: read_checkpoint -> to_torch -> from_torch gives back every tensor bitwise.

TesseraNet's input: an (n, c, h, w) float32 tensor (or (n, c h w) in torch's flattening
order), standardized as tessera standardizes: torch_inputs() turns rows as tessera reads them
(tessera.data.load) into that, with the checkpoint's input_mean and input_std. Its output:
(n, classes) logits (tessera's loss is softmax cross-entropy on them).
"""
import time

import numpy as np
import torch
from torch import nn

from . import checkpoint as _ckpt
from . import data as _data
from . import gpt as _gpt
from . import model as _model
from .gpt import GPT

__all__ = ["Add", "Concat", "GPT", "TesseraNet", "to_torch", "load_state_dict",
           "to_torch_optimizer", "from_torch", "torch_inputs", "graph_from_sequential", "VERSION"]

VERSION = "0.1.0"  # meson.build's project version, written as tessera_version by from_torch

# tessera's defaults (tsr_net_opts_init, tessera train --help)
DEFAULT_HYPER = {"sgd": {"lr": 0.01, "momentum": 0.9, "weight_decay": 0.0, "beta1": 0.9,
                         "beta2": 0.999, "eps": 1e-8},
                 "adam": {"lr": 0.001, "momentum": 0.9, "weight_decay": 0.0, "beta1": 0.9,
                          "beta2": 0.999, "eps": 1e-8}}
DEFAULT_HYPER["adamw"] = dict(DEFAULT_HYPER["adam"], weight_decay=0.01)  # src/optim/adamw.c


class Add(nn.Module):
    """tessera's add layer: the element-wise sum of its inputs, in their order."""

    def forward(self, *xs):
        y = xs[0]
        for x in xs[1:]:
            y = y + x
        return y


class Concat(nn.Module):
    """tessera's concat layer: its inputs joined along channels (dim 1)."""

    def forward(self, *xs):
        return torch.cat(xs, dim=1)


class _Reorder(nn.Module):
    """Puts the features of a flattened input in another order (an add of inputs that tessera
    and torch flatten differently)."""

    def __init__(self, index):
        super().__init__()
        self.register_buffer("index", torch.as_tensor(np.asarray(index, dtype=np.int64)))

    def forward(self, x):
        return x[:, self.index]


# ---- feature orders ----

def _flatten_perm(shape, perm):
    """The order in which torch sees the features of an activation of shape (c, h, w) once
    flattened, as tessera indices: perm[i] is the tessera feature at torch position i; None
    when the two agree. perm: the activation's own order (only 1 x 1 activations have one)."""
    c, h, w = shape
    if h * w == 1:
        return perm
    if c == 1:
        return None
    return np.arange(c * h * w).reshape(h, w, c).transpose(2, 0, 1).reshape(-1)


def _identity(perm, n):
    return np.arange(n) if perm is None else perm


def _key(name, taken):
    """The ModuleDict key of a layer: its name with '.' (which torch refuses) as '_', and not
    one of ModuleDict's own attributes (keys, train, ...)."""
    k = name.replace(".", "_") or "layer"
    while k in taken or hasattr(taken, k):
        k += "_"
    return k


# ---- modules for layers and back ----

def _module_for(l):
    """A fresh torch module for layer l (shapes known), torch's default initialization."""
    c = l.in_shapes[0][0]
    if l.kind == "dense":
        c, h, w = l.in_shapes[0]
        return nn.Linear(c * h * w, l.units)
    if l.kind == "conv":
        kh, kw, sh, sw, ph, pw = l.window()
        return nn.Conv2d(c, l.units, (kh, kw), stride=(sh, sw), padding=(ph, pw))
    if l.kind == "maxpool":
        kh, kw, sh, sw, ph, pw = l.window()
        return nn.MaxPool2d((kh, kw), stride=(sh, sw), padding=(ph, pw))
    if l.kind == "avgpool":
        kh, kw, sh, sw, ph, pw = l.window()
        return nn.AvgPool2d((kh, kw), stride=(sh, sw), padding=(ph, pw))
    if l.kind == "globalavgpool":
        return nn.AdaptiveAvgPool2d(1)
    if l.kind == "batchnorm":
        _, h, w = l.in_shapes[0]
        bn = nn.BatchNorm2d if h * w > 1 else nn.BatchNorm1d
        return bn(c, eps=float(l.eps or 1e-5), momentum=float(l.momentum or 0.1))
    if l.kind == "relu":
        return nn.ReLU()
    if l.kind == "flatten":
        return nn.Flatten()
    if l.kind == "dropout":
        return nn.Dropout(float(l.rate))
    if l.kind == "add":
        return Add()
    return Concat()


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _layer_for(m, name):
    """The tessera Layer of a torch module, or a ValueError saying what tessera lacks."""
    def refuse(why):
        return ValueError("%s (%s): %s" % (name, type(m).__name__, why))
    if isinstance(m, nn.Linear):
        if m.bias is None:
            raise refuse("tessera's dense layers have a bias; use bias=True")
        return _model.Layer(name, "dense", units=m.out_features)
    if isinstance(m, nn.Conv2d):
        if m.groups != 1 or _pair(m.dilation) != (1, 1) or m.padding_mode != "zeros":
            raise refuse("tessera convolves with groups 1, dilation 1 and zero padding")
        if m.bias is None:
            raise refuse("tessera's conv layers have a bias; use bias=True")
        kh, kw = _pair(m.kernel_size)
        pad = m.padding
        if pad == "valid":
            pad = (0, 0)
        elif pad == "same":
            if kh % 2 == 0 or kw % 2 == 0 or _pair(m.stride) != (1, 1):
                raise refuse("padding='same' maps to tessera only for odd kernels, stride 1")
            pad = ((kh - 1) // 2, (kw - 1) // 2)
        ph, pw = _pair(pad)
        sh, sw = _pair(m.stride)
        return _model.Layer(name, "conv", units=m.out_channels, kernel_h=kh, kernel_w=kw,
                            stride_h=sh if (sh, sw) != (1, 1) else 0,
                            stride_w=sw if (sh, sw) != (1, 1) else 0, pad_h=ph, pad_w=pw)
    if isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
        kind = "maxpool" if isinstance(m, nn.MaxPool2d) else "avgpool"
        kh, kw = _pair(m.kernel_size)
        ph, pw = _pair(m.padding)
        if m.ceil_mode or 2 * ph > kh or 2 * pw > kw:
            raise refuse("tessera pools with padding of at most half the kernel, rounding the "
                         "output size down")
        if kind == "avgpool" and not m.count_include_pad and (ph or pw):
            raise refuse("tessera's mean pooling counts the padding (count_include_pad=True)")
        if kind == "maxpool" and _pair(m.dilation) != (1, 1):
            raise refuse("tessera pools with dilation 1")
        if kind == "avgpool" and m.divisor_override:
            raise refuse("tessera averages over the whole window (no divisor_override)")
        sh, sw = _pair(m.stride if m.stride is not None else m.kernel_size)
        stride = {} if (sh, sw) == (kh, kw) else {"stride_h": sh, "stride_w": sw}
        return _model.Layer(name, kind, kernel_h=kh, kernel_w=kw, pad_h=ph, pad_w=pw, **stride)
    if isinstance(m, nn.AdaptiveAvgPool2d):
        if _pair(m.output_size) != (1, 1):
            raise refuse("tessera's global mean pooling gives 1 x 1 (output_size=1)")
        return _model.Layer(name, "globalavgpool")
    if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        if not m.affine or not m.track_running_stats or m.momentum is None:
            raise refuse("tessera's batchnorm has a scale and shift and running statistics "
                         "with a momentum (affine=True, track_running_stats=True)")
        fields = {}
        if abs(m.momentum - 0.1) > 1e-9:
            fields["momentum"] = float(m.momentum)
        if abs(m.eps - 1e-5) > 1e-12:
            fields["eps"] = float(m.eps)
        return _model.Layer(name, "batchnorm", **fields)
    if isinstance(m, nn.ReLU):
        return _model.Layer(name, "relu")
    if isinstance(m, nn.Flatten):
        if m.start_dim != 1 or m.end_dim != -1:
            raise refuse("tessera flattens a whole sample (start_dim 1, end_dim -1)")
        return _model.Layer(name, "flatten")
    if isinstance(m, nn.Dropout):
        return _model.Layer(name, "dropout", rate=float(m.p))
    if isinstance(m, Add):
        return _model.Layer(name, "add")
    if isinstance(m, Concat):
        return _model.Layer(name, "concat")
    if isinstance(m, (nn.Softmax, nn.LogSoftmax)):
        raise refuse("tessera's last layer gives logits (its loss applies the softmax): "
                     "drop the softmax")
    raise refuse("not a layer tessera has; supported: Linear, ReLU, Conv2d, MaxPool2d, "
                 "AvgPool2d, AdaptiveAvgPool2d(1), BatchNorm1d/2d, Flatten, Dropout, and "
                 "tessera.pytorch's Add and Concat")


def _flat_modules(seq):
    out = []
    for m in seq:
        if isinstance(m, nn.Sequential):
            out += _flat_modules(m)
        elif not isinstance(m, nn.Identity):
            out.append(m)
    return out


def graph_from_sequential(seq, input_shape=None):
    """(Graph, {layer name: module}) of an nn.Sequential (nested ones flattened, Identity
    dropped), its layers named layer1, layer2, ... as tessera names them. input_shape:
    (c, h, w); by default (for a network that starts with Linear) tessera's geometry of its
    in_features (a square one-channel image for a square count)."""
    mods = _flat_modules(seq)
    if not mods:
        raise ValueError("an empty nn.Sequential has no layers")
    if input_shape is None:
        if not isinstance(mods[0], nn.Linear):
            raise ValueError("give input_shape=(c, h, w): the network starts with %s"
                             % type(mods[0]).__name__)
        input_shape = _model.default_input_shape(mods[0].in_features)
    layers, by_name = [], {}
    for i, m in enumerate(mods):
        name = "layer%d" % (i + 1)
        layers.append(_layer_for(m, name))
        by_name[name] = m
    return _model.Graph(layers, input_shape, "<nn.Sequential>"), by_name


def _check_module(l, m):
    """The module of layer l has the shapes l has."""
    c, h, w = l.in_shapes[0]
    if l.kind == "dense":
        if (m.in_features, m.out_features) != (c * h * w, l.units):
            raise ValueError("%s: Linear(%d, %d), but the layer takes %d features (%dx%dx%d, "
                             "h x w x c) to %d" % (l.name, m.in_features, m.out_features,
                                                    c * h * w, h, w, c, l.units))
    elif l.kind == "conv":
        if (m.in_channels, m.out_channels) != (c, l.units):
            raise ValueError("%s: Conv2d(%d, %d, ...), but the layer takes %d channels to %d"
                             % (l.name, m.in_channels, m.out_channels, c, l.units))
    elif l.kind == "batchnorm":
        if m.num_features != c:
            raise ValueError("%s: %s(%d), but the layer normalizes %d channels"
                             % (l.name, type(m).__name__, m.num_features, c))


# ---- the network ----

class TesseraNet(nn.Module):
    """A tessera model as a torch.nn.Module: its layers as torch modules in `self.layers` (an
    nn.ModuleDict keyed by layer name, '.' replaced by '_'), run in model order, each on the
    outputs of the layers it names (graph.layers[k].inputs).

    graph: a tessera.model.Graph. modules: {layer name: module} to use (from_modules, to keep
    a torch model's own modules); the others are made fresh with torch's initialization.
    """

    def __init__(self, graph, modules=None):
        super().__init__()
        self.graph = graph
        self.input_shape = graph.input_shape
        self.layers = nn.ModuleDict()
        self.reorders = nn.ModuleDict()
        self.keys = {}
        self.in_perm = {}  # dense, conv: the tessera index of each torch input feature/channel
        perms = {}
        for l in graph.layers:
            key = _key(l.name, self.layers)
            self.keys[l.name] = key
            m = (modules or {}).get(l.name)
            if m is None:
                m = _module_for(l)
            else:
                _check_module(l, m)
            self.layers[key] = m
            ins = [perms[n] for n in l.inputs] if l.inputs else [None]
            shape = l.in_shapes[0]
            out = ins[0]
            if l.kind == "dense":
                self.in_perm[l.name] = _flatten_perm(shape, ins[0])
                out = None
            elif l.kind == "conv":
                self.in_perm[l.name] = ins[0]
                out = None
            elif l.kind == "batchnorm":
                self.in_perm[l.name] = ins[0]  # per channel: the features keep their order
            elif l.kind == "flatten":
                out = _flatten_perm(shape, ins[0])
            elif l.kind == "add":
                n = shape[0] * shape[1] * shape[2]
                for k, p in enumerate(ins[1:], 1):
                    if not _same(p, ins[0]):
                        inverse = np.argsort(_identity(p, n))
                        self.reorders["%s_%d" % (key, k)] = _Reorder(
                            inverse[_identity(ins[0], n)])
            elif l.kind == "concat":
                if any(p is not None for p in ins):
                    parts, offset = [], 0
                    for p, s in zip(ins, l.in_shapes):
                        n = s[0] * s[1] * s[2]
                        parts.append(_identity(p, n) + offset)
                        offset += n
                    out = np.concatenate(parts)
            perms[l.name] = out
        self._last_use = {}
        for i, l in enumerate(graph.layers):
            for n in l.inputs:
                self._last_use[n] = i

    @classmethod
    def from_modules(cls, input_shape, entries):
        """A graph network from torch modules: entries is a list of (name, module) or (name,
        module, inputs) with inputs a layer name or a list of them (default: the previous
        entry; the first takes the network's input). Modules: those graph_from_sequential
        takes, Add and Concat for merges. The modules are kept, weights and all."""
        layers, mods = [], {}
        for e in entries:
            name, m = e[0], e[1]
            inputs = e[2] if len(e) > 2 else None
            l = _layer_for(m, name)
            l.given = [inputs] if isinstance(inputs, str) else (list(inputs) if inputs else None)
            layers.append(l)
            mods[name] = m
        return cls(_model.Graph(layers, input_shape, "<TesseraNet>"), mods)

    def forward(self, x):
        c, h, w = self.input_shape
        if x.dim() == 2:
            x = x.reshape(x.shape[0], c, h, w)
        values = {}
        for i, l in enumerate(self.graph.layers):
            key = self.keys[l.name]
            m = self.layers[key]
            ins = [values[n] for n in l.inputs] if l.inputs else [x]
            if l.kind == "dense":
                y = m(ins[0].flatten(1))
            elif l.kind in ("conv", "maxpool", "avgpool", "globalavgpool"):
                a = ins[0]
                y = m(a[:, :, None, None] if a.dim() == 2 else a)
            elif l.kind == "batchnorm" and isinstance(m, nn.BatchNorm1d):
                y = m(ins[0].flatten(1))
            elif l.kind in _model.MERGE_TYPES:
                if l.shape[1] * l.shape[2] == 1 or any(a.dim() == 2 for a in ins):
                    ins = [a.flatten(1) for a in ins]
                ins = [self.reorders[r](a) if (r := "%s_%d" % (key, k)) in self.reorders else a
                       for k, a in enumerate(ins)]
                y = m(*ins)
            else:
                y = m(ins[0])
            values[l.name] = y
            for n in l.inputs:
                if self._last_use[n] == i:
                    del values[n]
        return values[self.graph.output.name]

    # ---- parameters in tessera's layouts ----
    def _convert(self, l, a, to_torch):
        """A parameter-shaped array of layer l (weight or its state) in the other layout."""
        perm = self.in_perm.get(l.name)
        if l.kind == "batchnorm":  # (C) both; the features in the order of the layer's input
            a = np.asarray(a, dtype=np.float32).reshape(-1)
            if perm is None:
                return a.copy()
            if to_torch:
                return np.ascontiguousarray(a[perm])
            out = np.empty_like(a)
            out[perm] = a
            return out
        if a.ndim == 1:
            return np.array(a, dtype=np.float32)
        if l.kind == "dense":
            if to_torch:
                return np.ascontiguousarray((a if perm is None else a[perm]).T)
            out = np.ascontiguousarray(a.T)
            if perm is not None:
                out = np.empty_like(out)
                out[perm] = a.T
            return out
        kh, kw, _, _, _, _ = l.window()
        cin = l.in_shapes[0][0]
        if to_torch:
            t = a.reshape(kh, kw, cin, l.units).transpose(3, 2, 0, 1)
            return np.ascontiguousarray(t if perm is None else t[:, perm])
        if perm is not None:
            b = np.empty_like(a)
            b[:, perm] = a
            a = b
        return np.ascontiguousarray(a.transpose(2, 3, 1, 0).reshape(kh * kw * cin, l.units))

    def params(self):
        """[(layer, torch weight, torch bias, tessera weight name, tessera bias name)]."""
        out = []
        for l in self.graph.layers:
            if l.kind in _model.PARAM_TYPES:
                m = self.layers[self.keys[l.name]]
                out.append((l, m.weight, m.bias) + _model.param_names(l))
        return out

    def param_list(self):
        """[(layer, torch parameter, tessera name, decay)] in tessera's order (as GPT's)."""
        return [(l, p, name, decay) for l, w, b, wn, bn in self.params()
                for p, name, decay in zip((w, b), (wn, bn), _gpt.DECAY[l.kind])]

    def convert(self, l, a, to_torch):
        """A parameter-shaped array of layer l (weight or its state) in the other layout."""
        return self._convert(l, a, to_torch)

    def param_groups(self, weight_decay):
        """Two torch optimizer groups as tessera decays: the weights with weight_decay, the
        biases and batchnorm parameters with 0."""
        ps = self.param_list()
        return [{"params": [p for _, p, _, d in ps if d], "weight_decay": weight_decay},
                {"params": [p for _, p, _, d in ps if not d], "weight_decay": 0.0}]

    def load_tessera(self, tensors):
        """Sets the weights from tessera tensors (name -> array, tessera's layouts)."""
        with torch.no_grad():
            for l, w, b, wn, bn in self.params():
                for p, name in ((w, wn), (b, bn)):
                    if name not in tensors:
                        raise KeyError("no tensor %s for layer %s" % (name, l.name))
                    a = self._convert(l, tensors[name], True)
                    if tuple(a.shape) != tuple(p.shape):
                        raise ValueError("%s: shape %s, the torch parameter is %s"
                                         % (name, a.shape, tuple(p.shape)))
                    p.copy_(torch.from_numpy(a))
            for l, m, names in self.buffers():
                for buf, name in zip(("running_mean", "running_var", "num_batches_tracked"),
                                     names):
                    if name not in tensors:
                        raise KeyError("no tensor %s for layer %s" % (name, l.name))
                    t = getattr(m, buf)
                    a = tensors[name]
                    a = (np.asarray(a).reshape(()) if buf == "num_batches_tracked"
                         else self._convert(l, a, True))
                    t.copy_(torch.from_numpy(np.array(a)).to(t.dtype))

    def buffers(self):
        """[(layer, torch module, tessera buffer names)] of the layers with buffers."""
        return [(l, self.layers[self.keys[l.name]], _model.buffer_names(l))
                for l in self.graph.layers if _model.buffer_names(l)]

    def tessera_tensors(self):
        """{name: array}: the parameters in tessera's layouts and names, in model order."""
        out = {}
        for l, w, b, wn, bn in self.params():
            out[wn] = self._convert(l, w.detach().cpu().numpy(), False)
            out[bn] = self._convert(l, b.detach().cpu().numpy(), False)
            for bl, m, names in self.buffers():
                if bl is l:
                    out[names[0]] = self._convert(l, m.running_mean.cpu().numpy(), False)
                    out[names[1]] = self._convert(l, m.running_var.cpu().numpy(), False)
                    # an F32 scalar, as tessera writes it (exact up to 2^24 steps)
                    out[names[2]] = np.array(float(m.num_batches_tracked.item()),
                                             dtype=np.float32)
        return out


def _same(p, q):
    if p is None or q is None:
        return p is None and q is None
    return np.array_equal(p, q)


# ---- checkpoints to torch ----

def to_torch(ckpt):
    """A TesseraNet running a checkpoint's model (read_checkpoint's Checkpoint, or a path)
    with its weights, in evaluation mode (dropout off, as `tessera eval`); a GPT
    (tessera.gpt) for a language model (an lmhead last: gpt:L,D,H,T). Feed it
    torch_inputs(x, ckpt)."""
    if isinstance(ckpt, str):
        ckpt = _ckpt.read_checkpoint(ckpt)
    net = GPT(ckpt.graph) if ckpt.graph.per_position else TesseraNet(ckpt.graph)
    net.load_tessera(ckpt.tensors)
    return net.eval()


def load_state_dict(ckpt, module):
    """Loads a checkpoint's weights into a torch module of the user's own making (an
    nn.Sequential of Conv2d, ReLU, MaxPool2d, Flatten, Linear, BatchNorm2d, ..., or any module
    whose state_dict lists the same tensors in the same order), and returns the module.

    Matched by order and shape: the checkpoint's tensors as to_torch lays them out for torch
    (weights transposed, conv filters (out, in, kh, kw), a dense layer after a flatten
    permuted to torch's (c, h, w) order; batchnorm's running statistics and step count), in
    model order, against module.state_dict()'s entries in its order. Refuses, with a
    ValueError naming the first entry that differs (both names and shapes), when a shape or
    the number of tensors differs, and leaves the module untouched then. Feed the module
    torch_inputs(x, ckpt): its predictions are to_torch(ckpt)'s, and so `tessera eval`'s."""
    if isinstance(ckpt, str):
        ckpt = _ckpt.read_checkpoint(ckpt)
    net = to_torch(ckpt)
    if isinstance(net, TesseraNet) and len(net.reorders):
        raise ValueError("%s: the model adds or concatenates activations flattened in different "
                         "orders (%s); only to_torch's TesseraNet runs it"
                         % (ckpt.path, ", ".join(net.reorders.keys())))
    src = [(k, v) for k, v in net.state_dict().items() if not k.startswith("reorders.")]
    dst = list(module.state_dict().items())
    for i in range(max(len(src), len(dst))):
        a = src[i] if i < len(src) else None
        b = dst[i] if i < len(dst) else None
        if a is None or b is None or tuple(a[1].shape) != tuple(b[1].shape):
            say = lambda e, who: ("%s's %s %s" % (who, e[0], tuple(e[1].shape)) if e
                                  else "nothing in the %s" % who)
            raise ValueError("%s: tensor %d: %s against %s (the checkpoint has %d tensors, "
                             "the module %d; model %s)"
                             % (ckpt.path, i, say(a, "checkpoint"), say(b, "module"), len(src),
                                len(dst), ckpt.metadata.get("model", "?")))
    module.load_state_dict({k: v.to(dtype=t.dtype) for (_, v), (k, t) in zip(src, dst)})
    return module


def torch_inputs(x, ckpt_or_mean, std=None, shape=None, flat=False):
    """Samples for a TesseraNet: x, rows of h w c features as tessera reads them (e.g.
    tessera.data.load(folder)[1].x: pixels / 255), standardized with the checkpoint's
    input_mean and input_std exactly as tessera does, as an (n, c, h, w) float32 tensor; with
    flat=True as (n, c h w), flattened in torch's order (for a torch model that starts with
    Linear). Either torch_inputs(x, ckpt) or torch_inputs(x, mean, std, shape=(c, h, w)). A
    language model's checkpoint (a GPT): x's rows of T token ids as an (n, T) long tensor."""
    if isinstance(ckpt_or_mean, _ckpt.Checkpoint) and ckpt_or_mean.graph.per_position:
        return torch.from_numpy(np.asarray(x).reshape(len(x), -1).astype(np.int64))
    if isinstance(ckpt_or_mean, _ckpt.Checkpoint):
        mean, std, shape = ckpt_or_mean.input_mean, ckpt_or_mean.input_std, ckpt_or_mean.input_shape
    else:
        mean = ckpt_or_mean
        if std is None or shape is None:
            raise ValueError("torch_inputs(x, mean, std, shape=(c, h, w))")
    z = _data.standardize(np.asarray(x, dtype=np.float32).reshape(len(x), -1), mean, std)
    t = torch.from_numpy(_data.to_nchw(z, shape))
    return t.flatten(1) if flat else t


_TORCH_OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}


def to_torch_optimizer(ckpt, net):
    """The torch optimizer of a checkpoint for net (to_torch(ckpt)): torch.optim.SGD (with
    momentum, nesterov when the hyper-parameters say so), Adam or AdamW, with the checkpoint's
    lr, momentum, weight_decay, betas and eps, and its state: momentum_buffer for SGD,
    exp_avg, exp_avg_sq and step (optimizer_steps) for Adam and AdamW. With a weight decay
    (and always for a GPT) the parameters come in net.param_groups' two groups: the weights
    (embedding tables, dense and conv weights) decayed, the biases and norms not, as tessera
    decays them. The learning-rate schedule is not carried: lr is the checkpoint's base rate."""
    name, hp = ckpt.optimizer, ckpt.optimizer_hyper
    if name not in _TORCH_OPTIMIZERS:
        raise ValueError("%s: optimizer %s has no torch counterpart here (supported: %s)"
                         % (ckpt.path, name, ", ".join(_TORCH_OPTIMIZERS)))
    if isinstance(net, GPT) or hp["weight_decay"]:
        params = net.param_groups(hp["weight_decay"])  # tessera decays weights only
    else:
        params = [p for _, p, _, _ in net.param_list()]
    if name == "sgd":
        opt = torch.optim.SGD(params, lr=hp["lr"], momentum=hp["momentum"],
                              weight_decay=hp["weight_decay"],
                              nesterov=bool(hp.get("nesterov", 0.0)))
    else:
        cls = getattr(torch.optim, _TORCH_OPTIMIZERS[name])
        opt = cls(params, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                  weight_decay=hp["weight_decay"])
    states = ckpt.state_names()
    steps = ckpt.optimizer_steps
    if steps == 0 or not states:
        return opt  # nothing accumulated: torch starts its state at the first step as tessera
    for l, p, pname, _ in net.param_list():
        s = {}
        for st in states:
            a = net.convert(l, ckpt.tensors["optimizer.%s.%s" % (pname, st)], True)
            s[st] = torch.from_numpy(a.reshape(tuple(p.shape)))
        if name != "sgd":
            s["step"] = torch.tensor(float(steps))
        opt.state[p] = s
    return opt


# ---- torch to checkpoints ----

def _optimizer_of(opt, name_hint=None):
    """(name, hyper, steps or None) of a torch optimizer, refusing what tessera lacks."""
    groups = opt.param_groups
    g = dict(groups[0])
    keys = ("lr", "momentum", "betas", "eps", "nesterov", "dampening")
    decays = {h["weight_decay"] for h in groups} - {0.0}
    if any(any(h.get(k) != g.get(k) for k in keys) for h in groups[1:]) or len(decays) > 1:
        raise ValueError("tessera has one set of hyper-parameters: the optimizer's parameter "
                         "groups differ (only a group of weight_decay 0 for what tessera does "
                         "not decay may)")
    g["weight_decay"] = decays.pop() if decays else 0.0
    if type(opt) is torch.optim.SGD:
        if g.get("dampening", 0) or g.get("maximize"):
            raise ValueError("tessera's SGD has no dampening and minimizes")
        hyper = dict(DEFAULT_HYPER["sgd"], lr=g["lr"], momentum=g["momentum"],
                     weight_decay=g["weight_decay"])
        if g.get("nesterov"):
            hyper["nesterov"] = 1.0
        return "sgd", hyper, None
    for name, cls in (("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)):
        if type(opt) is cls:
            if g.get("amsgrad") or g.get("maximize"):
                raise ValueError("tessera's %s has no amsgrad and minimizes" % name)
            hyper = dict(DEFAULT_HYPER[name], lr=g["lr"], beta1=g["betas"][0],
                         beta2=g["betas"][1], eps=g["eps"], weight_decay=g["weight_decay"])
            steps = {int(s["step"]) for s in opt.state.values() if "step" in s}
            if len(steps) > 1:
                raise ValueError("the parameters have taken different numbers of steps %s; "
                                 "tessera counts one for all" % sorted(steps))
            return name, hyper, steps.pop() if steps else 0
    raise ValueError("optimizer %s: tessera has sgd, adam and adamw" % type(opt).__name__)


def from_torch(module, path, *, input_shape=None, dataset=None, input_mean=None,
               input_std=None, data=None, optimizer=None, optimizer_steps=None, like=None,
               seed=1, epochs=0, lr_schedule="cosine", standardize=None):
    """Writes module as a tessera checkpoint at path that `tessera eval --checkpoint` and
    `tessera train --resume` load; returns the Checkpoint written.

    module: a TesseraNet, or an nn.Sequential of Linear, ReLU, Conv2d, MaxPool2d, AvgPool2d,
        Flatten, Dropout (the last a Linear: the class scores). input_shape: (c, h, w) of a
        sample (default: the dataset's, or a Linear's in_features as tessera shapes them).
    The inputs' standardization, which tessera applies before the first layer (x - mean) / std:
        dataset: the training set (tessera.data.Dataset, after any --train-limit) that
            tessera will train on: its mean, std and fingerprint (`train --resume` refuses
            other data), computed as tessera does; or
            standardize: its --standardize (column, scalar or none; default column for
            CSV data, scalar for images, as tessera train); or
        input_mean, input_std (and data: the fingerprint string) given directly: scalars,
            or per-column arrays (standardize="column"); or
        like: a Checkpoint whose training state is copied (data, standardization, epoch,
            seeds, schedule; its optimizer's name, hyper-parameters and state when no
            optimizer is given and its tensors fit).
    optimizer: a torch.optim SGD, Adam or AdamW whose hyper-parameters and state are written
        (state missing for a parameter: zeros, as tessera starts), or a name (sgd, adam,
        adamw) for tessera's defaults and zero state; default sgd (tessera's default).
    Without like: a fresh run (epoch 0, step 0), seed `seed`, lr_schedule and epochs as
    given.
    """
    if isinstance(module, (TesseraNet, GPT)):
        net = module
    elif isinstance(module, nn.Sequential):
        if input_shape is None and dataset is not None:
            input_shape = dataset.shape
        graph, mods = graph_from_sequential(module, input_shape)
        net = TesseraNet(graph, mods)
    else:
        raise TypeError("from_torch takes a TesseraNet, a GPT or an nn.Sequential, not %s"
                        % type(module).__name__)
    graph = net.graph
    if input_shape is not None and tuple(input_shape) != graph.input_shape:
        raise ValueError("input_shape %s, but the network takes %s" % (tuple(input_shape),
                                                                        graph.input_shape))
    base = dict(like.metadata) if like is not None else {}
    kind = base.get("input_standardize", "scalar")
    if dataset is not None:
        kind = standardize or _data.default_standardize(dataset)
        data, input_mean, input_std = _data.describe(dataset, kind)
    elif input_mean is not None:
        kind = standardize or ("column" if np.asarray(input_mean).size > 1 else "scalar")
    elif isinstance(net, GPT) and "input_mean" not in base:
        kind, input_mean, input_std = "none", 0.0, 1.0  # token ids go in as they are
    if input_mean is None and "input_mean" not in base:
        raise ValueError("from_torch needs the inputs' standardization: give dataset= (the "
                         "training set), like= (a checkpoint), or input_mean= and input_std=")
    meta = {
        "tessera_version": base.get("tessera_version", VERSION),
        "model": graph.describe(),
        "model_ini": graph.to_ini(),
        "inputs": graph.inputs,
        "classes": graph.classes,
        "input_shape": "%d %d %d" % graph.input_shape,
        "input_mean": _floats(input_mean) if input_mean is not None else base["input_mean"],
        "input_std": _floats(input_std) if input_std is not None else base["input_std"],
        "data": data if data is not None else base.get("data", ""),
        "net_seed": base.get("net_seed", seed),
        "init": base.get("init", "pytorch"),
        "epoch": base.get("epoch", 0),
        "step_in_epoch": base.get("step_in_epoch", 0),
        "epochs": base.get("epochs", epochs),
        "seed": base.get("seed", seed),
        "lr_schedule": base.get("lr_schedule", lr_schedule),
        "sync": base.get("sync", "none"),
        "ranks": base.get("ranks", 1),
        "dropout_calls": base.get("dropout_calls", ""),
    }
    # The like checkpoint's run settings, so that a resume of the file goes on as its run would;
    # where it came from (its commit, date and command), or this package and now.
    meta.update((k, base[k]) for k in _ckpt.SETTINGS if k in base)
    meta.update((k, base[k]) for k in _ckpt.PROVENANCE if k in base)
    if like is None:
        meta["tessera_commit"] = "python package %s" % VERSION
        meta["written"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if kind != "scalar":  # last, as tessera writes it; no key means scalar
        meta["input_standardize"] = kind
    # The optimizer: a torch one, a name, the like checkpoint's, or tessera's default.
    old = like.tensors if like is not None else {}
    torch_opt = None
    if optimizer is None and like is not None:
        name, hyper = like.optimizer, like.optimizer_hyper
        steps = like.optimizer_steps
    elif optimizer is None or isinstance(optimizer, str):
        name = optimizer or "sgd"
        if name not in DEFAULT_HYPER:
            raise ValueError("optimizer %s: tessera has sgd, adam and adamw" % name)
        hyper, steps, old = dict(DEFAULT_HYPER[name]), 0, {}
    else:
        torch_opt = optimizer
        name, hyper, steps = _optimizer_of(optimizer)
        old = {}
        if steps is None:
            steps = like.optimizer_steps if like is not None else 0
    if optimizer_steps is not None:
        steps = optimizer_steps
    states = _ckpt.OPTIMIZER_STATES[name]
    if name == "sgd" and not hyper.get("momentum"):
        states = ()
    base_lr = _ckpt.format_float(hyper["lr"])
    if optimizer is None:
        base_lr = base.get("base_lr", base_lr)
    meta.update(optimizer=name, optimizer_hyper=_ckpt.format_hyper(hyper),
                optimizer_steps=steps, base_lr=base_lr)
    # The tensors in tessera's order: each parameter, then its state.
    if torch_opt is not None:
        _check_decay(net, torch_opt)
    tensors = {}
    params = net.tessera_tensors()
    plist = net.param_list()
    for i, (l, p, pname, _) in enumerate(plist):
        tensors[pname] = params[pname]
        for st in states:
            key = "optimizer.%s.%s" % (pname, st)
            s = torch_opt.state.get(p, {}).get(st) if torch_opt is not None else None
            if s is not None:
                a = net.convert(l, s.detach().cpu().numpy(), False)
            elif key in old and old[key].shape == params[pname].shape:
                a = old[key]
            else:
                a = np.zeros_like(params[pname])
            tensors[key] = a
        if i + 1 == len(plist) or plist[i + 1][0] is not l:
            for bname in _model.buffer_names(l):  # after the layer's parameters, as tessera's
                tensors[bname] = params[bname]
    _ckpt.write_checkpoint(path, tensors, meta)
    return _ckpt.read_checkpoint(path)


def _check_decay(net, opt):
    """Refuses an optimizer whose groups of weight_decay 0 and the others do not split the
    parameters as tessera decays them (weights yes, biases and norms no)."""
    if len({g["weight_decay"] for g in opt.param_groups}) < 2:
        return
    decay = {id(p): (name, d) for _, p, name, d in net.param_list()}
    for g in opt.param_groups:
        for p in g["params"]:
            name, d = decay.get(id(p), (None, None))
            if name is not None and d != (g["weight_decay"] != 0.0):
                raise ValueError("%s is in a group of weight_decay %g, but tessera %s it; use "
                                 "net.param_groups(weight_decay)" % (
                                     name, g["weight_decay"], "decays" if d else "does not decay"))


def _floats(v):
    a = np.asarray(v, dtype=np.float32)
    return " ".join(_ckpt.format_float(x) for x in a.reshape(-1))
