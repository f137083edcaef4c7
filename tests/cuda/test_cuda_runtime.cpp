// The CUDA runtime: transfers, the caching allocator, streams and events, device checks. The
// GPU tests skip with a message where no GPU is present; the error paths run everywhere.
#include <gtest/gtest.h>

#include "tessera/runtime/cuda.h"
#include "tessera/tessera.h"
#include "testing/cuda_test.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

using testing::CudaTest;
using testing::kCuda;

TEST(CudaRuntime, WithoutAGpuMovingATensorThrowsATypedError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(device_count(DeviceType::CUDA), 0);
  EXPECT_THROW(ones({2}).to(kCuda), Error);
}

TEST(CudaRuntime, WithoutAGpuPinningThrowsATypedError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  testing::expect_error<RuntimeError>([] { (void)ones({2}).pin_memory(); }, "pin_memory",
                                      "expected a CUDA device");
  EXPECT_FALSE(ones({2}).is_pinned());
  Tensor x = ones({2});
  EXPECT_TRUE(x.to(kCPU, /*non_blocking=*/true).is_same(x));
}

TEST(CudaRuntime, PinnedMemoryIsForCpuTensorsOnly) {
  testing::expect_error<ValueError>(
      [] { (void)empty({2}, TensorOptions().with_device(kCuda).with_pinned_memory()); },
      "pin_memory", "CPU tensor");
}

TEST_F(CudaTest, PinnedTensorsCopyBothWaysWithoutBlocking) {
  Tensor x = randn({1000, 33});
  Tensor pinned = x.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_FALSE(x.is_pinned());
  EXPECT_TRUE(pinned.pin_memory().is_same(pinned)) << "pinning a pinned tensor is a no-op";
  EXPECT_TRUE(allclose(pinned, x, 0, 0));
  // Host to device, queued: the kernels after it on the stream see the data.
  Tensor on_gpu = pinned.to(kCuda, /*non_blocking=*/true) * 2;
  // Device to pinned host, queued: the data is there after a synchronize.
  Tensor back = empty({1000, 33}, TensorOptions().with_pinned_memory());
  back.copy_(on_gpu, /*non_blocking=*/true);
  cuda::synchronize();
  EXPECT_TRUE(allclose(back, x * 2, 0, 0));
  // Pageable or non-contiguous ends fall back to blocking copies and stay correct.
  Tensor t = empty({33, 1000}, TensorOptions().with_pinned_memory()).transpose(0, 1);
  t.copy_(on_gpu, /*non_blocking=*/true);
  EXPECT_TRUE(allclose(t, x * 2, 0, 0));
  EXPECT_TRUE(allclose(x.to(kCuda, true).to(kCPU, true), x, 0, 0));
}

TEST_F(CudaTest, APinnedSourceFreedWhileItsCopyIsQueuedStaysCorrect) {
  Tensor x = randn({1 << 20});
  Tensor on_gpu;
  {
    Tensor pinned = x.pin_memory();
    on_gpu = pinned.to(kCuda, /*non_blocking=*/true);
  }  // freeing the pinned block waits for the copy
  EXPECT_TRUE(allclose(on_gpu.to(kCPU), x, 0, 0));
}

TEST_F(CudaTest, ABlockingCopyFromPinnedMemoryHasReadItOnReturn) {
  // Work queued first keeps the stream busy, so a copy that only queued would still be waiting
  // when the host overwrites its source (torch: non_blocking=False synchronises).
  Tensor a = randn({4096, 4096}).to(kCuda);
  Tensor x = randn({1 << 22});
  Tensor pinned = x.pin_memory();
  for (int i = 0; i < 8; ++i) a = matmul(a, a) * 1e-2;
  Tensor on_gpu = pinned.to(kCuda);
  pinned.fill_(0);
  EXPECT_TRUE(allclose(on_gpu.to(kCPU), x, 0, 0));
}

