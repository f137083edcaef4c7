// The CUDA caching allocator. cudaMalloc and cudaFree synchronise the device and cost tens of
// microseconds, so freed blocks are kept and handed out again: a training step then allocates
// nothing from the driver after its first iteration.
//
// Blocks are rounded to a size class (512-byte multiples up to 1 MiB, then four classes per
// power of two) and cached per (device, stream, class). Reuse is stream-ordered: a block freed
// by work queued on a stream is handed out again only to that stream, whose later kernels run
// after the earlier ones, so no event or host sync is needed. When cudaMalloc runs out of
// memory, every cached block is released and the call retried once.
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "tessera/runtime/cuda.h"

namespace tessera::cuda {
namespace {

size_t size_class(size_t nbytes) {
  constexpr size_t kSmallQuantum = 512, kSmallLimit = size_t{1} << 20;
  if (nbytes <= kSmallLimit) return (nbytes + kSmallQuantum - 1) / kSmallQuantum * kSmallQuantum;
  size_t power = size_t{1} << (63 - __builtin_clzll(nbytes - 1));  // largest power of 2 < nbytes
  size_t step = power / 4;
  return (nbytes + step - 1) / step * step;
}

class CachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t bytes = size_class(nbytes);
    const int device = current_device();
    const Key key{device, current_stream(), bytes};
    std::lock_guard lock(mutex_);
    void* ptr = nullptr;
    auto it = free_.find(key);
    if (it != free_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(bytes);
    } else {
      ptr = device_malloc(bytes);
    }
    live_[ptr] = key;
    stats_.live_bytes += static_cast<int64_t>(bytes);
    stats_.allocated_bytes += static_cast<int64_t>(bytes);
    stats_.num_allocs += 1;
    if (stats_.live_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.live_bytes;
    return ptr;
  }

  void deallocate(void* ptr, size_t) override {
    if (!ptr) return;
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    TESSERA_ASSERT(it != live_.end());
    const Key key = it->second;
    live_.erase(it);
    free_[key].push_back(ptr);
    stats_.live_bytes -= static_cast<int64_t>(key.bytes);
    stats_.cached_bytes += static_cast<int64_t>(key.bytes);
  }

  AllocatorStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard lock(mutex_);
    stats_.peak_bytes = stats_.live_bytes;
  }
  void raise_peak(int64_t bytes) override {
    std::lock_guard lock(mutex_);
    if (bytes > stats_.peak_bytes) stats_.peak_bytes = bytes;
  }
  void empty_cache() override {
    std::lock_guard lock(mutex_);
    release_cached();
  }

 private:
  struct Key {
    int device = 0;
    cudaStream_t stream = nullptr;
    size_t bytes = 0;
    bool operator<(const Key& o) const {
      return std::tie(device, stream, bytes) < std::tie(o.device, o.stream, o.bytes);
    }
  };

  void* device_malloc(size_t bytes) {
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached();
      status = cudaMalloc(&ptr, bytes);
    }
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total = 0;
      (void)cudaMemGetInfo(&free_bytes, &total);
      throw RuntimeError(detail::str("[cuda.allocate] out of memory: asked for ", bytes,
                                     " bytes with ", stats_.live_bytes, " bytes live and ",
                                     free_bytes, " of ", total, " bytes free on the device"));
    }
    TESSERA_CUDA_CHECK(status);
    return ptr;
  }

  // Blocks may still be used by queued kernels: wait for them before giving memory back.
  void release_cached() {
    if (free_.empty()) return;
    TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [key, ptrs] : free_)
      for (void* p : ptrs) TESSERA_CUDA_CHECK(cudaFree(p));
    free_.clear();
    stats_.cached_bytes = 0;
  }

  mutable std::mutex mutex_;
  std::map<Key, std::vector<void*>> free_;
  std::unordered_map<void*, Key> live_;
  AllocatorStats stats_;
};

CachingAllocator& caching_allocator() {
  static auto* a = new CachingAllocator;  // never destroyed: storages may outlive statics
  return *a;
}

[[maybe_unused]] const bool registered =
    (register_allocator(DeviceType::CUDA, &caching_allocator()), true);

}  // namespace

AllocatorStats memory_stats() { return caching_allocator().stats(); }
void empty_cache() { caching_allocator().empty_cache(); }
void reset_peak_memory_stats() { caching_allocator().reset_peak(); }

}  // namespace tessera::cuda
