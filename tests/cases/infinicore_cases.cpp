// Op cases for causal_softmax, rearrange and random_sample. References are explicit loops over
// output coordinates in double; random_sample's picks the candidates by repeated argmax instead
// of sorting.
#include <cmath>
#include <limits>

#include "tessera/ops/infinicore.h"
#include "testing/op_cases.h"
#include "testing/reference.h"

namespace tessera::testing {
namespace {

// softmax over the last dim of x [..., T, S] where column j is visible from row i when
// j <= i + S - T.
Tensor causal_softmax_ref(const Tensor& x) {
  std::vector<double> v = values(x);
  const int64_t T = x.size(-2), S = x.size(-1);
  std::vector<double> out(v.size(), 0.0);
  for (size_t row = 0; row * S < v.size(); ++row) {
    const int64_t i = static_cast<int64_t>(row) % T, visible = i + S - T + 1;
    double m = -std::numeric_limits<double>::infinity(), z = 0;
    for (int64_t j = 0; j < visible; ++j) m = std::max(m, v[row * S + j]);
    for (int64_t j = 0; j < visible; ++j) z += std::exp(v[row * S + j] - m);
    for (int64_t j = 0; j < visible; ++j) out[row * S + j] = std::exp(v[row * S + j] - m) / z;
  }
  return from_values(out, x.sizes(), x.dtype());
}

std::vector<OpCase> causal_softmax_cases() {
  std::vector<OpCase> v;
  v.push_back(one(
      "causal_softmax", "square", {real({2, 4, 4})}, [](auto& x) { return causal_softmax(x[0]); },
      [](auto& x) { return causal_softmax_ref(x[0]); }));
  v.push_back(one(
      "causal_softmax", "decode_with_cache", {real({3, 5})},
      [](auto& x) { return causal_softmax(x[0]); },
      [](auto& x) { return causal_softmax_ref(x[0]); }));
  v.push_back(one(
      "causal_softmax", "noncontiguous_heads", {real({2, 3, 4, 6}, true)},
      [](auto& x) { return causal_softmax(x[0] * 3.0); },
      [](auto& x) { return causal_softmax_ref(x[0] * 3.0); }));
  v[0].gradgradcheck = true;
  return v;
}

// Element c of the output reads x at in_coords(c).
Tensor remap(const Tensor& x, const Shape& out_shape,
             const std::function<Shape(const Shape&)>& in_coords) {
  std::vector<double> v = values(x);
  return build(out_shape, x.dtype(),
               [&](const Shape& c) { return v[ravel(in_coords(c), x.sizes())]; });
}

std::vector<OpCase> rearrange_cases() {
  std::vector<OpCase> v;
  // [B, T, H*D] -> [B, H, T, D]: out[b, h, t, d] = x[b, t, h * D + d].
  v.push_back(one(
      "rearrange", "split_heads", {real({2, 3, 8})},
      [](auto& x) {
        return rearrange(x[0], "b t (h d) -> b h t d", {{"h", 2}});
      },
      [](auto& x) {
        return remap(x[0], {2, 2, 3, 4}, [](const Shape& c) {
          return Shape{c[0], c[2], c[1] * 4 + c[3]};
        });
      }));
  // The inverse, from a non-contiguous input: [B, H, T, D] -> [B, T, H*D] (a copy).
  v.push_back(one(
      "rearrange", "merge_heads_noncontiguous", {real({2, 3, 4, 5}, true)},
      [](auto& x) { return rearrange(x[0], "b h t d -> b t (h d)"); },
      [](auto& x) {
        return remap(x[0], {2, 4, 15}, [](const Shape& c) {
          return Shape{c[0], c[2] / 5, c[1], c[2] % 5};
        });
      }));
  // Ellipsis, a unit dim and a reordered split: [..., 1, (a b)] -> [..., b, a].
  v.push_back(one(
      "rearrange", "ellipsis_unit_transpose_split", {real({2, 3, 1, 6})},
      [](auto& x) {
        return rearrange(x[0], "... 1 (a b) -> ... b a", {{"b", 3}});
      },
      [](auto& x) {
        return remap(x[0], {2, 3, 3, 2}, [](const Shape& c) {
          return Shape{c[0], c[1], 0, c[3] * 3 + c[2]};
        });
      }));
  return v;
}

// random_sample by selection: candidates are taken in descending order by repeated argmax over
// the softmax probabilities, accumulating until the scaled threshold is reached.
Tensor random_sample_ref(const Tensor& logits, double u, double topp, int64_t topk, double temp) {
  const int64_t V = logits.size(-1), B = logits.numel() / V;
  std::vector<double> v = values(logits), out(B);
  for (int64_t r = 0; r < B; ++r) {
    std::vector<double> row(v.begin() + r * V, v.begin() + (r + 1) * V);
    std::vector<double> p(V);
    const double m = *std::max_element(row.begin(), row.end());
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += p[j] = std::exp((row[j] - m) / temp);
    std::vector<int64_t> picked;
    std::vector<double> cum;
    std::vector<bool> used(V, false);
    for (int64_t n = 0; n < V; ++n) {
      int64_t best = -1;
      for (int64_t j = 0; j < V; ++j)
        if (!used[j] && (best < 0 || row[j] > row[best])) best = j;
      used[best] = true;
      picked.push_back(best);
      cum.push_back((cum.empty() ? 0.0 : cum.back()) + p[best] / z);
    }
    const int64_t k = topk == 0 ? V : std::min(topk, V);
    const double threshold = std::min(cum[k - 1], topp * cum[V - 1]) * u;
    int64_t i = 0;
    while (i < V - 1 && cum[i] < threshold) ++i;
    out[r] = static_cast<double>(picked[i]);
  }
  return from_values(out, logits.dim() == 2 ? Shape{B} : Shape{}, kInt64);
}

std::vector<OpCase> random_sample_cases() {
  std::vector<OpCase> v;
  struct Setting {
    const char* label;
    double u, topp;
    int64_t topk;
    double temperature;
  };
  for (Setting s :
       {Setting{"topk_topp", 0.8, 0.8, 3, 0.5}, Setting{"full_vocab", 0.37, 1.0, 0, 1.0},
        Setting{"nucleus_only", 0.05, 0.9, 0, 2.0}, Setting{"greedy_topk_1", 0.5, 0.9, 1, 1.0}}) {
    OpCase c = one(
        "random_sample", s.label, {constant({4, 16})},
        [=](auto& x) { return random_sample(x[0], s.u, s.topp, s.topk, s.temperature); },
        [=](auto& x) { return random_sample_ref(x[0], s.u, s.topp, s.topk, s.temperature); });
    c.gradcheck = false;
    v.push_back(std::move(c));
  }
  return v;
}

TESSERA_OP_CASES(causal_softmax_cases());
TESSERA_OP_CASES(rearrange_cases());
TESSERA_OP_CASES(random_sample_cases());

}  // namespace
}  // namespace tessera::testing
