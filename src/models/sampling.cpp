#include "tessera/models/sampling.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/shape.h"

namespace tessera::models {

namespace {

// The logits as float64 on the CPU, one value per token.
std::vector<double> logits_to_vector(const Tensor& logits) {
  TESSERA_CHECK(logits.defined() && logits.numel() > 0 && logits.is_floating_point(), ValueError,
                "[sample] expected non-empty floating logits, got ",
                logits.defined()
                    ? logits.shape_str() + " " + std::string(dtype_name(logits.dtype()))
                    : std::string("an undefined tensor"));
  for (int64_t d = 0; d + 1 < logits.dim(); ++d)
    TESSERA_CHECK(logits.size(d) == 1, ValueError,
                  "[sample] expected the logits of one position ([V], [1, V] or [1, 1, V]), got ",
                  logits.shape_str());
  Tensor flat = logits.detach().to(kCPU).to(kFloat64).contiguous().reshape({-1});
  const double* p = flat.data_ptr<double>();
  std::vector<double> out(p, p + flat.numel());
  for (double v : out)
    TESSERA_CHECK(!std::isnan(v), ValueError, "[sample] expected logits without NaN, got NaN");
  return out;
}

// Token ids ordered by probability, most likely first (ties: lower id first), so filtering and
// drawing do not depend on the sort implementation.
std::vector<int32_t> order_by_prob(const std::vector<double>& probs) {
  std::vector<int32_t> order(probs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  return order;
}

}  // namespace

void check_sampling_options(const SamplingOptions& options) {
  TESSERA_CHECK(std::isfinite(options.temperature) && options.temperature >= 0.0, ValueError,
                "[sample] expected temperature >= 0, got ", options.temperature);
  TESSERA_CHECK(options.top_k >= 0, ValueError, "[sample] expected top_k >= 0, got ",
                options.top_k);
  TESSERA_CHECK(options.top_p > 0.0 && options.top_p <= 1.0, ValueError,
                "[sample] expected top_p in (0, 1], got ", options.top_p);
}

std::vector<double> sampling_probs(const Tensor& logits, const SamplingOptions& options) {
  check_sampling_options(options);
  std::vector<double> x = logits_to_vector(logits);
  const size_t V = x.size();
  std::vector<double> probs(V, 0.0);
  const size_t best = static_cast<size_t>(std::max_element(x.begin(), x.end()) - x.begin());
  TESSERA_CHECK(x[best] > -INFINITY, ValueError,
                "[sample] expected at least one logit above -inf, got all -inf");
  if (options.temperature == 0.0 || x[best] == INFINITY) {
    probs[best] = 1.0;
    return probs;
  }
  // softmax(x / T), shifted by the max for stability.
  double total = 0.0;
  for (size_t i = 0; i < V; ++i)
    total += probs[i] = std::exp((x[i] - x[best]) / options.temperature);
  for (double& p : probs) p /= total;

  if ((options.top_k > 0 && static_cast<size_t>(options.top_k) < V) || options.top_p < 1.0) {
    const std::vector<int32_t> order = order_by_prob(probs);
    size_t keep = options.top_k > 0 ? std::min(V, static_cast<size_t>(options.top_k)) : V;
    // Nucleus: the most likely tokens until their mass reaches top_p (the crossing token kept),
    // as a share of what top-k kept (renormalised between the two, as HF's and vLLM's are).
    double kept_mass = 0.0;
    for (size_t r = 0; r < keep; ++r) kept_mass += probs[order[r]];
    double mass = 0.0;
    for (size_t r = 0; r < keep; ++r) {
      mass += probs[order[r]];
      if (mass >= options.top_p * kept_mass) {
        keep = r + 1;
        break;
      }
    }
    std::vector<double> kept(V, 0.0);
    total = 0.0;
    for (size_t r = 0; r < keep; ++r) total += kept[order[r]] = probs[order[r]];
    for (double& p : kept) p /= total;
    probs.swap(kept);
  }
  return probs;
}

int32_t draw_from_probs(const std::vector<double>& probs, double u) {
  double cdf = 0.0;
  int32_t last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) continue;
    last = static_cast<int32_t>(i);
    cdf += probs[i];
    if (u < cdf) return last;
  }
  return last;
}

int32_t sample_token(const Tensor& logits, const SamplingOptions& options, Generator* gen) {
  const std::vector<double> probs = sampling_probs(logits, options);
  if (options.temperature == 0.0)
    return static_cast<int32_t>(std::max_element(probs.begin(), probs.end()) - probs.begin());
  Generator& g = gen ? *gen : default_generator();
  const std::array<uint32_t, 4> bits = philox(g.seed(), g.reserve(1));
  return draw_from_probs(probs, uint_to_unit_double(bits[0], bits[1]));
}

std::vector<int32_t> generate(CausalLM& model, std::vector<int32_t> prompt, int64_t max_new_tokens,
                              const SamplingOptions& options, Generator* gen,
                              const TokenCallback& on_token) {
  TESSERA_CHECK(!prompt.empty(), ValueError,
                "[generate] expected a prompt of at least one token, got none");
  TESSERA_CHECK(max_new_tokens >= 0, ValueError, "[generate] expected max_new_tokens >= 0, got ",
                max_new_tokens);
  check_sampling_options(options);
  nn::EvalModeGuard eval_mode(model);
  autograd::InferenceMode inference;
  for (int64_t n = 0; n < max_new_tokens; ++n) {
    // Without a KV cache, every step re-reads the window that fits the model's context.
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(prompt.size()), model.max_seq_len());
    std::vector<int64_t> window(prompt.end() - T, prompt.end());
    Tensor idx = tensor(window, Shape{1, T}).to(model.device());
    const int32_t next = sample_token(model(idx, /*last_only=*/true), options, gen);
    prompt.push_back(next);
    if (on_token && !on_token(next)) break;
  }
  return prompt;
}

}  // namespace tessera::models
