// Page-locked host memory for CPU tensors (Tensor::pin_memory, TensorOptions::pinned_memory):
// transfers from it run at full bus speed and may stay queued (non_blocking). Blocks come from
// cudaHostAlloc and are not cached. Freeing one first waits for every device, since a
// non-blocking copy queued on some stream may still be reading or writing it; pinned tensors are
// meant to be kept and reused (staging buffers), so the wait is rare.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "backend/cuda/cuda_check.h"
#include "tessera/core/allocator.h"

namespace tessera::cuda {
namespace {

class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    void* p = nullptr;
    if (nbytes > 0) TESSERA_CUDA_CHECK(cudaHostAlloc(&p, nbytes, cudaHostAllocPortable));
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.live_bytes += static_cast<int64_t>(nbytes);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
    stats_.allocated_bytes += static_cast<int64_t>(nbytes);
    ++stats_.num_allocs;
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr) {
      synchronize_all_devices();
      (void)cudaFreeHost(ptr);  // a destructor's path: nothing to report an error to
    }
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.live_bytes -= static_cast<int64_t>(nbytes);
  }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_bytes = stats_.live_bytes;
  }
  void raise_peak(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_bytes = std::max(stats_.peak_bytes, bytes);
  }

 private:
  static void synchronize_all_devices() {
    int current = 0, count = 0;
    if (cudaGetDevice(&current) != cudaSuccess || cudaGetDeviceCount(&count) != cudaSuccess) return;
    for (int d = 0; d < count; ++d) {
      (void)cudaSetDevice(d);
      (void)cudaDeviceSynchronize();
    }
    (void)cudaSetDevice(current);
  }

  mutable std::mutex mutex_;
  AllocatorStats stats_;
};

[[maybe_unused]] const bool registered =
    (register_pinned_host_allocator(new PinnedHostAllocator), true);  // never destroyed

}  // namespace
}  // namespace tessera::cuda
