"""Safetensors files as tessera writes them (src/io/safetensors.c), in plain Python and NumPy.

A file is an 8-byte little-endian header length N, N bytes of JSON (an object: "__metadata__",
a map of strings, and one entry per tensor: "dtype", "shape", "data_offsets" [begin, end] into
the buffer), padded with spaces to a multiple of 8, then the buffer. tessera writes only F32
tensors, the metadata first, the tensors in buffer order; it refuses holes, overlaps and bytes
no tensor describes, and so does this reader.
"""
import json
import os
import struct
import tempfile

import numpy as np

MAX_HEADER = 100 * 1000 * 1000  # TSR_ST_MAX_HEADER
MAX_DIMS = 8  # TSR_ST_MAX_DIMS


class FormatError(ValueError):
    """A file that is not what it should be; the message names the file and what is wrong."""


def _bad(path, what):
    return FormatError("%s: not a valid safetensors file: %s" % (path, what))


def read(path):
    """(tensors, metadata) of a safetensors file: an ordered dict name -> float32 array (C order,
    writable copies, in buffer order) and a dict of metadata strings. Raises FormatError."""
    with open(path, "rb") as f:
        blob = f.read()
    return parse(blob, path)


def parse(blob, path="<bytes>"):
    """read() of the bytes of a file; path names it in messages."""
    if len(blob) < 8:
        raise _bad(path, "shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER:
        raise _bad(path, "header length above 100 MB")
    if n > len(blob) - 8:
        raise _bad(path, "truncated inside its header")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _bad(path, "the header is not a JSON object") from None
    if not isinstance(header, dict):
        raise _bad(path, "the header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _bad(path, "__metadata__ is not an object of strings")
    buf = memoryview(blob)[8 + n:]
    entries = []
    for name, t in header.items():
        if not name:
            raise _bad(path, "a tensor has an empty name")
        if not isinstance(t, dict):
            raise _bad(path, "entry '%s' is not an object" % name)
        if t.get("dtype") != "F32":
            raise _bad(path, "tensor '%s': only dtype F32 is supported" % name)
        shape, off = t.get("shape"), t.get("data_offsets")
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(isinstance(s, int) and s >= 0 for s in shape)):
            raise _bad(path, "tensor '%s': shape is not an array of at most 8 sizes" % name)
        if (not isinstance(off, list) or len(off) != 2
                or not all(isinstance(o, int) for o in off)):
            raise _bad(path, "tensor '%s': data_offsets is not [begin, end]" % name)
        begin, end = off
        if begin < 0 or end < begin or end > len(buf):
            raise _bad(path, "tensor '%s': data_offsets out of the buffer" % name)
        if end - begin != 4 * int(np.prod(shape, dtype=np.int64)):
            raise _bad(path, "tensor '%s': data_offsets do not match its shape" % name)
        entries.append((begin, end, name, shape))
    entries.sort()
    at = 0
    tensors = {}
    for begin, end, name, shape in entries:
        if begin < at:
            raise _bad(path, "tensor '%s' overlaps the one before it in the buffer" % name)
        if begin > at:
            raise _bad(path, "the buffer has a hole before tensor '%s'" % name)
        at = end
        tensors[name] = np.frombuffer(buf[begin:end], dtype="<f4").astype(np.float32).reshape(shape)
    if at != len(buf):
        raise _bad(path, "the buffer has bytes no tensor describes")
    return tensors, meta


def header_bytes(tensors, metadata):
    """The 8-byte length and the JSON header of a file holding tensors (name -> array, in this
    order) and metadata, as tessera writes them: metadata first, padded with spaces."""
    root = {}
    if metadata:
        root["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, a in tensors.items():
        size = 4 * int(a.size)
        root[name] = {"dtype": "F32", "shape": [int(s) for s in a.shape],
                      "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(root, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def write(path, tensors, metadata):
    """Writes tensors (name -> array, converted to little-endian float32, in this order) and
    metadata (str -> str) to path: beside it first, then renamed over it, as tessera does, so
    that a reader never sees half a file."""
    arrays = {}
    for name, a in tensors.items():
        a = np.asarray(a, dtype="<f4", order="C")  # a scalar stays 0-d (shape [])
        if a.ndim > MAX_DIMS:
            raise ValueError("tensor %s: %d dimensions, at most %d" % (name, a.ndim, MAX_DIMS))
        arrays[name] = a
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header_bytes(arrays, metadata))
            for a in arrays.values():
                f.write(a.tobytes())
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes 0600; a checkpoint is as readable as the user's other files.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
