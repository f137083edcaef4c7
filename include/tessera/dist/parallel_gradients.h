#pragma once
// What a model split over tensor- and pipeline-parallel ranks does with its gradients between
// backward and the optimizer step, so the step equals the single-process one:
//   - Sequence parallelism: a replicated parameter (norms, position embeddings, row-parallel
//     biases) gets on each TP rank only its slice of the sequence's share of the gradient;
//     synchronize() sums them over the TP group.
//   - Pipeline parallelism with tied embeddings: the first stage's token embedding and the last
//     stage's output projection are one weight held twice; synchronize() sums their gradients
//     over the two ranks, so both copies take the same step.
//   - Clipping: the global norm counts each element of the whole model once (sharded gradients
//     summed over the TP group, replicated ones once, stages summed over the PP group, the last
//     stage's copy of a tied weight left out).
// Data parallelism is DDP's business (its reduction happens in backward, before these).
#include <memory>

#include "tessera/dist/tensor_parallel.h"
#include "tessera/nn/module.h"

namespace tessera::dist {

struct ParallelGradientsOptions {
  GroupPtr tp;  // null or size 1: no tensor parallelism
  bool sequence_parallel = false;
  GroupPtr pp;  // null or size 1: one stage
  // This rank's copies of weights tied across the first and last stage, and the group of the
  // ranks holding them (null: none).
  TensorList tied;
  GroupPtr tied_group;
  // Whether this rank's tied copies count in the norm (true on the first stage only).
  bool count_tied_in_norm = true;
};

class ParallelGradients {
 public:
  // module: this rank's part of the model (its parameters that require grad are the ones
  // synchronised and clipped).
  ParallelGradients(const nn::Module& module, ParallelGradientsOptions options);

  // The sums above (collective over the TP group, then the tied group).
  void synchronize();
  // The global 2-norm of the gradients (collective); with max_norm > 0 every gradient is scaled
  // by max_norm / (norm + 1e-6) when that is below 1, as optim::clip_grad_norm_. Returns the
  // norm (0-d float32).
  Tensor clip_grad_norm_(double max_norm);

  const ParallelGradientsOptions& options() const { return options_; }

 private:
  ParallelGradientsOptions options_;
  TensorList sharded_, replicated_;  // parameters requiring grad, by how TP holds them
};

}  // namespace tessera::dist
