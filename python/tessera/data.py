"""Datasets, samplers and the DataLoader: the same objects as tessera.utils.data (torch's
torch.utils.data), under the short name tessera has always had."""
from .utils.data import (  # noqa: F401
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    TensorDataset,
    WorkerInfo,
    default_collate,
    get_worker_info,
)
