"""tessera.optim and tessera.data from Python: param-group views, optimizer state, schedulers,
datasets (including Python subclasses) and the DataLoader."""
import pytest

import tessera
from tessera import data, nn, optim


def quadratic_step(opt, p):
    opt.zero_grad()
    loss = (p**2).sum()
    loss.backward()
    opt.step()
    return loss


def test_param_group_view_changes_the_optimizer():
    p = tessera.ones(2, requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    group = opt.param_groups[0]
    assert group["lr"] == 0.1 and group["params"][0] is not None and "momentum" in group
    group["lr"] = 0.5
    quadratic_step(opt, p)
    assert p.tolist() == [0.0, 0.0]  # 1 - 0.5 * 2
    with pytest.raises(ValueError, match="option"):
        group["colour"] = 1
    adam = optim.Adam([p], betas=(0.8, 0.9))
    assert adam.param_groups[0]["betas"] == (0.8, 0.9) and adam.defaults["weight_decay"] == 0.0
    assert optim.AdamW([p]).defaults["weight_decay"] == 0.01


def test_param_group_dicts_and_add_param_group():
    a, b = tessera.ones(2, requires_grad=True), tessera.ones(2, requires_grad=True)
    opt = optim.SGD([{"params": [a], "lr": 1.0}], lr=0.1)
    opt.add_param_group({"params": b})
    assert [g["lr"] for g in opt.param_groups] == [1.0, 0.1]
    with pytest.raises(ValueError, match="one group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(ValueError):
        optim.SGD([a], lr=-1.0)


def test_state_and_state_dict_round_trip():
    p = tessera.tensor([1.0, -2.0], requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    assert opt.state(p) is None
    quadratic_step(opt, p)
    st = opt.state(p)
    assert st["step"] == 1 and set(st) >= {"exp_avg", "exp_avg_sq"}
    saved = opt.state_dict()
    assert saved["param_groups"][0]["params"] == [0] and saved["param_groups"][0]["betas"] == (0.9, 0.999)
    assert saved["param_groups"][0]["amsgrad"] is False and saved["state"][0]["step"].item() == 1
    q = tessera.tensor(p.tolist(), requires_grad=True)
    opt2 = optim.Adam([q], lr=0.1)
    opt2.load_state_dict(
        {
            "state": {i: {k: v.clone() for k, v in s.items()} for i, s in saved["state"].items()},
            "param_groups": [dict(g) for g in saved["param_groups"]],
        }
    )
    quadratic_step(opt, p)
    quadratic_step(opt2, q)
    assert q.tolist() == pytest.approx(p.tolist())


def test_optimizer_state_dicts_move_between_torch_and_tessera():
    torch = pytest.importorskip("torch")
    w0 = [0.5, -1.0, 2.0, 0.25]
    tp = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.AdamW([tp], lr=0.05, betas=(0.8, 0.9), weight_decay=0.1, amsgrad=True)
    for _ in range(2):
        topt.zero_grad()
        (tp**2).sum().backward()
        topt.step()
    p = tessera.tensor(tp.tolist(), requires_grad=True)
    opt = optim.AdamW([p], lr=1.0)
    opt.load_state_dict(topt.state_dict())  # torch's extra switches (foreach, ...) are ignored
    assert opt.param_groups[0]["lr"] == 0.05 and opt.param_groups[0]["betas"] == (0.8, 0.9)
    for _ in range(2):
        topt.zero_grad()
        (tp**2).sum().backward()
        topt.step()
        opt.zero_grad()
        (p**2).sum().backward()
        opt.step()
    assert p.tolist() == pytest.approx(tp.tolist(), rel=1e-5)
    # and back: tessera's state dict drives torch's optimizer
    back = torch.tensor(p.tolist(), requires_grad=True)
    topt2 = torch.optim.AdamW([back], lr=1.0, amsgrad=True)
    sd = opt.state_dict()
    topt2.load_state_dict(
        {
            "state": {i: {k: torch.tensor(v.tolist()) for k, v in s.items()} for i, s in sd["state"].items()},
            "param_groups": sd["param_groups"],
        }
    )
    for o, x in ((topt, tp), (topt2, back)):
        o.zero_grad()
        (x**2).sum().backward()
        o.step()
    assert back.tolist() == pytest.approx(tp.tolist(), rel=1e-5)


def test_closure_and_schedulers():
    p = tessera.ones(1, requires_grad=True)
    opt = optim.SGD([p], lr=1.0)
    sched = optim.lr_scheduler.LRScheduler(opt, lambda step, base, group: base / (step + 1))
    loss = opt.step(lambda: quadratic_step_loss(p, opt))
    assert loss.item() == 1.0
    sched.step()
    assert sched.get_last_lr() == [0.5] and sched.last_epoch == 1
    step = optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    for _ in range(4):
        step.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.125)


def quadratic_step_loss(p, opt):
    opt.zero_grad()
    loss = (p**2).sum()
    loss.backward()
    return loss


def test_clip_grad_norm_and_weight_decay_groups():
    m = nn.Linear(3, 2)
    m(tessera.ones(4, 3)).sum().backward()
    total = nn.utils.clip_grad_norm_(m.parameters(), 0.1)
    assert total.item() > 0.1 and optim.grad_norm(m.parameters()).item() == pytest.approx(
        0.1, rel=1e-4
    )
    groups = optim.weight_decay_param_groups(m.parameters(), 0.1)
    assert [len(g["params"]) for g in groups] == [1, 1] and groups[1]["weight_decay"] == 0.0


def test_tensor_dataset_and_loader():
    x, y = tessera.arange(10.0).reshape(5, 2), tessera.arange(5)
    ds = data.TensorDataset(x, y)
    assert len(ds) == 5 and ds[2][1].item() == 2
    loader = data.DataLoader(ds, batch_size=2)
    batches = list(loader)
    assert len(loader) == 3 and [b[1].tolist() for b in batches] == [[0, 1], [2, 3], [4]]
    shuffled = [b[1].tolist() for b in data.DataLoader(ds, batch_size=5, shuffle=True, seed=1)]
    again = [b[1].tolist() for b in data.DataLoader(ds, batch_size=5, shuffle=True, seed=1)]
    assert shuffled == again and sorted(shuffled[0]) == [0, 1, 2, 3, 4]
    assert len(list(data.DataLoader(ds, batch_size=2, drop_last=True))) == 2


def test_python_dataset_subclass():
    class Squares(data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return tessera.tensor([float(i)]), i * i

    loader = data.DataLoader(Squares(), batch_size=4, prefetch=2)
    batches = list(loader)
    assert [b[1].tolist() for b in batches] == [[0, 1, 4, 9], [16, 25]]
    assert batches[0][0].shape == (4, 1)

    class Broken(data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            raise KeyError("no such item")

    with pytest.raises(KeyError):
        next(iter(data.DataLoader(Broken(), batch_size=1)))


def test_samplers():
    assert data.SequentialSampler(3).indices() == [0, 1, 2]
    r = data.RandomSampler(5, seed=3)
    assert sorted(r) == [0, 1, 2, 3, 4] and len(r) == 5
    shards = [data.DistributedSampler(10, rank, 3, shuffle=False).indices() for rank in range(3)]
    assert shards[0] == [0, 3, 6, 9] and len(shards[2]) == 4
    loader = data.DataLoader(
        data.TensorDataset(tessera.arange(4)), batch_size=2, sampler=data.SequentialSampler(4)
    )
    assert [b[0].tolist() for b in loader] == [[0, 1], [2, 3]]
