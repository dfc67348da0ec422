"""A safetensors file's float32 tensors, for the test scripts that compare checkpoints."""
import array
import json
import struct


def tensors(path):
    """{name: array('f')} of every tensor in the file at path (the metadata left out)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k != "__metadata__":
            x = array.array("f")
            x.frombytes(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            out[k] = x
    return out
