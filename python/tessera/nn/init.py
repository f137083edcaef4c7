"""Parameter initialisation (torch.nn.init), filled in place under no_grad by C++."""
from .._C.nn.init import (  # noqa: F401
    calculate_gain,
    constant_,
    kaiming_normal_,
    kaiming_uniform_,
    normal_,
    ones_,
    uniform_,
    xavier_normal_,
    xavier_uniform_,
    zeros_,
)
