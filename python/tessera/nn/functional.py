"""torch.nn.functional's counterpart, plus InfiniCore's functional set.

Every name is a C++ op (the same function as tessera.<name>); only embedding takes torch.nn.
functional's argument order (indices first), which differs from tessera.embedding(weight, ...).
"""
from .._C import (  # noqa: F401
    add_rms_norm,
    causal_softmax,
    cross_entropy,
    dropout,
    gelu,
    layer_norm,
    linear,
    linear_gelu,
    log_softmax,
    mse_loss,
    narrow,
    nll_loss,
    one_hot,
    random_sample,
    rearrange,
    relu,
    rms_norm,
    rope,
    rope_tables,
    scaled_dot_product_attention,
    sigmoid,
    silu,
    softmax,
    softplus,
    squeeze,
    swiglu,
    tanh,
    unsqueeze,
)
from .._C.functional import embedding  # noqa: F401
