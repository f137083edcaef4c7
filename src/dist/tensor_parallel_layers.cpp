// ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding and the sharded/replicated
// split of a module's parameters.
#include <functional>
#include <unordered_set>

#include "dist/tensor_parallel_internal.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/index.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/shape.h"

namespace tessera::dist {

namespace {

const char* bool_str(bool b) { return b ? "True" : "False"; }

const char* input_name(ColumnInput input) {
  switch (input) {
    case ColumnInput::Replicated:
      return "replicated";
    case ColumnInput::SequenceParallel:
      return "sequence_parallel";
    case ColumnInput::InRegion:
      return "in_region";
  }
  return "?";
}

// The group, checked before a layer builds its base (which needs the rank's slices).
const ProcessGroup& checked_group(std::string_view op, const GroupPtr& group) {
  detail::check_group(op, group);
  return *group;
}

void check_master_linear(std::string_view op, const Tensor& weight, const Tensor& bias) {
  TESSERA_CHECK(weight.defined() && weight.dim() == 2, ValueError, "[", op,
                "] expected a 2-d master_weight [out, in], got ",
                weight.defined() ? weight.shape_str() : std::string("undefined"));
  TESSERA_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), ValueError,
                "[", op, "] expected a master_bias [", weight.size(0), "], got ",
                bias.defined() ? bias.shape_str() : std::string());
}

// This rank's rows of a column-parallel master (weight or bias; both are checked first, as the
// base's arguments are evaluated in no fixed order).
Tensor column_shard(const Tensor& t, const Tensor& weight, const Tensor& bias,
                    const GroupPtr& group, const ColumnParallelOptions& options) {
  const ProcessGroup& g = checked_group("ColumnParallelLinear", group);
  check_master_linear("ColumnParallelLinear", weight, bias);
  if (!t.defined()) return Tensor();
  return shard_fused_rows(t, options.fused_parts, g.rank(), g.size());
}

Tensor row_weight(const Tensor& weight, const Tensor& bias, const GroupPtr& group,
                  const RowParallelOptions& options) {
  const ProcessGroup& g = checked_group("RowParallelLinear", group);
  check_master_linear("RowParallelLinear", weight, bias);
  TESSERA_CHECK(!options.sequence_parallel || options.reduce_output, ValueError,
                "[RowParallelLinear] expected reduce_output with sequence_parallel, got "
                "reduce_output False");
  return shard_tensor(weight, 1, g.rank(), g.size());
}

// The replicated bias: a copy of the master's (a parameter of its own).
Tensor row_bias(const Tensor& bias) {
  if (!bias.defined()) return Tensor();
  autograd::NoGradGuard ng;
  return bias.detach().clone();
}

// master [V, C] padded with zero rows to a multiple of the group size; this rank's rows.
Tensor vocab_shard(const Tensor& master, const GroupPtr& group) {
  const ProcessGroup& g = checked_group("VocabParallelEmbedding", group);
  TESSERA_CHECK(master.defined() && master.dim() == 2 && master.numel() > 0, ValueError,
                "[VocabParallelEmbedding] expected a non-empty 2-d master_weight [V, C], got ",
                master.defined() ? master.shape_str() : std::string("undefined"));
  const int64_t V = master.size(0);
  const int64_t padded = pad_to_multiple(V, g.size());
  if (padded == V) return shard_tensor(master, 0, g.rank(), g.size());
  autograd::NoGradGuard ng;
  Tensor pad = zeros({padded - V, master.size(1)},
                     TensorOptions(master.dtype()).with_device(master.device()));
  return shard_tensor(cat({master.detach(), pad}, 0), 0, g.rank(), g.size());
}

}  // namespace

// ---- ColumnParallelLinear ----

ColumnParallelLinear::ColumnParallelLinear(const Tensor& master_weight, const Tensor& master_bias,
                                           GroupPtr group, ColumnParallelOptions options)
    : nn::Linear(column_shard(master_weight, master_weight, master_bias, group, options),
                 column_shard(master_bias, master_weight, master_bias, group, options)),
      group(std::move(group)),
      options(std::move(options)) {}

Tensor ColumnParallelLinear::enter_region(const Tensor& x) const {
  if (options.input == ColumnInput::Replicated) return copy_to_tensor_parallel_region(x, group);
  if (options.input == ColumnInput::SequenceParallel)
    return gather_from_sequence_parallel_region(x, group, 1);
  return x;
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  return gather(linear(enter_region(x), weight, if_defined(bias)));
}

Tensor ColumnParallelLinear::forward_gelu(const Tensor& x, std::string_view approximate) {
  return gather(linear_gelu(enter_region(x), weight, if_defined(bias), approximate));
}

Tensor ColumnParallelLinear::gather(const Tensor& y) const {
  if (!options.gather_output) return y;
  Tensor full = gather_from_tensor_parallel_region(y, group);
  if (options.fused_parts.size() <= 1 || group->size() == 1) return full;
  // The gather is rank-major ([q_0 k_0 v_0 q_1 k_1 v_1]); the master's order is part-major.
  Shape local_parts;
  for (int64_t p : options.fused_parts) local_parts.push_back(p / group->size());
  std::vector<TensorList> pieces;
  for (const Tensor& chunk : split(full, out_features, -1))
    pieces.push_back(split(chunk, local_parts, -1));
  TensorList ordered;
  for (size_t k = 0; k < local_parts.size(); ++k)
    for (const TensorList& rank_pieces : pieces) ordered.push_back(rank_pieces[k]);
  return cat(ordered, -1);
}

