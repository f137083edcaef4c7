"""Modules and layers (tessera._C.nn), torch.nn's counterpart.

Subclass Module and assign Parameters and Modules as attributes; they are registered in C++ in
assignment order, so parameters(), state_dict() and optimizers see them as in torch.
"""
from .._C.nn import (  # noqa: F401
    GELU,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    Module,
    ModuleDict,
    ModuleList,
    Parameter,
    ReLU,
    RMSNorm,
    Sequential,
    SiLU,
)
from . import functional, init, lora, parallel, utils  # noqa: F401
