#pragma once
// The pieces GPT-2 and LLaMA share when they shard themselves for tensor parallelism: each
// builds its parallel layers from its current (full) layers.
#include <memory>
#include <vector>

#include "tessera/dist/tensor_parallel.h"

namespace tessera::models::detail {

// How a column-parallel layer reads activations that enter it whole or as sequence slices.
inline dist::ColumnInput column_input(bool sequence_parallel) {
  return sequence_parallel ? dist::ColumnInput::SequenceParallel : dist::ColumnInput::Replicated;
}

// Enters a column-parallel region once for several layers that read the same x (q, k and v;
// gate and up), which are then built with ColumnInput::InRegion.
Tensor enter_column_region(const Tensor& x, const dist::GroupPtr& group, bool sequence_parallel);

// The parallel layers cut from a whole nn::Linear.
std::shared_ptr<dist::ColumnParallelLinear> column_parallel(const nn::Linear& whole,
                                                            const dist::GroupPtr& group,
                                                            dist::ColumnParallelOptions options);
std::shared_ptr<dist::RowParallelLinear> row_parallel(const nn::Linear& whole,
                                                      const dist::GroupPtr& group,
                                                      bool sequence_parallel);

// The vocabulary-parallel embedding and output projection; with `tied`, the head's weight is
// the embedding's slice (one tensor), else it is cut from head's own weight.
struct VocabParallelPair {
  std::shared_ptr<dist::VocabParallelEmbedding> embedding;
  std::shared_ptr<dist::ColumnParallelLinear> head;
};
VocabParallelPair vocab_parallel(const nn::Embedding& embedding, const nn::Linear& head, bool tied,
                                 const dist::GroupPtr& group, bool sequence_parallel);

}  // namespace tessera::models::detail
