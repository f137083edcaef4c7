"""The profiler (torch.profiler): every op, backward node and record_function range.

    with tessera.profiler.profile() as p:
        loss = model(x).sum()
        loss.backward()
    print(p.table(sort_by="self", row_limit=10))
    p.export_chrome_trace("trace.json")   # chrome://tracing or ui.perfetto.dev
"""
from ._C import runtime as _rt


class profile:
    """Records while inside; then table(), key_averages() and export_chrome_trace()."""

    def __init__(self):
        self._scope = None
        self._profile = None

    def __enter__(self):
        self._scope = _rt.ProfilerScope()
        self._scope.enter()
        return self

    def __exit__(self, *exc):
        self._profile = self._scope.exit()
        return False

    def _result(self):
        if self._profile is None:
            raise RuntimeError("[profiler] expected a finished profile, got one still recording")
        return self._profile

    def table(self, sort_by="self", row_limit=-1, group_by_input_shape=False):
        """Rows per op (sort_by: self, total, calls, memory or peak), as key_averages().table()."""
        return self._result().table(sort_by, row_limit, group_by_input_shape)

    def key_averages(self, group_by_input_shape=False, sort_by="self"):
        """One dict per op name: count, cpu_time_total_us, self_cpu_time_total_us, memory."""
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
