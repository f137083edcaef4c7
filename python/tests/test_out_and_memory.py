"""torch's out= keyword on the module functions, and tessera.memory's allocator counters."""
import pytest

import tessera

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x, y, out: m.add(x, y, alpha=2, out=out),
        lambda m, x, y, out: m.mul(x, 3.0, out=out),
        lambda m, x, y, out: m.exp(x, out=out),
        lambda m, x, y, out: m.matmul(x, y.T, out=out),
        lambda m, x, y, out: m.sum(x, 1, out=out),
        lambda m, x, y, out: m.cat([x, y], 0, out=out),
        lambda m, x, y, out: m.stack([x, y], out=out),
        lambda m, x, y, out: m.where(x > 0, x, y, out=out),
        lambda m, x, y, out: m.softmax(x, -1, out=out) if m is tessera else m.softmax(x, -1),
    ],
)
def test_out_writes_the_result_into_out_and_returns_it(call):
    vals_x, vals_y = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], [[1.0, 2.0, -3.0], [0.0, -1.0, 4.0]]
    expected = call(torch, torch.tensor(vals_x), torch.tensor(vals_y), None)
    out = tessera.empty(0)  # resized to the result's shape, as torch does
    got = call(tessera, tessera.tensor(vals_x), tessera.tensor(vals_y), out)
    assert got is out
    assert tuple(out.shape) == tuple(expected.shape)
    assert out.reshape(-1).tolist() == pytest.approx(expected.reshape(-1).tolist(), rel=1e-6)


def test_out_of_the_right_shape_keeps_its_storage_and_may_alias_an_input():
    x = tessera.tensor([1.0, 2.0, 3.0])
    out = tessera.zeros(3)
    ptr = out.data_ptr()
    tessera.add(x, x, out=out)
    assert out.data_ptr() == ptr and out.tolist() == [2.0, 4.0, 6.0]
    tessera.mul(x, x, out=x)  # the result is computed before it is written
    assert x.tolist() == [1.0, 4.0, 9.0]


def test_out_casts_safely_and_refuses_unsafe_casts_and_autograd():
    ints = tessera.tensor([1, 2])
    out = tessera.empty(2)
    tessera.add(ints, ints, out=out)
    assert out.dtype == tessera.float32 and out.tolist() == [2.0, 4.0]
    with pytest.raises(TypeError, match=r"\[add\] result type float32 can't be cast"):
        tessera.add(out, out, out=tessera.empty(2, dtype=tessera.int64))
    w = tessera.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"\[exp\] .*out="):
        tessera.exp(w, out=tessera.empty(2))
    with tessera.no_grad():
        assert tessera.exp(w * 0, out=tessera.empty(2)).tolist() == [1.0, 1.0]


def test_memory_counters_follow_allocations_and_peaks():
    mem = tessera.memory
    mem.reset_peak_memory_stats()
    before = mem.memory_allocated()
    assert mem.max_memory_allocated() == before
    big = tessera.empty(1 << 20)  # 4 MiB
    assert mem.memory_allocated() >= before + 4 * 2**20
    del big
    assert mem.memory_allocated() == before
    assert mem.max_memory_allocated() >= before + 4 * 2**20
    assert mem.memory_reserved() >= mem.memory_allocated()
    mem.empty_cache()
    assert mem.memory_stats()["inactive_split_bytes.all.current"] == 0
    mem.reset_peak_memory_stats("cpu")
    assert mem.max_memory_allocated("cpu") == mem.memory_allocated("cpu")
    with pytest.raises(ValueError):
        mem.memory_stats("tpu")
