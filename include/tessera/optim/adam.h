#pragma once
// Adam and AdamW, matching torch.optim: with g = grad (negated if maximize), step t >= 1,
//   Adam:  g += weight_decay * p                 AdamW: p *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2,   (amsgrad: vmax = max(vmax, v))
//   p -= lr / (1 - beta1^t) * m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps)
// One fused pass over p, g, m, v per parameter (backend kernel adam_step_kernel).
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
