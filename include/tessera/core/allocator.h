#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tessera/core/device.h"

namespace tessera {

struct AllocatorStats {
  int64_t live_bytes = 0;   // bytes currently allocated
  int64_t peak_bytes = 0;   // high-water mark of live_bytes since the last reset_peak()
  int64_t num_allocs = 0;   // allocations made since start
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
};

// Allocator that hands out 64-byte aligned host memory and counts live/peak bytes.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  AllocatorStats stats() const override;
  void reset_peak() override;

 private:
  std::atomic<int64_t> live_{0}, peak_{0}, count_{0};
};

Allocator* cpu_allocator();
// The allocator for a device type; backends register theirs at load time.
Allocator* get_allocator(DeviceType type);
void register_allocator(DeviceType type, Allocator* allocator);

}  // namespace tessera
