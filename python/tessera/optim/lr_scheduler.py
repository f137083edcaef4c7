"""Learning-rate schedules; call step() after optimizer.step(), as with torch.

LRScheduler, LambdaLR, StepLR and WarmupCosineLR are the C++ library's. The torch schedules below
(CosineAnnealingLR, LinearLR, OneCycleLR, SequentialLR, ReduceLROnPlateau) are written here in
Python against optimizer.param_groups, with torch's semantics: construction applies step 0, and
schedules built on one optimizer share its initial lrs (torch's group["initial_lr"]), so that
SequentialLR can chain them.
"""
import bisect
import math

from .._C.optim import LRScheduler, LambdaLR, StepLR, WarmupCosineLR  # noqa: F401

def _initial_lr(optimizer):
    """Each group's lr before its first schedule (torch's group["initial_lr"]), kept by the C++
    optimizer so that the C++ schedules (LambdaLR, StepLR, ...) share it."""
    return list(optimizer._initial_lrs())


class _Scheduler:
    """What every schedule here shares: the lrs of the last step and a state dict of the
    schedule's own fields (not the optimizer's)."""

    def get_last_lr(self):
        return list(self._last_lr)

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state):
        self.__dict__.update(state)


class _Schedule(_Scheduler):
    """A schedule with a closed form: lr of each group at step t from its base lr."""

    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        self.base_lrs = _initial_lr(optimizer)
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, step, base_lr):
        raise NotImplementedError

    def step(self, epoch=None):
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self._last_lr = [self.lr_at(self.last_epoch, b) for b in self.base_lrs]
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr


class CosineAnnealingLR(_Schedule):
    """eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2 (periodic past T_max)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        if T_max <= 0:
            raise ValueError(f"[CosineAnnealingLR] expected T_max > 0, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step, base_lr):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * step / self.T_max)) / 2


class LinearLR(_Schedule):
    """base_lr times a factor going linearly from start_factor to end_factor over total_iters."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(
                "[LinearLR] expected 0 < start_factor <= 1 and 0 <= end_factor <= 1, got "
                f"{start_factor} and {end_factor}")
        if total_iters < 0:
            raise ValueError(f"[LinearLR] expected total_iters >= 0, got {total_iters}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step, base_lr):
        done = min(step, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)


def _anneal(strategy, start, end, pct):
    if strategy == "cos":
        return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)
    return start + (end - start) * pct


