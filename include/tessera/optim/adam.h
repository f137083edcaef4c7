#pragma once
// Adam and AdamW, matching torch.optim: with g = grad (negated if maximize), step t >= 1,
//   Adam:  g += weight_decay * p                 AdamW: p *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2,   (amsgrad: vmax = max(vmax, v))
//   p -= lr / (1 - beta1^t) * m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps)
// One fused pass over p, g, m, v per parameter (backend kernels adam_step_kernel, and
// adam_step_list_kernel for a list of parameters in one call).
#include <optional>

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // nullopt: the optimizer's default (0 for Adam, 1e-2 for AdamW, as torch).
  std::optional<double> weight_decay;
  bool amsgrad = false;
  bool maximize = false;
};

class Adam : public Optimizer {
 public:
  explicit Adam(TensorList params, AdamOptions defaults = {});
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions defaults = {});

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions defaults,
       bool decoupled_weight_decay);
  void update(const Tensor& param, const Tensor& grad, const Options& options,
              ParamState& state) override;
  // Parameters on one device with one dtype and step count take one adam_step_list_kernel call
  // (on CUDA one launch, where one per parameter left ~150 small launches per GPT-2 step).
  void update_group(const std::vector<Update>& updates, const Options& options) override;
  void check_options(const Options& options) const override;

 private:
  bool decoupled_weight_decay_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter).
class AdamW : public Adam {
 public:
  explicit AdamW(TensorList params, AdamOptions defaults = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamOptions defaults = {});
};

}  // namespace tessera::optim
