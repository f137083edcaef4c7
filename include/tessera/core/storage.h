#pragma once
// A refcounted buffer with two write counters. version() counts the writes autograd tracks
// (through any tensor viewing the buffer but an untracked alias, Tensor::variable_data()): it
// detects in-place changes to tensors saved for backward. generation() counts every write: caches
// derived from the buffer (a packed weight, an autocast copy) compare it.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

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
  // Page-locked host memory (pinned_host_allocator()): copies to and from a GPU may run
  // asynchronously.
  bool pinned() const { return allocator_ != nullptr && allocator_ == pinned_host_allocator(); }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  uint32_t generation() const { return generation_.load(std::memory_order_relaxed); }
  // A write: generation() moves on, and version() too when autograd tracks it.
  void bump_version(bool tracked = true) {
    generation_.fetch_add(1, std::memory_order_relaxed);
    if (tracked) version_.fetch_add(1, std::memory_order_relaxed);
  }

  // Set by ops that read this buffer as a weight no gradient is taken for (linear under no_grad,
  // frozen or inference weights): it is read again unchanged, so a backend may keep a copy of it
  // in a layout of its own, such as a GEMM's packed weights.
  void mark_frozen_weight() { frozen_weight_.store(true, std::memory_order_relaxed); }
  bool is_frozen_weight() const { return frozen_weight_.load(std::memory_order_relaxed); }

  // That backend copy: one slot, created on first use and freed with the buffer. The backend
  // stores its own type and checks generation() against the one it copied.
  template <class T>
  std::shared_ptr<T> derived_layout() {
    std::lock_guard<std::mutex> lock(derived_mutex_);
    if (!derived_) derived_ = std::make_shared<T>();
    return std::static_pointer_cast<T>(derived_);
  }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
  std::atomic<uint32_t> version_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> frozen_weight_{false};
  std::mutex derived_mutex_;
  std::shared_ptr<void> derived_;
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace tessera
