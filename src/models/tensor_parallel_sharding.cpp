#include "tensor_parallel_sharding.h"

#include "tessera/ops/creation.h"
#include "tessera/ops/shape.h"

namespace tessera::models::detail {

Tensor enter_column_region(const Tensor& x, const dist::GroupPtr& group, bool sequence_parallel) {
  return sequence_parallel ? dist::gather_from_sequence_parallel_region(x, group)
                           : dist::copy_to_tensor_parallel_region(x, group);
}

std::shared_ptr<dist::ColumnParallelLinear> column_parallel(const nn::Linear& whole,
                                                            const dist::GroupPtr& group,
                                                            dist::ColumnParallelOptions options) {
  return std::make_shared<dist::ColumnParallelLinear>(
      whole.weight.detach(), whole.bias.defined() ? whole.bias.detach() : Tensor(), group,
      std::move(options));
}

std::shared_ptr<dist::RowParallelLinear> row_parallel(const nn::Linear& whole,
                                                      const dist::GroupPtr& group,
                                                      bool sequence_parallel) {
  return std::make_shared<dist::RowParallelLinear>(
      whole.weight.detach(), whole.bias.defined() ? whole.bias.detach() : Tensor(), group,
      dist::RowParallelOptions{.sequence_parallel = sequence_parallel});
}

namespace {

// master [V, C] with zero rows appended up to a multiple of the group size.
Tensor pad_vocab_rows(const Tensor& master, int size) {
  const int64_t V = master.size(0);
  const int64_t padded = dist::pad_to_multiple(V, size);
  if (padded == V) return master;
  return cat({master, zeros({padded - V, master.size(1)},
                            TensorOptions(master.dtype()).with_device(master.device()))},
             0);
}

}  // namespace

VocabParallelPair vocab_parallel(const nn::Embedding& embedding, const nn::Linear& head, bool tied,
                                 const dist::GroupPtr& group, bool sequence_parallel) {
  VocabParallelPair out;
  out.embedding = std::make_shared<dist::VocabParallelEmbedding>(embedding.weight.detach(), group,
                                                                 sequence_parallel);
  const Tensor head_master = tied ? embedding.weight : head.weight;
  out.head = std::make_shared<dist::ColumnParallelLinear>(
      pad_vocab_rows(head_master.detach(), group->size()), Tensor(), group,
      dist::ColumnParallelOptions{.input = column_input(sequence_parallel), .fused_parts = {}});
  if (tied) out.head->weight = out.head->replace_parameter("weight", out.embedding->weight);
  return out;
}

}  // namespace tessera::models::detail