TEST_F(CudaTest, AFreedPinnedBlockIsNotReusedWhileItsCopyIsQueued) {
  pinned_host_allocator()->empty_cache();  // no idle block of the size class to hand out instead
  Tensor a = randn({4096, 4096}).to(kCuda);
  Tensor x = randn({1 << 22});
  Tensor on_gpu;
  for (int i = 0; i < 8; ++i) a = matmul(a, a) * 1e-2;  // keeps the stream busy
  {
    Tensor pinned = x.pin_memory();
    on_gpu = pinned.to(kCuda, /*non_blocking=*/true);
  }  // freed at once, without waiting: the block goes to the cache with its copy's event
  // The same size class again: a block still being read must not come back and be overwritten.
  empty({1 << 22}, TensorOptions().with_pinned_memory()).fill_(0);
  EXPECT_TRUE(allclose(on_gpu.to(kCPU), x, 0, 0));
  // Once the copy is done, its block is reused.
  cuda::synchronize();
  const int64_t cached = pinned_host_allocator()->stats().cached_bytes;
  Tensor again = empty({1 << 22}, TensorOptions().with_pinned_memory());
  EXPECT_LT(pinned_host_allocator()->stats().cached_bytes, cached);
}

TEST_F(CudaTest, GradientFlowsThroughPinMemory) {
  Tensor x = randn({4, 3}, TensorOptions().with_requires_grad(true));
  (x.pin_memory().to(kCuda, true) * 3).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(allclose(x.grad(), full({4, 3}, 3.0), 0, 0));
}

TEST_F(CudaTest, RoundTripKeepsValuesForEveryDtype) {
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32, kBool, kUInt8}) {
    Tensor x = cast(arange(0, 37, 1, kInt64) - 18, dt);
    Tensor back = x.to(kCuda).to(kCPU);
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_TRUE(allclose(back.to(kFloat64), x.to(kFloat64), 0, 0)) << dt;
  }
}

TEST_F(CudaTest, StridedCopiesInBothDirections) {
  Tensor x = randn({6, 5});
  Tensor t = x.transpose(0, 1);  // non-contiguous source
  EXPECT_TRUE(allclose(t.to(kCuda).to(kCPU), t, 0, 0));
  Tensor dst = zeros({5, 6}, TensorOptions().with_device(kCuda)).transpose(0, 1);
  dst.copy_(x);  // non-contiguous destination across devices
  EXPECT_TRUE(allclose(dst.to(kCPU), x, 0, 0));
  // The two devices sum in different orders: equal within rounding of the magnitudes summed.
  EXPECT_NEAR(x.to(kCuda).sum().item<float>(), x.sum().item<float>(),
              1e-6 * abs(x).sum().item<float>());
}

TEST_F(CudaTest, GradientFlowsBackAcrossTheTransfer) {
  Tensor x = randn({4, 3}, TensorOptions().with_requires_grad(true));
  Tensor y = (x.to(kCuda) * 3).sum();
  y.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), kCPU);
  EXPECT_TRUE(allclose(x.grad(), full({4, 3}, 3.0), 0, 0));
}

TEST_F(CudaTest, MixingDevicesInOneOpIsRefused) {
  Tensor a = ones({3}), b = ones({3}).to(kCuda);
  testing::expect_error<RuntimeError>([&] { (void)add(a, b); }, "add",
                                      "expected all tensors on one device");
}

TEST_F(CudaTest, AllocatorReusesFreedBlocks) {
  cuda::synchronize();
  { Tensor warm = empty({1 << 20}, TensorOptions().with_device(kCuda)); }
  const AllocatorStats before = cuda::memory_stats();
  {
    Tensor t = empty({1 << 20}, TensorOptions().with_device(kCuda));
    EXPECT_EQ(cuda::memory_stats().live_bytes, before.live_bytes + (int64_t{4} << 20));
  }
  const AllocatorStats after = cuda::memory_stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.cached_bytes, before.cached_bytes);  // the same block came back from the cache
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_stats().cached_bytes, 0);
}

TEST_F(CudaTest, EventsTimeQueuedWork) {
  cuda::Event start, end;
  start.record();
  Tensor x = randn({512, 512}).to(kCuda);
  Tensor y = matmul(x, x);
  end.record();
  end.synchronize();
  EXPECT_GE(start.elapsed_ms(end), 0.0f);
  cuda::Stream side;
  {
    cuda::StreamGuard guard(side);
    Tensor z = matmul(x, x);
    EXPECT_TRUE(allclose(z.to(kCPU), y.to(kCPU), 1e-5, 1e-5));
  }
  side.synchronize();
}

TEST_F(CudaTest, PrintsFromAHostCopy) {
  std::string s = tensor({1.0, 2.0}).to(kCuda).str();
  EXPECT_NE(s.find("[1, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cuda:0"), std::string::npos) << s;
}

}  // namespace
}  // namespace tessera
