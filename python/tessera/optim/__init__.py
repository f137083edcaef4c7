"""Optimizers (torch.optim's SGD, Adam, AdamW), gradient clipping and lr schedulers.

optimizer.param_groups[i] is a live view of the C++ group: group["lr"] = x changes the rate.
"""
from .._C.optim import (  # noqa: F401
    SGD,
    Adam,
    AdamW,
    Optimizer,
    clip_grad_norm_,
    grad_norm,
    weight_decay_param_groups,
)
from . import lr_scheduler  # noqa: F401
