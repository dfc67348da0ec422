"""tessera's language model (`--model gpt:L,D,H,T`) as a PyTorch module, and its weights to and
from tessera checkpoints.

GPT is GPT-2's pre-norm transformer with nanoGPT's module names, built from a tessera model
graph of the shape src/nn/model.c's add_gpt gives (gpt_config checks it and refuses anything
else, naming the layer):

  wte   nn.Embedding(V, D)     <- layers.<embed>.embedding.weight (V, D), as it is
  wpe   nn.Embedding(ctx, D)   <- layers.<embed>.embedding.position (ctx, D), as it is
  h[b]  ln_1   nn.LayerNorm(D, eps)   <- layers.<h<b>.ln1>.layernorm.weight, .bias (D,)
        attn.c_attn nn.Linear(D, 3D)  <- layers.<h<b>.qkv>.conv.weight (D, 3D) transposed, .bias
             causal softmax(q k^T / sqrt(D/H) + mask) v, q = columns 0..D-1 of c_attn's output,
             k = D..2D-1, v = 2D..3D-1, head j at columns j D/H .. (j + 1) D/H - 1 of each
        attn.c_proj nn.Linear(D, D)   <- layers.<h<b>.proj>.conv.weight transposed, .bias
        ln_2                          <- h<b>.ln2
        mlp.c_fc   nn.Linear(D, 4D)   <- h<b>.fc;  GELU(approximate='tanh')
        mlp.c_proj nn.Linear(4D, D)   <- h<b>.fc2
  ln_f  nn.LayerNorm(D, eps)   <- lnf
  lm_head nn.Linear(D, V, bias=False), its weight wte.weight (tied; tessera's lmhead has no
        tensor of its own)

A tessera tensor with one row is 1-D in a checkpoint (src/train/checkpoint.c's add_data): biases
and layer-norm parameters (C,), a one-row position table (D,). Input: (n, T) token ids (long,
or tessera's float rows of exact integers); output: (n, T, V) logits, the loss the
cross-entropy at every position averaged over the tokens, as tessera's.

Weight decay: tessera decays the parameters its layers mark so (embedding tables, conv
weights), not biases or layer-norm parameters; param_groups(weight_decay) gives torch
optimizers the same two groups.
"""
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from . import model as _model

__all__ = ["GPT", "gpt_config", "DECAY"]

#: Which parameters tessera decays (src/nn/*.c's layouts: weights yes, biases no; an embedding
#: both tables; layernorm and batchnorm none).
DECAY = {"dense": (True, False), "conv": (True, False), "batchnorm": (False, False),
         "embedding": (True, True), "layernorm": (False, False)}

_BLOCK = ("ln1", "qkv", "attn", "proj", "res1", "ln2", "fc", "gelu", "fc2", "res2")
_KINDS = ("layernorm", "conv", "attention", "conv", "add", "layernorm", "conv", "gelu", "conv",
          "add")


