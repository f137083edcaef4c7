"""C++ exceptions surface as the Python exception of the same name with the same message, and
InfiniCore's functional set (causal_softmax, random_sample, rearrange, ...) behaves as
documented."""
import pytest

import tessera
import tessera.nn.functional as F


def test_exceptions_map_to_python_types_with_the_cpp_message():
    x = tessera.zeros(2, 3)
    with pytest.raises(ValueError, match=r"^\[view\]|^\[reshape\]"):
        x.view(4, 2)
    with pytest.raises(IndexError, match=r"^\[select\] expected index in"):
        tessera.select(x, 0, 5)
    with pytest.raises(TypeError, match=r"^\[softmax\] expected a floating-point tensor"):
        tessera.softmax(tessera.zeros(2, dtype=tessera.int64), 0)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        F.scaled_dot_product_attention(
            tessera.zeros(1, 1, 2, 2),
            tessera.zeros(1, 1, 2, 2),
            tessera.zeros(1, 1, 2, 2),
            dropout_p=0.1,
        )
    with pytest.raises(RuntimeError, match=r"^\[requires_grad_\]"):
        (tessera.ones(2, requires_grad=True) * 2).requires_grad_(False)
    with pytest.raises(ValueError, match="broadcast|expected"):
        tessera.ones(2) + tessera.ones(3)
    with pytest.raises(TypeError):  # pybind11's own argument check
        tessera.softmax("x", 0)
    # torch: "Integers to negative integer powers are not allowed", by ** as by pow.
    for power in (lambda t: t ** -1, lambda t: t.pow(-1), lambda t: tessera.pow(t, -1)):
        with pytest.raises(ValueError, match=r"^\[pow\] expected a non-negative exponent"):
            power(tessera.tensor([2]))
    assert (tessera.tensor([3]) ** 2).tolist() == [9] and (2 ** tessera.tensor([3])).tolist() == [8]
    # torch refuses bitwise ops on floating tensors; bools mix with integers as in arithmetic.
    for bitwise in (lambda t: t & 1, lambda t: 1 | t, lambda t: ~t, lambda t: t.bitwise_xor(t)):
        with pytest.raises(TypeError, match=r"^\[bitwise_\w+\] expected integer or bool"):
            bitwise(tessera.ones(2))
    mixed = tessera.tensor([True, False]) & 3
    assert mixed.dtype == tessera.int64 and mixed.tolist() == [1, 0]


def test_infinicore_functional_set_is_exposed():
    for name in (
        "causal_softmax",
        "linear",
        "rms_norm",
        "silu",
        "swiglu",
        "rope",
        "embedding",
        "random_sample",
        "add_rms_norm",
        "narrow",
        "squeeze",
        "unsqueeze",
        "rearrange",
    ):
        assert callable(getattr(F, name)), name


def test_causal_softmax_masks_future_keys_bottom_right():
    x = tessera.randn(2, 3, 5)  # 3 new queries after 2 cached keys
    y = F.causal_softmax(x)
    assert y.sum(-1).reshape(-1).tolist() == pytest.approx([1.0] * 6, rel=1e-6)
    assert y[:, 0, 3:].abs().max().item() == 0 and y[:, 1, 4].abs().max().item() == 0
    assert (y[:, 2] > 0).all().item()
    with pytest.raises(ValueError, match="S >= T"):
        F.causal_softmax(tessera.zeros(4, 3))


def test_random_sample_is_seeded_and_respects_topk_topp():
    logits = tessera.tensor([[0.0, 1.0, 2.0, 3.0, 10.0, 9.0]] * 2)
    assert F.random_sample(logits, temperature=0.0).tolist() == [4, 4]
    assert F.random_sample(logits[0], 0.99, 1.0, 2, 1.0).item() in (4, 5)
    tessera.manual_seed(7)
    a = [F.random_sample(logits[0]).item() for _ in range(20)]
    tessera.manual_seed(7)
    assert [F.random_sample(logits[0]).item() for _ in range(20)] == a
    g = tessera.Generator(1)
    flat = tessera.zeros(4)
    counts = [0] * 4
    for _ in range(400):
        counts[F.random_sample(flat, generator=g).item()] += 1
    assert min(counts) > 60  # uniform over 4 tokens
    top = [
        F.random_sample(tessera.tensor([5.0, 4.9, -9.0, -9.0]), topp=0.5, generator=g).item()
        for _ in range(50)
    ]
    assert set(top) == {0}  # the nucleus holds only the top token
    assert (
        F.random_sample(flat, 0.0).dtype is tessera.int64 and F.random_sample(flat, 0.0).shape == ()
    )
    with pytest.raises(ValueError, match="random_val"):
        F.random_sample(flat, 2.0)


def test_rearrange_views_and_errors():
    x = tessera.arange(24.0).reshape(2, 3, 4)
    y = tessera.rearrange(x, "b t (h d) -> b h t d", h=2)
    assert y.shape == (2, 2, 3, 2) and y.data_ptr() == x.data_ptr()  # a view, no copy
    assert x.rearrange("b t c -> (b t) c").shape == (6, 4)
    assert F.rearrange(x, "... c -> c ...").shape == (4, 2, 3)
    assert F.rearrange(x, "b t c -> b 1 t c").shape == (2, 1, 3, 4)
    for pattern, kwargs, match in [
        ("b t c", {}, "'->'"),
        ("b t -> b t", {}, "at least|dims"),
        ("b t c -> b t", {}, "same axes"),
        ("b t (h d) -> b h t d", {}, "sizes for all but one"),
        ("b t (h d) -> b h t d", {"h": 3}, "divisible"),
        ("b t c -> b t c", {"z": 2}, "only for axes"),
        ("b (t -> b t", {}, "unbalanced"),
    ]:
        with pytest.raises(ValueError, match=match):
            tessera.rearrange(x, pattern, **kwargs)
