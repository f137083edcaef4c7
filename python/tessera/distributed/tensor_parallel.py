"""Tensor parallelism as Megatron-LM splits a transformer, on tessera/dist/tensor_parallel.h.

    group = dist.new_group([0, 1])                     # the tensor-parallel ranks
    whole = nn.Linear(64, 256)                         # the weights one process would hold
    fc = ColumnParallelLinear(whole.weight, whole.bias, group)   # rows 128 r .. 128 r + 127
    proj = RowParallelLinear(nn.Linear(256, 64).weight, None, group)
    y = proj(gelu(fc(x)))                              # equals the whole MLP on every rank

Layers are cut from whole master tensors, so every layout starts where one process starts. The
region functions are autograd functions (their backward is the dual collective);
vocab_parallel_cross_entropy takes logits whose last dim is this rank's slice of the vocabulary.
"""
from .._C.distributed import (  # noqa: F401
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    copy_to_tensor_parallel_region,
    gather_from_sequence_parallel_region,
    gather_from_tensor_parallel_region,
    reduce_from_tensor_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
    scatter_to_sequence_parallel_region,
    scatter_to_tensor_parallel_region,
    shard_fused_rows,
    shard_tensor,
    vocab_parallel_cross_entropy,
)