class OneCycleLR(_Scheduler):
    """The 1cycle policy: lr from max_lr / div_factor up to max_lr over pct_start of the steps,
    then down to initial / final_div_factor (three_phase: back to initial first), and momentum
    (SGD's momentum or Adam's beta1) the other way between max_momentum and base_momentum."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        if total_steps is None:
            if not epochs or not steps_per_epoch or epochs <= 0 or steps_per_epoch <= 0:
                raise ValueError("[OneCycleLR] expected total_steps, or epochs and "
                                 f"steps_per_epoch > 0, got {epochs} and {steps_per_epoch}")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0:
            raise ValueError(f"[OneCycleLR] expected total_steps > 0, got {total_steps}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"[OneCycleLR] expected pct_start in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"[OneCycleLR] expected anneal_strategy 'cos' or 'linear', got '{anneal_strategy}'")
        self.optimizer, self.total_steps, self.anneal_strategy = optimizer, total_steps, anneal_strategy
        groups = optimizer.param_groups
        n = len(groups)
        per_group = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * n  # noqa: E731
        max_lrs = per_group(max_lr)
        initial = [m / div_factor for m in max_lrs]
        minimum = [i / final_div_factor for i in initial]
        optimizer._set_initial_lrs(initial)
        self.lrs = {"initial": initial, "max": max_lrs, "min": minimum}
        up = float(pct_start * total_steps) - 1
        if three_phase:
            self.phases = [(up, "initial", "max", "max_m", "base_m"),
                           (float(2 * pct_start * total_steps) - 2, "max", "initial", "base_m", "max_m"),
                           (total_steps - 1, "initial", "min", "max_m", "max_m")]
        else:
            self.phases = [(up, "initial", "max", "max_m", "base_m"),
                           (total_steps - 1, "max", "min", "base_m", "max_m")]
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if groups[0].get("betas") is None and groups[0].get("momentum") is None:
                raise ValueError("[OneCycleLR] expected an optimizer with momentum or betas for "
                                 "cycle_momentum=True")
            self.use_beta1 = groups[0].get("betas") is not None
            self.lrs["base_m"], self.lrs["max_m"] = per_group(base_momentum), per_group(max_momentum)
        self.last_epoch = last_epoch
        self.step()

    def _value(self, step, i, start_key, end_key):
        return _anneal(self.anneal_strategy, self.lrs[start_key][i], self.lrs[end_key][i], step)

    def step(self):
        self.last_epoch += 1
        t = self.last_epoch
        if t > self.total_steps:
            raise ValueError(f"[OneCycleLR] stepped {t} times, past total_steps {self.total_steps}")
        start = 0.0
        for k, (end, lr_from, lr_to, m_from, m_to) in enumerate(self.phases):
            if t <= end or k == len(self.phases) - 1:
                pct = (t - start) / (end - start)
                break
            start = end
        self._last_lr = []
        for i, group in enumerate(self.optimizer.param_groups):
            lr = self._value(pct, i, lr_from, lr_to)
            group["lr"] = lr
            self._last_lr.append(lr)
            if self.cycle_momentum:
                m = self._value(pct, i, m_from, m_to)
                if self.use_beta1:
                    group["betas"] = (m, group["betas"][1])
                else:
                    group["momentum"] = m


class SequentialLR(_Scheduler):
    """schedulers[i] runs from milestones[i - 1] on (restarted at its step 0 there)."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"[SequentialLR] expected {len(schedulers) - 1} milestones for "
                             f"{len(schedulers)} schedulers, got {len(milestones)}")
        if any(s.optimizer is not optimizer for s in schedulers):
            raise ValueError("[SequentialLR] expected every scheduler to hold this optimizer")
        self.optimizer, self._schedulers, self._milestones = optimizer, schedulers, list(milestones)
        self.last_epoch = last_epoch + 1
        # Each scheduler applied its step 0 when built: start over from the first one's.
        for s in schedulers:
            s.last_epoch -= 1
        schedulers[0].step()
        self._last_lr = schedulers[0].get_last_lr()

    def step(self):
        self.last_epoch += 1
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            scheduler.step(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state):
        state = dict(state)
        for s, sd in zip(self._schedulers, state.pop("_schedulers")):
            s.load_state_dict(sd)
        self.__dict__.update(state)


class ReduceLROnPlateau(_Scheduler):
    """Multiplies the lrs by factor once the metric passed to step() has not improved (by
    threshold, relative or absolute) for more than patience steps; then waits cooldown steps."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError(f"[ReduceLROnPlateau] expected factor < 1.0, got {factor}")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError("[ReduceLROnPlateau] expected mode 'min' or 'max' and threshold_mode "
                             f"'rel' or 'abs', got '{mode}' and '{threshold_mode}'")
        n = len(optimizer.param_groups)
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * n
        if len(self.min_lrs) != n:
            raise ValueError(f"[ReduceLROnPlateau] expected {n} min_lr values, got {len(self.min_lrs)}")
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = threshold, threshold_mode, cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _better(self, value):
        if self.threshold_mode == "rel":
            scale = 1 - self.threshold if self.mode == "min" else 1 + self.threshold
            bound = self.best * scale
        else:
            bound = self.best - self.threshold if self.mode == "min" else self.best + self.threshold
        return value < bound if self.mode == "min" else value > bound

    def step(self, metrics):
        value = float(metrics)
        self.last_epoch += 1
        if self._better(value):
            self.best, self.num_bad_epochs = value, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = group["lr"]
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]
