#include "tessera/core/allocator.h"

#include <array>
#include <cstdlib>
#include <new>

#include "tessera/core/error.h"
#include "tessera/core/storage.h"

namespace tessera {

void* CpuAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  TESSERA_CHECK(p != nullptr, RuntimeError, "[cpu_allocator] expected to allocate ", nbytes,
                " bytes, got out of memory");
  int64_t live = live_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  count_.fetch_add(1);
  int64_t peak = peak_.load();
  while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  std::free(ptr);
  live_.fetch_sub(static_cast<int64_t>(nbytes));
}

AllocatorStats CpuAllocator::stats() const { return {live_.load(), peak_.load(), count_.load()}; }

void CpuAllocator::reset_peak() { peak_.store(live_.load()); }

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

StorageImpl::StorageImpl(size_t nbytes, Device device, Allocator* allocator)
    : data_(allocator->allocate(nbytes)), nbytes_(nbytes), device_(device), allocator_(allocator) {}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device,
                         std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (allocator_) allocator_->deallocate(data_, nbytes_);
  else if (deleter_) deleter_(data_);
}

}  // namespace tessera
