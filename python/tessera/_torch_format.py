"""Reading torch.save's zip files without torch: archive/data.pkl describes the object, each
tensor's storage is archive/data/<key>. The unpickler admits only the classes such a file of
tensors and state dicts needs (tensor rebuilding, storage types, OrderedDict), so a file can
never run code; anything else is an UnpicklingError naming the class."""
import collections
import pickle
import zipfile

import numpy as np

from . import _C

# torch storage class -> (numpy dtype of its bytes, tessera dtype name).
_STORAGES = {
    "FloatStorage": ("<f4", "float32"),
    "DoubleStorage": ("<f8", "float64"),
    "HalfStorage": ("<f2", "float16"),
    "BFloat16Storage": ("<u2", "bfloat16"),
    "LongStorage": ("<i8", "int64"),
    "IntStorage": ("<i4", "int32"),
    "ShortStorage": ("<i2", "int16"),
    "CharStorage": ("i1", "int8"),
    "ByteStorage": ("u1", "uint8"),
    "BoolStorage": ("?", "bool"),
}


class _StorageType:
    def __init__(self, name):
        self.name = name


def _to_tessera(array, dtype_name):
    if dtype_name == "bfloat16":  # numpy has none: widen the bits to float32 exactly
        wide = (array.astype(np.uint32) << 16).view(np.float32)
        return _C.from_numpy(np.ascontiguousarray(wide)).to(_C.bfloat16)
    return _C.from_numpy(np.ascontiguousarray(array))


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, *_):
    array, dtype_name = storage
    itemsize = array.dtype.itemsize
    # as_strided trusts its arguments: out-of-range ones from the file would read past the
    # storage (a crash or other memory), so they are checked against it first.
    size, stride = tuple(size), tuple(stride)
    if (not isinstance(offset, int) or offset < 0 or len(size) != len(stride)
            or any(not isinstance(v, int) or v < 0 for v in size + stride)):
        raise ValueError(f"[load] expected a non-negative offset, sizes and strides, got "
                         f"offset {offset}, size {size}, stride {stride}")
    if 0 not in size and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= len(array):
        raise ValueError(f"[load] expected a tensor within its storage of {len(array)} elements, "
                         f"got offset {offset}, size {size}, stride {stride}")
    view = np.lib.stride_tricks.as_strided(array[offset:], shape=size,
                                           strides=tuple(s * itemsize for s in stride))
    t = _to_tessera(view.copy(), dtype_name)
    return t.requires_grad_(True) if requires_grad else t


def _rebuild_parameter(data, requires_grad, *_):
    return data.requires_grad_(True) if requires_grad else data


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("collections", "OrderedDict"): collections.OrderedDict,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive, prefix):
        super().__init__(file)
        self.archive, self.prefix, self.storages = archive, prefix, {}

    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        raise pickle.UnpicklingError(
            f"[tessera.load] expected tensors and state dicts in the torch file, got {module}.{name}")

    def persistent_load(self, pid):
        kind, storage_type, key = pid[0], pid[1], pid[2]
        if kind != "storage" or not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"[tessera.load] expected a storage reference, got {pid!r}")
        if key not in self.storages:
            np_dtype, dtype_name = _STORAGES[storage_type.name]
            raw = self.archive.read(f"{self.prefix}/data/{key}")
            self.storages[key] = (np.frombuffer(raw, dtype=np_dtype), dtype_name)
        return self.storages[key]


def load_torch_zip(file):
    """The object torch.save wrote to file (a path or a binary file object)."""
    with zipfile.ZipFile(file) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ValueError("[tessera.load] expected a torch.save zip file with one data.pkl, "
                             f"got {len(pickles)}")
        prefix = pickles[0][: -len("/data.pkl")]
        with archive.open(pickles[0]) as f:
            return _Unpickler(f, archive, prefix).load()
