#pragma once
// Tensor parallelism as Megatron-LM splits a transformer: the ranks of a tensor-parallel (TP)
// group each hold a slice of every large weight and compute their slice of the activations.
//
//   ColumnParallelLinear: weight rows (output features) split; y_r = x W_r^T + b_r.
//   RowParallelLinear:    weight columns (input features) split; y = sum_r x_r W_r^T + b.
//   VocabParallelEmbedding: vocabulary rows split; ids outside a rank's rows give zeros and the
//                         ranks' outputs are summed.
//   vocab_parallel_cross_entropy: cross-entropy of logits whose vocabulary is split.
//
// Sequence parallelism (SP) additionally splits the activations outside the TP regions (norms,
// residuals, dropout) along the sequence: the region is entered by an all-gather of the sequence
// and left by a reduce-scatter instead of an all-reduce.
//
// Every layer is built from a full master tensor (the one a single process would hold) and keeps
// its rank's slice, so a TP run starts exactly where the single-process run starts. The region
// functions below are autograd functions; with a group of size 1 they return their input.
#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/layers.h"

namespace tessera::dist {

using GroupPtr = std::shared_ptr<ProcessGroup>;

// ---- regions (forward / backward) ----

// identity / all-reduce (sum) of the gradient: enters a region from replicated activations.
Tensor copy_to_tensor_parallel_region(const Tensor& x, const GroupPtr& group);
// all-reduce (sum) / identity: leaves a region by summing the ranks' partial results.
Tensor reduce_from_tensor_parallel_region(const Tensor& x, const GroupPtr& group);
// keeps this rank's slice of the last dim / all-gathers the gradient along the last dim.
Tensor scatter_to_tensor_parallel_region(const Tensor& x, const GroupPtr& group);
// all-gathers along the last dim / keeps this rank's slice of the gradient.
Tensor gather_from_tensor_parallel_region(const Tensor& x, const GroupPtr& group);
// keeps this rank's slice of dim / all-gathers the gradient along dim (enters SP).
Tensor scatter_to_sequence_parallel_region(const Tensor& x, const GroupPtr& group,
                                           int64_t dim = 1);
// all-gathers along dim / reduce-scatters (sum) the gradient along dim.
Tensor gather_from_sequence_parallel_region(const Tensor& x, const GroupPtr& group,
                                            int64_t dim = 1);
// reduce-scatters (sum) along dim / all-gathers the gradient along dim.
Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, const GroupPtr& group,
                                                  int64_t dim = 1);

// ---- slicing master tensors ----

// Slice `rank` of `size` equal slices of master along dim (a contiguous copy, not a view).
// ValueError naming what unless size divides the dim.
Tensor shard_tensor(const Tensor& master, int64_t dim, int rank, int size);
// For fused projections: dim 0 of master is the concatenation of blocks of `parts` rows (e.g.
// q, k, v of a fused QKV weight or bias); each block is sharded on its own and this rank's
// slices are concatenated in the same order (so a rank holds whole heads of q, k and v).
Tensor shard_fused_rows(const Tensor& master, const std::vector<int64_t>& parts, int rank,
                        int size);
// `n` rounded up to a multiple of `multiple` (vocabularies padded to a multiple of TP).
int64_t pad_to_multiple(int64_t n, int64_t multiple);

// ---- layers ----

// How a column-parallel layer's input enters the region.
enum class ColumnInput {
  Replicated,        // every rank holds all of x: copy_to_tensor_parallel_region
  SequenceParallel,  // x is this rank's sequence slice: gather_from_sequence_parallel_region
  InRegion,          // the caller entered the region already (one gather for q, k and v)
};

struct ColumnParallelOptions {
  ColumnInput input = ColumnInput::Replicated;
  bool gather_output = false;  // all-gather the output features (else each rank keeps its own)
  // Blocks of the master's output rows sharded separately (fused QKV: {C, C, C}; GQA:
  // {Hq*D, Hkv*D, Hkv*D}); empty: one block.
  std::vector<int64_t> fused_parts;
};

