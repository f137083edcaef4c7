"""tessera.save / tessera.load: round trips of tensors, state dicts and nested checkpoints
(paths and file objects, every dtype), files other safetensors readers see as tensors, torch.save
files read without running their pickle, and clear errors."""
import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest
import torch

import tessera


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.float().tolist() == b.float().tolist()


def test_checkpoint_round_trips_through_a_path_and_a_file_object(tmp_path):
    model = tessera.nn.Linear(3, 2)
    opt = tessera.optim.AdamW(model.parameters(), lr=0.1)
    (model(tessera.randn(4, 3)) ** 2).sum().backward()
    opt.step()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 7,
            "lr": 0.1, "name": "run", "none": None, "shape": (2, 3), 3: [1.5, "x"],
            "bf16": tessera.randn(5).to(tessera.bfloat16), "ids": tessera.arange(6).reshape(2, 3)}
    path = tmp_path / "ckpt.pt"
    tessera.save(ckpt, path)
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt"]  # written atomically, no temporary left
    buf = io.BytesIO()
    tessera.save(ckpt, buf)
    buf.seek(0)
    for got in (tessera.load(path), tessera.load(str(path)), tessera.load(buf)):
        assert list(got) == list(ckpt)
        assert got["step"] == 7 and got["lr"] == 0.1 and got["name"] == "run"
        assert got["none"] is None and got["shape"] == (2, 3) and got[3] == [1.5, "x"]
        assert same(got["bf16"], ckpt["bf16"]) and same(got["ids"], ckpt["ids"])
        for k, v in ckpt["model"].items():
            assert same(got["model"][k], v), k
        restored = tessera.optim.AdamW(model.parameters(), lr=0.1)
        restored.load_state_dict(got["optimizer"])
        assert restored.state_dict().keys() == opt.state_dict().keys()
    model2 = tessera.nn.Linear(3, 2)
    model2.load_state_dict(tessera.load(path)["model"])
    assert same(model2.weight, model.weight)


def test_a_plain_tensor_and_map_location():
    buf = io.BytesIO()
    x = tessera.randn(3, 4)
    tessera.save(x, buf)
    buf.seek(0)
    y = tessera.load(buf, map_location="cpu")
    assert same(x, y)


def test_the_file_is_safetensors_other_readers_can_read(tmp_path):
    path = tmp_path / "sd.safetensors"
    tessera.save({"w": tessera.ones(2, 2)}, path)
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    assert header["0"]["dtype"] == "F32" and header["0"]["shape"] == [2, 2]
    tensors, _ = tessera.io.load_safetensors(str(path))
    assert tensors["0"].tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_a_safetensors_file_from_another_writer_loads_as_its_tensors(tmp_path):
    path = tmp_path / "other.safetensors"
    tessera.io.save_safetensors(str(path), {"a.weight": tessera.zeros(3)})
    got = tessera.load(path)
    assert list(got) == ["a.weight"] and got["a.weight"].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64,
                                   torch.float16])
def test_torch_save_files_load_without_torch_code(tmp_path, dtype):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(dtype) if dtype.is_floating_point else None
    state = model.state_dict() if model else {"ids": torch.arange(12).reshape(3, 4)}
    # A non-contiguous view sharing its storage with a parameter, and a scalar.
    first = next(iter(state.values()))
    state["view"] = first.t()[1:]
    state["step"] = 3
    path = tmp_path / "torch.pt"
    torch.save(state, path)
    got = tessera.load(path)
    assert list(got) == list(state) and got["step"] == 3
    for k, v in state.items():
        if k == "step":
            continue
        assert tuple(got[k].shape) == tuple(v.shape), k
        assert got[k].float().tolist() == v.float().tolist(), k
    with open(path, "rb") as f:  # and from a file object
        assert list(tessera.load(f)) == list(state)


def test_torch_files_with_code_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"f": os.getcwd, "w": torch.ones(1)}, path)
    with pytest.raises(pickle.UnpicklingError, match="posix.getcwd"):
        tessera.load(path)
    with zipfile.ZipFile(tmp_path / "empty.pt", "w") as z:
        z.writestr("x/other.txt", "")
    with pytest.raises(ValueError, match="one data.pkl"):
        tessera.load(tmp_path / "empty.pt")


def test_unsupported_objects_are_type_errors():
    with pytest.raises(TypeError, match=r"\[tessera.save\] expected .* got ndarray"):
        tessera.save({"a": np.zeros(2)}, io.BytesIO())


def test_torch_file_tensor_outside_its_storage_is_a_value_error():
    # as_strided trusts its arguments: a crafted file read past the storage.
    from tessera._torch_format import _rebuild_tensor
    storage = (np.zeros(4, np.float32), "float32")
    assert _rebuild_tensor(storage, 1, (3,), (1,)).tolist() == [0.0, 0.0, 0.0]
    for offset, size, stride in [(2, (4,), (1,)), (0, (2,), (4,)), (-1, (2,), (1,)),
                                 (0, (2,), (-1,)), (0, (2, 2), (1,))]:
        with pytest.raises(ValueError, match="load"):
            _rebuild_tensor(storage, offset, size, stride)
