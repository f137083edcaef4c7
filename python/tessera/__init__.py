"""Tessera: a C++20 deep-learning framework with a PyTorch-shaped Python API.

Everything here is the C++ core (tessera._C): tensors, every op (as a function and a method),
autograd, nn, optim, data and distributed. The Python files only arrange the names the way torch
does.

    import tessera
    x = tessera.randn(4, 3, requires_grad=True)
    (x @ x.T).sum().backward()
"""
from . import _C
from ._C import *  # noqa: F401,F403  Tensor, dtypes, device and every op

# The star import brought the C++ submodules; the Python packages of the same names wrap them.
del autograd, data, distributed, functional, nn, optim, runtime, train  # noqa: F821
from ._size import Size  # noqa: F401,E402
from . import _pickling  # noqa: F401,E402  tensors pickle
from . import amp, autograd, data, distributed, nn, optim, profiler, train, utils  # noqa: F401,E402
del memory  # noqa: F821  tessera._C.memory; the Python tessera.memory adds torch's helpers
from . import memory  # noqa: F401,E402
del context  # noqa: F821  tessera._C.context; the Python tessera.context re-exports it
from . import context  # noqa: E402  infinicore.context: devices, streams, events, graphs
from .context import DeviceEvent  # noqa: F401,E402
from . import ops  # noqa: F401,E402  infinicore.ops: paged attention, KV-cache attention
from .amp import autocast  # noqa: F401,E402
del llm  # noqa: F821  tessera._C.llm; the Python tessera.llm wraps it
from . import llm  # noqa: E402  vLLM's LLM / AsyncLLM over the inference engine
from .llm import LLM, SamplingParams  # noqa: F401,E402
from .serialization import load, save  # noqa: F401,E402
from .autograd import (  # noqa: F401,E402
    enable_grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)

__version__ = "0.1.0"
