// The CUDA embedding gradient (sorted runs, no atomics) against the CPU's index_add, on the
// index patterns that stress it: byte-like tokens where a few ids repeat thousands of times, a
// vocabulary row count that is not a power of two, padding_idx, int32 ids, widths that are not a
// multiple of the 32-column tile, and an empty batch. Skipped without a GPU.
#include <gtest/gtest.h>

#include "tessera/runtime/cuda.h"
#include "tessera/tessera.h"
#include "testing/cuda_test.h"

namespace tessera {
namespace {

using testing::kCuda;
using CudaEmbeddingTest = testing::CudaTest;

// The weight gradient of sum(embedding(w, ids) * g) on the GPU, brought back to the CPU as
// float64, and the same on the CPU.
std::pair<Tensor, Tensor> weight_grads(const Tensor& ids, int64_t V, int64_t C, DType dtype,
                                       std::optional<int64_t> padding_idx) {
  Generator gen(11);
  Tensor w = randn({V, C}, TensorOptions(kFloat32), &gen).to(dtype);
  Shape out_shape = ids.sizes();
  out_shape.push_back(C);
  Tensor g = randn(out_shape, TensorOptions(kFloat32), &gen).to(dtype);
  Tensor grads[2];
  for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
    const Device dev = on_gpu ? kCuda : kCPU;
    // detach: on the CPU to() returns w itself, which must stay a plain tensor for the GPU pass
    Tensor wd = w.to(dev).detach().requires_grad_(true);
    sum(embedding(wd, ids.to(dev), padding_idx) * g.to(dev)).backward();
    grads[on_gpu] = wd.grad().to(kCPU).to(kFloat64);
  }
  return {grads[1], grads[0]};
}

// Ids drawn mostly from a handful of values, as byte tokens of English text are.
Tensor skewed_ids(Shape shape, int64_t V, DType dtype) {
  Generator gen(5);
  Tensor u = rand(shape, TensorOptions(kFloat32), &gen);
  Tensor common = randint(0, 8, shape, TensorOptions(kInt64), &gen);
  Tensor rare = randint(0, V, shape, TensorOptions(kInt64), &gen);
  return where(u < Scalar(0.9), common, rare).to(dtype);
}

TEST_F(CudaEmbeddingTest, HeavilyRepeatedIdsMatchTheCpu) {
  for (DType dtype : {kFloat32, kFloat64}) {
    auto [gpu, cpu] = weight_grads(skewed_ids({8, 1024}, 50257, kInt64), 50257, 96, dtype, {});
    EXPECT_TRUE(allclose(gpu, cpu, 1e-4, 1e-4)) << dtype;
    EXPECT_GT(max(abs(cpu)).item<double>(), 10.0) << "the repeated rows must have summed";
  }
}

TEST_F(CudaEmbeddingTest, Int32IdsOddWidthsAndPadding) {
  for (int64_t C : {1, 33, 200}) {
    Tensor ids = skewed_ids({3, 77}, 1000, kInt32);
    auto [gpu, cpu] = weight_grads(ids, 1000, C, kFloat32, 3);
    EXPECT_TRUE(allclose(gpu, cpu, 1e-4, 1e-4)) << "C = " << C;
    EXPECT_EQ(abs(cpu.select(0, 3)).sum().item<double>(), 0.0) << "padding row stays zero";
  }
}

TEST_F(CudaEmbeddingTest, SixteenBitGradientsSumInFloat) {
  // Summing ~1000 bf16 rows per id in float and rounding once is closer to the float64 sum than
  // the CPU's per-add rounding; compare both to the float64 gradient.
  Tensor ids = skewed_ids({4, 512}, 300, kInt64);
  const Tensor gpu = weight_grads(ids, 300, 64, kBFloat16, {}).first;
  const Tensor exact = weight_grads(ids, 300, 64, kFloat64, {}).second;
  const double scale = max(abs(exact)).item<double>();
  EXPECT_LT(max(abs(gpu - exact)).item<double>(), 0.02 * scale);
}

TEST_F(CudaEmbeddingTest, EmptyBatchGivesZeros) {
  const Tensor gpu = weight_grads(zeros({0}, TensorOptions(kInt64)), 10, 4, kFloat32, {}).first;
  EXPECT_EQ(gpu.sizes(), (Shape{10, 4}));
  EXPECT_EQ(abs(gpu).sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace tessera
