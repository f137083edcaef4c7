#include "tessera/nn/init.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"

namespace tessera::nn::init {

namespace {

thread_local bool skip_init = false;

void check_floating(const Tensor& t, std::string_view op) {
  TESSERA_CHECK(t.defined() && t.is_floating_point(), TypeError, "[", op,
                "] expected a defined floating-point tensor, got ",
                t.defined() ? dtype_name(t.dtype()) : "an undefined one");
}

double fan(const Tensor& t, FanMode mode) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return static_cast<double>(mode == FanMode::FanIn ? fan_in : fan_out);
}

}  // namespace

NoInitGuard::NoInitGuard() : previous_(skip_init) { skip_init = true; }
NoInitGuard::~NoInitGuard() { skip_init = previous_; }

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: {
      double slope = param.value_or(0.01);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case Nonlinearity::SELU:
      return 3.0 / 4.0;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  TESSERA_CHECK(t.dim() >= 2, ValueError,
                "[calculate_fan_in_and_fan_out] expected a tensor with at least 2 dims, got shape ",
                t.sizes());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor normal_(const Tensor& t, double mean, double std, Generator* gen) {
  check_floating(t, "init.normal_");
  if (skip_init) return t;
  autograd::NoGradGuard no_grad;
  Tensor out = t;
  tessera::normal_(out, mean, std, gen);
  return out;
}

Tensor uniform_(const Tensor& t, double low, double high, Generator* gen) {
  check_floating(t, "init.uniform_");
  if (skip_init) return t;
  autograd::NoGradGuard no_grad;
  Tensor out = t;
  tessera::uniform_(out, low, high, gen);
  return out;
}

Tensor constant_(const Tensor& t, const Scalar& value) {
  TESSERA_CHECK(t.defined(), ValueError,
                "[init.constant_] expected a defined tensor, got an "
                "undefined one");
  if (skip_init) return t;
  autograd::NoGradGuard no_grad;
  Tensor out = t;
  out.fill_(value);
  return out;
}

Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

Tensor xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(t, -a, a, gen);
}

Tensor xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), gen);
}

Tensor kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                        Generator* gen) {
  if (t.defined() && t.numel() == 0) return t;  // torch warns and leaves it
  double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / fan(t, mode));
  return uniform_(t, -bound, bound, gen);
}

Tensor kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                       Generator* gen) {
  if (t.defined() && t.numel() == 0) return t;
  return normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(fan(t, mode)), gen);
}

}  // namespace tessera::nn::init
