"""The profiler (torch.profiler): every op, backward node and record_function range.

    with tessera.profiler.profile() as p:
        loss = model(x).sum()
        loss.backward()
    print(p.table(sort_by="self", row_limit=10))
    p.export_chrome_trace("trace.json")   # chrome://tracing or ui.perfetto.dev

With ProfilerActivity.CUDA among the activities (the default where a GPU is present) every event
also gets its GPU time, from CUDA events queued as it begins and ends.
"""
import enum

from ._C import runtime as _rt


class ProfilerActivity(enum.Enum):
    CPU = "cpu"
    CUDA = "cuda"


def supported_activities():
    """CPU, and CUDA where a GPU can be used."""
    from . import cuda

    return {ProfilerActivity.CPU} | ({ProfilerActivity.CUDA} if cuda.is_available() else set())


class profile:
    """Records while inside; then table(), key_averages() and export_chrome_trace().

    activities: an iterable of ProfilerActivity (default: supported_activities()). Host times
    are always recorded; CUDA adds GPU times (RuntimeError without a GPU).
    """

    def __init__(self, activities=None):
        activities = supported_activities() if activities is None else set(activities)
        for a in activities:
            if not isinstance(a, ProfilerActivity):
                raise ValueError(f"[profiler] expected ProfilerActivity values, got {a!r}")
        self._device_time = ProfilerActivity.CUDA in activities
        self._scope = None
        self._profile = None

    def __enter__(self):
        self._scope = _rt.ProfilerScope()
        self._scope.enter(self._device_time)
        return self

    def __exit__(self, *exc):
        self._profile = self._scope.exit()
        return False

    def _result(self):
        if self._profile is None:
            raise RuntimeError("[profiler] expected a finished profile, got one still recording")
        return self._profile

    def table(self, sort_by="self", row_limit=-1, group_by_input_shape=False):
        """Rows per op, as key_averages().table(). sort_by: self, total, calls, memory, peak,
        self_cuda or cuda_total (or torch's self_cpu_time_total, cuda_time_total, ...)."""
        return self._result().table(sort_by, row_limit, group_by_input_shape)

    def key_averages(self, group_by_input_shape=False, sort_by="self"):
        """One dict per op name: count, cpu_time_total_us, self_cpu_time_total_us,
        cuda_time_total_us, self_cuda_time_total_us (0 without GPU times), memory."""
        return self._result().key_averages(group_by_input_shape, sort_by)

    def export_chrome_trace(self, path):
        self._result().export_chrome_trace(path)


class record_function:
    """Marks a named range of user code in the profile."""

    def __init__(self, name):
        self.name = name
        self._scope = None

    def __enter__(self):
        self._scope = _rt.RecordScope()
        self._scope.enter(self.name)
        return self

    def __exit__(self, *exc):
        self._scope.exit()
        return False
