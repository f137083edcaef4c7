#pragma once
// Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay, matching
// torch.optim.SGD: with g = grad (negated if maximize) + weight_decay * p,
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g
//   d = nesterov ? g + momentum * buf : buf   (d = g without momentum)
//   p -= lr * d
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  bool maximize = false;
};

class SGD : public Optimizer {
 public:
  explicit SGD(TensorList params, SGDOptions defaults = {});
  explicit SGD(std::vector<ParamGroup> groups, SGDOptions defaults = {});

 protected:
  void update(const Tensor& param, const Tensor& grad, const Options& options,
              ParamState& state) override;
  void check_options(const Options& options) const override;
};

}  // namespace tessera::optim
