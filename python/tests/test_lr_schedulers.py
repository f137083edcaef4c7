"""The torch lr schedules of tessera.optim.lr_scheduler against torch's own: the same optimizer
settings and steps give the same lrs (and OneCycleLR's momentum) at every step, state_dict
round trips, and bad arguments raise ValueError."""
import pytest
import torch

import tessera
from tessera import optim

STEPS = 40


def make_pair(kind="adam", lrs=(0.1, 0.02)):
    """A tessera and a torch optimizer over two param groups with the given lrs."""
    t_params = [tessera.ones(2, requires_grad=True), tessera.ones(3, requires_grad=True)]
    r_params = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
    t_groups = [{"params": [p], "lr": lr} for p, lr in zip(t_params, lrs)]
    r_groups = [{"params": [p], "lr": lr} for p, lr in zip(r_params, lrs)]
    if kind == "adam":
        return optim.Adam(t_groups), torch.optim.Adam(r_groups)
    return optim.SGD(t_groups, momentum=0.9), torch.optim.SGD(r_groups, momentum=0.9)


def group_state(opt):
    out = []
    for g in opt.param_groups:
        out.append(g["lr"])
        if g.get("betas") is not None:
            out.append(g["betas"][0])
        if g.get("momentum") is not None:
            out.append(g["momentum"])
    return out


def expect_same_schedule(make, kind="adam", steps=STEPS, metric=None):
    """Steps both schedules (after an optimizer step each time, as in training)."""
    t_opt, r_opt = make_pair(kind)
    t_sched, r_sched = make(optim.lr_scheduler, t_opt), make(torch.optim.lr_scheduler, r_opt)
    assert group_state(t_opt) == pytest.approx(group_state(r_opt), rel=1e-12, abs=1e-15)
    for step in range(steps):
        t_opt.step()
        r_opt.step()
        args = (metric(step),) if metric else ()
        t_sched.step(*args)
        r_sched.step(*args)
        assert group_state(t_opt) == pytest.approx(group_state(r_opt), rel=1e-12, abs=1e-15), step
        assert t_sched.get_last_lr() == pytest.approx(t_opt_lrs(t_opt), rel=1e-12)
        if hasattr(r_sched, "get_last_lr"):  # not on torch 1.13's ReduceLROnPlateau
            assert t_sched.get_last_lr() == pytest.approx(r_sched.get_last_lr(), rel=1e-12, abs=1e-15)


def t_opt_lrs(opt):
    return [g["lr"] for g in opt.param_groups]


def test_cosine_annealing_matches_torch_past_t_max():
    expect_same_schedule(lambda m, o: m.CosineAnnealingLR(o, T_max=15, eta_min=1e-3))


def test_linear_lr_matches_torch():
    expect_same_schedule(lambda m, o: m.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=12))
    expect_same_schedule(lambda m, o: m.LinearLR(o))


@pytest.mark.parametrize("three_phase", [False, True])
@pytest.mark.parametrize("strategy", ["cos", "linear"])
@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_one_cycle_matches_torch_with_momentum(three_phase, strategy, kind):
    expect_same_schedule(
        lambda m, o: m.OneCycleLR(o, max_lr=[0.5, 0.1], total_steps=STEPS, pct_start=0.25,
                                  anneal_strategy=strategy, three_phase=three_phase),
        kind=kind)


def test_one_cycle_from_epochs_and_past_its_end():
    expect_same_schedule(lambda m, o: m.OneCycleLR(o, max_lr=0.3, epochs=4, steps_per_epoch=10,
                                                   cycle_momentum=False))
    t_opt, _ = make_pair()
    sched = optim.lr_scheduler.OneCycleLR(t_opt, max_lr=0.3, total_steps=2)
    sched.step()
    sched.step()
    with pytest.raises(ValueError, match="past total_steps 2"):
        sched.step()


@pytest.mark.filterwarnings("ignore:The epoch parameter")  # torch's SequentialLR calls step(0)
def test_sequential_warmup_then_cosine_matches_torch():
    def make(m, o):
        warm = m.LinearLR(o, start_factor=0.1, total_iters=5)
        cos = m.CosineAnnealingLR(o, T_max=20)
        return m.SequentialLR(o, [warm, cos], milestones=[5])

    expect_same_schedule(make)


def test_sequential_of_the_cpp_schedules_matches_torch():
    # The C++-bound LambdaLR and StepLR had no .optimizer, a read-only last_epoch and no
    # step(epoch), and each took the lr of the schedule built before it as its base.
    def make(m, o):
        warm = m.LambdaLR(o, lambda t: (t + 1) / 5)
        decay = m.StepLR(o, step_size=4, gamma=0.5)
        return m.SequentialLR(o, [warm, decay], milestones=[5])

    expect_same_schedule(make)


def test_reduce_on_plateau_matches_torch():
    losses = [1.0, 0.9, 0.95, 0.93, 0.92, 0.91, 0.905, 0.9049, 0.95, 0.96, 0.97, 0.5] * 3
    for mode, threshold_mode in [("min", "rel"), ("min", "abs"), ("max", "rel")]:
        expect_same_schedule(
            lambda m, o: m.ReduceLROnPlateau(o, mode=mode, factor=0.5, patience=2, cooldown=1,
                                             threshold=0.01, threshold_mode=threshold_mode,
                                             min_lr=[0.01, 0.004]),
            steps=len(losses), metric=lambda i: losses[i])


def test_state_dict_resumes_the_schedule():
    t_opt, _ = make_pair()
    sched = optim.lr_scheduler.CosineAnnealingLR(t_opt, T_max=10)
    for _ in range(4):
        sched.step()
    state = sched.state_dict()
    want = [sched.get_last_lr()]
    sched.step()
    want.append(sched.get_last_lr())
    other_opt, _ = make_pair()
    resumed = optim.lr_scheduler.CosineAnnealingLR(other_opt, T_max=10)
    resumed.load_state_dict(state)
    resumed.step()
    assert [state["_last_lr"], resumed.get_last_lr()] == want


def test_bad_arguments_raise_value_error():
    t_opt, _ = make_pair()
    lr = optim.lr_scheduler
    with pytest.raises(ValueError, match="T_max > 0"):
        lr.CosineAnnealingLR(t_opt, T_max=0)
    with pytest.raises(ValueError, match="start_factor"):
        lr.LinearLR(t_opt, start_factor=0)
    with pytest.raises(ValueError, match="total_steps"):
        lr.OneCycleLR(t_opt, max_lr=0.1)
    with pytest.raises(ValueError, match="anneal_strategy"):
        lr.OneCycleLR(t_opt, max_lr=0.1, total_steps=5, anneal_strategy="step")
    with pytest.raises(ValueError, match="milestones"):
        lr.SequentialLR(t_opt, [lr.LinearLR(t_opt)], milestones=[3])
    with pytest.raises(ValueError, match="factor < 1.0"):
        lr.ReduceLROnPlateau(t_opt, factor=1.0)
