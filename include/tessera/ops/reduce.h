#pragma once
// Reductions over any set of dims (empty dims = all dims) with keepdim.
#include <optional>
#include <tuple>

#include "tessera/core/tensor.h"

namespace tessera {

Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false,
           std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Largest/smallest value over everything.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// (values, indices) along dim.
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Index of the max/min (over the flattened tensor when dim is not given); int64.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1).
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// p-norm (p = 2 by default; p = inf gives the max abs).
Tensor norm(const Tensor& x, double p = 2.0, const Shape& dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor all(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, const Shape& dims = {}, bool keepdim = false);

// Sums a broadcast gradient back to `shape` (the inverse of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace tessera
