"""tessera.context (infinicore.context): devices, streams, DeviceEvent with torch.cuda.Event
semantics on the CPU's host stream, and graph recording whose replays equal eager runs on new
inputs, with elementwise chains fused into one pass that allocates nothing."""
import time

import numpy as np
import pytest

import tessera
import tessera.nn.functional as F
from tessera import context


def test_devices_and_the_host_stream():
    assert context.get_device() == tessera.device("cpu")
    assert context.device_count("cpu") == 1
    assert context.device_count("cuda") == tessera.cuda.device_count()
    context.set_device("cpu")
    s = context.get_stream()
    assert s.device == tessera.device("cpu") and s == context.get_stream()
    s.synchronize()
    context.sync_stream()
    context.sync_device()
    with pytest.raises(ValueError, match=r"^\[context.set_device\] expected cpu or cpu:0"):
        context.set_device("cpu:1")


@pytest.mark.skipif(tessera.cuda.is_available(), reason="checks the CPU-only build")
def test_cuda_context_needs_the_cuda_backend():
    with pytest.raises(NotImplementedError, match="CUDA backend"):
        context.set_device("cuda:0")
    with pytest.raises(NotImplementedError):
        context.Stream("cuda:0")
    assert context.get_device() == tessera.device("cpu")


@pytest.mark.skipif(not tessera.cuda.is_available(), reason="needs a GPU")
def test_cuda_events_time_device_work():
    context.set_device("cuda:0")
    try:
        s = context.Stream()
        start, end = tessera.DeviceEvent(enable_timing=True), tessera.DeviceEvent(enable_timing=True)
        start.record(s)
        x = tessera.randn(2048, 2048, device="cuda")
        y = x @ x
        end.record()
        end.synchronize()
        assert end.query() and start.elapsed_time(end) >= 0
        assert y.shape == (2048, 2048)
    finally:
        context.set_device("cpu")


def test_device_event_semantics_on_the_host_stream():
    e = tessera.DeviceEvent()
    assert e is not None and not e.is_recorded and e.query()  # never recorded: nothing to wait for
    start = tessera.DeviceEvent(enable_timing=True)
    end = tessera.DeviceEvent(enable_timing=True)
    start.record()
    time.sleep(0.02)
    end.record(context.get_stream())
    assert start.query() and end.query() and end.device == tessera.device("cpu")
    end.synchronize()
    end.wait()
    ms = start.elapsed_time(end)
    assert 15.0 <= ms < 2000.0
    assert end.elapsed_time(start) < 0
    with pytest.raises(ValueError, match="enable_timing=True"):
        e.elapsed_time(end)
    with pytest.raises(ValueError, match="expected both events recorded"):
        start.elapsed_time(tessera.DeviceEvent(enable_timing=True))


def chain(x, bias):
    return tessera.sigmoid(F.relu(x * 2.0 + bias) - 1.5) * x


def test_fused_elementwise_chain_equals_eager_bitwise_and_allocates_nothing():
    tessera.manual_seed(0)
    x, bias = tessera.randn(64, 300), tessera.randn(300)
    context.start_graph_recording()
    assert context.is_graph_recording()
    y = chain(x, bias)
    graph = context.stop_graph_recording()
    stats = graph.stats()
    assert stats["fused_passes"] == 1 and stats["fused_kernels"] == 6
    assert stats["launches"] == 1 and graph.steps[0].startswith("fused(")
    assert stats["freed_intermediates"] == 5
    for _ in range(3):
        x.copy_(tessera.randn(64, 300))
        bias.copy_(tessera.randn(300))
        graph.run()
        assert graph.stats()["last_replay_allocations"] == 0
        np.testing.assert_array_equal(y.numpy(), chain(x, bias).numpy())
    assert graph.stats()["replays"] == 3


def test_layer_norm_gelu_residual_chain():
    tessera.manual_seed(1)
    norm = tessera.nn.LayerNorm(96)
    x = tessera.randn(4, 17, 96)

    def block(x):
        return F.gelu(norm(x), approximate="tanh") + x

    with tessera.no_grad():
        context.start_graph_recording()
        y = block(x)
        graph = context.stop_graph_recording()
    assert graph.stats()["launches"] == 2  # layer_norm, then gelu + add in one pass
    x.copy_(tessera.randn(4, 17, 96))
    graph.run()
    with tessera.no_grad():
        np.testing.assert_array_equal(y.numpy(), block(x).numpy())


def test_mlp_block_replays_on_new_inputs_with_autograd_off():
    tessera.manual_seed(2)
    mlp = tessera.nn.Sequential(
        tessera.nn.Linear(32, 128), tessera.nn.GELU(), tessera.nn.Linear(128, 32)
    )
    x = tessera.randn(8, 32)
    context.start_graph_recording()
    y = mlp(x) + x
    graph = context.stop_graph_recording()
    assert not y.requires_grad and tessera.is_grad_enabled()
    results = []
    for _ in range(2):
        x.copy_(tessera.randn(8, 32))
        graph.run()
        with tessera.no_grad():
            np.testing.assert_allclose(y.numpy(), (mlp(x) + x).numpy(), rtol=1e-6, atol=1e-6)
        results.append(y.numpy().copy())
    assert not np.array_equal(results[0], results[1])  # new inputs give new results


def test_attention_decoder_step_with_a_kv_cache():
    tessera.manual_seed(3)
    B, H, D, T = 2, 4, 8, 7
    C = H * D
    qkv, proj = tessera.nn.Linear(C, 3 * C), tessera.nn.Linear(C, C)
    k_cache, v_cache = tessera.randn(B, H, T, D), tessera.randn(B, H, T, D)
    x = tessera.randn(B, 1, C)

    def heads(t):
        return t.view(B, 1, H, D).transpose(1, 2)

    def step(x):
        q, k, v = qkv(x).split(C, -1)
        k = tessera.cat([k_cache, heads(k)], 2)
        v = tessera.cat([v_cache, heads(v)], 2)
        a = F.scaled_dot_product_attention(heads(q), k, v)
        return x + proj(a.transpose(1, 2).reshape(B, 1, C))

    context.start_graph_recording()
    y = step(x)
    graph = context.stop_graph_recording()
    x.copy_(tessera.randn(B, 1, C))
    v_cache.copy_(tessera.randn(B, H, T, D))
    graph.run()
    with tessera.no_grad():
        np.testing.assert_allclose(y.numpy(), step(x).numpy(), rtol=1e-6, atol=1e-6)


def test_bad_use_raises_clear_errors():
    with pytest.raises(RuntimeError, match=r"^\[stop_graph_recording\] expected a recording"):
        context.stop_graph_recording()
    context.start_graph_recording()
    with pytest.raises(RuntimeError, match=r"^\[start_graph_recording\] expected no recording"):
        context.start_graph_recording()
    context.stop_graph_recording()

    x = tessera.randn(4)
    for body, message in [
        (lambda: tessera.rand(3), r"\[graph\] cannot record rand: random ops"),
        (lambda: F.dropout(x, 0.5, training=True), r"called by dropout"),
        (lambda: x.add_(1.0), r"tensor made before recording"),
        (lambda: tessera.multinomial(x.abs() + 0.1, 2), r"cannot record multinomial"),
    ]:
        context.start_graph_recording()
        with pytest.raises(RuntimeError, match=message):
            body()
        with pytest.raises(RuntimeError, match=r"the recording failed"):
            context.stop_graph_recording()
        assert not context.is_graph_recording()
