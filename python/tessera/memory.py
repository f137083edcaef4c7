"""Memory counters and cache control for any device, shaped like torch.cuda's memory functions:

    tessera.memory.reset_peak_memory_stats()
    loss = model(x).sum(); loss.backward()
    print(tessera.memory.max_memory_allocated() / 2**20, "MiB")
    tessera.memory.empty_cache()  # give cached blocks back to the system

`device` is "cpu" (the default) or "cuda[:N]"; tessera.cuda.* answer for CUDA alone.
"""
from ._C.memory import empty_cache, memory_stats, reset_peak_memory_stats  # noqa: F401


def memory_allocated(device="cpu"):
    """Bytes held by live tensors."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device="cpu"):
    """The peak of memory_allocated since the start or the last reset_peak_memory_stats()."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device="cpu"):
    """Bytes held by the allocator: live tensors plus its cache of freed blocks."""
    return memory_stats(device)["reserved_bytes.all.current"]
