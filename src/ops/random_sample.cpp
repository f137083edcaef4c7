// InfiniCore's random_sample: a per-row loop over the sorted distribution (top-k, top-p,
// temperature), one uniform draw per row.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/op_utils.h"
#include "tessera/ops/index.h"
#include "tessera/ops/infinicore.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

// The sampled index of one row of V logits given the uniform draw u (see the header).
template <class T>
int64_t sample_row(const T* logits, int64_t V, double u, double topp, int64_t topk,
                   double temperature) {
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  auto value = [&](int64_t i) { return static_cast<double>(logits[i]); };
  // Descending by value, ties by index, so the result does not depend on the sort.
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return value(a) > value(b) || (value(a) == value(b) && a < b);
  });
  const bool greedy = temperature == 0.0 || topk == 1 || topp <= 0.0;
  if (greedy) return order[0];
  // Cumulative softmax probabilities in sorted order, computed in double.
  std::vector<double> cum(V);
  const double top = value(order[0]);
  double total = 0.0;
  for (int64_t i = 0; i < V; ++i) cum[i] = total += std::exp((value(order[i]) - top) / temperature);
  for (double& c : cum) c /= total;
  const int64_t k = topk <= 0 ? V : std::min(topk, V);
  const double threshold = std::min(cum[k - 1], topp * cum[V - 1]) * u;
  // First i with cum[i] >= threshold (a left-sided searchsorted).
  const int64_t i = std::lower_bound(cum.begin(), cum.end(), threshold) - cum.begin();
  return order[std::min(i, V - 1)];
}

}  // namespace

Tensor random_sample(const Tensor& logits, std::optional<double> random_val, double topp,
                     int64_t topk, double temperature, Generator* gen) {
  TESSERA_OP_SCOPE("random_sample", logits);
  constexpr const char* op = "random_sample";
  TESSERA_CHECK(is_floating(logits.dtype()), TypeError, "[", op,
                "] expected floating-point logits, got ", logits.dtype());
  TESSERA_CHECK((logits.dim() == 1 || logits.dim() == 2) && logits.size(-1) > 0, ValueError, "[",
                op, "] expected logits [V] or [B, V] with V > 0, got shape ", logits.sizes());
  TESSERA_CHECK(temperature >= 0.0 && std::isfinite(temperature), ValueError, "[", op,
                "] expected a finite temperature >= 0, got ", temperature);
  TESSERA_CHECK(topk >= 0, ValueError, "[", op, "] expected topk >= 0 (0: no limit), got ", topk);
  TESSERA_CHECK(!random_val || (*random_val >= 0.0 && *random_val <= 1.0), ValueError, "[", op,
                "] expected random_val in [0, 1], got ", random_val.value_or(0.0));
  const int64_t V = logits.size(-1), B = logits.dim() == 2 ? logits.size(0) : 1;
  std::vector<double> u(B, random_val.value_or(0.0));
  if (!random_val) {
    // One Philox block per row, so the draws do not depend on how rows are processed.
    Generator& g = gen ? *gen : default_generator();
    const uint64_t base = g.reserve(static_cast<uint64_t>(B));
    for (int64_t r = 0; r < B; ++r) {
      auto bits = philox(g.seed(), base + static_cast<uint64_t>(r));
      u[r] = uint_to_unit_double(bits[0], bits[1]);
    }
  }
  // Rows are sampled on the host (one pass each); device logits are copied there first.
  Tensor x = contiguous(logits.detach().to(kCPU));
  Tensor out = empty(logits.dim() == 2 ? Shape{B} : Shape{}, kInt64);
  int64_t* o = out.data_ptr<int64_t>();
  dispatch<kFloatingTypes>(x.dtype(), op, [&]<class T>() {
    const T* p = x.data_ptr<T>();
    for (int64_t r = 0; r < B; ++r) o[r] = sample_row(p + r * V, V, u[r], topp, topk, temperature);
  });
  return out.to(logits.device());
}

TESSERA_REGISTER_OPS({"random_sample", "random", kFloatingTypes, false});

}  // namespace tessera
