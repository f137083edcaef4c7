"""Learning-rate schedules; call step() after optimizer.step(), as with torch."""
from .._C.optim import LRScheduler, LambdaLR, StepLR, WarmupCosineLR  # noqa: F401
