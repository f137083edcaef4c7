#pragma once
// SamplingParams with the distribution's fields set, for sampler tests.
#include <cstdint>

#include "tessera/infer/sampler.h"

namespace tessera::testing {

inline infer::SamplingParams sampling_params(double temperature, int64_t top_k = 0,
                                             double top_p = 1.0, double min_p = 0.0) {
  infer::SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

}  // namespace tessera::testing
