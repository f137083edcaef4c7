#pragma once
// Inputs every rank can rebuild for every other rank, so each checks its result against a serial
// reference computed locally in float64.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/dist/process_group_mpi.h"
#include "tessera/ops/creation.h"

namespace tessera::dist::testing {

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d = {kBool,  kUInt8,   kInt8,     kInt16,   kInt32,
                                       kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
  return d;
}
// Odd sizes on purpose, and 0: every rank still takes part in a collective of nothing.
inline const std::vector<int64_t>& sizes() {
  static const std::vector<int64_t> s = {0, 1, 7, 1001};
  return s;
}

// Small integers (exact in every dtype, sums included): rank r's element i.
inline double value(int r, int64_t i) { return static_cast<double>((r * 3 + i) % 7); }

// Rank r's input: values value(r, offset + i) cast to dtype, and the same values as float64
// after that cast (what the reference reduces).
inline Tensor input(int r, int64_t n, DType dtype, int64_t offset = 0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(r, offset + i);
  return tensor(v).to(dtype);
}

inline std::vector<double> values(const Tensor& t) {
  Tensor d = t.to(kFloat64).contiguous();
  const double* p = static_cast<const double*>(d.data_ptr());
  return std::vector<double>(p, p + d.numel());
}

// Exact for integers and bool; a 16-bit result is rounded once, from the float32 sum.
inline double tolerance(DType dtype) {
  if (dtype == kFloat16 || dtype == kBFloat16) return 1e-2;
  if (dtype == kFloat32) return 1e-6;
  return 0;
}

inline void expect_values(const Tensor& got, const std::vector<double>& want, DType dtype,
                          const std::string& what) {
  std::vector<double> g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = tolerance(dtype) * std::max(1.0, std::abs(want[i]));
    ASSERT_NEAR(g[i], want[i], tol) << what << " at element " << i;
  }
}

inline std::shared_ptr<ProcessGroupMPI> world() { return ProcessGroupMPI::world(); }

}  // namespace tessera::dist::testing
