"""Indexing and slicing with torch's semantics (numpy's, except that an int next to index
tensors selects first): basic items become views, advanced ones (index tensors, masks, lists)
gather; assignment writes through views, and autograd follows the writes as torch's does."""
import numpy as np
import pytest
import torch

import tessera

A = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)


def idx(values):
    return tessera.tensor(values)


KEYS = [
    (1,),
    (-1, slice(1, None), slice(None, None, 2)),
    (Ellipsis, 0),
    (None, 0, Ellipsis, None),
    (slice(None), None, slice(1, 3)),
    (slice(-3, -1), 2),
    (slice(None), [0, 2]),
    ([1, 0], [2, 1]),
    (slice(None), [0, 2], slice(None), [1, 4]),  # non-adjacent: indexed dims go first
    (slice(None), [[0], [2]], [1, 3]),  # broadcast index tensors
    (0, slice(None), [-1, 0]),  # negative indices
    (Ellipsis, [4, 4, 0]),
]


@pytest.mark.parametrize("key", KEYS, ids=[str(i) for i in range(len(KEYS))])
def test_getitem_matches_torch(key):
    t = tessera.from_numpy(A.copy())
    got = t[tuple(idx(k) if isinstance(k, list) else k for k in key)]
    want = torch.from_numpy(A.copy())[
        tuple(torch.tensor(k) if isinstance(k, list) else k for k in key)
    ]
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_basic_indexing_returns_views():
    t = tessera.arange(12.0).reshape(3, 4)
    v = t[1:, ::2]
    assert v.shape == (2, 2) and v.stride() == (4, 2)
    v.fill_(-1)
    assert t.tolist() == [[0, 1, 2, 3], [-1, 5, -1, 7], [-1, 9, -1, 11]]
    assert t[..., 0].tolist() == [0, -1, -1] and t[None].shape == (1, 3, 4)
    assert t[1, 2].shape == () and t[True].shape == (1, 3, 4)


def test_masks_and_index_tensors():
    t = tessera.tensor([[1.0, -2.0], [-3.0, 4.0]])
    assert t[t > 0].tolist() == [1.0, 4.0]
    assert t[idx([1, 1, 0])].tolist() == [[-3.0, 4.0], [-3.0, 4.0], [1.0, -2.0]]
    assert t[idx([True, False])].tolist() == [[1.0, -2.0]]
    assert t[:, idx([1])].tolist() == [[-2.0], [4.0]]
    assert t[idx(1)].tolist() == [-3.0, 4.0]  # a 0-d index tensor drops the dim


def test_setitem_basic_and_advanced():
    a = np.zeros((3, 4))
    t = tessera.zeros(3, 4, dtype=tessera.float64)
    for key, value in [
        ((slice(1, None),), 1.0),
        ((slice(None), slice(None, None, 2)), np.array([5.0, 6.0])),
        ((0,), np.arange(4.0)),
        ((np.array([2, 0]), np.array([3, 1])), np.array([-7.0, -8.0])),
        ((slice(None), [0, 3]), np.array([[1.0, 2.0]])),
        ((Ellipsis, 2), 9.0),
    ]:
        a[key] = value
        tkey = tuple(
            idx(k.tolist()) if isinstance(k, np.ndarray) else idx(k) if isinstance(k, list) else k
            for k in key
        )
        t[tkey] = value if isinstance(value, float) else tessera.from_numpy(value.copy())
        np.testing.assert_array_equal(t.numpy(), a)
    m = t > 3
    t[m] = 0.5
    a[a > 3] = 0.5
    np.testing.assert_array_equal(t.numpy(), a)
    t[idx([2]), idx([0])] = -3.0
    a[2, 0] = -3.0
    t[t < 0] = tessera.tensor([10.0, 20.0], dtype=tessera.float64)
    a[a < 0] = [10.0, 20.0]
    np.testing.assert_array_equal(t.numpy(), a)


def test_setitem_casts_and_accepts_lists():
    t = tessera.zeros(3, dtype=tessera.int64)
    t[1:] = tessera.tensor([1.9, 2.2])
    t[0] = 5
    assert t.tolist() == [5, 1, 2]
    t[idx([0, 2])] = [7, 8]
    assert t.tolist() == [7, 1, 8]


