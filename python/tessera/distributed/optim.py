"""torch.distributed.optim's ZeroRedundancyOptimizer, on the C++ dist::ZeroOptimizer.

    ddp = tessera.nn.parallel.DistributedDataParallel(model)   # reduce_scatter=True: stage 2
    opt = ZeroRedundancyOptimizer(ddp.parameters(), tessera.optim.AdamW, ddp=ddp, lr=1e-3)

Unlike torch's it works through the DDP wrapper (its shards are cut from DDP's gradient
buckets), so it takes ddp; optimizer_class is tessera.optim.SGD, Adam or AdamW.
"""
from .._C.distributed import ZeroRedundancyOptimizer  # noqa: F401
