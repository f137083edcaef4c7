// Page-locked host memory for CPU tensors (Tensor::pin_memory, TensorOptions::pinned_memory):
// transfers from it run at full bus speed and may stay queued (non_blocking). As torch's caching
// host allocator, freed blocks are kept by size class and reused, since cudaHostAlloc and
// cudaFreeHost are slow and synchronising (a data loader pins a fresh batch every step). A queued
// transfer records an event on its stream against its block; a freed block is handed out again
// only once its events have completed, so freeing never waits and never touches other devices.
#include "backend/cuda/pinned_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "tessera/core/allocator.h"

namespace tessera::cuda {
namespace {

constexpr size_t kMinBlock = 4096;

// Four classes per power of two above kMinBlock: a reused block wastes at most a quarter.
size_t size_class(size_t nbytes) {
  if (nbytes <= kMinBlock) return kMinBlock;
  const size_t step = std::bit_floor(nbytes) / 4;
  return (nbytes + step - 1) / step * step;
}

class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t bytes = size_class(nbytes);
    void* p = reuse(bytes);
    if (!p) {
      if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        empty_cache();  // the cache may hold the memory: give it back and try once more
        TESSERA_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
      }
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_[address(p)] = Block{bytes, {}};
    }
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.live_bytes += static_cast<int64_t>(nbytes);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
    stats_.allocated_bytes += static_cast<int64_t>(nbytes);
    ++stats_.num_allocs;
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const Block& block = blocks_.at(address(ptr));
    free_.emplace(block.bytes, address(ptr));
    stats_.live_bytes -= static_cast<int64_t>(nbytes);
    stats_.cached_bytes += static_cast<int64_t>(block.bytes);
  }

  void record_use(const void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(address(ptr));
    if (it == blocks_.begin()) return;
    --it;
    if (address(ptr) >= it->first + it->second.bytes) return;
    drop_completed(it->second);
    cudaEvent_t event = nullptr;
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    it->second.uses.push_back(event);
    TESSERA_CUDA_CHECK(cudaEventRecord(event, stream));
  }

  // Frees every cached block, first waiting for the transfers still using it.
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [bytes, base] : free_) {
      Block& block = blocks_.at(base);
      for (cudaEvent_t e : block.uses) {
        (void)cudaEventSynchronize(e);
        (void)cudaEventDestroy(e);
      }
      (void)cudaFreeHost(reinterpret_cast<void*>(base));
      blocks_.erase(base);
      stats_.cached_bytes -= static_cast<int64_t>(bytes);
    }
    free_.clear();
    (void)cudaGetLastError();  // a failure here has no caller to report to
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
  struct Block {
    size_t bytes;
    std::vector<cudaEvent_t> uses;  // recorded after queued transfers, not yet seen complete
  };

  static uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

  // Destroys the events of block that have completed; true when none is left.
  static bool drop_completed(Block& block) {
    std::erase_if(block.uses, [](cudaEvent_t e) {
      if (!event_completed(e)) return false;
      (void)cudaEventDestroy(e);
      return true;
    });
    return block.uses.empty();
  }

  // A cached block of exactly bytes whose transfers are done, taken out of the cache; or null.
  void* reuse(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [first, last] = free_.equal_range(bytes);
    for (auto it = first; it != last; ++it) {
      Block& block = blocks_.at(it->second);
      if (!drop_completed(block)) continue;
      void* p = reinterpret_cast<void*>(it->second);
      free_.erase(it);
      stats_.cached_bytes -= static_cast<int64_t>(bytes);
      return p;
    }
    return nullptr;
  }

  mutable std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;      // live and cached, by base address
  std::multimap<size_t, uintptr_t> free_;  // the cached ones, by size
  AllocatorStats stats_;
};

PinnedHostAllocator* const g_allocator = [] {
  auto* a = new PinnedHostAllocator;  // never destroyed: tensors may outlive static destruction
  register_pinned_host_allocator(a);
  return a;
}();

}  // namespace

void record_pinned_use(const void* ptr, cudaStream_t stream) {
  g_allocator->record_use(ptr, stream);
}

}  // namespace tessera::cuda
