"""Mixed precision: autocast (torch.autocast) and GradScaler (torch.amp.GradScaler).

    with tessera.autocast("cpu", dtype=tessera.bfloat16):
        loss = model(x).logsumexp(-1).mean()   # matmuls in bfloat16, reductions in float32
    loss.backward()                            # outside: gradients reach the float32 weights

The casting happens in C++ at each op's entry (by the op's cast policy), so C++ and Python
callers see the same behaviour.
"""
import functools

from ._C import bfloat16
from ._C import runtime as _rt

GradScaler = _rt.GradScaler
is_autocast_enabled = _rt.is_autocast_enabled
get_autocast_dtype = _rt.get_autocast_dtype


class autocast:
    """Runs ops inside in mixed precision on device_type ("cpu" or "cuda"). Also a decorator."""

    def __init__(self, device_type="cpu", dtype=bfloat16, enabled=True):
        self.device_type, self.dtype, self.enabled = device_type, dtype, enabled
        self._scopes = []

    def __enter__(self):
        scope = _rt.AutocastScope()
        scope.enter(self.device_type, self.dtype, self.enabled)
        self._scopes.append(scope)
        return self

    def __exit__(self, *exc):
        self._scopes.pop().exit()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.dtype, self.enabled):
                return fn(*args, **kwargs)

        return wrapper
