"""PyTorch parity for every registered op, driven by the case table (optable_core, optable_nn):
forward values and input gradients in float32 and float64, bfloat16 forward values, from
identical inputs. The coverage tests fail when an op registered in C++ has no case."""
import numpy as np
import pytest
import torch

import optable_core
import optable_nn
import tessera
from optable import make_inputs, outputs, to_torch

CASES = optable_core.CASES + optable_nn.CASES
REGISTRY = {name: (family, dtypes, diff) for name, family, dtypes, diff in tessera.ops_registry()}

# Registered ops that may go without a case, each with the reason. Empty: random ops are
# compared by distribution and ops torch 1.13 lacks against torch composites (optable_nn).
EXEMPT = {}

# (rtol, atol) for forward values and for gradients, by dtype.
TOL = {"float64": (1e-7, 1e-9), "float32": (1e-4, 1e-5), "bfloat16": (2e-2, 2e-2)}
GRAD_TOL = {"float64": (1e-6, 1e-8), "float32": (1e-3, 1e-4)}


def seeded():
    tessera.manual_seed(0)
    torch.manual_seed(0)


def run(case, lib, inputs):
    fn = case.ref if lib is torch and case.ref is not None else case.fn
    return outputs(fn(lib, *inputs))


def compare(case, got, want, dtype, what, tol=None, check_dtype=True):
    if not isinstance(want, torch.Tensor):
        assert not isinstance(got, tessera.Tensor), f"{what}: got a tensor, torch a {type(want)}"
        assert got == pytest.approx(want, rel=1e-6), f"{what}: {got} vs torch {want}"
        return
    assert isinstance(got, tessera.Tensor), f"{what}: got {type(got).__name__}, torch a tensor"
    assert tuple(got.shape) == tuple(
        want.shape
    ), f"{what}: shape {tuple(got.shape)} vs torch {tuple(want.shape)}"
    if check_dtype and case.check_dtype:
        assert (
            got.dtype.name == str(want.dtype).split(".")[-1]
        ), f"{what}: {got.dtype} vs torch {want.dtype}"
    if case.check == "meta":
        return
    g = to_torch(got)
    if case.check == "stats":
        gf, wf = g.double(), want.double()
        scale = max(1.0, wf.abs().mean().item())
        assert (
            abs(gf.mean() - wf.mean()) < 0.02 * scale
        ), f"{what}: mean {gf.mean()} vs torch {wf.mean()}"
        assert (
            abs(gf.std() - wf.std()) < 0.02 * scale
        ), f"{what}: std {gf.std()} vs torch {wf.std()}"
        return
    if case.check == "sorted":
        g, want = g.flatten().sort().values, want.flatten().sort().values
    if not (g.is_floating_point() or want.is_floating_point()):
        assert torch.equal(g.to(want.dtype), want), f"{what}:\n got {g}\nwant {want}"
        return
    rtol, atol = tol or case.tol.get(dtype) or TOL.get(dtype, TOL["float32"])
    torch.testing.assert_close(
        g.double(),
        want.double(),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        msg=lambda m: f"{case.id} {what} ({dtype}): {m}",
    )


def compare_gradients(case, got, want, tess_in, torch_in, dtype):
    """Backward of sum(out * v) with the same random v for every differentiable output."""
    rng = np.random.default_rng(7)
    t_loss = r_loss = None
    for g, w in zip(got, want):
        if not (isinstance(w, torch.Tensor) and w.requires_grad):
            continue
        v = rng.standard_normal(tuple(w.shape)).astype(dtype)
        assert isinstance(g, tessera.Tensor) and g.requires_grad, f"{case.id}: output needs grad"
        t_term, r_term = (g * tessera.from_numpy(v.copy())).sum(), (
            w * torch.from_numpy(v.copy())
        ).sum()
        t_loss = t_term if t_loss is None else t_loss + t_term
        r_loss = r_term if r_loss is None else r_loss + r_term
    if r_loss is None:
        return
    r_loss.backward()
    t_loss.backward()
    for i, (t, r) in enumerate(zip(tess_in, torch_in)):
        if not r.requires_grad:
            continue
        if r.grad is None:
            assert t.grad is None or not t.grad.abs().sum().item(), f"{case.id}: input {i} grad"
            continue
        if t.grad is None:  # no gradient reached the input: torch's must be all zeros
            assert not r.grad.abs().sum().item(), f"{case.id}: input {i} got no gradient"
            continue
        compare(case, t.grad, r.grad, dtype, f"grad of input {i}", tol=GRAD_TOL[dtype])


def forward_params():
    return [
        pytest.param(c, dt, id=f"{c.id}-{dt or 'nodtype'}")
        for c in CASES
        for dt in (c.dtypes or (None,))
    ]


@pytest.mark.parametrize("case,dtype", forward_params())
def test_forward_and_gradients(case, dtype):
    grad = case.grad and dtype in ("float32", "float64")
    tess_in, torch_in = make_inputs(case, dtype or "float32", grad)
    seeded()
    got = run(case, tessera, tess_in)
    seeded()
    want = run(case, torch, torch_in)
    assert len(got) == len(want), f"{len(got)} outputs vs torch {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        compare(case, g, w, dtype, f"output {k}")
    if grad:
        compare_gradients(case, got, want, tess_in, torch_in, dtype)


def runs_bfloat16(case):
    if not any(s.floating for s in case.inputs) or case.check != "values":
        return False
    if case.bf16 is not None:
        return case.bf16
    return tessera.bfloat16 in REGISTRY[case.op][1]


@pytest.mark.parametrize("case", [c for c in CASES if runs_bfloat16(c)], ids=lambda c: c.id)
def test_bfloat16_forward(case):
    tess_in, torch_in = make_inputs(case, "bfloat16", grad=False)
    seeded()
    got = run(case, tessera, tess_in)
    seeded()
    try:
        want = run(case, torch, torch_in)
        check_dtype = True
    except RuntimeError:
        # torch 1.13 has no bfloat16 cpu kernel for this op: float32 on the same (rounded) inputs.
        fp32 = [t.float() if t.dtype == torch.bfloat16 else t for t in torch_in]
        want = run(case, torch, fp32)
        check_dtype = False
    for k, (g, w) in enumerate(zip(got, want)):
        compare(case, g, w, "bfloat16", f"output {k}", check_dtype=check_dtype)


def test_every_registered_op_has_a_case():
    missing = sorted(set(REGISTRY) - {c.op for c in CASES} - set(EXEMPT))
    assert not missing, f"ops registered in C++ without a parity case: {missing}"


def test_cases_and_exemptions_name_registered_ops():
    unknown = sorted(({c.op for c in CASES} | set(EXEMPT)) - set(REGISTRY))
    assert not unknown, f"not in tessera.ops_registry(): {unknown}"


def test_every_differentiable_op_has_a_gradient_case():
    graded = {
        c.op
        for c in CASES
        if c.grad and any(s.needs_grad for s in c.inputs) and set(c.dtypes) & {"float32", "float64"}
    }
    missing = sorted(
        n for n, (_, _, diff) in REGISTRY.items() if diff and n not in graded | set(EXEMPT)
    )
    assert not missing, f"differentiable ops without a gradient case: {missing}"
