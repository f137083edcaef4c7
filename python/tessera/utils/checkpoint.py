"""Activation checkpointing (torch.utils.checkpoint, reentrant form).

    h = checkpoint(block, x)   # block's activations are recomputed in backward

fn's parameters get their gradients during backward(); give fn at least one input that
requires grad, as with PyTorch's reentrant checkpoint.
"""
from .._C import runtime as _rt


def checkpoint(fn, *inputs):
    """fn(*inputs) without keeping its activations; returns what fn returns (a tensor or a list)."""
    outputs = _rt.checkpoint(fn, list(inputs))
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
