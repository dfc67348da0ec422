"""tessera models in Python: the INI model files of `tessera train --model FILE` and of a
checkpoint's `model_ini` metadata, read into a graph of layers with their shapes.

The format is tsr_model_load_ini's (include/tessera/net.h, src/nn/model.c): one section per
layer, in order, each with `type = dense | relu | conv | maxpool | avgpool | flatten | dropout |
add | concat | batchnorm | globalavgpool | embedding | layernorm | gelu | attention | lmhead`
and its keys; dense: `units`, optional `activation = relu | none`, `in_features`;
conv (or conv2d): `filters` (or `units`), `kernel = K | KHxKW`, optional `stride`, `padding`
(N or NHxNW), `activation`, `in_channels`; pools: `kernel`, optional `stride`; dropout: `rate`;
the language model's (a sample a sequence T x 1 x 1 of token ids): embedding `vocab`, `units`,
optional `context` (the position table's rows); layernorm optional `eps`; attention `heads`;
lmhead `units` (the embedding's vocab; tied to its table). The gpt:L,D,H,T shorthand: gpt().
A section's name is its layer's name; `input = NAME` or `inputs = A, B` names the layers it
takes (default: the previous section; the first section takes the network's input). `add` sums
inputs of one shape (a residual connection); `concat` joins them along channels (spatial
inputs; for 1 x 1 inputs that is along features). `activation = relu` is a ReLU layer of its
own right after its section's layer (as in tessera), and the section's name then means the
ReLU's output.

Shapes are (c, h, w) per sample, the order of a checkpoint's `input_shape`; tessera stores a
sample channels-last, h w c values per row.
"""
import re
import struct

from .layer_types import TYPES as _REGISTRY


def _field(key):
    """A key's spec field(s) as tessera.model takes them: None (activation: a ReLU layer of its
    own), a name, or (h, w) names for a size or padding."""
    f = key["fields"]
    return None if not f else f[0] if len(f) == 1 else tuple(f)


# Read from the C library's registry (layer_types.py, `tessera summary --layer-types`), not
# declared again here: the keys each type takes, key -> (spec field(s), form), an alias of a key
# right after it; the types' aliases; the required keys, (field, key, message).
_KEYS = {t["name"]: {name: (_field(k), k["form"]) for k in t["keys"]
                     for name in (k["name"], k["alias"]) if name}
         for t in _REGISTRY}
_ALIASES = {t["alias"]: t["name"] for t in _REGISTRY if t["alias"]}
_REQUIRED = {t["name"]: [(k["fields"][0], k["name"], k["missing"]) for k in t["keys"]
                         if k["missing"]]
             for t in _REGISTRY if any(k["missing"] for k in t["keys"])}
TYPES = tuple(_KEYS)
#: Types with parameters, and their names in a checkpoint (layers.N.TYPE.NAME), in tessera's
#: order (an lmhead has none: it borrows the embedding's weight).
PARAMS = {t["name"]: tuple(t["params"]) for t in _REGISTRY if t["params"]}
PARAM_TYPES = tuple(PARAMS)
#: Types with buffers (non-trained state a checkpoint holds), and their names.
BUFFERS = {t["name"]: tuple(t["buffers"]) for t in _REGISTRY if t["buffers"]}
#: Types that take several inputs (add, concat).
MERGE_TYPES = tuple(t["name"] for t in _REGISTRY if t["inputs"][0] > 1)
#: Types whose last layer predicts: dense (one prediction per sample) and lmhead (one per
#: position of a sequence: the labels are (n, T), the loss averaged over the tokens).
OUTPUT_TYPES = tuple(t["name"] for t in _REGISTRY if t["output"])
#: A dense layer's units that are the number of classes (`units = classes`, TSR_UNITS_CLASSES):
#: bind_classes sets them.
UNITS_CLASSES = -1


def bind_classes(layers, classes):
    """Sets every dense layer's `units = classes` to classes (tsr_model_bind_classes); returns
    layers."""
    for l in layers:
        if l.kind in OUTPUT_TYPES and l.units == UNITS_CLASSES:
            l.units = int(classes)
    return layers


class ModelError(ValueError):
    """A model that tessera would refuse; the message names the file, the section and the fix."""


