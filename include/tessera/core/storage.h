#pragma once
// A refcounted buffer. Every tensor viewing the same buffer shares its version counter, which
// autograd uses to detect in-place changes to tensors saved for backward.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tessera/core/allocator.h"
#include "tessera/core/device.h"

namespace tessera {

class StorageImpl {
 public:
  // Owns nbytes from allocator.
  StorageImpl(size_t nbytes, Device device, Allocator* allocator);
  // Wraps memory owned elsewhere (numpy, DLPack, mmap); deleter runs when the storage dies.
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
  std::atomic<uint32_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace tessera
