#pragma once
// Ordering along a dim, as torch's sort/argsort/topk: ties keep index order and NaN sorts as
// larger than every number. Values are differentiable (through gather of the indices).
#include <cstdint>
#include <tuple>

#include "tessera/core/tensor.h"

namespace tessera {

// (values, indices) of x sorted along dim; the order is always stable.
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false,
                                bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// (values, indices) of the k largest (or smallest) along dim, in order. IndexError unless
// 0 <= k <= x.size(dim).
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);

}  // namespace tessera