class Layer:
    """One layer of a model: its name, type, spec fields (as tsr_layer_spec_t: units, kernel_h,
    kernel_w, stride_h, stride_w, pad_h, pad_w, in_channels, in_features, rate; 0 is the
    default), the names of its inputs and, once the graph is built, its index in the spec (the
    N of its checkpoint tensors `layers.N.TYPE.weight`), its input shapes and output shape."""

    FIELDS = ("units", "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w",
              "in_channels", "in_features", "rate", "momentum", "eps", "heads", "vocab",
              "context")
    FLOATS = ("rate", "momentum", "eps")

    def __init__(self, name, kind, inputs=None, **fields):
        kind = _ALIASES.get(kind, kind)
        if kind not in _KEYS:
            raise ModelError("layer %s: unknown layer type %s; use %s" % (name, kind, _types()))
        unknown = set(fields) - set(self.FIELDS)
        if unknown:
            raise ModelError("layer %s: unknown fields %s" % (name, ", ".join(sorted(unknown))))
        self.name, self.kind = name, kind
        #: the inputs as given (None: the previous layer's output); Graph resolves them
        self.given = [inputs] if isinstance(inputs, str) else (list(inputs) if inputs else None)
        for f in self.FIELDS:
            setattr(self, f, fields.get(f, 0.0 if f in self.FLOATS else 0))
        for f in self.FLOATS:
            setattr(self, f, _f32(getattr(self, f)))
        self.section = None  # set on the ReLU an `activation = relu` key makes
        self.inputs = self.index = self.in_shapes = self.shape = None

    def fields(self):
        return {f: getattr(self, f) for f in self.FIELDS if getattr(self, f)}

    def __repr__(self):
        extra = "".join(", %s=%r" % kv for kv in self.fields().items())
        return "Layer(%r, %r, inputs=%r%s)" % (self.name, self.kind, self.given, extra)

    # Window geometry with tessera's defaults (src/nn/conv.c, src/nn/pool.c).
    def window(self):
        """(kh, kw, sh, sw, ph, pw) of a conv or pooling layer."""
        kh = self.kernel_h
        kw = self.kernel_w or kh
        if self.kind == "conv":
            sh = self.stride_h or 1
            sw = self.stride_w or sh
        else:
            sh = self.stride_h or kh
            sw = self.stride_w or (sh if self.stride_h else kw)
        return kh, kw, sh, sw, self.pad_h, self.pad_w

    def describe(self):
        """This layer's part of tsr_model_describe's string ("512", "relu", "conv3x3/32p1x1")."""
        if self.kind == "dense":
            return "%d" % self.units if self.units != UNITS_CLASSES else "classes"
        if self.kind == "conv":
            kw = self.kernel_w or self.kernel_h
            sh, sw = self.stride_h, self.stride_w or self.stride_h
            s = "conv%dx%d/%d" % (self.kernel_h, kw, self.units)
            if sh > 1:
                s += "s%dx%d" % (sh, sw)
            if self.pad_h or self.pad_w:
                s += "p%dx%d" % (self.pad_h, self.pad_w)
            return s
        if self.kind in ("maxpool", "avgpool"):
            kw = self.kernel_w or self.kernel_h
            sh, sw = self.stride_h, self.stride_w or self.stride_h
            s = "%s%dx%d" % (self.kind, self.kernel_h, kw)
            if sh > 0 and (sh != self.kernel_h or sw != kw):
                s += "s%dx%d" % (sh, sw)
            if self.pad_h or self.pad_w:
                s += "p%dx%d" % (self.pad_h, self.pad_w)
            return s
        if self.kind == "batchnorm":
            return ("batchnorm" + ("/momentum" + _g(self.momentum, 6) if self.momentum else "")
                    + ("/eps" + _g(self.eps, 6) if self.eps else ""))
        if self.kind == "dropout":
            return "dropout" + _g(self.rate, 6)
        if self.kind == "layernorm":
            return "layernorm" + ("/eps" + _g(self.eps, 6) if self.eps else "")
        if self.kind == "embedding":
            return "embedding/v%d" % self.vocab + ("/t%d" % self.context if self.context else "")
        if self.kind == "attention":
            return "attention/h%d" % self.heads
        if self.kind == "lmhead":
            return "lmhead/v%d" % self.units if self.units != UNITS_CLASSES else "lmhead/classes"
        return self.kind

    def ini_keys(self):
        """The "key = value" lines tsr_model_to_ini writes for this layer: every key that
        differs from its default."""
        out = []
        if self.kind == "dense":
            if self.units == UNITS_CLASSES:
                out.append("units = classes")
            elif self.units:
                out.append("units = %d" % self.units)
            if self.in_features:
                out.append("in_features = %d" % self.in_features)
        elif self.kind == "conv":
            if self.units:
                out.append("filters = %d" % self.units)
            out += _window_keys(self)
            if self.pad_h or self.pad_w:
                out.append("padding = %dx%d" % (self.pad_h, self.pad_w))
            if self.in_channels:
                out.append("in_channels = %d" % self.in_channels)
        elif self.kind in ("maxpool", "avgpool"):
            out += _window_keys(self)
            if self.pad_h or self.pad_w:
                out.append("padding = %dx%d" % (self.pad_h, self.pad_w))
        elif self.kind == "batchnorm":
            for f in ("momentum", "eps"):
                if getattr(self, f):
                    out.append("%s = %s" % (f, _g(getattr(self, f), 9)))
        elif self.kind == "dropout":
            out.append("rate = %s" % _g(self.rate, 9))
        elif self.kind == "layernorm":
            if self.eps:
                out.append("eps = %s" % _g(self.eps, 9))
        elif self.kind == "embedding":
            out += ["vocab = %d" % self.vocab, "units = %d" % self.units]
            if self.context:
                out.append("context = %d" % self.context)
        elif self.kind == "attention":
            out.append("heads = %d" % self.heads)
        elif self.kind == "lmhead":
            out.append("units = classes" if self.units == UNITS_CLASSES else
                       "units = %d" % self.units)
        return out


