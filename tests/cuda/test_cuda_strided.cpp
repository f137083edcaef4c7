// Elementwise ops over strided operands whose innermost dim is contiguous (the CUDA loops move
// such rows in 16-byte vectors): head transposes, slices of the last dim, broadcasts, and the
// layouts that must fall back to one element at a time (a row width that is not a multiple of
// the vector, a misaligned start). Copies and adds are exact, so the GPU must equal the CPU.
#include <gtest/gtest.h>

#include "tessera/tessera.h"
#include "testing/cuda_test.h"

namespace tessera {
namespace {

using testing::CudaTest;
using testing::kCuda;

void expect_equal(const Tensor& gpu, const Tensor& cpu, const char* what) {
  ASSERT_EQ(gpu.device(), kCuda) << what;
  EXPECT_TRUE(allclose(gpu.to(kCPU).to(kFloat64), cpu.to(kFloat64), 0, 0)) << what;
}

TEST_F(CudaTest, InnerContiguousStridedOpsMatchTheCpu) {
  for (DType dtype : {kBFloat16, kFloat32, kInt64}) {
    SCOPED_TRACE(dtype_name(dtype));
    // Vectors are 8 bf16, 4 float32 or 2 int64: 12 is a whole number of them for float32 and
    // int64 only, 3 for none.
    for (int64_t D : {64, 16, 12, 3}) {
      SCOPED_TRACE(D);
      Generator gen(D);
      Tensor x = randint(-50, 50, {2, 5, 7, D}, TensorOptions(dtype), &gen);
      Tensor y = randint(-50, 50, {2, 7, 5, D}, TensorOptions(dtype), &gen);
      const Tensor xg = x.to(kCuda), yg = y.to(kCuda);
      // [B, H, T, D] to [B, T, H, D], as attention's heads are merged.
      expect_equal(xg.transpose(1, 2).contiguous(), x.transpose(1, 2).contiguous(), "transpose");
      expect_equal(xg.transpose(1, 2) + yg, x.transpose(1, 2) + y, "transposed add");
      // A slice of the last dim written in place, starting on and off a vector boundary (rows
      // of 2 D + 16 elements: aligned, so only the start decides).
      for (int64_t start : {int64_t{0}, int64_t{1}}) {
        Tensor wide = zeros({2, 7, 5, 2 * D + 16}, TensorOptions(dtype)), wg = wide.to(kCuda);
        wide.narrow(3, start, D).add_(y);
        Tensor slot = wg.narrow(3, start, D);
        slot.add_(yg);
        expect_equal(wg, wide, start == 0 ? "slice add" : "misaligned slice add");
      }
      // Broadcast along the outer dims, and a cast between dtypes.
      Tensor row = randint(-50, 50, {1, 1, 1, D}, TensorOptions(dtype), &gen);
      expect_equal(xg.transpose(1, 2) * row.to(kCuda), x.transpose(1, 2) * row, "broadcast row");
      expect_equal(xg.transpose(1, 2).to(kFloat64), x.transpose(1, 2).to(kFloat64), "cast");
    }
  }
}

}  // namespace
}  // namespace tessera