def gpt_config(graph):
    """(config, layers) of a tessera graph of add_gpt's shape: config {"layers", "width",
    "heads", "context", "vocab", "positions"}, layers {"embed": Layer, "blocks": [{"ln1": Layer,
    ...}], "lnf": Layer, "head": Layer}. Raises ModelError, naming the layer that differs."""
    ls = graph.layers
    path = graph.path

    def refuse(layer, why):
        return _model.ModelError("%s: [%s] %s; tessera.gpt takes the layers of gpt:L,D,H,T "
                                 "(src/nn/model.c)" % (path, layer.name, why))
    if len(ls) < 3 or (len(ls) - 3) % len(_BLOCK) or ls[0].kind != "embedding":
        raise _model.ModelError("%s: not a GPT of gpt:L,D,H,T's shape (an embedding, blocks of "
                                "%d layers, a layernorm and an lmhead)" % (path, len(_BLOCK)))
    embed = ls[0]
    d = embed.units
    blocks, stream = [], embed.name
    nb = (len(ls) - 3) // len(_BLOCK)
    heads = None
    for b in range(nb):
        block = dict(zip(_BLOCK, ls[1 + b * len(_BLOCK):1 + (b + 1) * len(_BLOCK)]))
        for key, kind in zip(_BLOCK, _KINDS):
            if block[key].kind != kind:
                raise refuse(block[key], "is %s where block %d's %s (%s) comes"
                             % (block[key].kind, b, key, kind))
        want = {"ln1": [stream], "qkv": [block["ln1"].name], "attn": [block["qkv"].name],
                "proj": [block["attn"].name], "res1": sorted([stream, block["proj"].name]),
                "ln2": [block["res1"].name], "fc": [block["ln2"].name],
                "gelu": [block["fc"].name], "fc2": [block["gelu"].name],
                "res2": sorted([block["res1"].name, block["fc2"].name])}
        for key, names in want.items():
            got = block[key].inputs if key not in ("res1", "res2") else sorted(block[key].inputs)
            if got != names:
                raise refuse(block[key], "reads %s, not %s" % (", ".join(got), ", ".join(names)))
        for key, units in (("qkv", 3 * d), ("proj", d), ("fc", 4 * d), ("fc2", d)):
            l = block[key]
            if l.window() != (1, 1, 1, 1, 0, 0) or l.units != units:
                raise refuse(l, "is %s, not a kernel-1 convolution of %d filters"
                             % (l.describe(), units))
        if heads is not None and block["attn"].heads != heads:
            raise refuse(block["attn"], "has %d heads, block 0 %d" % (block["attn"].heads, heads))
        heads = block["attn"].heads
        blocks.append(block)
        stream = block["res2"].name
    lnf, head = ls[-2], ls[-1]
    if lnf.kind != "layernorm" or lnf.inputs != [stream]:
        raise refuse(lnf, "is not a layernorm reading %s" % stream)
    if head.kind != "lmhead" or head.inputs != [lnf.name]:
        raise refuse(head, "is not an lmhead reading %s" % lnf.name)
    positions = graph.input_shape[1]
    config = {"layers": nb, "width": d, "heads": heads or 1, "context": embed.context,
              "vocab": embed.vocab, "positions": positions}
    return config, {"embed": embed, "blocks": blocks, "lnf": lnf, "head": head}


def _layernorm(l, d):
    return nn.LayerNorm(d, eps=float(l.eps or 1e-5))


