"""tessera.nn from Python: Module subclasses registering attributes like torch, Parameter,
buffers, state dicts, containers holding Python-defined modules, mode/dtype switches, init."""
import gc

import pytest

import tessera
from tessera import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.scale = nn.Parameter(tessera.ones(8))
        self.plain = tessera.zeros(8)  # a plain tensor attribute is not a parameter (torch)
        self.register_buffer("steps", tessera.zeros(1))
        self.register_buffer("cache", tessera.zeros(2), persistent=False)

    def forward(self, x):
        return self.fc(x) * self.scale


def test_attributes_register_in_torch_order():
    b = Block()  # own entries first, then children's (torch's order)
    assert [n for n, _ in b.named_parameters()] == ["scale", "fc.weight", "fc.bias"]
    assert list(b.state_dict()) == ["scale", "steps", "fc.weight", "fc.bias"]
    assert [n for n, _ in b.named_buffers()] == ["steps", "cache"]
    assert b.scale is b.scale and isinstance(b.scale, nn.Parameter)
    assert isinstance(b.scale, tessera.Tensor) and b.scale.requires_grad
    assert b.steps.shape == (1,)  # registered buffers are reachable as attributes
    assert b.num_parameters() == 4 * 8 + 8 + 8
    assert [n for n, _ in b.named_modules()] == ["", "fc"] and len(b.children()) == 1
    assert "Parameter containing" in repr(b.scale)


def test_reassigning_a_buffer_replaces_it():
    b = Block()
    b.steps = b.steps + 5  # torch replaces the registered buffer; it was a Python attribute only
    assert b.state_dict()["steps"].tolist() == [5.0]
    b.to(tessera.float64)
    assert b.steps.dtype == tessera.float64 and b.state_dict()["steps"].dtype == tessera.float64


def test_to_takes_flags_as_flags():
    b = Block()
    b.to("cpu", non_blocking=False)  # False was taken as a device (cuda:0)
    b.to(dtype=tessera.float64, non_blocking=True)
    assert b.scale.dtype == tessera.float64 and b.scale.device.type == "cpu"
    with pytest.raises(TypeError, match="Module.to"):
        b.to(memory_format=1)


def test_forward_call_and_gradients():
    b = Block()
    out = b(tessera.ones(2, 4))
    assert out.shape == (2, 8)
    out.sum().backward()
    assert b.scale.grad is not None and b.fc.weight.grad.shape == (8, 4)
    b.zero_grad()
    assert b.scale.grad is None


def test_assignment_before_init_raises():
    class Early(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(1, 1)
            super().__init__()

    with pytest.raises(AttributeError, match="super"):
        Early()


def test_module_without_forward_raises():
    class Empty(nn.Module):
        pass

    with pytest.raises(NotImplementedError, match="forward"):
        Empty()(tessera.ones(1))


def test_repr_uses_python_class_names_and_extra_repr():
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(2, 3, bias=False)

        def extra_repr(self):
            return "tied=False"

        def forward(self, x):
            return self.proj(x)

    r = repr(Head())
    assert r.startswith("Head(tied=False") and "(proj): Linear(in_features=2, out_features=3" in r


def test_weight_tying_and_replacement():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, idx):
            return self.head(self.emb(idx))

    m = Tied()
    assert [n for n, _ in m.named_parameters()] == ["emb.weight"]
    assert list(m.state_dict()) == ["emb.weight", "head.weight"]
    m(tessera.tensor([1, 2])).sum().backward()
    assert m.emb.weight.grad is not None
    m.head = nn.Linear(4, 10)
    assert [n for n, _ in m.named_parameters()] == ["emb.weight", "head.weight", "head.bias"]


def test_state_dict_round_trip_and_strictness():
    a, b = Block(), Block()
    b.load_state_dict(a.state_dict())
    assert b.fc.weight.tolist() == a.fc.weight.tolist()
    state = a.state_dict()
    del state["scale"]
    state["extra"] = tessera.zeros(1)
    with pytest.raises(ValueError, match="missing keys"):
        b.load_state_dict(state)
    report = b.load_state_dict(state, strict=False)
    assert report.missing_keys == ["scale"] and report.unexpected_keys == ["extra"]
    # torch raises on a shape mismatch even when not strict (it was silently left unloaded).
    state["fc.weight"] = tessera.zeros(1, 1)
    before = b.fc.bias.tolist()
    state["fc.bias"] = b.fc.bias.detach() + 1
    with pytest.raises(ValueError, match="fc.weight: expected"):
        b.load_state_dict(state, strict=False)
    assert b.fc.bias.tolist() == before  # nothing was loaded


def test_train_eval_to_and_apply():
    b = Block()
    assert b.training and b.eval() is b and not b.training and not b.fc.training
    b.train()
    assert b.fc.training
    w = b.fc.weight
    assert b.to(tessera.float64) is b
    assert w.dtype is tessera.float64 and b.fc.weight.dtype is tessera.float64  # same tensor
    assert b.steps.dtype is tessera.float64 and b.float().scale.dtype is tessera.float32
    names = []
    b.apply(lambda m: names.append(type(m).__name__))
    assert names == ["Linear", "Block"]


def test_containers_keep_python_modules_alive():
    class Double(nn.Module):
        def forward(self, x):
            return x * 2

    seq = nn.Sequential(Double(), nn.ReLU(), Double())
    gc.collect()
    assert seq(tessera.tensor([-1.0, 1.0])).tolist() == [0.0, 4.0]
    assert len(seq) == 3 and isinstance(seq[0], Double) and isinstance(seq[-2], nn.ReLU)
    seq.append(Double())
    assert [type(m).__name__ for m in seq] == ["Double", "ReLU", "Double", "Double"]
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    layers.append(Block())
    assert len(layers) == 4 and isinstance(layers[3], Block)
    assert [n for n, _ in layers.named_parameters()][:2] == ["0.weight", "0.bias"]
    with pytest.raises(TypeError, match="one tensor"):
        nn.Sequential(nn.ModuleList())


def test_layers_match_their_definitions():
    x = tessera.randn(3, 6)
    ln = nn.LayerNorm(6)
    y = ln(x)
    assert y.mean(-1).abs().max().item() < 1e-5 and ln.normalized_shape == (6,)
    assert nn.RMSNorm(6)(x).pow(2).mean(-1).tolist() == pytest.approx([1.0] * 3, rel=1e-4)
    assert nn.Dropout(0.5).eval()(x).tolist() == x.tolist()
    e = nn.Embedding(5, 2, padding_idx=0)
    assert e.weight[0].tolist() == [0.0, 0.0] and e.padding_idx == 0
    assert nn.GELU("tanh")(x).shape == x.shape and nn.SiLU()(x).shape == x.shape


def test_init_functions():
    w = tessera.empty(64, 32)
    nn.init.xavier_uniform_(w)
    bound = (6 / (64 + 32)) ** 0.5
    assert w.abs().max().item() <= bound
    nn.init.constant_(w, 0.5)
    assert w.min().item() == 0.5
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert 0.1 < w.std().item() < 0.4
    assert nn.init.calculate_gain("tanh") == pytest.approx(5 / 3)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.init.calculate_gain("swish")
