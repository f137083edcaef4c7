"""tessera.autograd.Function subclasses written in Python: the same class body runs under tessera
and torch 1.13 and gives the same values and gradients; gradients match central finite
differences in float64; ctx.needs_input_grad, saved outputs, non-tensor arguments, higher-order
gradients and typed errors."""
import numpy as np
import pytest
import torch

import tessera


def make_ops(fw):
    """A custom op pair defined against framework fw (tessera or torch)."""

    class ScaledTanh(fw.autograd.Function):
        """y = alpha * tanh(x * w); saves its output, takes a non-tensor alpha."""

        @staticmethod
        def forward(ctx, x, w, alpha):
            y = alpha * fw.tanh(x * w)
            ctx.save_for_backward(x, w, y)
            ctx.alpha = alpha
            return y

        @staticmethod
        def backward(ctx, grad):
            x, w, y = ctx.saved_tensors
            # dy/d(xw) = alpha * (1 - tanh^2) = alpha - y^2 / alpha
            d = grad * (ctx.alpha - y * y / ctx.alpha)
            gx = d * w if ctx.needs_input_grad[0] else None
            gw = (d * x).sum(0) if ctx.needs_input_grad[1] else None
            return gx, gw, None

    class SplitMul(fw.autograd.Function):
        """Two outputs (a * b, a - b), the second often unused."""

        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b, a - b

        @staticmethod
        def backward(ctx, g_prod, g_diff):
            a, b = ctx.saved_tensors
            return g_prod * b + g_diff, g_prod * a - g_diff

    return ScaledTanh, SplitMul


def run(fw, x0, w0):
    ScaledTanh, SplitMul = make_ops(fw)
    x = fw.tensor(x0, dtype=fw.float64, requires_grad=True)
    w = fw.tensor(w0, dtype=fw.float64, requires_grad=True)
    y = ScaledTanh.apply(x, w, 1.5)
    p, d = SplitMul.apply(y, x)
    loss = (p * p).sum() + d.sum() * 0.5 + SplitMul.apply(x, w)[0].sum()  # second output unused
    loss.backward()
    return [t.detach().numpy() for t in (y, p, d, loss, x.grad, w.grad)]


def test_matches_torch():
    rng = np.random.default_rng(0)
    x0, w0 = rng.standard_normal((4, 3)), rng.standard_normal(3)
    for a, b in zip(run(tessera, x0, w0), run(torch, x0, w0)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_gradients_match_finite_differences():
    ScaledTanh, _ = make_ops(tessera)
    rng = np.random.default_rng(1)
    x0, w0 = rng.standard_normal((3, 2)), rng.standard_normal(2)
    probe = rng.standard_normal((3, 2))  # loss = sum(probe * f(x, w))

    def loss_of(xv, wv):
        y = ScaledTanh.apply(tessera.tensor(xv), tessera.tensor(wv), 0.7)
        return float((y * tessera.tensor(probe)).sum())

    x = tessera.tensor(x0, requires_grad=True)
    w = tessera.tensor(w0, requires_grad=True)
    (ScaledTanh.apply(x, w, 0.7) * tessera.tensor(probe)).sum().backward()
    eps = 1e-6
    for value, grad in ((x0, x.grad.numpy()), (w0, w.grad.numpy())):
        numeric = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            hi, lo = value.copy(), value.copy()
            hi[i] += eps
            lo[i] -= eps
            args_hi = (hi, w0) if value is x0 else (x0, hi)
            args_lo = (lo, w0) if value is x0 else (x0, lo)
            numeric[i] = (loss_of(*args_hi) - loss_of(*args_lo)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def test_ctx_needs_input_grad_and_no_graph_without_grad():
    seen = []

    class Probe(tessera.autograd.Function):
        @staticmethod
        def forward(ctx, a, k, b):
            seen.append(ctx.needs_input_grad)
            assert not tessera.is_grad_enabled()  # forward records nothing itself
            return a * b

        @staticmethod
        def backward(ctx, g):
            seen.append(ctx.needs_input_grad)
            return g, None, None

    a = tessera.ones(2, dtype=tessera.float64, requires_grad=True)
    b = tessera.ones(2, dtype=tessera.float64)
    out = Probe.apply(a, 3, b)
    assert out.grad_fn is not None and out.grad_fn.name() == "ProbeBackward"
    out.sum().backward()
    assert seen == [(True, False, False)] * 2 and a.grad.tolist() == [1.0, 1.0]
    with tessera.no_grad():
        assert Probe.apply(a, 3, b).grad_fn is None


def test_returning_an_input_keeps_its_history_and_double_backward():
    class Ident(tessera.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    class Cube(tessera.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x  # public ops: differentiable again

    x = tessera.tensor([1.0, 2.0], dtype=tessera.float64, requires_grad=True)
    y = Ident.apply(x)
    assert x.is_leaf and y is not x
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    (g,) = tessera.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    (gg,) = tessera.autograd.grad(g.sum(), x)
    assert g.tolist() == [3.0, 12.0] and gg.tolist() == [6.0, 12.0]  # 3x^2, 6x


def test_outputs_sharing_an_input_are_not_written_in_place():
    """As torch: autograd cannot rebuild a returned view's history without bypassing the class's
    backward, so in-place writes through it are refused (torch: "This view was created inside a
    custom Function"), also when the input itself needs no gradient."""

    def make_head(fw):
        class Head(fw.autograd.Function):
            @staticmethod
            def forward(ctx, x, a):
                return x[0:2]

            @staticmethod
            def backward(ctx, g):
                full = fw.zeros(4, dtype=g.dtype)
                full[0:2] = g
                return full, None

        return Head

    for fw, error in [(tessera, RuntimeError), (torch, RuntimeError)]:
        Head = make_head(fw)
        a = fw.ones(4, requires_grad=True)
        for x in [fw.ones(4, requires_grad=True) * 1, fw.ones(4)]:
            head = Head.apply(x, a)
            assert head.requires_grad
            with pytest.raises(error):
                head.mul_(2)
    Head = make_head(tessera)
    with pytest.raises(RuntimeError, match="function with its own backward"):
        Head.apply(tessera.ones(4), tessera.ones(4, requires_grad=True)).mul_(2)


def scale_op(name, backward_result):
    """x * k whose backward returns backward_result(g)."""

    class Op(tessera.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return backward_result(g)

    Op.__name__ = name
    return Op


def test_errors_are_typed():
    WrongCount = scale_op("WrongCount", lambda g: g)
    GradForInt = scale_op("GradForInt", lambda g: (g, g))
    x = tessera.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match=r"\[WrongCountBackward\] expected backward to return 2"):
        WrongCount.apply(x, 2).sum().backward()
    with pytest.raises(TypeError, match=r"gradient 1 to be None \(a non-tensor argument\)"):
        GradForInt.apply(x, 2).sum().backward()
    with pytest.raises(TypeError, match=r"\[WrongCount.apply\] expected positional arguments"):
        WrongCount.apply(x, k=2)
    with pytest.raises(NotImplementedError):
        tessera.autograd.Function.apply(x)
