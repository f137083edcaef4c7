#!/usr/bin/env python3
"""PyTorch reference for tests/e2e/test_optim_vs_torch.cpp.

Builds a deterministic float64 problem (a 3-5-2 tanh MLP on closed-form data, parameters from
closed-form values), runs torch.optim for 20 steps per case and prints one JSON object mapping
each case name to a list of rows of numbers:
  <optimizer case>      one row per step: all parameters flattened (W1, b1, W2, b2)
  <case>_lrs            one row per step: the lr of every param group
  sched_<name>          one row per step (0..N): the lr of every param group
  clip_<norm>_<max>     [[total norm], [clipped grads flattened]]
The C++ test rebuilds the same problem from the same formulas; keep the two in sync.
"""
import json
import math

import torch

torch.set_default_dtype(torch.float64)
STEPS = 20
SHAPES = [(5, 3), (5,), (2, 5), (2,)]  # W1, b1, W2, b2


def make_params():
    """Parameter k, element i (row-major) = 0.5 * sin(1 + 0.7 i + 1.9 k)."""
    params = []
    for k, shape in enumerate(SHAPES):
        n = math.prod(shape)
        values = [0.5 * math.sin(1.0 + 0.7 * i + 1.9 * k) for i in range(n)]
        params.append(torch.tensor(values).reshape(shape).requires_grad_())
    return params


X = torch.tensor([[math.sin(0.7 * i + 1.3 * j) for j in range(3)] for i in range(8)])
Y = torch.tensor([[math.cos(0.5 * i - 0.9 * k) for k in range(2)] for i in range(8)])


def loss_fn(params):
    w1, b1, w2, b2 = params
    out = torch.nn.functional.linear(torch.tanh(torch.nn.functional.linear(X, w1, b1)), w2, b2)
    return torch.nn.functional.mse_loss(out, Y)


def flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params]).tolist()


def warmup_cosine(warmup, max_steps, min_lr, base_lr):
    """Linear warmup from 0, cosine to min_lr at max_steps, then min_lr (as a LambdaLR factor)."""
    def factor(step):
        if step < warmup:
            return step / warmup
        if step > max_steps:
            return min_lr / base_lr
        r = (step - warmup) / (max_steps - warmup)
        return (min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * r))) / base_lr
    return factor


def run(make_optimizer, make_scheduler=None):
    params = make_params()
    opt = make_optimizer(params)
    sched = make_scheduler(opt) if make_scheduler else None
    rows, lrs = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss_fn(params).backward()
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        if sched:
            sched.step()
        rows.append(flat(params))
    return rows, lrs


def optimizer_cases(out):
    O = torch.optim
    cases = {
        "sgd": lambda p: O.SGD(p, lr=0.1),
        "sgd_momentum_dampening_wd":
            lambda p: O.SGD(p, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
        "sgd_nesterov_wd": lambda p: O.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02),
        "sgd_maximize": lambda p: O.SGD(p, lr=0.01, momentum=0.5, maximize=True),
        "adam": lambda p: O.Adam(p, lr=0.02, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01,
                                 foreach=False),
        "adam_amsgrad": lambda p: O.Adam(p, lr=0.02, betas=(0.8, 0.95), eps=1e-6, amsgrad=True,
                                         foreach=False),
        "adamw": lambda p: O.AdamW(p, lr=0.02, betas=(0.9, 0.999), weight_decay=0.1, foreach=False),
        "adamw_amsgrad_maximize": lambda p: O.AdamW(p, lr=0.01, amsgrad=True, maximize=True,
                                                    weight_decay=0.05, foreach=False),
        # Matrices decay, vectors do not (tessera's weight_decay_param_groups), own lr for vectors.
        "adamw_groups": lambda p: O.AdamW(
            [{"params": [p[0], p[2]], "weight_decay": 0.1},
             {"params": [p[1], p[3]], "weight_decay": 0.0, "lr": 0.03}],
            lr=0.01, foreach=False),
    }
    for name, make in cases.items():
        out[name], _ = run(make)

    def warmup_cosine_sched(opt):
        factor = warmup_cosine(5, 15, 0.005, 0.05)
        return O.lr_scheduler.LambdaLR(opt, factor)

    out["adamw_warmup_cosine"], out["adamw_warmup_cosine_lrs"] = run(
        lambda p: O.AdamW(p, lr=0.05, weight_decay=0.1, foreach=False), warmup_cosine_sched)


def scheduler_cases(out):
    O = torch.optim

    def lrs(make_sched, steps=30):
        groups = [{"params": [torch.zeros(1, requires_grad=True)], "lr": 0.1},
                  {"params": [torch.zeros(1, requires_grad=True)], "lr": 0.03}]
        opt = O.SGD(groups, lr=0.1)
        sched = make_sched(opt)
        rows = [[g["lr"] for g in opt.param_groups]]
        for _ in range(steps):
            opt.step()
            sched.step()
            rows.append([g["lr"] for g in opt.param_groups])
        return rows

    out["sched_warmup_cosine"] = lrs(lambda opt: O.lr_scheduler.LambdaLR(
        opt, [warmup_cosine(5, 20, 0.001, 0.1), warmup_cosine(5, 20, 0.001, 0.03)]))
    out["sched_step"] = lrs(lambda opt: O.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5))
    out["sched_lambda"] = lrs(lambda opt: O.lr_scheduler.LambdaLR(opt, lambda t: 0.95 ** t))


def clip_cases(out):
    for norm_type, key in [(2.0, "2"), (1.0, "1"), (float("inf"), "inf"), (3.0, "3")]:
        for max_norm in (1.5, 1000.0):
            params = make_params()
            for k, p in enumerate(params):
                n = p.numel()
                p.grad = torch.tensor([3.0 * math.cos(0.3 * i + k) for i in range(n)]).reshape(p.shape)
            total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
            grads = torch.cat([p.grad.reshape(-1) for p in params]).tolist()
            out[f"clip_{key}_{max_norm:g}"] = [[total.item()], grads]


def main():
    out = {}
    optimizer_cases(out)
    scheduler_cases(out)
    clip_cases(out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
