#include "infer/device_sampler.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/tessera.h"

namespace tessera::infer {

namespace detail {
namespace {

// A per-row column [rows, 1] of float64 values on device.
Tensor column(std::span<const RowSampling> rows, double (*field)(const RowSampling&),
              Device device) {
  std::vector<double> v;
  for (const RowSampling& r : rows) v.push_back(field(r));
  return tensor(v, Shape{static_cast<int64_t>(v.size()), 1}).to(device);
}

}  // namespace

Tensor sample_rows(const Tensor& logits, std::span<const RowSampling> rows) {
  autograd::NoGradGuard no_grad;
  const int64_t R = logits.size(0), V = logits.size(1);
  TESSERA_CHECK(static_cast<int64_t>(rows.size()) == R, ValueError, "[sample_rows] expected ", R,
                " row settings, got ", rows.size());
  const Device device = logits.device();
  const Tensor greedy_ids = argmax(logits, 1);
  const bool any_stochastic = std::any_of(rows.begin(), rows.end(), [](const RowSampling& r) {
    return r.temperature > 0.0;
  });
  if (!any_stochastic) return greedy_ids;

  // softmax(x / T) in float64 (greedy rows divide by 1; their pick is the argmax anyway).
  const Tensor x = logits.to(kFloat64);
  const Tensor temperature =
      column(rows, [](const RowSampling& r) { return r.temperature > 0 ? r.temperature : 1.0; },
             device);
  Tensor probs = softmax(x / temperature, 1);

  // top-k and top-p over the stable descending order (the host's order_by_prob): rank r stays
  // when r < k and the mass of the ranks before it is below top_p. Rows without either keep all.
  const bool any_filter = std::any_of(rows.begin(), rows.end(), [V](const RowSampling& r) {
    return (r.top_k > 0 && r.top_k < V) || r.top_p < 1.0;
  });
  if (any_filter) {
    auto [sorted, order] = sort(probs, 1, /*descending=*/true);
    const Tensor mass_before = cumsum(sorted, 1) - sorted;
    const Tensor rank = arange(V, kFloat64).to(device).unsqueeze(0);
    const Tensor k = column(rows, [](const RowSampling& r) {
      return r.top_k > 0 ? static_cast<double>(r.top_k) : std::numeric_limits<double>::infinity();
    }, device);
    const Tensor top_p = column(rows, [](const RowSampling& r) { return r.top_p; }, device);
    const Tensor filtered = column(rows, [](const RowSampling& r) {
      return r.top_k > 0 || r.top_p < 1.0 ? 1.0 : 0.0;
    }, device);
    const Tensor keep_ranked = logical_or(logical_and(rank < k, mass_before < top_p),
                                          filtered == Scalar(0.0));
    const Tensor keep = scatter(zeros_like(probs), 1, order, cast(keep_ranked, kFloat64));
    probs = probs * keep;
    probs = probs / sum(probs, {1}, /*keepdim=*/true);
  }
  // min_p: below min_p times the row's top probability goes to zero (renormalised by the pick).
  const Tensor min_p = column(rows, [](const RowSampling& r) { return r.min_p; }, device);
  probs = where(probs < min_p * amax(probs, {1}, /*keepdim=*/true), zeros_like(probs), probs);

  // Inverse CDF: the first id whose cumulative mass exceeds u * total (the last nonzero one if
  // rounding leaves none), as models::draw_from_probs.
  const Tensor u = column(rows, [](const RowSampling& r) { return r.u; }, device);
  const Tensor target = u * sum(probs, {1}, /*keepdim=*/true);
  const Tensor first_above = sum(cumsum(probs, 1) <= target, {1});
  const Tensor ids = arange(V, kInt64).to(device).unsqueeze(0);
  const Tensor last_nonzero = amax(where(probs > Scalar(0.0), ids, full_like(ids, -1)), {1});
  const Tensor picked = where(first_above >= Scalar(V), last_nonzero, first_above);
  const Tensor greedy = column(rows, [](const RowSampling& r) {
    return r.temperature > 0.0 ? 0.0 : 1.0;
  }, device).squeeze(1) > Scalar(0.0);
  return where(greedy, greedy_ids, picked);
}

}  // namespace detail
}  // namespace tessera::infer
