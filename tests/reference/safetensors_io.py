"""Minimal safetensors reader/writer on plain torch (the test machine has no safetensors package).

Format: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
raw little-endian data (offsets relative to its start). Tensors tessera stored once under
several names (tied weights) are listed in __metadata__["tessera.aliases"]; load() restores them.
"""
import json
import struct

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
CODES = {dtype: code for code, dtype in DTYPES.items()}


def load(path):
    """Returns ({name: tensor}, {metadata key: value})."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        if end > begin:
            t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=dtype)
        else:
            t = torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"])
    for alias, target in json.loads(metadata.get("tessera.aliases", "{}")).items():
        tensors[alias] = tensors[target]
    return tensors, metadata


def save(path, tensors, metadata=None):
    """Writes {name: tensor} (largest element size first, so every tensor stays aligned)."""
    names = sorted(tensors, key=lambda k: -tensors[k].element_size())
    header = {"__metadata__": metadata} if metadata else {}
    chunks, offset = [], 0
    for name in names:
        t = tensors[name].detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
