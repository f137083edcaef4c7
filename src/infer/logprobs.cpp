#include "tessera/infer/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/core/error.h"

namespace tessera::infer {

TokenLogprob token_logprobs(std::span<const float> logits, int32_t token, int64_t k) {
  const int64_t V = static_cast<int64_t>(logits.size());
  TESSERA_CHECK(V > 0, ValueError, "[token_logprobs] expected non-empty logits");
  TESSERA_CHECK(token >= 0 && token < V, ValueError, "[token_logprobs] expected a token in [0, ", V,
                "), got ", token);
  TESSERA_CHECK(k >= 0, ValueError, "[token_logprobs] expected k >= 0, got ", k);
  // In double: a 32K-entry sum in float loses the small tail.
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  auto lp = [&](int32_t id) { return static_cast<float>(logits[id] - lse); };

  TokenLogprob out;
  out.token = token;
  out.logprob = lp(token);
  k = std::min(k, V);
  if (k > 0) {
    std::vector<int32_t> ids(V);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    out.top.reserve(k);
    for (int64_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], lp(ids[i]));
  }
  return out;
}

}  // namespace tessera::infer
