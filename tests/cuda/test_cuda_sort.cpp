// sort, argsort and topk on the GPU (cub's segmented radix sort) give the CPU's order exactly:
// ties in index order, NaN largest, -0.0 equal to 0.0, every dtype, rows along any dim.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessera/tessera.h"
#include "testing/cuda_test.h"
#include "testing/reference.h"

namespace tessera {
namespace {

using testing::CudaTest;
using testing::kCuda;
using testing::values;

void expect_same_order(const Tensor& x, int64_t dim, bool descending) {
  auto [cpu_values, cpu_order] = sort(x, dim, descending);
  auto [gpu_values, gpu_order] = sort(x.to(kCuda), dim, descending);
  EXPECT_EQ(values(gpu_order.to(kCPU)), values(cpu_order))
      << dtype_name(x.dtype()) << " dim " << dim << (descending ? " descending" : " ascending");
  EXPECT_EQ(values(isnan(gpu_values.to(kCPU))), values(isnan(cpu_values)));
}

TEST_F(CudaTest, SortMatchesTheCpuOrderForTiesNanAndSignedZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = tensor(std::vector<float>{3, -0.0f, nan, 1, 0.0f, -inf, 1, inf, -nan, 3, -2, 0.0f},
                    Shape{2, 6});
  for (bool descending : {false, true})
    for (int64_t dim : {0, 1}) expect_same_order(x, dim, descending);
}

TEST_F(CudaTest, SortMatchesTheCpuForEveryDtypeAndShape) {
  Generator gen(11);
  // Few distinct values (many ties), rows along every dim of a 3-d tensor.
  Tensor base = randint(-10, 10, {7, 33, 130}, TensorOptions(kFloat32), &gen);
  for (DType dtype :
       {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32, kInt16, kInt8, kUInt8, kBool}) {
    Tensor x = dtype == kUInt8 ? cast(base + 10.0, dtype) : cast(base, dtype);
    for (int64_t dim : {0, 1, 2})
      for (bool descending : {false, true}) expect_same_order(x, dim, descending);
  }
}

TEST_F(CudaTest, SortOfOneLongRowAndOfFullRangeNarrowTypesMatchesTheCpu) {
  Generator gen(13);
  // One row (the device-wide sort), with ties: values from 5000 levels.
  Tensor row = randint(-2500, 2500, {1 << 20}, TensorOptions(kFloat32), &gen);
  for (bool descending : {false, true}) expect_same_order(row, 0, descending);
  // Keys sorted on fewer bits: every int8/uint8 value, int16 across its range, 16-bit floats
  // spanning their exponents (subnormals to the largest) with both signs.
  Tensor wide = randn({3, 4099}, TensorOptions(kFloat64), &gen);
  Tensor spread = wide * exp(randn({3, 4099}, TensorOptions(kFloat64), &gen) * 8.0);
  for (bool descending : {false, true}) {
    expect_same_order(cast(randint(-128, 128, {3, 4099}, TensorOptions(kInt64), &gen), kInt8), 1,
                      descending);
    expect_same_order(cast(randint(0, 256, {3, 4099}, TensorOptions(kInt64), &gen), kUInt8), 1,
                      descending);
    expect_same_order(cast(randint(-32768, 32768, {3, 4099}, TensorOptions(kInt64), &gen), kInt16),
                      1, descending);
    expect_same_order(cast(spread, kBFloat16), 1, descending);
    expect_same_order(cast(spread, kFloat16), 1, descending);
  }
}

TEST_F(CudaTest, TopkTakesTheLeadingOrderOfAWideRow) {
  Generator gen(12);
  Tensor logits = randn({64, 50257}, TensorOptions(kFloat32), &gen);
  auto [cpu_values, cpu_idx] = topk(logits, 40, -1);
  auto [gpu_values, gpu_idx] = topk(logits.to(kCuda), 40, -1);
  EXPECT_EQ(values(gpu_idx.to(kCPU)), values(cpu_idx));
  EXPECT_EQ(values(gpu_values.to(kCPU)), values(cpu_values));
  EXPECT_EQ(argsort(logits.to(kCuda), -1, true).size(-1), 50257);
}

}  // namespace
}  // namespace tessera
