"""The training runtime from Python: autocast, the profiler, activation checkpointing and the
GradScaler, checked against the float32 results and PyTorch's semantics."""
import json
import math

import pytest

import tessera


def test_autocast_policies_and_float32_masters():
    x = tessera.randn(4, 8)
    w = tessera.randn(8, 3, requires_grad=True)
    with tessera.autocast("cpu", dtype=tessera.bfloat16):
        assert tessera.amp.is_autocast_enabled("cpu")
        y = x @ w
        assert y.dtype is tessera.bfloat16  # lower precision for matmul
        s = y.softmax(-1)
        assert s.dtype is tessera.float32  # float32 for softmax
        r = tessera.relu(x)
        assert r.dtype is tessera.float32  # no policy: the input's dtype
    assert not tessera.amp.is_autocast_enabled("cpu")
    assert (x @ w).dtype is tessera.float32
    y.float().sum().backward()
    assert w.grad.dtype is tessera.float32
    want = x.sum(0).unsqueeze(1).expand(8, 3)  # d(sum(x @ w))/dw
    assert tessera.allclose(w.grad, want, rtol=0.02, atol=0.05)


def test_autocast_as_decorator_and_disabled():
    @tessera.autocast("cpu", dtype=tessera.bfloat16)
    def f(a, b):
        return a @ b

    a = tessera.randn(2, 2)
    assert f(a, a).dtype is tessera.bfloat16
    with tessera.autocast("cpu", dtype=tessera.bfloat16):
        with tessera.autocast("cpu", enabled=False):
            assert (a @ a).dtype is tessera.float32
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        with tessera.autocast("cpu", dtype=tessera.float64):
            pass


def test_profiler_table_and_trace(tmp_path):
    lin = tessera.nn.Linear(16, 4)
    x = tessera.randn(8, 16)
    with tessera.profiler.profile() as p:
        with tessera.profiler.record_function("my_block"):
            lin(x).relu().sum().backward()
    table = p.table(row_limit=-1)
    for name in ("linear", "relu", "sum", "my_block", "Backward"):
        assert name in table, name
    rows = {r["name"]: r for r in p.key_averages()}
    assert rows["linear"]["count"] == 1 and rows["my_block"]["kind"] == "user"
    path = tmp_path / "trace.json"
    p.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {"linear", "my_block"} <= {e["name"] for e in events}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)


def test_profiler_activities():
    from tessera.profiler import ProfilerActivity

    assert ProfilerActivity.CPU in tessera.profiler.supported_activities()
    x = tessera.randn(8, 8)
    with tessera.profiler.profile(activities=[ProfilerActivity.CPU]) as p:
        (x @ x).sum()
    rows = {r["name"]: r for r in p.key_averages()}
    assert rows["matmul"]["cuda_time_total_us"] == 0 and "Self CUDA" not in p.table()
    assert p.table(sort_by="self_cpu_time_total") == p.table(sort_by="self")
    with pytest.raises(ValueError, match="ProfilerActivity"):
        tessera.profiler.profile(activities=["cuda"])
    if not tessera.cuda.is_available():
        assert ProfilerActivity.CUDA not in tessera.profiler.supported_activities()
        with pytest.raises(RuntimeError, match="device_time"):
            with tessera.profiler.profile(activities=[ProfilerActivity.CUDA]):
                pass
        return
    y = x.cuda()
    with tessera.profiler.profile() as p:  # CPU and CUDA by default
        (y @ y).sum()
    rows = {r["name"]: r for r in p.key_averages()}
    assert rows["matmul"]["cuda_time_total_us"] > 0 and "Self CUDA" in p.table()


def test_checkpoint_gives_the_same_gradients():
    lin = tessera.nn.Linear(6, 6)
    x = tessera.randn(3, 6, requires_grad=True)

    def block(t):
        return lin(t).tanh() * 2

    block(x).sum().backward()
    gx, gw = x.grad.clone(), lin.weight.grad.clone()
    x.grad = None
    lin.weight.grad = None
    out = tessera.utils.checkpoint.checkpoint(block, x)
    out.sum().backward()
    assert tessera.allclose(x.grad, gx, rtol=0, atol=0)
    assert tessera.allclose(lin.weight.grad, gw, rtol=0, atol=0)


