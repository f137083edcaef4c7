// run_hardware_suite: GEMM peaks, STREAM, the latency sweep and GPU copies into one Result.
#include <algorithm>
#include <chrono>

#include "tessera/bench/hardware.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/creation.h"
#include "tessera/runtime/cuda.h"

namespace tessera::bench {
namespace {

constexpr StreamKernel kStreamKernels[] = {StreamKernel::Copy, StreamKernel::Scale,
                                           StreamKernel::Add, StreamKernel::Triad};

std::vector<double> rates(const std::vector<double>& seconds, double work) {
  std::vector<double> r;
  for (double s : seconds) r.push_back(work / s);
  return r;
}

// The latency sweep's sizes: powers of two from 4 KiB, plus the top size.
std::vector<int64_t> sweep_sizes(int64_t max_bytes) {
  std::vector<int64_t> sizes;
  for (int64_t s = 4096; s < max_bytes; s *= 2) sizes.push_back(s);
  sizes.push_back(max_bytes);
  return sizes;
}

// Host-to-device and back through Tensor::to (pageable host memory, as a user's tensor is).
void gpu_copies(Result& result, int64_t bytes, int repetitions) {
  Tensor host = zeros({bytes / 4});
  const Device gpu(DeviceType::CUDA, 0);
  Tensor dev = host.to(gpu);
  for (const char* direction : {"host_to_device", "device_to_host"}) {
    const bool h2d = std::string(direction) == "host_to_device";
    std::vector<double> seconds;
    for (int i = 0; i <= repetitions; ++i) {
      cuda::synchronize();
      const auto start = std::chrono::steady_clock::now();
      Tensor out = h2d ? host.to(gpu) : dev.to(Device(DeviceType::CPU));
      cuda::synchronize();
      if (i > 0)  // the first is a warm-up
        seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    result.add({"copy",
                "B/s",
                Better::Higher,
                {{"direction", direction}, {"bytes", bytes}},
                rates(seconds, static_cast<double>(bytes)),
                "bytes / time of one Tensor::to"});
  }
}

}  // namespace

void run_hardware_suite(Result& result, const HardwareOptions& options) {
  const int reps = options.quick ? 3 : options.repetitions;
  const int64_t gemm_size = options.gemm_size > 0 ? options.gemm_size : options.quick ? 256 : 2048;
  const int64_t llc = result.machine.last_level_cache_bytes();
  const int64_t array_bytes = options.stream_array_bytes > 0 ? options.stream_array_bytes
                              : options.quick                ? int64_t(4) << 20
                                                             : 4 * llc;
  const int64_t latency_max = options.latency_max_bytes > 0 ? options.latency_max_bytes
                              : options.quick               ? int64_t(1) << 20
                                                            : 4 * llc;
  const auto sizes = sweep_sizes(latency_max);
  // Triad's working set is three arrays: from 3 x 16 KiB up to the STREAM arrays.
  std::vector<int64_t> bandwidth_sizes;
  for (int64_t a = 16 << 10; a < array_bytes; a *= 4) bandwidth_sizes.push_back(a);
  bandwidth_sizes.push_back(array_bytes);
  const bool gpu = cuda::is_available();
  const int64_t total =
      static_cast<int64_t>(options.gemm_dtypes.size() + 4 + sizes.size() + bandwidth_sizes.size()) +
      gpu;
  int64_t done = 0;
  auto step = [&](const std::string& what) {
    if (options.progress) options.progress(what, done++, total);
  };

  for (const auto& dtype : options.gemm_dtypes) {
    step("gemm " + dtype);
    const auto seconds = time_gemm(dtype, gemm_size, reps);
    if (seconds.empty()) continue;  // oneDNN has no kernel for it here
    result.add({"gemm",
                dtype == "int8" ? "OP/s" : "FLOP/s",
                Better::Higher,
                {{"dtype", dtype}, {"m", gemm_size}, {"n", gemm_size}, {"k", gemm_size}},
                rates(seconds, gemm_flops(gemm_size, gemm_size, gemm_size)),
                "2*m*n*k / time of one oneDNN matmul call (weights in the layout oneDNN prefers)"});
  }
  const int64_t n = array_bytes / static_cast<int64_t>(sizeof(double));
  for (StreamKernel k : kStreamKernels) {
    step(std::string("stream ") + stream_kernel_name(k));
    result.add({"stream",
                "B/s",
                Better::Higher,
                {{"kernel", stream_kernel_name(k)}, {"array_bytes", array_bytes}},
                rates(time_stream(k, n, reps), static_cast<double>(stream_bytes(k, n))),
                "STREAM bytes (2 or 3 arrays x 8 B x n) / time of one pass; the best is the max"});
  }
  for (int64_t a : bandwidth_sizes) {
    step("bandwidth " + std::to_string(3 * a >> 10) + " KiB");
    const int64_t elems = a / static_cast<int64_t>(sizeof(double));
    // About 64 MiB moved per sample, so small working sets are timed over many passes.
    const int passes = static_cast<int>(std::max<int64_t>(1, (int64_t(64) << 20) / (3 * a)));
    result.add({"bandwidth",
                "B/s",
                Better::Higher,
                {{"bytes", 3 * a}},
                rates(time_stream(StreamKernel::Triad, elems, reps, passes),
                      static_cast<double>(stream_bytes(StreamKernel::Triad, elems))),
                "STREAM triad bytes / time of one pass, by working set (three arrays)"});
  }
  for (int64_t bytes : sizes) {
    step("latency " + std::to_string(bytes >> 10) + " KiB");
    std::vector<double> seconds;
    for (double ns : time_pointer_chase(bytes, reps)) seconds.push_back(ns * 1e-9);
    result.add({"latency",
                "s",
                Better::Lower,
                {{"bytes", bytes}},
                seconds,
                "time per dependent load chasing a random cycle of 64 B nodes"});
  }
  if (gpu) {
    step("gpu copies");
    gpu_copies(result, options.quick ? int64_t(16) << 20 : int64_t(256) << 20, reps);
  }
  if (options.progress) options.progress("done", total, total);
}

}  // namespace tessera::bench
