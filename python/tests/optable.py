"""The op-case table's vocabulary: input specs, cases, and identical inputs for both frameworks.

A case names a registered op, its inputs (shape, value kind, layout) and one function
`fn(lib, *inputs)` that runs unchanged with lib = tessera and lib = torch; when torch spells the
op differently, `ref(torch, *inputs)` gives the torch side. The runner (test_ops_parity.py)
compares forward values and input gradients for every case and dtype.
"""
import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

import tessera

FLOAT_KINDS = ("real", "pos", "unit", "const", "special", "zero")


@dataclass
class In:
    """One input. kind: real U(-2, 2), pos U(0.5, 2), unit U(-0.9, 0.9), const (real, no grad),
    special (real with inf/-inf/nan planted), zero, int (integers in [-5, 5]), index ([0, high)),
    perm (each row distinct values of [0, high)), mask (bool). nc: a non-contiguous view
    (transposed storage, or every other element for 1-d)."""

    shape: tuple
    kind: str = "real"
    nc: bool = False
    high: int = 0
    grad: bool = True  # floating kinds real/pos/unit require grad unless this is False

    @property
    def floating(self):
        return self.kind in FLOAT_KINDS

    @property
    def needs_grad(self):
        return self.grad and self.kind in ("real", "pos", "unit")


def R(*shape, nc=False):
    return In(shape, "real", nc)


def P(*shape, nc=False, grad=True):
    return In(shape, "pos", nc, grad=grad)


def U(*shape):
    return In(shape, "unit")


def K(*shape):
    return In(shape, "const")


def I(shape, high):  # noqa: E743  (index, as in the C++ table)
    return In(tuple(shape), "index", high=high)


def M(*shape):
    return In(shape, "mask")


@dataclass
class Case:
    op: str  # the registered C++ op this case exercises
    inputs: list
    fn: Callable  # fn(lib, *inputs) for lib in (tessera, torch)
    ref: Optional[Callable] = None  # ref(torch, *inputs) when torch spells the op differently
    label: str = ""
    dtypes: tuple = ("float32", "float64")  # () runs once (no floating inputs)
    grad: bool = True  # compare input gradients (floating dtypes)
    bf16: Optional[bool] = None  # None: when the registry lists bfloat16 for the op
    check: str = "values"  # values | meta (shape/dtype) | stats (mean/std) | sorted
    tol: dict = field(default_factory=dict)  # per dtype name: (rtol, atol)
    check_dtype: bool = True

    @property
    def id(self):
        return f"{self.op}-{self.label}" if self.label else self.op


def _base_array(spec, rng):
    """The storage array of an input (float64 for floating kinds) before any view."""
    shape = tuple(spec.shape)
    if spec.nc and len(shape) >= 2:
        shape = shape[:-2] + (shape[-1], shape[-2])
    elif spec.nc and len(shape) == 1:
        shape = (shape[0] * 2,)
    k = spec.kind
    if k in ("real", "const", "special"):
        a = rng.uniform(-2, 2, shape)
        if k == "special" and a.size >= 3:
            flat = a.reshape(-1)
            flat[0], flat[1], flat[2] = np.inf, -np.inf, np.nan
        return a
    if k == "pos":
        return rng.uniform(0.5, 2, shape)
    if k == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if k == "zero":
        return np.zeros(shape)
    if k == "int":
        return rng.integers(-5, 6, shape).astype(np.int64)
    if k == "index":
        return rng.integers(0, max(spec.high, 1), shape).astype(np.int64)
    if k == "perm":
        rows = int(np.prod(shape[:-1]))
        perms = np.stack([rng.permutation(spec.high)[: shape[-1]] for _ in range(rows)])
        return perms.reshape(shape).astype(np.int64)
    if k == "mask":
        return rng.uniform(0, 1, shape) < 0.5
    raise ValueError(f"unknown input kind {k}")


def _view(spec, base):
    """The input view of a base (numpy array or tensor of either framework)."""
    if spec.nc and len(spec.shape) >= 2:
        return base.swapaxes(-1, -2)
    if spec.nc and len(spec.shape) == 1:
        return base[::2]
    return base


def make_inputs(case, dtype, grad):
    """Identical inputs as (tessera list, torch list): float32/64 through numpy (separate
    copies), bfloat16 through DLPack from torch; floating inputs require grad when asked."""
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    tess, ref = [], []
    for spec in case.inputs:
        base = _base_array(spec, rng)
        if spec.floating and dtype == "bfloat16":
            tb = torch.from_numpy(base.astype(np.float32)).to(torch.bfloat16)
            rt = _view(spec, tb)
            tt = tessera.from_dlpack(rt)
        else:
            if spec.floating or spec.kind == "int":
                base = base.astype(dtype if spec.floating else case_int_dtype(dtype))
            rt = torch.from_numpy(_view(spec, base.copy()))
            tt = tessera.from_numpy(_view(spec, base.copy()))
        if grad and spec.needs_grad:
            rt.requires_grad_(True)
            tt.requires_grad_(True)
        tess.append(tt)
        ref.append(rt)
    return tess, ref


def case_int_dtype(dtype):
    """Integer inputs take the case's dtype when it is an integer dtype, else int64."""
    return dtype if dtype.startswith(("int", "uint")) else "int64"


def to_torch(value):
    """A tessera tensor as a torch tensor sharing memory (DLPack; numpy for bool, which torch
    1.13's DLPack lacks); other values unchanged."""
    if isinstance(value, tessera.Tensor):
        value = value.detach()
        if value.dtype == tessera.bool:
            return torch.from_numpy(value.numpy())
        return torch.from_dlpack(value)
    return value


def outputs(result):
    """A case result as a list of outputs."""
    if isinstance(result, (tuple, list)):
        return list(result)
    return [result]
