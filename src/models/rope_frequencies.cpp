#include "tessera/models/rope_frequencies.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tessera/core/error.h"

namespace tessera::models {
namespace {

// Llama 3.1: keep short wavelengths, divide long ones by factor, interpolate in between.
void scale_llama3(std::vector<double>& inv, const RopeScaling& s) {
  const double context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = context / s.low_freq_factor;
  const double high_freq_wavelen = context / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;
    } else {
      const double smooth =
          (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  }
}

// YaRN: the dimension index at which a frequency turns `rotations` times over the original
// context, then a ramp from keeping (fast dimensions) to dividing by factor (slow ones).
void scale_yarn(std::vector<double>& inv, int64_t head_dim, double theta, const RopeScaling& s) {
  const double dim = static_cast<double>(head_dim);
  const double context = static_cast<double>(s.original_max_position_embeddings);
  auto dim_turning = [&](double rotations) {
    return dim * std::log(context / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
  };
  double low = dim_turning(s.beta_fast), high = dim_turning(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;  // as Hugging Face's, against a zero-width ramp
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    inv[i] = ramp * inv[i] / s.factor + (1.0 - ramp) * inv[i];
  }
}

// YaRN's 0.1 m ln(scale) + 1, 1 for scale <= 1.
double yarn_mscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

}  // namespace

std::vector<double> rope_inv_freq(int64_t head_dim, double theta,
                                  const std::optional<RopeScaling>& scaling) {
  TESSERA_CHECK(head_dim > 0 && head_dim % 2 == 0, ValueError,
                "[rope_inv_freq] expected an even head_dim > 0, got ", head_dim);
  std::vector<double> inv(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i)
    inv[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  if (!scaling) return inv;
  const RopeScaling& s = *scaling;
  if (s.rope_type == "llama3") {
    scale_llama3(inv, s);
  } else if (s.rope_type == "linear") {
    for (double& f : inv) f /= s.factor;
  } else if (s.rope_type == "yarn") {
    scale_yarn(inv, head_dim, theta, s);
  } else {
    throw ValueError(tessera::detail::str(
        "[rope_inv_freq] expected rope_type llama3, linear or yarn, got '", s.rope_type, "'"));
  }
  return inv;
}

double rope_attention_factor(const std::optional<RopeScaling>& scaling) {
  if (!scaling || scaling->rope_type != "yarn") return 1.0;
  const RopeScaling& s = *scaling;
  if (s.attention_factor > 0.0) return s.attention_factor;
  if (s.mscale > 0.0 && s.mscale_all_dim > 0.0)
    return yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  return yarn_mscale(s.factor, 1.0);
}

}  // namespace tessera::models
