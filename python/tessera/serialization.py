"""tessera.save / tessera.load, as torch.save / torch.load for what training scripts save: a
tensor, a state dict, or nested dicts, lists and tuples of tensors, numbers, strings and None
(an optimizer's state_dict(), a checkpoint dict). The file is safetensors: the tensors by name,
the structure around them as JSON in its metadata, so any safetensors reader sees the tensors
and nothing is unpickled. tessera.load also reads torch.save's zip files (tensors and state
dicts), without torch and without running their pickle's code.
"""
import io
import json
import os
import zipfile

from . import _C
from ._torch_format import load_torch_zip

_STRUCTURE = "tessera.structure"


def _flatten(obj, tensors):
    """obj as JSON with each tensor replaced by {"t": its name in tensors}."""
    if isinstance(obj, _C.Tensor):
        name = str(len(tensors))
        tensors[name] = obj.detach()
        return {"t": name}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        items = [_flatten(x, tensors) for x in obj]
        return {"tuple": items} if isinstance(obj, tuple) else items
    if isinstance(obj, dict):
        return {"dict": [[_flatten(k, tensors), _flatten(v, tensors)] for k, v in obj.items()]}
    raise TypeError(
        "[tessera.save] expected tensors, numbers, strings, None, lists, tuples and dicts, got "
        f"{type(obj).__name__}")


def _unflatten(node, tensors):
    if isinstance(node, list):
        return [_unflatten(x, tensors) for x in node]
    if not isinstance(node, dict):
        return node
    if "t" in node:
        return tensors[node["t"]]
    if "tuple" in node:
        return tuple(_unflatten(x, tensors) for x in node["tuple"])
    return {_unflatten(k, tensors): _unflatten(v, tensors) for k, v in node["dict"]}


def save(obj, f):
    """Writes obj to f (a path, written atomically, or a binary file object)."""
    tensors = {}
    structure = json.dumps(_flatten(obj, tensors))
    metadata = {_STRUCTURE: structure}
    if isinstance(f, (str, os.PathLike)):
        _C.io.save_safetensors(os.fspath(f), tensors, metadata)
    else:
        f.write(_C.io.serialize_safetensors(tensors, metadata))


def load(f, map_location=None, weights_only=None):
    """Reads what save (or torch.save, for tensors and state dicts) wrote to f (a path or a binary
    file object). map_location: a device (or its name) to move the tensors to. weights_only is
    accepted for torch compatibility: nothing here ever runs code from the file."""
    del weights_only
    if isinstance(f, (str, os.PathLike)):
        path = os.fspath(f)
        if zipfile.is_zipfile(path):
            obj = load_torch_zip(path)
        else:
            obj = _load_safetensors(*_C.io.load_safetensors(path))
    else:
        data = f.read()
        if zipfile.is_zipfile(io.BytesIO(data)):
            obj = load_torch_zip(io.BytesIO(data))
        else:
            obj = _load_safetensors(*_C.io.parse_safetensors(data))
    return obj if map_location is None else _to(obj, map_location)


def _load_safetensors(tensors, metadata):
    if _STRUCTURE not in metadata:  # another writer's file: its tensors by name
        return tensors
    return _unflatten(json.loads(metadata[_STRUCTURE]), tensors)


def _to(obj, device):
    if isinstance(obj, _C.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj
