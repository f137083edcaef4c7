"""ModuleDict, ModuleList and Sequential with torch's container protocol, and module forward hooks
(pre-hooks replacing arguments, forward hooks replacing outputs, removable handles), each compared
with torch 1.13 running the same code."""
import gc

import numpy as np
import pytest
import torch

import tessera

FRAMEWORKS = [tessera, torch]


def np_of(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach().numpy())


def containers(fw):
    nn = fw.nn
    d = nn.ModuleDict({"proj": nn.Linear(2, 3), "act": nn.ReLU()})
    d["out"] = nn.Linear(3, 1)
    d.update([("extra", nn.GELU())])
    lst = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
    lst.append(nn.ReLU())
    lst.extend([nn.SiLU(), nn.GELU()])
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seq.append(nn.Linear(2, 1))
    return d, lst, seq


@pytest.mark.parametrize("fw", FRAMEWORKS, ids=["tessera", "torch"])
def test_container_protocol_matches_torch(fw):
    d, lst, seq = containers(fw)
    assert list(d) == list(d.keys()) == ["proj", "act", "out", "extra"]
    assert len(d) == 4 and "act" in d and "missing" not in d
    assert d["proj"] is d.proj and [k for k, _ in d.items()] == list(d.keys())
    assert [type(m).__name__ for m in d.values()] == ["Linear", "ReLU", "Linear", "GELU"]
    assert [n for n, _ in d.named_parameters()] == [
        "proj.weight",
        "proj.bias",
        "out.weight",
        "out.bias",
    ]
    with pytest.raises(KeyError):
        d["missing"]

    assert len(lst) == 5 and type(lst[-1]).__name__ == "GELU" and lst[0] in lst
    assert [type(m).__name__ for m in lst] == ["Linear", "Linear", "ReLU", "SiLU", "GELU"]
    sliced = lst[1:4]
    assert type(sliced) is type(lst) and len(sliced) == 3 and sliced[0] is lst[1]
    assert [n for n, _ in lst.named_parameters()][:2] == ["0.weight", "0.bias"]
    with pytest.raises(IndexError):
        lst[5]

    assert len(seq) == 3 and seq[-1] is seq[2] and type(seq[:2]) is type(seq)
    assert [type(m).__name__ for m in seq] == ["Linear", "ReLU", "Linear"]
    assert tuple(seq(fw.ones(4, 2)).shape) == (4, 1)


def test_modules_keep_python_halves_in_containers():
    class Double(tessera.nn.Module):
        def forward(self, x):
            return x * 2

    d = tessera.nn.ModuleDict({"f": Double()})
    lst = tessera.nn.ModuleList(Double() for _ in range(2))  # a generator: nothing else holds them
    seq = tessera.nn.Sequential()
    seq.extend(Double() for _ in range(2))
    gc.collect()
    x = tessera.ones(3)
    assert d["f"](x).tolist() == [2.0] * 3
    assert lst[1](x).tolist() == [2.0] * 3
    assert seq(x).tolist() == [4.0] * 3


def test_container_errors_are_typed():
    nn = tessera.nn
    with pytest.raises(TypeError, match=r"\[ModuleDict\] expected a tessera.nn.Module, got int"):
        nn.ModuleDict({"a": 1})
    with pytest.raises(TypeError, match=r"\[ModuleDict\] expected a str key, got int"):
        nn.ModuleDict()[0] = nn.ReLU()
    with pytest.raises(TypeError, match=r"\[ModuleList\] expected a tessera.nn.Module"):
        nn.ModuleList([nn.ReLU()]).append("relu")
    with pytest.raises(TypeError, match=r"\[Sequential\] expected modules mapping one tensor"):
        nn.Sequential(nn.ModuleList())


def hooked_run(fw):
    """Hooks on a Python model and on a layer inside a Sequential; returns outputs and calls."""
    fw.manual_seed(0)
    nn = fw.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))

        def forward(self, x, scale=1.0):
            return self.body(x) * scale, "aux"

    net = Net()
    with fw.no_grad():
        for i, p in enumerate(net.parameters()):
            p.copy_(fw.linspace(-1, 1, p.numel()).reshape(p.shape) * (i + 1) * 0.3)
    calls = []
    x = fw.linspace(-2, 2, 6).reshape(2, 3)

    def pre(module, args):
        calls.append(("pre", type(module).__name__, len(args)))
        return args[0] + 1  # a non-tuple replaces the first argument

    def capture(module, args, output):
        calls.append(("fwd", type(module).__name__, tuple(output.shape)))

    def negate(module, args, output):
        return -output

    def replace_aux(module, args, output):
        return output[0], "replaced"

    outs = [net(x, scale=2.0)[0]]
    h_pre = net.register_forward_pre_hook(pre)
    h_cap = net.body[0].register_forward_hook(capture)  # fires inside the container
    h_neg = net.body[2].register_forward_hook(negate)
    h_aux = net.register_forward_hook(replace_aux)
    y, aux = net(x, scale=2.0)
    outs.append(y)
    assert aux == "replaced"
    y.sum().backward()
    grad = net.body[0].weight.grad
    for h in (h_pre, h_neg, h_aux):
        h.remove()
    h_neg.remove()  # a second remove is a no-op
    outs.append(net(x, scale=2.0)[0])
    h_cap.remove()
    outs.append(net(x)[0])
    return [np_of(o) for o in outs] + [np_of(grad)], calls


def test_forward_hooks_match_torch():
    ours, our_calls = hooked_run(tessera)
    ref, ref_calls = hooked_run(torch)
    assert our_calls == ref_calls
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(ours[0], ours[1])  # the hooks changed the output


def test_hook_handle_as_context_manager_and_errors():
    lin = tessera.nn.Linear(2, 2)
    seen = []
    with lin.register_forward_hook(lambda m, a, o: seen.append(1)):
        lin(tessera.ones(2))
    lin(tessera.ones(2))
    assert seen == [1]
    with pytest.raises(TypeError, match=r"\[register_forward_hook\] expected a callable, got int"):
        lin.register_forward_hook(3)
    with pytest.raises(TypeError, match=r"\[register_forward_pre_hook\] expected a callable"):
        lin.register_forward_pre_hook(None)


def test_apply_initialises_like_nanogpt():
    def init(fw):
        fw.manual_seed(0)
        nn = fw.nn
        model = nn.ModuleDict({"wte": nn.Embedding(5, 4), "h": nn.ModuleList([nn.Linear(4, 4)])})
        seen = []

        def _init(m):
            seen.append(type(m).__name__)
            if isinstance(m, nn.Linear):
                nn.init.constant_(m.weight, 0.5)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.constant_(m.weight, 0.25)

        assert model.apply(_init) is model
        return seen, {k: np_of(v) for k, v in model.state_dict().items()}

    ours, ref = init(tessera), init(torch)
    assert ours[0] == ref[0]
    for k in ref[1]:
        np.testing.assert_array_equal(ours[1][k], ref[1][k])