def test_gradients_through_indexing():
    x = tessera.arange(6.0).reshape(2, 3).requires_grad_()
    (x[0, 1:] * 2).sum().backward()
    assert x.grad.tolist() == [[0, 2, 2], [0, 0, 0]]
    x.grad = None
    x[idx([1, 1]), idx([0, 2])].sum().backward()
    assert x.grad.tolist() == [[0, 0, 0], [1, 0, 1]]
    x.grad = None
    x[x > 2].sum().backward()
    assert x.grad.tolist() == [[0, 0, 0], [1, 1, 1]]


def test_setitem_is_recorded_by_autograd():
    x = tessera.ones(4, requires_grad=True)
    y = x * 2
    y[1:3] = 0.0
    y[idx([0])] = x[idx([3])] * 5
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 7.0]


def _assignments(lib, x, w):
    """Writes through views of a graph tensor and of a plain one; returns what to backward."""
    y = x * 1
    y[:, 1] = y[:, 0].clone() * w[0]  # the source is y's own old values
    y[lib.tensor([0, 2]), 2:] *= w[1]  # advanced rows, updated in place
    view_taken_before = y[1]
    y.mul_(2)
    plain = lib.zeros(3, 4)
    plain[1:, ::2] = x[:2, :2] * w[2]  # a tensor that required no grad starts to
    plain[0] = 1.0
    return (y * y).sum() + (view_taken_before * 3).sum() + (plain * plain).sum()


def test_assignments_through_views_match_torch_gradients():
    values = np.linspace(-1.5, 2.0, 12).reshape(3, 4)
    weights = np.array([0.5, -2.0, 3.0])
    grads = []
    for lib in (torch, tessera):
        x = lib.tensor(values.tolist(), requires_grad=True)
        w = lib.tensor(weights.tolist(), requires_grad=True)
        _assignments(lib, x, w).backward()
        grads.append((np.array(x.grad.tolist()), np.array(w.grad.tolist())))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-5, atol=1e-5)


def test_index_errors():
    t = tessera.zeros(2, 3)
    with pytest.raises(IndexError, match="out of bounds for dimension 1 with size 3"):
        t[0, 3]
    with pytest.raises(IndexError, match="out of bounds"):
        t[idx([0, 2])]
    with pytest.raises(IndexError, match="at most 2 indices"):
        t[0, 0, 0]
    with pytest.raises(IndexError, match="mask of shape"):
        t[tessera.ones(3, dtype=tessera.bool)]
    with pytest.raises(IndexError, match="integer or bool"):
        t[tessera.zeros(1)]
    with pytest.raises(ValueError, match="step > 0"):
        t[::-1]
    with pytest.raises(TypeError, match="expected int, slice"):
        t["a"]
    with pytest.raises(IndexError, match="expected int, slice.*got float"):  # torch's type
        t[1.5]


def test_a_huge_step_takes_the_first_element():
    # (e - b + step - 1) / step and stride * step overflowed int64.
    import sys
    x = tessera.arange(5)
    assert x[::sys.maxsize].tolist() == [0]
    assert x[1::sys.maxsize].tolist() == [1]
    assert x[::2].tolist() == [0, 2, 4]


def test_a_0d_mask_on_a_0d_tensor():
    # torch: a 0-d mask adds a unit dim (it read past the end of a 0-d tensor's shape).
    x, tx = tessera.tensor(5.0), torch.tensor(5.0)
    for m in (True, False):
        assert x[tessera.tensor(m)].tolist() == tx[torch.tensor(m)].tolist()


def test_a_numpy_integer_indexes_as_an_int():
    # It went through index_select (a copy), so writes through the result were lost.
    x = tessera.zeros(3, 2)
    x[np.int64(1)].fill_(1.0)
    assert x.tolist() == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    assert x[np.int32(-1)].tolist() == [0.0, 0.0]
    assert x[np.array([0, 1])].shape == (2, 2)  # arrays stay index tensors
