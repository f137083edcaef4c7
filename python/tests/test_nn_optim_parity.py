"""PyTorch parity for modules and optimizers: layer outputs and every gradient from identical
initial weights (copied from torch through load_state_dict / DLPack), and SGD/Adam/AdamW
trajectories over 20 steps, with schedulers and gradient clipping."""
import math

import numpy as np
import pytest
import torch

import tessera
from optable import to_torch


def assert_close(got, want, rtol=1e-5, atol=1e-6, what=""):
    torch.testing.assert_close(
        to_torch(got).double(),
        want.detach().double(),
        rtol=rtol,
        atol=atol,
        msg=lambda m: f"{what}: {m}",
    )


def same_input(*shape, seed=0, dtype=np.float32):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return tessera.from_numpy(a.copy()), torch.from_numpy(a.copy())


def check_module(tm, rm, *inputs, rtol=1e-5, atol=1e-6):
    """Loads rm's weights into tm, runs both on the inputs (a shape for random values, or a
    [tessera, torch] pair) and compares outputs and the gradients of every parameter and
    floating input."""
    tm.load_state_dict(rm.state_dict())
    assert [n for n, _ in tm.named_parameters()] == [n for n, _ in rm.named_parameters()]
    t_in, r_in = [], []
    for x in inputs:
        tx, rx = same_input(*x) if isinstance(x, tuple) else x
        if rx.is_floating_point():
            tx.requires_grad_(True)
            rx.requires_grad_(True)
        t_in.append(tx)
        r_in.append(rx)
    t_out, r_out = tm(*t_in), rm(*r_in)
    assert_close(t_out, r_out, rtol, atol, "output")
    v = np.random.default_rng(1).standard_normal(tuple(r_out.shape)).astype(np.float32)
    (t_out * tessera.from_numpy(v.copy())).sum().backward()
    (r_out * torch.from_numpy(v.copy())).sum().backward()
    for (name, tp), (_, rp) in zip(tm.named_parameters(), rm.named_parameters()):
        assert_close(tp.grad, rp.grad, rtol, atol, f"grad of {name}")
    for i, (tx, rx) in enumerate(zip(t_in, r_in)):
        if rx.requires_grad:
            assert_close(tx.grad, rx.grad, rtol, atol, f"grad of input {i}")


def test_linear():
    check_module(tessera.nn.Linear(4, 5), torch.nn.Linear(4, 5), (3, 2, 4))


def test_linear_without_bias():
    check_module(tessera.nn.Linear(4, 5, bias=False), torch.nn.Linear(4, 5, bias=False), (3, 4))


def test_layer_norm_with_trained_affine():
    torch.manual_seed(0)
    rm = torch.nn.LayerNorm(6)
    with torch.no_grad():
        rm.weight.normal_()
        rm.bias.normal_()
    # The input gradient sums terms of order |weight| * |x| (up to ~6 here): float32 rounding
    # there is a few 1e-6 absolute, which an unseeded draw once put on a 0.1-sized entry.
    check_module(tessera.nn.LayerNorm(6), rm, (2, 3, 6), atol=1e-5)


def test_embedding_with_padding():
    idx = np.array([[1, 3, 1], [0, 9, 4]], dtype=np.int64)
    check_module(
        tessera.nn.Embedding(10, 4, padding_idx=1),
        torch.nn.Embedding(10, 4, padding_idx=1),
        [tessera.from_numpy(idx.copy()), torch.from_numpy(idx.copy())],
    )


class TorchRMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def test_rms_norm():
    check_module(tessera.nn.RMSNorm(6), TorchRMSNorm(6), (4, 6))


def test_sequential_mlp_and_activations():
    rm = torch.nn.Sequential(
        torch.nn.Linear(4, 8),
        torch.nn.GELU(approximate="tanh"),
        torch.nn.Linear(8, 8),
        torch.nn.SiLU(),
        torch.nn.Dropout(0.3),
        torch.nn.Linear(8, 2),
        torch.nn.ReLU(),
    )
    tm = tessera.nn.Sequential(
        tessera.nn.Linear(4, 8),
        tessera.nn.GELU("tanh"),
        tessera.nn.Linear(8, 8),
        tessera.nn.SiLU(),
        tessera.nn.Dropout(0.3),
        tessera.nn.Linear(8, 2),
        tessera.nn.ReLU(),
    )
    rm.eval()
    tm.eval()
    check_module(tm, rm, (5, 4))


# ---- attention, written once per framework in the usual GPT-2 way ----


