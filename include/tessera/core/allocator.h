#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "tessera/core/device.h"

namespace tessera {

struct AllocatorStats {
  int64_t live_bytes = 0;       // bytes currently allocated
  int64_t peak_bytes = 0;       // high-water mark of live_bytes since the last reset_peak()
  int64_t num_allocs = 0;       // allocations made since start
  int64_t cached_bytes = 0;     // freed blocks kept for reuse (not counted in live_bytes)
  int64_t allocated_bytes = 0;  // bytes handed out since start (the profiler's per-op deltas)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Raises the high-water mark to at least bytes (the profiler restores it after an op's own
  // reset_peak, so callers' peaks stay what they would be without it).
  virtual void raise_peak(int64_t bytes) = 0;
  // Returns cached free blocks to the system.
  virtual void empty_cache() {}
};

// Hands out 64-byte aligned host memory and counts live/peak bytes. Blocks of at least
// kCacheMinBytes are rounded up to a size class (four per power of two) and, when freed, kept
// for the next request of their class, up to kCacheMaxBytes in all: a training step frees and
// re-allocates the same large tensors every step, which glibc would otherwise unmap and fault
// in again (a third of a small model's step). A request that finds no block of its class first
// releases cached blocks until live + cached + its own bytes fit in the most ever live plus a
// half: the tensors a backward pass allocates after the forward's peak (logit and embedding
// gradients) need blocks beyond that peak, and a cache held to the peak itself would fault them
// in every step. The untouched tail of a rounded block is never faulted in, so rounding costs
// address space. Blocks of 4 MiB and more are advised as transparent huge pages.
// Off under AddressSanitizer, so that it still sees use-after-free.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kCacheMinBytes = size_t{1} << 18;
  static constexpr size_t kCacheMaxBytes = size_t{2} << 30;
  // Live plus cached blocks may reach the live peak plus 1/kCacheHeadroom of it.
  static constexpr int64_t kCacheHeadroom = 2;
#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool kCaches = false;
#else
  static constexpr bool kCaches = true;
#endif
  ~CpuAllocator() override;
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  void raise_peak(int64_t bytes) override;
  void empty_cache() override;
  // The bytes a request of nbytes occupies: its size class when cached, else nbytes rounded
  // to the alignment.
  static size_t block_bytes(size_t nbytes);

 private:
  static void raise_max(std::atomic<int64_t>& mark, int64_t bytes);
  // Frees cached blocks until a new block of bytes fits under high_water_ and its headroom;
  // mutex_ held.
  void release_for(size_t bytes);

  std::atomic<int64_t> live_{0}, peak_{0}, count_{0}, cached_{0}, allocated_{0};
  // Block bytes of the live allocations, and their most ever (never reset): the cache's bound.
  std::atomic<int64_t> live_blocks_{0}, high_water_{0};
  std::mutex mutex_;                                  // guards free_blocks_
  std::map<size_t, std::vector<void*>> free_blocks_;  // by block bytes, none empty
};

Allocator* cpu_allocator();
// The allocator for a device type; backends register theirs at load time.
Allocator* get_allocator(DeviceType type);
void register_allocator(DeviceType type, Allocator* allocator);
// Page-locked host memory for transfers to a GPU (registered by the CUDA backend; nullptr in a
// build without one). Tensors on it are CPU tensors whose storage reports pinned().
Allocator* pinned_host_allocator();
void register_pinned_host_allocator(Allocator* allocator);

}  // namespace tessera
