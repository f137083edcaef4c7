"""numpy and DLPack exchange: zero-copy both ways, strides preserved, lifetimes tied to the
owners, and the copying constructors tessera.tensor / as_tensor."""
import gc
import sys

import numpy as np
import pytest
import torch

import tessera


def test_from_numpy_shares_memory_and_strides():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tessera.from_numpy(a)
    a[0, 0] = 100
    assert t[0, 0].item() == 100
    t[1, 1] = -1
    assert a[1, 1] == -1
    tt = tessera.from_numpy(a.T)
    assert tt.shape == (4, 3) and tt.stride() == (1, 4) and not tt.is_contiguous()
    assert tessera.from_numpy(a[:, ::2]).tolist() == a[:, ::2].tolist()


def test_from_numpy_keeps_the_array_alive():
    t = tessera.from_numpy(np.full((1000,), 3.0))
    gc.collect()
    assert t.sum().item() == 3000.0


def test_from_numpy_dtypes_and_errors():
    for np_dtype, dtype in [
        (np.bool_, tessera.bool),
        (np.uint8, tessera.uint8),
        (np.int32, tessera.int32),
        (np.float16, tessera.float16),
        (np.float64, tessera.float64),
    ]:
        assert tessera.from_numpy(np.zeros(2, dtype=np_dtype)).dtype is dtype
    reversed_ = np.arange(4.0)[::-1]
    refs = sys.getrefcount(reversed_)
    for _ in range(3):
        with pytest.raises(ValueError, match="non-negative strides"):
            tessera.from_numpy(reversed_)
    assert sys.getrefcount(reversed_) == refs  # a refused array is not kept alive (it leaked)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        tessera.from_numpy([1, 2])
    with pytest.raises((TypeError, ValueError)):
        tessera.from_numpy(np.zeros(2, dtype=np.complex64))


def test_numpy_shares_memory():
    t = tessera.zeros(2, 3)
    a = t.numpy()
    a[1, 2] = 5
    assert t[1, 2].item() == 5
    del t
    gc.collect()
    assert a.sum() == 5  # the array keeps the storage alive
    v = tessera.arange(6.0).reshape(2, 3).T
    assert v.numpy().strides == (4, 12) and v.numpy().tolist() == [[0, 3], [1, 4], [2, 5]]
    assert np.asarray(tessera.ones(2, requires_grad=True)).tolist() == [1.0, 1.0]


def test_numpy_errors():
    with pytest.raises(RuntimeError, match="detach"):
        tessera.ones(2, requires_grad=True).numpy()
    with pytest.raises(TypeError, match="bfloat16"):
        tessera.ones(2, dtype=tessera.bfloat16).numpy()


def test_torch_reads_tessera_memory_through_dlpack():
    t = tessera.arange(12.0).reshape(3, 4)[:, 1::2]
    r = torch.from_dlpack(t)
    assert r.shape == (3, 2) and r.stride() == (4, 2)
    assert r.data_ptr() == t.data_ptr()
    r[0, 0] = 42
    assert t[0, 0].item() == 42
    assert t.__dlpack_device__() == (1, 0)
    b = tessera.ones(3, dtype=tessera.bfloat16) * 1.5
    assert (
        torch.from_dlpack(b).dtype == torch.bfloat16 and torch.from_dlpack(b).tolist() == [1.5] * 3
    )


def test_tessera_reads_torch_memory_through_dlpack():
    r = torch.arange(12, dtype=torch.float64).reshape(3, 4).t()
    t = tessera.from_dlpack(r)
    assert t.shape == (4, 3) and t.stride() == (1, 4) and t.data_ptr() == r.data_ptr()
    r[0, 1] = -5
    assert t[0, 1].item() == -5
    del r
    gc.collect()
    assert t.shape == (4, 3) and t[0, 1].item() == -5  # the torch tensor stays alive
    assert tessera.from_dlpack(torch.ones(2, dtype=torch.bfloat16)).dtype is tessera.bfloat16
    assert tessera.from_dlpack(torch.tensor([1, 2], dtype=torch.int32)).tolist() == [1, 2]


def test_dlpack_capsules():
    cap = tessera.to_dlpack(tessera.ones(2))
    assert torch.utils.dlpack.from_dlpack(cap).tolist() == [1.0, 1.0]
    cap = torch.utils.dlpack.to_dlpack(torch.zeros(3))
    t = tessera.from_dlpack(cap)
    assert t.tolist() == [0.0] * 3
    with pytest.raises(ValueError, match="already used"):
        tessera.from_dlpack(cap)
    tessera.to_dlpack(tessera.ones(4))  # an unconsumed capsule frees its export itself
    with pytest.raises(RuntimeError, match="require grad"):
        tessera.ones(2, requires_grad=True).__dlpack__()
    assert tessera.from_dlpack(np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]


def test_tensor_copies_and_as_tensor_shares():
    a = np.arange(3.0)
    t = tessera.tensor(a)
    a[0] = 9
    assert t.tolist() == [0.0, 1.0, 2.0] and t.dtype is tessera.float64
    s = tessera.as_tensor(a)
    a[1] = 8
    assert s.tolist() == [9.0, 8.0, 2.0]
    assert tessera.tensor([[1, 2], [3, 4]]).dtype is tessera.int64
    assert tessera.tensor([1.0, 2]).dtype is tessera.float32  # torch's default float dtype
    assert tessera.tensor([True]).dtype is tessera.bool
    assert tessera.tensor(2.5, dtype=tessera.float64, requires_grad=True).requires_grad
    r = torch.ones(2, requires_grad=True)
    assert tessera.tensor(r).tolist() == [1.0, 1.0]
    x = tessera.ones(2)
    assert tessera.as_tensor(x) is not None and tessera.as_tensor(x).data_ptr() == x.data_ptr()
    assert tessera.tensor(x).data_ptr() != x.data_ptr()


def test_python_floats_keep_float64_precision():
    # They were rounded through float32 even when float64 was asked for.
    assert tessera.tensor([0.1], dtype=tessera.float64).item() == 0.1
    assert tessera.tensor(1e-50, dtype=tessera.float64).item() == 1e-50
    assert tessera.as_tensor([1e40], dtype=tessera.float64).item() == 1e40
    assert tessera.tensor([0.1]).dtype == tessera.float32  # torch's default dtype


def test_numpy_array_keeps_its_memory_when_the_tensor_gets_new_memory():
    o = tessera.zeros(4)
    a = o.numpy()
    tessera.add(tessera.ones(8), 1, out=o)  # resized: o moves to new memory
    a[:] = 7  # the array's memory is still alive (it was freed with o's old storage)
    assert a.tolist() == [7.0] * 4
    assert o.tolist() == [2.0] * 8


def test_numpy_on_the_left_defers_to_the_tensor():
    # numpy converted the tensor through __array__ and returned an ndarray, silently off the
    # graph; with __array_priority__ it defers to the tensor, which refuses, as torch 1.13 does.
    x, tx = tessera.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    for t in (x, tx):
        with pytest.raises(TypeError):
            np.full(2, 3.0) * t
    assert (x * tessera.from_numpy(np.full(2, 3.0))).requires_grad
