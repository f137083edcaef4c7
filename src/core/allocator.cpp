#include "tessera/core/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <new>

#include "tessera/core/error.h"
#include "tessera/core/storage.h"

namespace tessera {

CpuAllocator::~CpuAllocator() { empty_cache(); }

size_t CpuAllocator::block_bytes(size_t nbytes) {
  if (!kCaches || nbytes < kCacheMinBytes)
    return (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  const int top = 63 - __builtin_clzll(nbytes);  // floor(log2(nbytes))
  const size_t step = size_t{1} << (top - 2);    // a quarter of that power of two
  return (nbytes + step - 1) / step * step;
}

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Blocks of a few huge pages or more are 2 MiB aligned and advised as huge pages: a fresh
// block then faults in 2 MiB at a time instead of 4 KiB (the kernel's per-fault work, not the
// zeroing, was most of the cost of faulting a step's large tensors in).
void* map_block(size_t bytes) {
  if (bytes < 2 * kHugePage) return std::aligned_alloc(CpuAllocator::kAlignment, bytes);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
#ifdef MADV_HUGEPAGE
  if (p) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: its failure changes nothing
#endif
  return p;
}

}  // namespace

void* CpuAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t bytes = block_bytes(nbytes);
  void* p = nullptr;
  if (kCaches && bytes >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_blocks_.find(bytes);
    if (it != free_blocks_.end()) {
      p = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) free_blocks_.erase(it);
      cached_.fetch_sub(static_cast<int64_t>(bytes));
    } else {
      release_for(bytes);
    }
  }
  if (!p) p = map_block(bytes);
  if (!p && cached_.load() > 0) {  // memory held for other sizes may be what is missing
    empty_cache();
    p = map_block(bytes);
  }
  TESSERA_CHECK(p != nullptr, RuntimeError, "[cpu_allocator] expected to allocate ", nbytes,
                " bytes, got out of memory");
  const int64_t held =
      live_blocks_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  raise_max(high_water_, held);
  int64_t live = live_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  count_.fetch_add(1);
  allocated_.fetch_add(static_cast<int64_t>(nbytes));
  raise_peak(live);
  return p;
}

void CpuAllocator::release_for(size_t bytes) {
  // Live and cached blocks together may reach the most ever live plus kCacheHeadroom of it.
  // Each release frees the smallest block that covers the excess (else the largest, and again):
  // what is freed is faulted in again when next needed, so the fewest bytes go, and a step's
  // few large tensors stay cached.
  const int64_t need = live_blocks_.load() + static_cast<int64_t>(bytes);
  const int64_t limit = std::max(high_water_.load() + high_water_.load() / kCacheHeadroom, need);
  int64_t excess = need + cached_.load() - limit;
  while (excess > 0 && !free_blocks_.empty()) {
    auto it = free_blocks_.lower_bound(static_cast<size_t>(excess));
    if (it == free_blocks_.end()) it = std::prev(it);
    std::free(it->second.back());
    it->second.pop_back();
    excess -= static_cast<int64_t>(it->first);
    cached_.fetch_sub(static_cast<int64_t>(it->first));
    if (it->second.empty()) free_blocks_.erase(it);
  }
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  live_.fetch_sub(static_cast<int64_t>(nbytes));
  const size_t bytes = block_bytes(nbytes);
  live_blocks_.fetch_sub(static_cast<int64_t>(bytes));
  if (kCaches && bytes >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_.load() + static_cast<int64_t>(bytes) <= static_cast<int64_t>(kCacheMaxBytes)) {
      free_blocks_[bytes].push_back(ptr);
      cached_.fetch_add(static_cast<int64_t>(bytes));
      return;
    }
  }
  std::free(ptr);
}

void CpuAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [bytes, blocks] : free_blocks_) {
    for (void* p : blocks) std::free(p);
    cached_.fetch_sub(static_cast<int64_t>(bytes * blocks.size()));
  }
  free_blocks_.clear();
}

AllocatorStats CpuAllocator::stats() const {
  return {live_.load(), peak_.load(), count_.load(), cached_.load(), allocated_.load()};
}

void CpuAllocator::reset_peak() { peak_.store(live_.load()); }

void CpuAllocator::raise_peak(int64_t bytes) { raise_max(peak_, bytes); }

void CpuAllocator::raise_max(std::atomic<int64_t>& mark, int64_t bytes) {
  int64_t old = mark.load();
  while (bytes > old && !mark.compare_exchange_weak(old, bytes)) {
  }
}

namespace {
std::array<Allocator*, kNumDeviceTypes>& allocator_table() {
  static std::array<Allocator*, kNumDeviceTypes> table{};
  return table;
}
}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator* instance = new CpuAllocator();  // leaked: outlives static tensors
  return instance;
}

Allocator* get_allocator(DeviceType type) {
  if (type == DeviceType::CPU) return cpu_allocator();
  Allocator* a = allocator_table()[static_cast<int>(type)];
  TESSERA_CHECK(a != nullptr, RuntimeError, "[allocator] expected a registered allocator for ",
                Device(type).str(), ", got none (was Tessera built with this backend?)");
  return a;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  allocator_table()[static_cast<int>(type)] = allocator;
}

namespace {
std::atomic<Allocator*> g_pinned_host_allocator{nullptr};
}  // namespace

Allocator* pinned_host_allocator() { return g_pinned_host_allocator.load(); }
void register_pinned_host_allocator(Allocator* allocator) { g_pinned_host_allocator = allocator; }

StorageImpl::StorageImpl(size_t nbytes, Device device, Allocator* allocator)
    : data_(allocator->allocate(nbytes)), nbytes_(nbytes), device_(device), allocator_(allocator) {}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device,
                         std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (allocator_)
    allocator_->deallocate(data_, nbytes_);
  else if (deleter_)
    deleter_(data_);
}

}  // namespace tessera
