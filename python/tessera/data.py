"""Datasets, samplers and the prefetching DataLoader (tessera._C.data).

Subclass Dataset with __len__ and __getitem__ (returning a tensor or a tuple of tensors) or use
TensorDataset; DataLoader yields lists of stacked tensors, one per field.
"""
from ._C.data import (  # noqa: F401
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    TensorDataset,
)
