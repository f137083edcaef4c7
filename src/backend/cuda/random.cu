// CUDA sampling kernels (the counterpart of cpu/random.cpp). Element i of a contiguous output
// draws from Philox block (offset + i) of the seed through the transforms of
// tessera/core/philox.h, the ones the CPU uses, so a tensor sampled here is bit-identical to the
// same draw on the CPU.
#include <cstdint>

#include "backend/common/random_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/core/philox.h"

namespace tessera::cuda {
namespace {

// out[i] = sample(i, philox block of element i), grid-stride.
template <class T, class Sample>
__global__ void sample_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, Sample sample) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = sample(i, philox(seed, offset + static_cast<uint64_t>(i)));
}

template <class T, class Sample>
void launch(const Tensor& t, uint64_t seed, uint64_t offset, const Sample& sample) {
  const int64_t n = t.numel();
  if (n == 0) return;
  sample_kernel<<<grid_size(n), kBlockSize, 0, current_stream()>>>(t.data_ptr<T>(), n, seed, offset,
                                                                   sample);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <class T>
struct Uniform {
  double low, high;
  __device__ T operator()(int64_t, const PhiloxBlock& r) const {
    return static_cast<T>(sample_uniform(r, low, high));
  }
};

template <class T>
struct Normal {
  double mean, stddev;
  __device__ T operator()(int64_t, const PhiloxBlock& r) const {
    return static_cast<T>(sample_normal(r, mean, stddev));
  }
};

template <class T>
struct Randint {
  int64_t low;
  uint64_t range;
  __device__ T operator()(int64_t, const PhiloxBlock& r) const {
    return static_cast<T>(sample_randint(r, low, range));
  }
};

template <class T>
struct Bernoulli {
  const T* p;
  __device__ T operator()(int64_t i, const PhiloxBlock& r) const {
    return static_cast<T>(sample_bernoulli(r, static_cast<double>(p[i])) ? 1.0 : 0.0);
  }
};

void uniform(const Tensor& t, double low, double high, uint64_t seed, uint64_t offset) {
  dispatch<kFloatingTypes>(t.dtype(), "uniform_", [&]<class T>() {
    launch<T>(t, seed, offset, Uniform<T>{low, high});
  });
}

void normal(const Tensor& t, double mean, double std, uint64_t seed, uint64_t offset) {
  dispatch<kFloatingTypes>(t.dtype(), "normal_", [&]<class T>() {
    launch<T>(t, seed, offset, Normal<T>{mean, std});
  });
}

void randint(const Tensor& t, int64_t low, int64_t high, uint64_t seed, uint64_t offset) {
  // high - low modulo 2^64: the width of [low, high) even where it overflows int64.
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  dispatch<kNumericTypes>(t.dtype(), "randint", [&]<class T>() {
    launch<T>(t, seed, offset, Randint<T>{low, range});
  });
}

void bernoulli(const Tensor& out, const Tensor& prob, uint64_t seed, uint64_t offset) {
  dispatch<kFloatingTypes>(out.dtype(), "bernoulli", [&]<class T>() {
    launch<T>(out, seed, offset, Bernoulli<T>{prob.data_ptr<T>()});
  });
}

TESSERA_REGISTER_KERNEL(uniform_kernel, DeviceType::CUDA, &uniform);
TESSERA_REGISTER_KERNEL(normal_kernel, DeviceType::CUDA, &normal);
TESSERA_REGISTER_KERNEL(randint_kernel, DeviceType::CUDA, &randint);
TESSERA_REGISTER_KERNEL(bernoulli_kernel, DeviceType::CUDA, &bernoulli);

}  // namespace
}  // namespace tessera::cuda