std::string ColumnParallelLinear::extra_repr() const {
  return tessera::detail::str(nn::Linear::extra_repr(), ", tp_size=", group->size(),
                              ", input=", input_name(options.input),
                              ", gather_output=", bool_str(options.gather_output));
}

// ---- RowParallelLinear ----

RowParallelLinear::RowParallelLinear(const Tensor& master_weight, const Tensor& master_bias,
                                     GroupPtr group, RowParallelOptions options)
    : nn::Linear(row_weight(master_weight, master_bias, group, options), row_bias(master_bias)),
      group(std::move(group)),
      options(options) {}

Tensor RowParallelLinear::forward_gelu(const Tensor& x, std::string_view approximate) {
  return gelu(forward(x), approximate);
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  Tensor in = options.input_is_parallel ? x : scatter_to_tensor_parallel_region(x, group);
  Tensor y = linear(in, weight);
  if (!options.reduce_output) return y;
  if (options.sequence_parallel) {
    TESSERA_CHECK(y.dim() >= 3 && y.size(1) % group->size() == 0, ValueError,
                  "[RowParallelLinear] expected an input [B, T, ...] with T divisible by the group "
                  "size ",
                  group->size(), " for sequence_parallel, got ", x.sizes());
    y = reduce_scatter_to_sequence_parallel_region(y, group, 1);
  } else {
    y = reduce_from_tensor_parallel_region(y, group);
  }
  return bias.defined() ? y + bias : y;
}

std::string RowParallelLinear::extra_repr() const {
  return tessera::detail::str(nn::Linear::extra_repr(), ", tp_size=", group->size(),
                              ", input_is_parallel=", bool_str(options.input_is_parallel),
                              ", reduce_output=", bool_str(options.reduce_output),
                              ", sequence_parallel=", bool_str(options.sequence_parallel));
}

// ---- VocabParallelEmbedding ----

VocabParallelEmbedding::VocabParallelEmbedding(const Tensor& master_weight, GroupPtr group,
                                               bool sequence_parallel)
    : nn::Embedding(vocab_shard(master_weight, group)),
      group(std::move(group)),
      sequence_parallel(sequence_parallel),
      vocab_size(master_weight.size(0)),
      vocab_start(this->group->rank() * num_embeddings),
      vocab_end(vocab_start + num_embeddings) {}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  constexpr const char* op = "VocabParallelEmbedding";
  detail::check_ids(op, ids, vocab_size, "token ids");
  TESSERA_CHECK(!sequence_parallel || (ids.dim() >= 2 && ids.size(1) % group->size() == 0),
                ValueError, "[", op, "] expected ids [B, T] with T divisible by the group size ",
                group->size(), " for sequence_parallel, got ", ids.sizes());
  Tensor out;
  if (group->size() == 1) {
    out = embedding(weight, ids);
  } else {
    // Ids of other ranks' rows look up local row 0 and are then zeroed.
    Tensor outside = logical_or(ids < vocab_start, ids >= vocab_end);
    Tensor local = masked_fill(ids - vocab_start, outside, 0);
    out = masked_fill(embedding(weight, local), unsqueeze(outside, -1), 0.0);
  }
  return sequence_parallel ? reduce_scatter_to_sequence_parallel_region(out, group, 1)
                           : reduce_from_tensor_parallel_region(out, group);
}

std::string VocabParallelEmbedding::extra_repr() const {
  return tessera::detail::str(nn::Embedding::extra_repr(), ", vocab_size=", vocab_size,
                              ", vocab_range=[", vocab_start, ", ", vocab_end,
                              "), tp_size=", group->size(),
                              ", sequence_parallel=", bool_str(sequence_parallel));
}

// ---- parameters ----

TensorParallelParams tensor_parallel_params(const nn::Module& module) {
  TensorParallelParams out;
  std::unordered_set<const TensorImpl*> sharded;
  std::unordered_set<const nn::Module*> seen;
  auto shard = [&](const Tensor& t) {
    if (t.defined() && sharded.insert(t.impl()).second) out.sharded.push_back(t);
  };
  std::function<void(const nn::Module&)> visit = [&](const nn::Module& m) {
    if (!seen.insert(&m).second) return;
    if (auto* c = dynamic_cast<const ColumnParallelLinear*>(&m)) {
      shard(c->weight);
      shard(c->bias);
    } else if (auto* r = dynamic_cast<const RowParallelLinear*>(&m)) {
      shard(r->weight);  // its bias is added after the reduction: replicated
    } else if (auto* e = dynamic_cast<const VocabParallelEmbedding*>(&m)) {
      shard(e->weight);
    }
    for (const auto& [name, child] : m.named_children()) visit(*child);
  };
  visit(module);
  // A tensor tied to a sharded one is sharded wherever else it appears.
  for (const Tensor& p : module.parameters())
    if (!sharded.count(p.impl())) out.replicated.push_back(p);
  return out;
}

}  // namespace tessera::dist
