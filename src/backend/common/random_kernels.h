#pragma once
// Kernel keys for random sampling into a contiguous tensor. Element i draws from Philox block
// (offset + i) of `seed`, so a draw is the same on any thread count.
#include "tessera/core/dispatcher.h"
#include "tessera/core/tensor.h"

namespace tessera {

TESSERA_DECLARE_KERNEL(uniform_kernel, void(const Tensor&, double low, double high, uint64_t seed,
                                            uint64_t offset));
TESSERA_DECLARE_KERNEL(normal_kernel, void(const Tensor&, double mean, double std, uint64_t seed,
                                           uint64_t offset));
// Integers uniformly in [low, high).
TESSERA_DECLARE_KERNEL(randint_kernel, void(const Tensor&, int64_t low, int64_t high,
                                            uint64_t seed, uint64_t offset));
// out[i] = (uniform < p[i]) ? 1 : 0; p has out's shape and dtype.
TESSERA_DECLARE_KERNEL(bernoulli_kernel, void(const Tensor& out, const Tensor& p, uint64_t seed,
                                              uint64_t offset));

}  // namespace tessera