class TesseraAttention(tessera.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = tessera.nn.Linear(dim, 3 * dim)
        self.c_proj = tessera.nn.Linear(dim, dim)

    def forward(self, x):
        qkv = tessera.rearrange(self.c_attn(x), "b t (k h d) -> k b h t d", k=3, h=self.heads)
        q, k, v = qkv[0], qkv[1], qkv[2]
        y = tessera.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(tessera.rearrange(y, "b h t d -> b t (h d)"))


class TorchAttention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = torch.nn.Linear(dim, 3 * dim)
        self.c_proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class TesseraBlock(tessera.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln = tessera.nn.LayerNorm(dim)
        self.attn = TesseraAttention(dim, heads)

    def forward(self, x):
        return x + self.attn(self.ln(x))


class TorchBlock(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln = torch.nn.LayerNorm(dim)
        self.attn = TorchAttention(dim, heads)

    def forward(self, x):
        return x + self.attn(self.ln(x))


def test_causal_self_attention_block_from_python_subclasses():
    tm = tessera.nn.Sequential(TesseraBlock(8, 2), TesseraBlock(8, 2))
    rm = torch.nn.Sequential(TorchBlock(8, 2), TorchBlock(8, 2))
    assert list(tm.state_dict()) == list(rm.state_dict())
    check_module(tm, rm, (2, 5, 8), rtol=1e-4, atol=1e-5)


# ---- optimizers ----


def models(seed=0):
    torch.manual_seed(seed)
    rm = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.SiLU(), torch.nn.Linear(8, 2)).double()
    tm = tessera.nn.Sequential(
        tessera.nn.Linear(3, 8), tessera.nn.SiLU(), tessera.nn.Linear(8, 2)
    ).double()
    tm.load_state_dict(rm.state_dict())
    return tm, rm


def run_trajectory(tm, rm, t_opt, r_opt, steps=20, t_sched=None, r_sched=None, clip=None):
    x_t, x_r = same_input(16, 3, seed=2, dtype=np.float64)
    y_t, y_r = same_input(16, 2, seed=3, dtype=np.float64)
    for step in range(steps):
        for model, opt, x, y, lib, sched in (
            (tm, t_opt, x_t, y_t, tessera, t_sched),
            (rm, r_opt, x_r, y_r, torch, r_sched),
        ):
            opt.zero_grad()
            loss = lib.nn.functional.mse_loss(model(x), y)
            loss.backward()
            if clip is not None:
                lib.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            if sched is not None:
                sched.step()
        for (name, tp), (_, rp) in zip(tm.named_parameters(), rm.named_parameters()):
            assert_close(tp, rp, 1e-10, 1e-12, f"{name} after step {step + 1}")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(lr=0.1),
        dict(lr=0.05, momentum=0.9, weight_decay=0.01),
        dict(lr=0.05, momentum=0.9, nesterov=True),
        dict(lr=0.05, momentum=0.8, dampening=0.1, maximize=True),
    ],
    ids=["plain", "momentum_wd", "nesterov", "dampening_maximize"],
)
def test_sgd_trajectory(kwargs):
    tm, rm = models()
    run_trajectory(
        tm,
        rm,
        tessera.optim.SGD(tm.parameters(), **kwargs),
        torch.optim.SGD(rm.parameters(), **kwargs),
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(lr=0.01),
        dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
        dict(lr=0.01, amsgrad=True),
    ],
    ids=["default", "betas_wd", "amsgrad"],
)
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_trajectories(name, kwargs):
    tm, rm = models()
    run_trajectory(
        tm,
        rm,
        getattr(tessera.optim, name)(tm.parameters(), **kwargs),
        getattr(torch.optim, name)(rm.parameters(), **kwargs),
    )


def test_param_groups_with_step_lr_and_clipping():
    tm, rm = models()
    groups = lambda m: [
        dict(params=list(m[0].parameters()), lr=0.05),  # noqa: E731
        dict(params=list(m[2].parameters()), weight_decay=0.0),
    ]
    t_opt = tessera.optim.AdamW(groups(tm), lr=0.02)
    r_opt = torch.optim.AdamW(groups(rm), lr=0.02)
    run_trajectory(
        tm,
        rm,
        t_opt,
        r_opt,
        t_sched=tessera.optim.lr_scheduler.StepLR(t_opt, 5, gamma=0.5),
        r_sched=torch.optim.lr_scheduler.StepLR(r_opt, 5, gamma=0.5),
        clip=0.5,
    )
    assert [g["lr"] for g in t_opt.param_groups] == pytest.approx(
        [g["lr"] for g in r_opt.param_groups]
    )


def test_lambda_lr_and_warmup_cosine_match_torch_lambda():
    tm, rm = models()
    t_opt = tessera.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    r_opt = torch.optim.SGD(rm.parameters(), lr=0.1, momentum=0.9)
    warmup, total = 4, 15

    def factor(step):  # the closed form WarmupCosineLR documents, with min_lr = 0
        if step < warmup:
            return step / warmup
        if step > total:
            return 0.0
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))

    run_trajectory(
        tm,
        rm,
        t_opt,
        r_opt,
        t_sched=tessera.optim.lr_scheduler.WarmupCosineLR(t_opt, warmup, total),
        r_sched=torch.optim.lr_scheduler.LambdaLR(r_opt, factor),
    )
    tm2, rm2 = models(1)
    t_opt = tessera.optim.Adam(tm2.parameters(), lr=0.01)
    r_opt = torch.optim.Adam(rm2.parameters(), lr=0.01)
    run_trajectory(
        tm2,
        rm2,
        t_opt,
        r_opt,
        steps=10,
        t_sched=tessera.optim.lr_scheduler.LambdaLR(t_opt, lambda s: 0.9**s),
        r_sched=torch.optim.lr_scheduler.LambdaLR(r_opt, lambda s: 0.9**s),
    )


def test_clip_grad_norm_matches_torch():
    tm, rm = models()
    for model, lib in ((tm, tessera), (rm, torch)):
        x = lib.ones(4, 3, dtype=lib.float64)
        (model(x) ** 2).sum().backward()
    for norm_type in (2.0, 1.0, math.inf):
        t_total = tessera.nn.utils.clip_grad_norm_(tm.parameters(), 0.3, norm_type)
        r_total = torch.nn.utils.clip_grad_norm_(rm.parameters(), 0.3, norm_type)
        assert_close(t_total, r_total, 1e-10, 1e-12, f"total norm ({norm_type})")
        for (name, tp), (_, rp) in zip(tm.named_parameters(), rm.named_parameters()):
            assert_close(tp.grad, rp.grad, 1e-10, 1e-12, f"clipped grad of {name}")