class ColumnParallelLinear : public nn::Linear {
 public:
  // master_weight [out, in]; master_bias [out] or undefined. The rank's weight is
  // [out / size, in].
  ColumnParallelLinear(const Tensor& master_weight, const Tensor& master_bias, GroupPtr group,
                       ColumnParallelOptions options = {});
  Tensor forward(const Tensor& x) override;
  // The GELU applies to this rank's columns before any gather (it acts elementwise).
  Tensor forward_gelu(const Tensor& x, std::string_view approximate) override;
  std::string type_name() const override { return "ColumnParallelLinear"; }
  std::string extra_repr() const override;

  GroupPtr group;
  ColumnParallelOptions options;

 private:
  Tensor enter_region(const Tensor& x) const;  // x as this rank's GEMM reads it
  Tensor gather(const Tensor& y) const;        // the ranks' columns in the master's order
};

struct RowParallelOptions {
  bool input_is_parallel = true;    // x holds this rank's input features (else scattered first)
  bool reduce_output = true;        // sum the ranks' results (else each returns its partial sum)
  bool sequence_parallel = false;   // reduce-scatter the sum along dim 1 instead of all-reducing
};

class RowParallelLinear : public nn::Linear {
 public:
  // master_weight [out, in]; the rank's weight is [out, in / size]. The bias is replicated and
  // added once, after the reduction; without reduce_output it is not added (the caller adds it
  // after reducing).
  RowParallelLinear(const Tensor& master_weight, const Tensor& master_bias, GroupPtr group,
                    RowParallelOptions options = {});
  Tensor forward(const Tensor& x) override;
  // The GELU follows the reduction: gelu(forward(x)).
  Tensor forward_gelu(const Tensor& x, std::string_view approximate) override;
  std::string type_name() const override { return "RowParallelLinear"; }
  std::string extra_repr() const override;

  GroupPtr group;
  RowParallelOptions options;
};

class VocabParallelEmbedding : public nn::Embedding {
 public:
  // master_weight [V, C]: padded with zero rows to a multiple of the group size, the rank keeps
  // rows [vocab_start, vocab_end). With sequence_parallel the summed output is reduce-scattered
  // along dim 1 (each rank gets its slice of the sequence) instead of all-reduced.
  VocabParallelEmbedding(const Tensor& master_weight, GroupPtr group,
                         bool sequence_parallel = false);
  // ids [B, T] int64 in [0, V); IndexError naming the op otherwise.
  Tensor forward(const Tensor& ids) override;
  std::string type_name() const override { return "VocabParallelEmbedding"; }
  std::string extra_repr() const override;

  GroupPtr group;
  bool sequence_parallel;
  int64_t vocab_size;               // V, without the padding
  int64_t vocab_start, vocab_end;   // this rank's rows of the padded vocabulary
};

// Mean cross-entropy of logits [..., V_local] whose last dim is this rank's slice of a padded
// vocabulary (rank r holds columns [r * V_local, (r + 1) * V_local)) against targets [...]
// int64 in [0, vocab_size) or ignore_index. Columns at or past vocab_size are padding and take
// no part. The max, the sum of exps and the target logit are all-reduced over the group, so the
// result (and its gradient, this rank's slice) equals cross_entropy of the gathered logits with
// torch's label smoothing. When every target is ignored the loss is what cross_entropy gives.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    const GroupPtr& group, int64_t vocab_size,
                                    int64_t ignore_index = -100, double label_smoothing = 0.0);

// Which parameters of a module a TP group shards (their gradients are slices: a global norm sums
// them over the group) and which it replicates (each rank holds the whole gradient; under SP
// only its part of the sequence's contribution, so they must be all-reduced over the group).
struct TensorParallelParams {
  TensorList sharded;     // weights of the parallel layers, column-parallel biases
  TensorList replicated;  // everything else: norms, position embeddings, row-parallel biases
};
TensorParallelParams tensor_parallel_params(const nn::Module& module);

}  // namespace tessera::dist
