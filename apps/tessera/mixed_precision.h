#pragma once
// --dtype bfloat16 until the library has autocast: a bfloat16 copy of the model runs forward
// and backward, while the float32 master model keeps the weights the optimizer updates and the
// checkpoints store (the usual fp32 master weights of mixed-precision training).
//
//   MixedPrecision mp(*master, compute);   // compute: same architecture, any initial weights
//   mp.pull_weights();                      // master -> bf16 copy
//   for each micro-batch: compute->loss(x, y) ... backward; mp.push_grads();
//   optimizer.step();                       // on the master
//   mp.pull_weights();
#include <memory>

#include "tessera/models/transformer.h"

namespace tessera::cli {

class MixedPrecision {
 public:
  // Casts compute to bfloat16. Both models must list the same parameters in the same order.
  MixedPrecision(models::CausalLM& master, std::shared_ptr<models::CausalLM> compute);
  models::CausalLM& compute() { return *compute_; }
  // Copies (rounds) the master weights into the bfloat16 model.
  void pull_weights();
  // Adds the bfloat16 model's gradients to the master's float32 .grad and drops them, so
  // micro-batch gradients accumulate in float32.
  void push_grads();

 private:
  TensorList master_params_, compute_params_;
  std::shared_ptr<models::CausalLM> compute_;
};

}  // namespace tessera::cli