class CausalSelfAttention(nn.Module):
    """c_attn (D -> 3D), causal attention of `heads` heads, c_proj (D -> D)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        dh = d // self.heads
        q, k, v = (a.view(n, t, self.heads, dh).transpose(1, 2) for a in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(n, t, d)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d, heads, layers):
        super().__init__()
        self.ln_1 = _layernorm(layers["ln1"], d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln_2 = _layernorm(layers["ln2"], d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """tessera's gpt:L,D,H,T in PyTorch (the module's doc has the layouts).

    graph: a tessera.model.Graph of add_gpt's shape (input shape (1, T, 1)); GPT.from_spec
    builds one from the shorthand. init: "pytorch" (torch's defaults: nn.Embedding normal(0,
    1), nn.Linear kaiming-uniform) or "gpt2" (tessera's --init gpt2: every weight normal(0,
    0.02), the residual projections 0.02 / sqrt(2L), biases 0, layer norms 1 and 0), drawn
    from torch's generator.
    """

    def __init__(self, graph, init="pytorch"):
        super().__init__()
        self.graph = graph
        self.config, self.tessera_layers = gpt_config(graph)
        c, lay = self.config, self.tessera_layers
        d = c["width"]
        self.wte = nn.Embedding(c["vocab"], d)
        self.wpe = nn.Embedding(c["context"], d) if c["context"] else None
        self.h = nn.ModuleList(Block(d, c["heads"], b) for b in lay["blocks"])
        self.ln_f = _layernorm(lay["lnf"], d)
        self.lm_head = nn.Linear(d, c["vocab"], bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as tessera's lmhead
        if init == "gpt2":
            self._init_gpt2()
        elif init != "pytorch":
            raise ValueError("init %r: use pytorch or gpt2" % init)

    @classmethod
    def from_spec(cls, text, vocab=256, init="pytorch"):
        """A fresh GPT of a shorthand ("gpt:2,32,4,16"; "gpt": 4,256,4,128) over `vocab`
        tokens, for sequences of the shorthand's T."""
        layers = _model.shorthand(text, vocab)
        t = layers[0].context
        return cls(_model.Graph(layers, (1, t, 1), text), init=init)

    def _init_gpt2(self):
        residual = 2 * self.config["layers"]  # the add layers: what tessera's init_std divides by
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif ".ln_" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                elif name.endswith("c_proj.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(residual))
                else:
                    p.normal_(0.0, 0.02)

    def forward(self, idx):
        """idx (n, T) token ids -> (n, T, V) logits."""
        idx = idx.long() if idx.dtype != torch.long else idx
        n, t = idx.shape
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(t, device=idx.device))[None]
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def loss(self, idx, targets):
        """tessera's loss: the cross-entropy at every position, averaged over the tokens."""
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.long().reshape(-1))

    # ---- parameters in tessera's names and layouts ----
    def param_list(self):
        """[(layer, torch parameter, tessera name, decay)] in tessera's order (model order, each
        layer's parameters in its type's order): what a checkpoint holds, and what tessera's
        optimizer decays."""
        lay = self.tessera_layers
        out = []

        def add(l, params):
            names = _model.param_names(l)
            for p, name, decay in zip(params, names, DECAY[l.kind]):
                out.append((l, p, name, decay))
        add(lay["embed"], [self.wte.weight] + ([self.wpe.weight] if self.wpe is not None else []))
        for b, blk in zip(lay["blocks"], self.h):
            add(b["ln1"], [blk.ln_1.weight, blk.ln_1.bias])
            add(b["qkv"], [blk.attn.c_attn.weight, blk.attn.c_attn.bias])
            add(b["proj"], [blk.attn.c_proj.weight, blk.attn.c_proj.bias])
            add(b["ln2"], [blk.ln_2.weight, blk.ln_2.bias])
            add(b["fc"], [blk.mlp.c_fc.weight, blk.mlp.c_fc.bias])
            add(b["fc2"], [blk.mlp.c_proj.weight, blk.mlp.c_proj.bias])
        add(lay["lnf"], [self.ln_f.weight, self.ln_f.bias])
        return out

    @staticmethod
    def convert(layer, a, to_torch):
        """A parameter-shaped array of layer (a weight, or its optimizer state) in the other
        layout: a conv weight (C_in, C_out) <-> nn.Linear's (C_out, C_in); the rest keep their
        values, a one-row tessera tensor 1-D."""
        a = np.asarray(a, dtype=np.float32)
        if layer.kind == "conv" and a.ndim == 2:
            return np.ascontiguousarray(a.T)
        if not to_torch and a.ndim == 2 and a.shape[0] == 1:
            return np.ascontiguousarray(a.reshape(-1))
        return np.array(a, dtype=np.float32)

    def load_tessera(self, tensors):
        """Sets the weights from tessera tensors (name -> array, tessera's layouts)."""
        with torch.no_grad():
            for l, p, name, _ in self.param_list():
                if name not in tensors:
                    raise KeyError("no tensor %s for layer %s" % (name, l.name))
                a = self.convert(l, tensors[name], True)
                if a.size != p.numel():
                    raise ValueError("%s: shape %s, the torch parameter is %s"
                                     % (name, a.shape, tuple(p.shape)))
                p.copy_(torch.from_numpy(a.reshape(tuple(p.shape))))
        return self

    def tessera_tensors(self):
        """{name: array}: the parameters in tessera's layouts and names, in tessera's order."""
        return {name: self.convert(l, p.detach().cpu().numpy(), False)
                for l, p, name, _ in self.param_list()}

    def param_groups(self, weight_decay):
        """Two torch optimizer groups as tessera decays: the decayed parameters with
        weight_decay, the others (biases, layer norms) with 0."""
        ps = self.param_list()
        return [{"params": [p for _, p, _, d in ps if d], "weight_decay": weight_decay},
                {"params": [p for _, p, _, d in ps if not d], "weight_decay": 0.0}]