def test_grad_scaler_skips_overflow_and_backs_off():
    w = tessera.tensor([1.0, 2.0], requires_grad=True)
    opt = tessera.optim.SGD([w], lr=0.1)
    scaler = tessera.amp.GradScaler(init_scale=8.0, growth_interval=2)
    scaler.scale((w * float("inf")).sum()).backward()
    assert not scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 4.0 and w.tolist() == [1.0, 2.0]
    for _ in range(2):
        opt.zero_grad()
        scaler.scale((w * w).sum()).backward()
        assert scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 8.0
    assert not any(math.isnan(v) for v in w.tolist())


def test_trainer_accumulates_like_one_batch_and_trains():
    def make():
        tessera.manual_seed(0)
        model = tessera.nn.Linear(4, 3)
        opt = tessera.optim.SGD(model.parameters(), lr=0.1)
        return model, opt

    tessera.manual_seed(1)
    x = tessera.randn(8, 4)
    y = tessera.randint(0, 3, (8,))
    loss = tessera.nn.functional.cross_entropy
    m1, o1 = make()
    t1 = tessera.train.Trainer(m1, lambda a, b: loss(m1(a), b), o1, grad_clip=0)
    m2, o2 = make()
    t2 = tessera.train.Trainer(m2, lambda a, b: loss(m2(a), b), o2, grad_accum=2, grad_clip=0)
    halves = iter([])
    for _ in range(5):
        r1 = t1.step(lambda: [x, y])
        halves = iter([[x[:4], y[:4]], [x[4:], y[4:]]])
        r2 = t2.step(lambda: next(halves))
        assert abs(r1["loss"] - r2["loss"]) < 1e-5 and not r1["skipped"]
    assert tessera.allclose(m1.weight, m2.weight, rtol=1e-5, atol=1e-6)
    assert t1.step_count == 5


def test_cuda_module_reports_devices_and_allocator():
    cuda = tessera.cuda
    if not cuda.is_available():
        assert cuda.device_count() == 0
        with pytest.raises(Exception):
            tessera.ones(2).to("cuda")
        return
    x = tessera.ones(1024, device="cuda")
    assert cuda.memory_allocated() >= 4096
    assert (x * 2).sum().item() == 2048
    del x
    cuda.empty_cache()
    assert cuda.memory_reserved() == cuda.memory_allocated()


def test_set_num_threads_sets_the_kernels_threads():
    before = tessera.get_num_threads()
    try:
        tessera.set_num_threads(1)
        assert tessera.get_num_threads() == 1
        tessera.set_num_threads(2)
        assert tessera.get_num_threads() == 2
    finally:
        tessera.set_num_threads(before)
    with pytest.raises(ValueError, match=r"\[set_num_threads\] expected n >= 1"):
        tessera.set_num_threads(0)


def test_pinned_memory_and_non_blocking_copies_as_torch():
    x = tessera.randn(64, 3)
    assert not x.is_pinned()
    assert x.to("cpu", non_blocking=True) is not None
    if not tessera.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"\[pin_memory\] expected a CUDA device"):
            x.pin_memory()
        return
    p = x.pin_memory()
    assert p.is_pinned() and tessera.allclose(p, x)
    y = p.cuda(non_blocking=True) * 2
    back = y.to("cpu", non_blocking=True)  # pageable destination: the copy completes first
    assert tessera.allclose(back, x * 2)


def test_dataloader_pin_memory_pins_batches_where_a_gpu_can_use_them():
    from tessera.utils.data import DataLoader, TensorDataset

    ds = TensorDataset(tessera.arange(12).reshape(6, 2), tessera.arange(6))
    plain = list(DataLoader(ds, batch_size=4))
    pinned = list(DataLoader(ds, batch_size=4, pin_memory=True))
    assert len(pinned) == len(plain) == 2
    for (x, y), (px, py) in zip(plain, pinned):
        assert tessera.allclose(x, px, rtol=0, atol=0) and tessera.allclose(y, py, rtol=0, atol=0)
        assert px.is_pinned() == tessera.cuda.is_available()
