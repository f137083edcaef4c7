// Philox-based sampling kernels.
#include "backend/common/random_kernels.h"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/core/philox.h"

namespace tessera::cpu {
namespace {

// Calls body(i, philox block of element i) for every element, in parallel.
template <class Body>
void for_each_block(int64_t n, uint64_t seed, uint64_t offset, Body body) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) body(i, philox(seed, offset + static_cast<uint64_t>(i)));
}

void uniform(const Tensor& t, double low, double high, uint64_t seed, uint64_t offset) {
  dispatch<kFloatingTypes>(t.dtype(), "uniform_", [&]<class T>() {
    T* p = t.data_ptr<T>();
    for_each_block(t.numel(), seed, offset, [&](int64_t i, const std::array<uint32_t, 4>& r) {
      p[i] = static_cast<T>(sample_uniform(r, low, high));
    });
  });
}

void normal(const Tensor& t, double mean, double std, uint64_t seed, uint64_t offset) {
  dispatch<kFloatingTypes>(t.dtype(), "normal_", [&]<class T>() {
    T* p = t.data_ptr<T>();
    for_each_block(t.numel(), seed, offset, [&](int64_t i, const std::array<uint32_t, 4>& r) {
      p[i] = static_cast<T>(sample_normal(r, mean, std));
    });
  });
}

void randint(const Tensor& t, int64_t low, int64_t high, uint64_t seed, uint64_t offset) {
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  dispatch<kNumericTypes>(t.dtype(), "randint", [&]<class T>() {
    T* p = t.data_ptr<T>();
    for_each_block(t.numel(), seed, offset, [&](int64_t i, const std::array<uint32_t, 4>& r) {
      p[i] = static_cast<T>(sample_randint(r, low, range));
    });
  });
}

void bernoulli(const Tensor& out, const Tensor& prob, uint64_t seed, uint64_t offset) {
  dispatch<kFloatingTypes>(out.dtype(), "bernoulli", [&]<class T>() {
    T* p = out.data_ptr<T>();
    const T* q = prob.data_ptr<T>();
    for_each_block(out.numel(), seed, offset, [&](int64_t i, const std::array<uint32_t, 4>& r) {
      p[i] = static_cast<T>(sample_bernoulli(r, static_cast<double>(q[i])) ? 1.0 : 0.0);
    });
  });
}

TESSERA_REGISTER_KERNEL(uniform_kernel, DeviceType::CPU, &uniform);
TESSERA_REGISTER_KERNEL(normal_kernel, DeviceType::CPU, &normal);
TESSERA_REGISTER_KERNEL(randint_kernel, DeviceType::CPU, &randint);
TESSERA_REGISTER_KERNEL(bernoulli_kernel, DeviceType::CPU, &bernoulli);

}  // namespace
}  // namespace tessera::cpu