def _window_keys(l):
    out = []
    for key, a, b in (("kernel", l.kernel_h, l.kernel_w), ("stride", l.stride_h, l.stride_w)):
        if a:
            out.append("%s = %dx%d" % (key, a, b) if b else "%s = %d" % (key, a))
    return out


def _f32(x):
    """x rounded to a float32, as tessera holds a rate."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def _g(x, digits):
    """C's %.{digits}g of a float32 value (a double in C's printf)."""
    return "%.*g" % (digits, _f32(x))


def _types():
    names = list(_KEYS)
    return ", ".join(names[:-1]) + " or " + names[-1]


# ---- INI text ----

def parse_ini(text, path="<model>"):
    """[(section, [(key, value, line)], line)] of an INI text, as inih reads it: `[name]`
    sections, `key = value` or `key: value`, comments starting with ; or # on their own line
    and inline after ` ;`. Raises ModelError for a line that is neither."""
    sections = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        m = re.search(r"\s;", line)
        if m:
            line = line[:m.start()].rstrip()
        if line.startswith("["):
            if not line.endswith("]"):
                raise ModelError("%s:%d: not an INI line (expected [section] or key = value)"
                                 % (path, number))
            sections.append((line[1:-1].strip(), [], number))
            continue
        m = re.match(r"([^=:]+?)\s*[=:]\s*(.*)$", line)
        if not m:
            raise ModelError("%s:%d: not an INI line (expected [section] or key = value)"
                             % (path, number))
        if not sections:
            sections.append(("", [], number))
        sections[-1][1].append((m.group(1).strip(), m.group(2).strip(), number))
    return sections


def _parse_pair(value, lo):
    m = re.fullmatch(r"([+-]?\d+)(?:[xX]([+-]?\d+))?", value)
    if not m:
        return None
    a = int(m.group(1))
    b = int(m.group(2)) if m.group(2) is not None else a
    if a < lo or b < lo or a > 1 << 16 or b > 1 << 16:
        return None
    return a, b


_EXPECTED = {"count": "expected a positive integer",
             "units": "expected a positive integer or classes",
             "size": "expected a positive integer N or NHxNW",
             "padding": "expected an integer N >= 0 or NHxNW",
             "probability": "expected a probability in [0, 1)",
             "fraction": "expected a number in (0, 1]",
             "activation": "use relu or none"}


def read_ini(text, path="<model>"):
    """The layers of an INI model text (a list of Layer, spec order, inputs not yet resolved:
    see Graph). Raises ModelError with the messages tessera gives, where it has them."""
    layers = []
    for section, keys, number in parse_ini(text, path):
        if not keys or keys[0][0] != "type":
            if any(k == "type" for k, _, _ in keys):
                k = next(k for k, _, _ in keys if k != "type")
                raise ModelError("%s: [%s] %s comes before 'type'; put type = ... first"
                                 % (path, section, k))
            raise ModelError("%s: section [%s] has no 'type' key; add type = %s"
                             % (path, section, _types()))
        kind = _ALIASES.get(keys[0][1], keys[0][1])
        if kind not in _KEYS:
            raise ModelError("%s: [%s] type = %s: unknown layer type; use %s"
                             % (path, section, keys[0][1], _types()))
        layer = Layer(section, kind)
        relu = False
        seen = set()
        for key, value, line in keys[1:]:
            if key == "type":
                raise ModelError("%s: [%s]: a second 'type' key in one section (one section "
                                 "per layer)" % (path, section))
            if key in ("input", "inputs"):
                names = [v.strip() for v in value.split(",")]
                if not value or not all(names):
                    raise ModelError("%s: [%s] %s = %s: expected layer names separated by "
                                     "commas" % (path, section, key, value))
                layer.given = names
                continue
            if key not in _KEYS[kind]:
                known = ", ".join(["type"] + list(_KEYS[kind]))
                raise ModelError("%s: [%s] unknown key '%s' for a %s layer (known: %s)"
                                 % (path, section, key, kind, known))
            field, form = _KEYS[kind][key]
            if field:
                seen.add(field if isinstance(field, str) else field[0])
            ok = True
            if form == "units" and value == "classes":
                layer.units = UNITS_CLASSES
            elif form in ("count", "units"):
                ok = re.fullmatch(r"\+?\d+", value) is not None and 0 < int(value) <= 1 << 20
                if ok:
                    setattr(layer, field, int(value))
            elif form in ("size", "padding"):
                pair = _parse_pair(value, 1 if form == "size" else 0)
                ok = pair is not None
                if ok:
                    setattr(layer, field[0], pair[0])
                    setattr(layer, field[1], pair[1])
            elif form == "probability":
                try:
                    r = float(value)
                    ok = 0.0 <= r < 1.0
                except ValueError:
                    ok = False
                if ok:
                    layer.rate = _f32(r)
            elif form == "fraction":
                try:
                    r = float(value)
                    ok = 0.0 < r <= 1.0
                except ValueError:
                    ok = False
                if ok:
                    setattr(layer, field, _f32(r))
            elif form == "activation":
                ok = value in ("relu", "none")
                relu = relu or value == "relu"
            if not ok:
                raise ModelError("%s: [%s] %s = %s: %s"
                                 % (path, section, key, value, _EXPECTED[form]))
        for field, _key, missing in _REQUIRED.get(kind, []):
            if field not in seen:
                raise ModelError("%s: section [%s] %s" % (path, section, missing))
        layers.append(layer)
        if relu:
            # tessera appends the activation's ReLU as a layer of its own; the section's name
            # then stands for the ReLU's output (Graph resolves references through `alias`).
            r = Layer(section + ".relu", "relu")
            r.section = section
            layers.append(r)
    if not layers:
        raise ModelError("%s: no layers; add one section per layer" % path)
    return layers


def reads_default(layers, i):
    """Whether layers[i] reads what it would read without `inputs` (the previous layer, the
    input batch for the first): tsr_model_describe then shows no inputs and tsr_model_to_ini
    writes none (src/nn/model.c's reads_default)."""
    given = layers[i].given
    if not given:
        return True
    if len(given) != 1:
        return False
    named = [j for j, l in enumerate(layers) if (l.name or "layer%d" % (j + 1)) == given[0]]
    if i == 0:
        return given[0] == "input" and not named
    return named == [i - 1]


def to_ini(layers):
    """The INI text of layers as tsr_model_to_ini writes it (sections in order, `input =` or
    `inputs =` only where a layer does not take the previous one's output)."""
    parts = []
    for i, l in enumerate(layers):
        lines = ["[%s]" % l.name, "type = %s" % l.kind]
        if not reads_default(layers, i):
            # The resolved names, once a Graph has resolved them: a section's name that stood
            # for its activation's ReLU names the ReLU's own section here.
            names = l.inputs if l.inputs is not None else l.given
            lines.append(("input = %s" if len(names) == 1 else "inputs = %s") % ", ".join(names))
        lines += l.ini_keys()
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


# ---- the graph ----

class Graph:
    """A model's layers in spec order, each input resolved to a layer name (None: the network's
    input), checked and shaped from the input shape (c, h, w).

    layers: the Layer list (spec order; each .index is its position, its checkpoint number).
    input_shape: (c, h, w). output: the last layer, dense with `classes` units.
    """

    def __init__(self, layers, input_shape, path="<model>"):
        self.layers = list(layers)
        self.input_shape = tuple(int(v) for v in input_shape)
        self.path = path
        self.by_name = {}
        alias = {}
        for i, l in enumerate(self.layers):
            if l.name in self.by_name:
                raise ModelError("%s: two layers are named %s; each section needs its own name"
                                 % (path, l.name))
            self.by_name[l.name] = l
            l.index = i
            if l.section:
                alias[l.section] = l.name
        #: section name -> the layer its name stands for (the ReLU of `activation = relu`)
        self.alias = alias
        prev = None
        for l in self.layers:
            if l.given is None:
                l.inputs = [prev] if prev is not None else []
            else:
                l.inputs = [alias.get(n, n) for n in l.given]
            prev = l.name
        self._check()
        self._shape()

    @property
    def output(self):
        return self.layers[-1]

    @property
    def inputs(self):
        c, h, w = self.input_shape
        return c * h * w

    @property
    def classes(self):
        return self.output.units

    def _check(self):
        position = {l.name: i for i, l in enumerate(self.layers)}
        used = set()
        for i, l in enumerate(self.layers):
            for n in l.inputs:
                if n not in position:
                    raise ModelError("%s: [%s] takes %s, but no layer is named so (layers: %s)"
                                     % (self.path, l.name, n,
                                        ", ".join(x.name for x in self.layers)))
                if position[n] >= i:
                    raise ModelError("%s: [%s] takes %s, which comes at or after it: a cycle "
                                     "(a layer takes only layers above it)" % (self.path, l.name, n))
                used.add(n)
            if l.kind in MERGE_TYPES and len(l.inputs) < 2:
                raise ModelError("%s: [%s] (%s) needs at least two inputs; add inputs = A, B"
                                 % (self.path, l.name, l.kind))
            if l.kind not in MERGE_TYPES and len(l.inputs) > 1:
                raise ModelError("%s: [%s] (%s) takes one input, not %s; use an add or concat "
                                 "layer to merge them" % (self.path, l.name, l.kind,
                                                          ", ".join(l.inputs)))
        unused = [l.name for l in self.layers[:-1] if l.name not in used]
        if unused:
            raise ModelError("%s: the output of %s is used by no layer (only the last layer's "
                             "output may be unused)" % (self.path, ", ".join(unused)))
        last = self.layers[-1]
        if last.kind not in OUTPUT_TYPES:
            raise ModelError("%s: the last layer must be dense (the class scores) or lmhead (a "
                             "language model's logits); [%s] is %s"
                             % (self.path, last.name, last.kind))
        heads = [l for l in self.layers if l.kind == "lmhead"]
        if heads:
            embeds = [l for l in self.layers if l.kind == "embedding"]
            if len(embeds) != 1:
                raise ModelError("%s: [%s] (lmhead) is tied to the network's embedding layer, "
                                 "but it has %d; use exactly one" % (self.path, heads[0].name,
                                                                      len(embeds)))
            for h in heads:
                if h.units != UNITS_CLASSES and h.units != embeds[0].vocab:
                    raise ModelError("%s: [%s] units = %d, but the embedding [%s] has vocab = %d;"
                                     " make them equal" % (self.path, h.name, h.units,
                                                           embeds[0].name, embeds[0].vocab))

    @property
    def embedding(self):
        """The embedding layer an lmhead is tied to (the only one), or None."""
        return next((l for l in self.layers if l.kind == "embedding"), None)

    @property
    def per_position(self):
        """True when the last layer predicts at every position (an lmhead): labels (n, T)."""
        return self.output.kind == "lmhead"

    def _shape(self):
        for l in self.layers:
            ins = [self.by_name[n].shape for n in l.inputs] if l.inputs else [self.input_shape]
            l.in_shapes = ins
            c, h, w = ins[0]
            k = l.kind
            if k == "dense":
                if l.units == UNITS_CLASSES:
                    raise ModelError("%s: [%s] units = classes, but no class count was given; "
                                     "bind it first (bind_classes(layers, classes))"
                                     % (self.path, l.name))
                if l.in_features and l.in_features != c * h * w:
                    raise ModelError("%s: [%s] in_features = %d, but its input has %d features"
                                     % (self.path, l.name, l.in_features, c * h * w))
                l.shape = (l.units, 1, 1)
            elif k in ("conv", "maxpool", "avgpool"):
                kh, kw, sh, sw, ph, pw = l.window()
                if k == "conv" and l.in_channels and l.in_channels != c:
                    raise ModelError("%s: [%s] in_channels = %d, but its input has %d channels"
                                     % (self.path, l.name, l.in_channels, c))
                if k != "conv" and (2 * ph > kh or 2 * pw > kw):
                    raise ModelError("%s: [%s] pooling pads at most half its kernel"
                                     % (self.path, l.name))
                if h + 2 * ph < kh or w + 2 * pw < kw:
                    raise ModelError("%s: [%s] kernel %dx%d is larger than its input %dx%dx%d "
                                     "(h x w x c)" % (self.path, l.name, kh, kw, h, w, c))
                oc = l.units if k == "conv" else c
                l.shape = (oc, (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1)
            elif k == "flatten":
                l.shape = (c * h * w, 1, 1)
            elif k == "globalavgpool":
                l.shape = (c, 1, 1)
            elif k == "add":
                if any(s != ins[0] for s in ins):
                    raise ModelError("%s: [%s] adds inputs of different shapes: %s"
                                     % (self.path, l.name, _shapes(l.inputs, ins)))
                l.shape = ins[0]
            elif k == "concat":
                if any(s[1:] != ins[0][1:] for s in ins):
                    raise ModelError("%s: [%s] concatenates inputs of different sizes: %s"
                                     % (self.path, l.name, _shapes(l.inputs, ins)))
                l.shape = (sum(s[0] for s in ins), h, w)
            elif k == "embedding":
                if c != 1 or w != 1:
                    raise ModelError("%s: [%s] (embedding) takes a sequence of token ids (T x 1 x "
                                     "1), not %dx%dx%d (h x w x c)" % (self.path, l.name, h, w, c))
                if l.context and h > l.context:
                    raise ModelError("%s: [%s] context = %d, but the sequence has %d positions; "
                                     "make context at least %d" % (self.path, l.name, l.context,
                                                                   h, h))
                l.shape = (l.units, h, w)
            elif k == "attention":
                if c % 3 or (c // 3) % l.heads:
                    raise ModelError("%s: [%s] (attention) takes [q | k | v] of 3 D channels "
                                     "with D divisible by heads = %d, not %d channels"
                                     % (self.path, l.name, l.heads, c))
                l.shape = (c // 3, h, w)
            elif k == "lmhead":
                emb = self.embedding
                if emb is not None and c != emb.units:
                    raise ModelError("%s: [%s] (lmhead) takes %d channels, the embedding's width "
                                     "%d" % (self.path, l.name, c, emb.units))
                if l.units == UNITS_CLASSES:
                    raise ModelError("%s: [%s] units = classes, but no class count was given; "
                                     "bind it first (bind_classes(layers, classes))"
                                     % (self.path, l.name))
                l.shape = (l.units, h, w)
            else:  # relu, dropout, layernorm, gelu
                l.shape = ins[0]

    def describe(self):
        """tsr_model_describe's string, the `model` metadata: "784-512-relu-10", whole
        (tessera wrote only its first 255 characters before 2026-12-06)."""
        return "-".join(["%d" % self.inputs] +
                        [l.describe() + ("" if reads_default(self.layers, i)
                                         else "[%s]" % ",".join(l.given))
                         for i, l in enumerate(self.layers)])

    def to_ini(self):
        return to_ini(self.layers)


def _shapes(names, shapes):
    return ", ".join("%s %dx%dx%d (h x w x c)" % (n, s[1], s[2], s[0])
                     for n, s in zip(names, shapes))


def default_input_shape(inputs):
    """tessera's geometry of a sample of `inputs` features when none is given: a square
    one-channel image when inputs is a perfect square, else 1 x 1 x inputs; as (c, h, w)."""
    side = int(round(inputs ** 0.5))
    return (1, side, side) if side * side == inputs else (inputs, 1, 1)


def param_names(layer):
    """The checkpoint names of a layer's parameters: ("layers.N.dense.weight",
    "layers.N.dense.bias") with N its index in the spec (an embedding's: weight, position), or
    () for a layer without any."""
    base = "layers.%d.%s." % (layer.index, layer.kind)
    names = PARAMS.get(layer.kind, ())
    if layer.kind == "embedding" and not layer.context:
        names = names[:1]  # no position table
    return tuple(base + p for p in names)


def buffer_names(layer):
    """The checkpoint names of a layer's buffers ("layers.N.batchnorm.running_mean", ...), as
    PyTorch names them, or () for a layer without any."""
    base = "layers.%d.%s." % (layer.index, layer.kind)
    return tuple(base + b for b in BUFFERS.get(layer.kind, ()))


def shorthand(text, classes):
    """The layers of a CLI shorthand (tsr_model_parse): mlp, mlp:W1,W2,..., linear, cnn."""
    def seq(specs):
        return [Layer("layer%d" % (i + 1), k, **f) for i, (k, f) in enumerate(specs)]
    if text == "linear":
        return seq([("dense", {"units": classes})])
    if text == "cnn":
        win = {"kernel_h": 3, "kernel_w": 3, "pad_h": 1, "pad_w": 1}
        pool = {"kernel_h": 2, "kernel_w": 2}
        return seq([("conv", dict(win, units=32)), ("relu", {}), ("maxpool", pool),
                    ("conv", dict(win, units=64)), ("relu", {}), ("maxpool", pool),
                    ("flatten", {}), ("dense", {"units": 128}), ("relu", {}),
                    ("dense", {"units": classes})])
    if text == "gpt" or text.startswith("gpt:"):
        return gpt(text, classes)
    widths = "512,512" if text == "mlp" else text[4:] if text.startswith("mlp:") else None
    if not widths or not re.fullmatch(r"\d+(,\d+)*", widths):
        raise ModelError("--model '%s': unknown model; use mlp, mlp:W1,W2,... (hidden widths), "
                         "linear, cnn, gpt:L,D,H,T, or a model file (.ini)" % text)
    specs = []
    for w in widths.split(","):
        specs += [("dense", {"units": int(w)}), ("relu", {})]
    return seq(specs + [("dense", {"units": classes})])


def gpt(text, vocab):
    """The layers of `gpt:L,D,H,T` ("gpt": 4,256,4,128) over `vocab` tokens, as tsr_model_parse
    builds them (src/nn/model.c's add_gpt): embed; per block b the pre-norm h<b>.ln1, h<b>.qkv
    (conv kernel 1, 3D filters), h<b>.attn, h<b>.proj, h<b>.res1 (add of the stream and proj),
    h<b>.ln2, h<b>.fc (4D), h<b>.gelu, h<b>.fc2 (D), h<b>.res2; lnf; head (lmhead)."""
    hint = "use gpt:L,D,H,T (layers, width, heads, context), e.g. gpt:4,256,4,128"
    spec = "4,256,4,128" if text == "gpt" else text[4:]
    parts = spec.split(",")
    if len(parts) != 4 or not all(re.fullmatch(r"\+?\d+", p) and 0 < int(p) <= 1 << 16
                                  for p in parts):
        raise ModelError("--model '%s': expected four positive integers; %s" % (text, hint))
    n, d, h, t = (int(p) for p in parts)
    if d % h:
        raise ModelError("--model '%s': the width %d is not divisible by the %d heads; make D a "
                         "multiple of H" % (text, d, h))
    layers = [Layer("embed", "embedding", vocab=vocab, units=d, context=t)]
    stream = "embed"
    for b in range(n):
        def add(suffix, kind, inputs=None, **f):
            layers.append(Layer("h%d.%s" % (b, suffix), kind, inputs, **f))
        add("ln1", "layernorm", [stream])
        add("qkv", "conv", units=3 * d, kernel_h=1, kernel_w=1)
        add("attn", "attention", heads=h)
        add("proj", "conv", units=d, kernel_h=1, kernel_w=1)
        add("res1", "add", [stream, "h%d.proj" % b])
        add("ln2", "layernorm")
        add("fc", "conv", units=4 * d, kernel_h=1, kernel_w=1)
        add("gelu", "gelu")
        add("fc2", "conv", units=d, kernel_h=1, kernel_w=1)
        add("res2", "add", ["h%d.res1" % b, "h%d.fc2" % b])
        stream = "h%d.res2" % b
    layers.append(Layer("lnf", "layernorm", [stream]))
    layers.append(Layer("head", "lmhead", units=vocab))
    return layers
