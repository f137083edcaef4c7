"""Autograd from Python: backward/grad, .grad and requires_grad, graph nodes, hooks, and the
grad-mode switches as context managers and decorators."""
import pytest

import tessera
from tessera import autograd


def test_backward_accumulates_into_leaves():
    x = tessera.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert x.is_leaf and x.requires_grad and x.grad is None
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
    (x * 2).sum().backward()
    assert x.grad.tolist() == [4.0, 6.0, 8.0]
    x.grad = None
    assert x.grad is None
    y = x * 3
    assert not y.is_leaf and y.grad_fn is not None and "Backward" in y.grad_fn.name()
    assert isinstance(y.grad_fn.next_functions, tuple)
    y.backward(tessera.ones(3))
    assert x.grad.tolist() == [3.0, 3.0, 3.0]


def test_requires_grad_property_and_method():
    x = tessera.ones(2)
    assert x.requires_grad_() is x and x.requires_grad
    x.requires_grad = False
    assert not x.requires_grad
    with pytest.raises(TypeError, match="floating-point"):
        tessera.ones(2, dtype=tessera.int64).requires_grad_()
    d = (tessera.ones(2, requires_grad=True) * 2).detach()
    assert not d.requires_grad and d.is_leaf


def test_grad_with_create_graph_gives_second_derivatives():
    x = tessera.tensor(2.0, dtype=tessera.float64, requires_grad=True)
    y = x**3
    (dx,) = autograd.grad(y, x, create_graph=True)
    assert dx.item() == pytest.approx(12.0)
    (ddx,) = autograd.grad(dx, x)
    assert ddx.item() == pytest.approx(12.0)
    z = tessera.tensor(1.0, requires_grad=True)
    assert autograd.grad((x * 2,), (x, z), allow_unused=True)[1] is None
    with pytest.raises(RuntimeError):
        autograd.grad(x * 2, z)


def test_backward_twice_needs_retain_graph():
    x = tessera.ones(2, requires_grad=True)
    y = (x.exp() * 2).sum()
    y.backward(retain_graph=True)
    y.backward()
    with pytest.raises(RuntimeError):
        y.backward()
    autograd.backward([(x * 3).sum()])
    assert x.grad.tolist() == pytest.approx([4 * 2.718281828 + 3] * 2)


def test_no_grad_as_context_and_decorator():
    x = tessera.ones(2, requires_grad=True)
    with tessera.no_grad():
        assert not tessera.is_grad_enabled()
        assert not (x * 2).requires_grad
        with tessera.enable_grad():
            assert (x * 2).requires_grad
    assert tessera.is_grad_enabled()

    @tessera.no_grad()
    def f(t):
        return t * 2

    @tessera.no_grad
    def g(t):
        return t * 2

    assert not f(x).requires_grad and not g(x).requires_grad and f.__name__ == "f"
    assert tessera.is_grad_enabled()


def test_set_grad_enabled_and_inference_mode():
    x = tessera.ones(2, requires_grad=True)
    tessera.set_grad_enabled(False)
    assert not (x * 2).requires_grad
    tessera.set_grad_enabled(True)
    with tessera.set_grad_enabled(False):
        assert not tessera.is_grad_enabled()
    assert tessera.is_grad_enabled()
    with tessera.inference_mode():
        assert autograd._C_autograd.is_inference_mode_enabled()
        y = x * 2
    assert not y.requires_grad and not autograd._C_autograd.is_inference_mode_enabled()


def test_hooks_and_retain_grad():
    x = tessera.ones(3, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.tolist()) or g * 10)
    y = x * 2
    y.retain_grad()
    y.sum().backward()
    assert seen == [[2.0, 2.0, 2.0]] and x.grad.tolist() == [20.0] * 3
    assert y.retains_grad and y.grad.tolist() == [1.0] * 3
    done = []
    w = tessera.zeros(2, requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda p: done.append(p.grad.sum().item()))
    (w + 1).sum().backward()
    assert done == [2.0]
    # torch returns a handle: after remove() the hooks no longer run (nor hold their callables).
    x.grad = None
    handle = x.register_hook(lambda g: g * 0)
    handle.remove()
    (x * 2).sum().backward()
    assert x.grad.tolist() == [20.0] * 3  # the first hook still runs, the removed one does not
    with w.register_post_accumulate_grad_hook(lambda p: done.append("removed")):
        pass
    (w + 1).sum().backward()
    assert done == [2.0, 4.0]  # the first hook again (the gradient accumulated)


def test_in_place_changes_are_checked():
    leaf = tessera.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError):
        leaf.add_(1)
    with tessera.no_grad():
        leaf.add_(1)
    assert leaf.tolist() == [2.0, 2.0]
    x = tessera.ones(2, requires_grad=True)
    y = x.exp()
    y.add_(1)  # exp's backward saved y: the gradient would be wrong now
    with pytest.raises(RuntimeError, match="modified|version|in-place"):
        y.sum().backward()


def test_data_rebinds_values_keeping_the_leaf():
    p = tessera.zeros(2, requires_grad=True)
    p.data = tessera.full((2,), 3.0)
    assert p.requires_grad and p.is_leaf and p.tolist() == [3.0, 3.0]
    assert not p.data.requires_grad


def test_writes_through_data_are_untracked_as_torchs():
    # torch: x.data has a version counter of its own, so writing through it leaves tensors saved
    # from x valid (backward then sees the new values), while detach() shares x's counter.
    w = tessera.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (w * w).sum()
    w.data.mul_(2)
    y.backward()
    assert w.grad.tolist() == [4.0, 8.0, 12.0] and w._version == 0
    v = tessera.tensor([1.0, 2.0], requires_grad=True)
    z = (v * v).sum()
    v.detach().mul_(2)
    with pytest.raises(RuntimeError, match="modified|version|in-place"):
        z.backward()
    # A tensor saved from x.data itself sees writes through it, as torch's counter of its own
    # does; views of the alias are untracked too.
    p = tessera.tensor([1.0, 2.0], requires_grad=True)
    alias = p.data
    q = (alias * p).sum()  # saves alias for p's gradient
    alias[0:1].add_(1)
    assert p._version == 0
    with pytest.raises(RuntimeError, match="modified|version|in-place"):
        q.backward()


def test_detect_anomaly_names_the_op():
    x = tessera.tensor([-1.0], requires_grad=True)
    with autograd.detect_anomaly():
        with pytest.raises(RuntimeError, match="Backward"):
            x.sqrt().sum().backward()
