"""tessera checkpoints (src/train/checkpoint.c) read and written in Python.

A checkpoint is a safetensors file (safetensors.py) with format "tessera-checkpoint/1":

tensors  `layers.N.TYPE.weight` and `.bias` for each layer with parameters (N: its index in
         the model, counting every layer, ReLUs included; TYPE: dense, conv, batchnorm,
         layernorm; an embedding's are `.weight` (vocab, D) and `.position` (context, D)), and
         for each parameter the optimizer's state `optimizer.<parameter>.<state>`: momentum_buffer
         (SGD with momentum), exp_avg and exp_avg_sq (Adam, AdamW). Float32, row-major:
         a dense weight is (in, out), a conv weight (kh kw c_in, c_out) with rows ordered
         (ky, kx, ci), a bias and its state are 1-D (out,).
metadata strings: format, tessera_version, model (tsr_model_describe's line), model_ini (the
         model as an INI file), inputs, classes, input_shape ("c h w"), input_mean and
         input_std (the training set's standardization: a sample x is fed as (x - mean) /
         std), data (the training set's fingerprint; `train --resume` refuses other data),
         net_seed, init (pytorch or he: how the parameters started; files without it were
         he), optimizer (sgd, adam, ...), optimizer_hyper ("lr X momentum X weight_decay X
         beta1 X beta2 X eps X"), optimizer_steps, epoch, step_in_epoch, epochs, seed,
         lr_schedule (constant or cosine), base_lr, sync, ranks, dropout_calls ("N:calls ..."),
         and crc32.<tensor> for every tensor (zlib's CRC-32 of its bytes, 8 hex digits).
         Under MPI also optimizer_state ("shared"; "per-rank" with the tensors
         `optimizer.rank<q>.<parameter>.<state>` of ranks q >= 1 and optimizer_steps_ranks; or
         under a grid "per-column" with `optimizer.column<q>.<parameter>.<state>` of grid
         columns q >= 1 and optimizer_steps_columns),
         outer_state ("momentum": the tensors `outer.<parameter>.momentum`), local_since,
         final_average and, at a stop between averages, replica_weights with the tensors
         `replica.rank<q>.<tensor>` and `anchor.<parameter>`, average_samples and average_steps
         (docs/checkpoints.md); this package reads rank 0's state.
"""
import zlib

import numpy as np

from . import model as _model
from . import safetensors

FORMAT = "tessera-checkpoint/1"

#: The metadata keys tessera writes besides the checksums, in its order.
KEYS = ("format", "tessera_version", "model", "model_ini", "inputs", "classes", "input_shape",
        "input_mean", "input_std", "data", "net_seed", "init", "optimizer", "optimizer_hyper",
        "optimizer_steps", "epoch", "step_in_epoch", "epochs", "seed", "lr_schedule", "base_lr",
        "sync", "ranks", "dropout_calls")
#: Where a checkpoint came from, written after "tessera_version" since 2026-12-06 where known:
#: the commit tessera was built from, when the file was written (UTC), the command line.
PROVENANCE = ("tessera_commit", "written", "command")
#: The run's settings tessera writes after "epochs" since issue 40, all four or none (a file of
#: before has none): the cosine schedule's horizon in epochs, the batch, gradient clipping and
#: label smoothing, which a resumed run takes (docs/checkpoints.md).
SETTINGS = ("schedule_epochs", "batch", "clip_grad", "label_smoothing")

#: The optimizers tessera names in `optimizer`, and the state tensors each keeps per
#: parameter (src/optim/*.c's state_names; SGD keeps none without momentum).
OPTIMIZER_STATES = {"sgd": ("momentum_buffer",), "adam": ("exp_avg", "exp_avg_sq"),
                    "adamw": ("exp_avg", "exp_avg_sq")}
HYPER_KEYS = ("lr", "momentum", "weight_decay", "beta1", "beta2", "eps")


class CheckpointError(safetensors.FormatError):
    """A file tessera would refuse as a checkpoint; the message names the file and why."""


def crc32(array):
    """The checksum tessera records for a tensor: CRC-32 of its little-endian float32 bytes,
    as 8 lowercase hex digits."""
    return "%08x" % (zlib.crc32(np.ascontiguousarray(array, dtype="<f4").tobytes()) & 0xffffffff)


def format_float(x):
    """A float32 as tessera writes one in the metadata (C's %.9g)."""
    return "%.9g" % float(np.float32(x))


def parse_floats(text):
    """A metadata number, or a space-separated list of them (per-feature values), as floats:
    a float32 scalar, or a float32 array."""
    parts = text.split()
    if len(parts) == 1:
        return np.float32(float(parts[0]))
    return np.array([float(p) for p in parts], dtype=np.float32)


def parse_hyper(text):
    """optimizer_hyper's "key value key value ..." as a dict of floats, each as it was written:
    the shortest decimal that reads back as the float32 tessera ran with (lr 0.01, not
    0.009999999776482582, which is that float32 widened)."""
    parts = text.split()
    if len(parts) % 2:
        raise ValueError("optimizer_hyper %r: expected key value pairs" % text)
    return {k: float(str(np.float32(float(v)))) for k, v in zip(parts[::2], parts[1::2])}


def format_hyper(hyper):
    """optimizer_hyper's text: tessera's six keys in its order (0 where not given), then any
    others (such as nesterov) in the dict's order."""
    keys = list(HYPER_KEYS) + [k for k in hyper if k not in HYPER_KEYS]
    return " ".join("%s %s" % (k, format_float(hyper.get(k, 0.0))) for k in keys)


