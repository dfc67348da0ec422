"""tessera in Python: checkpoints, models, logs and data as tessera writes and reads them,
and PyTorch interoperability. Pure Python and NumPy; PyTorch only for tessera.pytorch.

    import sys; sys.path.insert(0, "python")     # or PYTHONPATH=python
    import tessera
    ckpt = tessera.read_checkpoint("run.st")      # tensors, metadata, model graph
    net = tessera.to_torch(ckpt)                  # a torch.nn.Module with the weights
    train, test = tessera.data.load("/usr/share/datasets/fashion-mnist")
    logits = net(tessera.torch_inputs(test.x, ckpt))
    mine = tessera.load_state_dict(ckpt, my_sequential)  # into your own nn.Module, by order
    tessera.from_torch(net, "out.st", dataset=train)   # back to a tessera checkpoint
    log = tessera.read_log("run.jsonl")           # epochs, events
    gpt = tessera.to_torch("lm.st")               # a gpt:L,D,H,T checkpoint: a tessera.gpt.GPT

See docs/python.md for the layouts and what is supported.
"""
from . import checkpoint, data, log, model, reference, safetensors
from .checkpoint import Checkpoint, CheckpointError, read_checkpoint, write_checkpoint
from .log import Log, read_log
from .model import Graph, Layer, ModelError

_TORCH = ("to_torch", "load_state_dict", "from_torch", "to_torch_optimizer", "torch_inputs",
          "TesseraNet", "GPT", "Add", "Concat", "pytorch")


def __getattr__(name):
    # torch is imported only when a torch function is asked for: the rest needs NumPy alone.
    if name in _TORCH:
        import importlib
        pytorch = importlib.import_module(__name__ + ".pytorch")
        return pytorch if name == "pytorch" else getattr(pytorch, name)
    raise AttributeError("module 'tessera' has no attribute %r" % name)
