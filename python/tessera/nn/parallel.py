"""torch.nn.parallel's DistributedDataParallel, on the C++ dist::DistributedDataParallel.

    dist.init_process_group("mpi")
    ddp = DistributedDataParallel(model)          # rank 0's parameters on every rank
    loss_fn(ddp(x), y).backward()                 # gradients averaged over the ranks
    with ddp.no_sync():                           # accumulate without reducing
        loss_fn(ddp(x), y).backward()

Besides torch's bucket_cap_mb, gradient_as_bucket_view and find_unused_parameters it takes
first_bucket_cap_mb (the first bucket's cap, 1 MB: communication starts early) and
reduce_scatter (ZeRO stage 2, with tessera.distributed.optim.ZeroRedundancyOptimizer).
"""
from .._C.distributed import DistributedDataParallel  # noqa: F401
