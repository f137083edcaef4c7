"""infinicore.context for tessera: the current device and stream, synchronisation, DeviceEvent
and graph recording (all in C++, tessera._C.context).

On the CPU there is one in-order host stream per thread and ops run synchronously: when an op
returns its work is done, so sync_stream()/sync_device() return at once and an event is complete
as soon as it is recorded (its elapsed_time measures the host clock). On CUDA the calls go to the
device's streams and events.

Graph recording works like CUDA graphs. The tensors made before start_graph_recording() (inputs,
weights) are read at their current contents on every replay, so copy_ new data into them; the
tensors the recorded ops returned are rewritten in place by graph.run(). Autograd is off while
recording (inference graphs); random ops, ops deciding shapes from data on the host and in-place
ops on inputs raise RuntimeError when recorded.

    x = tessera.randn(8, 64)
    tessera.context.start_graph_recording()
    y = tessera.nn.functional.gelu(x * 2.0 + 1.0)
    graph = tessera.context.stop_graph_recording()
    x.copy_(tessera.randn(8, 64))
    graph.run()   # y now holds gelu(x * 2 + 1) for the new x, computed in one fused pass
"""
from ._C.context import (  # noqa: F401
    DeviceEvent,
    Graph,
    Stream,
    device_count,
    get_device,
    get_stream,
    is_graph_recording,
    set_device,
    start_graph_recording,
    stop_graph_recording,
    sync_device,
    sync_stream,
)
