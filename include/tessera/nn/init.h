#pragma once
// Parameter initialisation (torch.nn.init). Every function fills its tensor in place under
// no_grad, so it works on parameters that require grad, and returns the same handle. Random
// fills draw from gen (the default generator when null). Under a NoInitGuard they leave it as it
// is.
#include <cstdint>
#include <optional>
#include <utility>

#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"

namespace tessera::nn::init {

// While one is alive on this thread, every function below checks its tensor and returns it
// unwritten (transformers' no_init_weights): for building a model whose weights a checkpoint is
// about to overwrite, or whose shapes alone are wanted. Parameters made with empty() then hold
// whatever their memory held, and a large one's pages are not even committed.
class NoInitGuard {
 public:
  NoInitGuard();
  ~NoInitGuard();
  NoInitGuard(const NoInitGuard&) = delete;
  NoInitGuard& operator=(const NoInitGuard&) = delete;

 private:
  bool previous_;
};

// make() run under a NoInitGuard: a model built for its weights to be loaded over (or for its
// shapes alone).
template <class Make>
auto without_init(Make&& make) {
  NoInitGuard no_init;
  return make();
}

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity { Linear, Sigmoid, Tanh, ReLU, LeakyReLU, SELU };

// Recommended gain for a nonlinearity, as torch: linear/sigmoid 1, tanh 5/3, relu sqrt(2),
// leaky_relu sqrt(2 / (1 + slope^2)) with slope = param (default 0.01), selu 3/4.
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);
// (fan_in, fan_out) = (size(1), size(0)) times the receptive field (product of dims 2..);
// ValueError for tensors with fewer than 2 dims.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor uniform_(const Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
Tensor constant_(const Tensor& t, const Scalar& value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);
// U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a), fan by mode.
Tensor kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU,
                        Generator* gen = nullptr);
// N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU,
                       Generator* gen = nullptr);

}  // namespace tessera::nn::init
