// Op cases for sort, argsort and topk. Random reals have no ties, so the order is unique and the
// values are differentiable; the reference sorts each line along dim in double with std::sort.
#include <algorithm>
#include <numeric>

#include "testing/op_cases.h"
#include "testing/reference.h"

namespace tessera::testing {
namespace {

// The first k entries along d of x sorted (descending or not): their values, or their indices.
Tensor loop_sorted(const Tensor& x, int64_t d, bool descending, int64_t k, bool indices) {
  std::vector<double> v = values(x);
  Shape shape = x.sizes();
  shape[d] = k;
  return build(shape, indices ? kInt64 : x.dtype(), [&](Shape c) {
    const int64_t rank = c[d];
    std::vector<int64_t> order(static_cast<size_t>(x.size(d)));
    std::iota(order.begin(), order.end(), int64_t{0});
    auto at = [&](int64_t i) {
      c[d] = i;
      return v[ravel(c, x.sizes())];
    };
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return descending ? at(a) > at(b) : at(a) < at(b); });
    return indices ? static_cast<double>(order[rank]) : at(order[rank]);
  });
}

std::vector<OpCase> sort_cases() {
  std::vector<OpCase> v;
  v.push_back(one(
      "sort", "last_dim", {real({3, 5})}, [](auto& x) { return std::get<0>(sort(x[0])); },
      [](auto& x) { return loop_sorted(x[0], 1, false, 5, false); }));
  v.push_back(one(
      "sort", "descending_dim0_noncontiguous", {real({4, 3}, true)},
      [](auto& x) { return std::get<0>(sort(x[0], 0, true)); },
      [](auto& x) { return loop_sorted(x[0], 0, true, 4, false); }));
  v.push_back(one(
      "topk", "largest_last_dim", {real({3, 6})},
      [](auto& x) { return std::get<0>(topk(x[0], 2)); },
      [](auto& x) { return loop_sorted(x[0], 1, true, 2, false); }));
  v.push_back(one(
      "topk", "smallest_3d_middle", {real({2, 5, 3})},
      [](auto& x) { return std::get<0>(topk(x[0], 3, 1, false)); },
      [](auto& x) { return loop_sorted(x[0], 1, false, 3, false); }));
  // Index results: value checks only.
  v.push_back(one(
      "topk", "indices", {real({4, 7})}, [](auto& x) { return std::get<1>(topk(x[0], 3, -1)); },
      [](auto& x) { return loop_sorted(x[0], 1, true, 3, true); }));
  v.push_back(one(
      "argsort", "descending_dim0", {real({5, 3})},
      [](auto& x) { return argsort(x[0], 0, true); },
      [](auto& x) { return loop_sorted(x[0], 0, true, 5, true); }));
  for (auto& c : v) c.gradcheck = c.label != "indices" && c.op != "argsort";
  return v;
}

TESSERA_OP_CASES(sort_cases());

}  // namespace
}  // namespace tessera::testing