class Checkpoint:
    """A tessera checkpoint in memory.

    tensors: dict name -> float32 array in tessera's layouts (see the module's doc), in the
        file's order. metadata: dict of the metadata strings, the crc32.* keys left out.
    graph: the model (model.Graph) with its layers' shapes; layers: graph.layers.
    The properties below read the metadata as numbers.
    """

    def __init__(self, tensors, metadata, path="<checkpoint>"):
        self.path = path
        self.tensors = dict(tensors)
        self.metadata = {k: v for k, v in metadata.items() if not k.startswith("crc32.")}
        self.graph = _model.Graph(_model.read_ini(self.metadata["model_ini"], path),
                                  self.input_shape, path)

    # ---- the metadata, typed ----
    def _int(self, key):
        return int(self.metadata[key])

    @property
    def layers(self):
        return self.graph.layers

    @property
    def input_shape(self):
        """(c, h, w) of one sample; tessera stores a sample as its h w c values, channels last."""
        c, h, w = (int(v) for v in self.metadata["input_shape"].split())
        return c, h, w

    @property
    def inputs(self):
        return self._int("inputs")

    @property
    def classes(self):
        return self._int("classes")

    @property
    def input_mean(self):
        """The training set's mean (float32; an array if per-feature)."""
        return parse_floats(self.metadata["input_mean"])

    @property
    def input_std(self):
        return parse_floats(self.metadata["input_std"])

    @property
    def input_standardize(self):
        """How the inputs were standardized: "scalar" (no key: every checkpoint of before),
        "column" (input_mean and input_std per feature) or "none"."""
        return self.metadata.get("input_standardize", "scalar")

    @property
    def optimizer(self):
        return self.metadata["optimizer"]

    @property
    def optimizer_hyper(self):
        return parse_hyper(self.metadata["optimizer_hyper"])

    @property
    def optimizer_steps(self):
        return self._int("optimizer_steps")

    @property
    def epoch(self):
        return self._int("epoch")

    @property
    def step_in_epoch(self):
        return self._int("step_in_epoch")

    def params(self):
        """[(layer, weight name, bias name)] for each layer with parameters, in model order (an
        embedding's: weight, position; without a position table (layer, weight name))."""
        return [(l,) + _model.param_names(l) for l in self.layers if l.kind in _model.PARAM_TYPES]

    def state_names(self):
        """The optimizer state tensors kept per parameter (by the names present)."""
        names = OPTIMIZER_STATES.get(self.optimizer, ())
        first = next((p[1] for p in self.params()), None)
        return tuple(s for s in names if first and "optimizer.%s.%s" % (first, s) in self.tensors)

    def __repr__(self):
        return "Checkpoint(%r: %s, %d tensors, epoch %s)" % (
            self.path, self.metadata.get("model"), len(self.tensors), self.metadata.get("epoch"))


def read_checkpoint(path):
    """Reads a tessera checkpoint: its tensors, metadata and model (a Checkpoint). Refuses, as
    tessera does, a file that is not a safetensors file, not a tessera checkpoint, or whose
    tensor fails its recorded CRC-32 (CheckpointError, naming the tensor)."""
    tensors, meta = safetensors.read(path)
    fmt = meta.get("format")
    if fmt != FORMAT:
        raise CheckpointError("%s: a safetensors file, but not a tessera checkpoint (format %s, "
                              "want %s)" % (path, fmt or "missing", FORMAT))
    for name, t in tensors.items():
        want, got = meta.get("crc32." + name), crc32(t)
        if want != got:
            raise CheckpointError("%s: tensor %s is damaged (checksum %s, recorded %s); use an "
                                  "older checkpoint" % (path, name, got, want or "none"))
    missing = [k for k in ("model_ini", "input_shape", "inputs", "classes") if k not in meta]
    if missing:
        raise CheckpointError("%s: no %s in the metadata" % (path, ", ".join(missing)))
    return Checkpoint(tensors, meta, path)


def write_checkpoint(path, tensors, metadata):
    """Writes tensors (name -> array, in this order) and metadata (every key of KEYS but
    format, and PROVENANCE and SETTINGS where given; any others are kept after them) as a tessera checkpoint,
    with the crc32.* key of every tensor, in tessera's order."""
    # np.asarray keeps a scalar (num_batches_tracked) 0-d; ascontiguousarray would make it (1,)
    tensors = {k: np.asarray(v, dtype=np.float32, order="C") for k, v in tensors.items()}
    missing = [k for k in KEYS[1:] if k not in metadata]
    if missing:
        raise ValueError("%s: metadata lacks %s" % (path, ", ".join(missing)))
    # tessera's order: the checksums (in tensor order), then its keys, then any others.
    meta = {"crc32." + name: crc32(t) for name, t in tensors.items()}
    meta["format"] = FORMAT
    for k in KEYS[1:]:
        meta[k] = str(metadata[k])
        if k == "tessera_version":
            meta.update((s, str(metadata[s])) for s in PROVENANCE if s in metadata)
        if k == "epochs":
            meta.update((s, str(metadata[s])) for s in SETTINGS if s in metadata)
    for k, v in metadata.items():
        if k not in meta and not k.startswith("crc32."):
            meta[k] = str(v)
    safetensors.write(path, tensors, meta)
