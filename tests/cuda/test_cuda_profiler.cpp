// The profiler's GPU times (device_time): CUDA events around every op time the kernels it
// queued. Skips without a GPU, except the error a session asking for GPU times gets there.
#include <gtest/gtest.h>

#include "tessera/runtime/cuda.h"
#include "tessera/runtime/profiler.h"
#include "tessera/tessera.h"
#include "testing/cuda_test.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

using testing::CudaTest;
using testing::kCuda;

TEST(CudaProfiler, WithoutAGpuDeviceTimeIsRefused) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(profiler::Profiler({.device_time = true}), RuntimeError);
  EXPECT_FALSE(profiler::Profiler::is_recording());
}

TEST_F(CudaTest, ProfilerTimesTheKernelsOfEachOpOnTheGpu) {
  Tensor a = randn({2048, 2048}).to(kCuda), b = randn({2048, 2048}).to(kCuda);
  (void)matmul(a, b);  // plans and workspace made outside the session
  cuda::synchronize();
  profiler::Profiler prof({.device_time = true});
  cuda::Event start, end;
  start.record();
  Tensor c;
  for (int i = 0; i < 5; ++i) c = matmul(a, b);
  end.record();
  const profiler::Profile p = prof.stop();
  end.synchronize();
  const double event_ms = start.elapsed_ms(end);

  ASSERT_TRUE(p.has_device_time());
  int64_t matmul_ns = 0, calls = 0, top = 0, self = 0;
  for (const profiler::Event& e : p.events()) {
    ASSERT_TRUE(e.has_device_time()) << e.name;
    EXPECT_EQ(e.device, 0) << e.name;
    EXPECT_GE(e.self_device_ns, 0) << e.name;
    self += e.self_device_ns;
    if (e.depth == 0) top += e.device_end_ns - e.device_start_ns;
    if (e.name == "matmul") {
      matmul_ns += e.device_end_ns - e.device_start_ns;
      ++calls;
    }
  }
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(self, top);
  // Five 17-GFLOP GEMMs keep the GPU busy for far longer than the host takes to queue them, so
  // the spans cover the kernels: within 10% of the whole loop's events (plus 50 us of slack).
  EXPECT_GT(matmul_ns / 1e6, 0.9 * event_ms - 0.05) << "GPU loop " << event_ms << " ms";
  EXPECT_LT(matmul_ns / 1e6, 1.1 * event_ms + 0.05) << "GPU loop " << event_ms << " ms";
  const std::string table = p.table(profiler::SortBy::kSelfDevice);
  EXPECT_NE(table.find("Self CUDA time total:"), std::string::npos) << table;
  EXPECT_NE(table.find("matmul"), std::string::npos) << table;
  EXPECT_NE(p.chrome_trace().find("\"CUDA 0\""), std::string::npos);
}

TEST_F(CudaTest, GpuSpansOfASessionStartedOverQueuedWorkFollowTheirLaunches) {
  // ~100 ms of GEMMs still queued when the session starts: the origin must be paired with the
  // host time at which the device went idle, not the session's start, or every GPU span would
  // sit that much before the host launched it.
  Tensor a = randn({4096, 4096}).to(kCuda);
  for (int i = 0; i < 40; ++i) a = matmul(a, a) * 1e-2;
  profiler::Profiler prof({.device_time = true});
  Tensor b = a + 1.0;
  const profiler::Profile p = prof.stop();
  for (const profiler::Event& e : p.events()) {
    ASSERT_TRUE(e.has_device_time()) << e.name;
    EXPECT_GE(e.device_start_ns, e.start_ns) << e.name << ": a kernel ran before its launch";
  }
}

}  // namespace
}  // namespace tessera
