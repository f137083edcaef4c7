#include "infer/device_sampler.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/tessera.h"

namespace tessera::infer {

namespace detail {
namespace {

bool is_greedy(const RowSampling& r) { return r.temperature <= 0.0; }
// The host filters only with a top-k below the vocabulary or a top-p below 1.
bool is_filtered(const RowSampling& r, int64_t V) {
  return (r.top_k > 0 && r.top_k < V) || r.top_p < 1.0;
}

// The rows' settings as float64 columns [rows, 1] on the device (one transfer for all).
struct Columns {
  Tensor temperature, top_k, top_p, filtered, min_p, u, greedy;
};

Columns columns(std::span<const RowSampling> rows, int64_t V, Device device) {
  constexpr int64_t kFields = 7;
  const auto R = static_cast<int64_t>(rows.size());
  std::vector<double> v;
  v.reserve(static_cast<size_t>(R * kFields));
  for (const RowSampling& r : rows) {
    const bool greedy = is_greedy(r), filtered = is_filtered(r, V);
    v.insert(v.end(), {greedy ? 1.0 : r.temperature,
                       r.top_k > 0 ? static_cast<double>(r.top_k)
                                   : std::numeric_limits<double>::infinity(),
                       r.top_p, filtered ? 1.0 : 0.0, r.min_p, r.u, greedy ? 1.0 : 0.0});
  }
  const Tensor all = tensor(v, Shape{R, kFields}).to(device);
  auto col = [&](int64_t i) { return all.narrow(1, i, 1); };
  return {col(0), col(1), col(2), col(3), col(4), col(5), col(6)};
}

// [1, V] token ids 0..V-1 (int64) on device, made once per thread and size: the sampler wants
// them every step, and each arange was a host-to-device copy.
const Tensor& token_ids(int64_t V, Device device) {
  thread_local std::map<std::tuple<int64_t, DeviceType, int>, Tensor> cache;
  Tensor& ids = cache[{V, device.type, device.index}];
  if (!ids.defined()) ids = arange(V, kInt64).to(device).unsqueeze(0);
  return ids;
}

}  // namespace

Tensor sample_rows(const Tensor& logits, std::span<const RowSampling> rows) {
  autograd::NoGradGuard no_grad;
  const int64_t R = logits.size(0), V = logits.size(1);
  TESSERA_CHECK(static_cast<int64_t>(rows.size()) == R, ValueError, "[sample_rows] expected ", R,
                " row settings, got ", rows.size());
  const Device device = logits.device();
  const Tensor greedy_ids = argmax(logits, 1);
  if (std::all_of(rows.begin(), rows.end(), is_greedy)) return greedy_ids;
  const Columns c = columns(rows, V, device);

  // softmax(x / T) in float64 (greedy rows divide by 1; their pick is the argmax anyway).
  Tensor probs = softmax(logits.to(kFloat64) / c.temperature, 1);

  // top-k and top-p over the stable descending order (the host's order_by_prob): rank r stays
  // when r < k and the mass of the ranks before it is below top_p of the top-k ranks' mass.
  // Unfiltered rows keep all.
  if (std::any_of(rows.begin(), rows.end(),
                  [V](const RowSampling& r) { return is_filtered(r, V); })) {
    auto [sorted, order] = sort(probs, 1, /*descending=*/true);
    const Tensor mass_before = cumsum(sorted, 1) - sorted;
    const Tensor rank = cast(token_ids(V, device), kFloat64);
    const Tensor in_top_k = rank < c.top_k;
    const Tensor top_k_mass = sum(where(in_top_k, sorted, zeros_like(sorted)), {1}, true);
    const Tensor keep_ranked = logical_or(logical_and(in_top_k, mass_before < c.top_p * top_k_mass),
                                          c.filtered == Scalar(0.0));
    const Tensor keep = scatter(zeros_like(probs), 1, order, cast(keep_ranked, kFloat64));
    probs = probs * keep;
    probs = probs / sum(probs, {1}, /*keepdim=*/true);
  }
  // min_p: below min_p times the row's top probability goes to zero (renormalised by the pick).
  probs = where(probs < c.min_p * amax(probs, {1}, /*keepdim=*/true), zeros_like(probs), probs);

  // Inverse CDF: the first id whose cumulative mass exceeds u * total (the last nonzero one if
  // rounding leaves none), as models::draw_from_probs.
  const Tensor target = c.u * sum(probs, {1}, /*keepdim=*/true);
  const Tensor first_above = sum(cumsum(probs, 1) <= target, {1});
  const Tensor& ids = token_ids(V, device);
  const Tensor last_nonzero = amax(where(probs > Scalar(0.0), ids, full_like(ids, -1)), {1});
  const Tensor picked = where(first_above >= Scalar(V), last_nonzero, first_above);
  return where(c.greedy.squeeze(1) > Scalar(0.0), greedy_ids, picked);
}

}  // namespace detail
}  // namespace tessera::infer
