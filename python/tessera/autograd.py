"""Gradients: tessera.autograd.grad / backward and the grad-mode switches.

no_grad, enable_grad, set_grad_enabled, inference_mode and detect_anomaly work as context
managers and as decorators, like their torch counterparts; the modes themselves live in C++
(thread-local), these classes only switch them.
"""
import functools

from ._C.autograd import Node, backward, grad, is_grad_enabled  # noqa: F401
from ._C import autograd as _C_autograd
from ._C.autograd import FunctionCtx  # noqa: F401


class Function:
    """A custom op with its own gradient (torch.autograd.Function):

        class Exp(Function):
            @staticmethod
            def forward(ctx, x):
                y = x.exp()
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, grad):
                (y,) = ctx.saved_tensors
                return grad * y

        Exp.apply(x)

    forward runs without recording; apply records one graph node whose backward calls the class's
    backward with one gradient per output (zeros for unused ones) and expects one per forward
    argument (None for non-tensors or inputs needing none).
    """

    @classmethod
    def apply(cls, *args, **kwargs):
        if kwargs:
            raise TypeError(f"[{cls.__name__}.apply] expected positional arguments, got keywords "
                            f"{sorted(kwargs)}")
        return _C_autograd._function_apply(cls, args)

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("[Function] expected the subclass to define forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("[Function] expected the subclass to define backward(ctx, ...)")


class _Mode:
    """A context manager that also decorates functions (with or without parentheses)."""

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return self(args[0])  # @no_grad without parentheses
        return self

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self._clone():
                return fn(*args, **kwargs)

        return wrapper

    def _clone(self):
        return type(self)()


class _GradMode(_Mode):
    _enabled = True

    def __init__(self, fn=None):
        self._prev = None

    def __enter__(self):
        self._prev = _C_autograd.is_grad_enabled()
        _C_autograd._set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc):
        _C_autograd._set_grad_enabled(self._prev)
        return False


class no_grad(_GradMode):
    """Ops record no graph inside (torch.no_grad)."""

    _enabled = False


class enable_grad(_GradMode):
    """Ops record graphs inside, even within no_grad (torch.enable_grad)."""

    _enabled = True


class set_grad_enabled(_Mode):
    """Sets grad mode now (usable as a plain call) and restores it on leaving a with block."""

    def __new__(cls, mode):
        return super().__new__(cls)

    def __init__(self, mode):
        self._mode = bool(mode)
        self._prev = _C_autograd.is_grad_enabled()
        _C_autograd._set_grad_enabled(self._mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C_autograd._set_grad_enabled(self._prev)
        return False

    def _clone(self):
        return set_grad_enabled(self._mode)


class inference_mode(_Mode):
    """No graph, and tensors made inside may not be saved for backward (torch.inference_mode)."""

    def __init__(self, mode=True):
        self._mode = mode if isinstance(mode, bool) else True
        self._scope = None

    def __enter__(self):
        if self._mode:
            self._scope = _C_autograd._InferenceModeScope()
            self._scope.__enter__()
        return self

    def __exit__(self, *exc):
        if self._scope is not None:
            self._scope.__exit__(*exc)
        return False

    def _clone(self):
        return inference_mode(self._mode)


class detect_anomaly(_Mode):
    """Backward names the op whose gradient turned NaN/Inf (torch.autograd.detect_anomaly)."""

    def __init__(self, fn=None):
        self._scope = None

    def __enter__(self):
        self._scope = _C_autograd._AnomalyScope()
        self._scope.__enter__()
        return self

    def __exit__(self, *exc):
        self._scope.__exit__(*exc)
        return False
