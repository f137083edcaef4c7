#pragma once
// Helpers of the tensor-parallel tests: the groups they run on and float64 comparisons of a
// rank's slice with the matching slice of the single-process result.
#include <cmath>
#include <string>
#include <vector>

#include "dist_test_util.h"
#include "tessera/dist/tensor_parallel.h"
#include "tessera/ops/shape.h"

namespace tessera::dist::testing {

// The TP groups every test runs on (every rank must call it): the world, pairs of ranks (at odd
// world sizes the last rank is a group of one) and single ranks, so the size-1 path is always
// checked against the plain layers too.
inline std::vector<GroupPtr> tp_groups() {
  auto w = world();
  std::vector<GroupPtr> groups{w};
  if (w->size() > 2) groups.push_back(w->split(w->rank() / 2, w->rank(), "tp_pairs"));
  if (w->size() > 1) groups.push_back(w->split(w->rank(), 0, "tp_single"));
  return groups;
}

inline std::string describe_group(const GroupPtr& g) {
  return tessera::detail::str(g->name(), " (rank ", g->rank(), " of ", g->size(), ")");
}

// A float64 master tensor every rank builds identically.
inline Tensor master(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kFloat64, &gen);
}

// ids [B, T] int64 covering every value of [0, V) when B * T >= V.
inline Tensor token_ids(int64_t B, int64_t T, int64_t V) {
  std::vector<int64_t> v(B * T);
  for (int64_t i = 0; i < B * T; ++i) v[i] = (i * 7 + 3) % V;
  return tensor(v).reshape({B, T});
}

// Slice i of n equal slices of t along dim.
inline Tensor part(const Tensor& t, int64_t dim, int64_t i, int64_t n) {
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  const int64_t k = t.size(d) / n;
  return t.narrow(d, i * k, k).contiguous();
}

// |got - want| <= tol * max(1, |want|) elementwise; nan matches nan.
inline void expect_close(const Tensor& got, const Tensor& want, const std::string& what,
                         double tol = 1e-12) {
  ASSERT_TRUE(got.defined()) << what << ": undefined";
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  std::vector<double> g = values(got), w = values(want);
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      ASSERT_TRUE(std::isnan(g[i])) << what << " at element " << i << ": " << g[i] << " vs nan";
      continue;
    }
    ASSERT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << what << " at element " << i;
  }
}

}  // namespace tessera::dist::testing
