#pragma once
// Views (sharing storage) and shape-combining ops. All are differentiable.
#include <optional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera {

Tensor view(const Tensor& x, const Shape& shape);  // one -1 allowed; needs compatible strides
Tensor reshape(const Tensor& x, const Shape& shape);  // view when possible, else copy
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// Python-style x[..., start:end:step, ...] along dim (negative and out-of-range bounds clamp).
Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start = std::nullopt,
             std::optional<int64_t> end = std::nullopt, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a dim
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = std::nullopt);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes);
Tensor as_strided(const Tensor& x, const Shape& sizes, const Shape& strides,
                  std::optional<int64_t> storage_offset = std::nullopt);

Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);
// Pieces of split_size along dim (the last may be smaller).
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split(const Tensor& x, const Shape& split_sizes, int64_t dim = 0);
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// Tiles x repeats[i] times along dim i.
Tensor repeat(const Tensor& x, const Shape& repeats);
// Lower/upper triangle of the last two dims (diagonal offset k).
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);
Tensor flip(const Tensor& x, const Shape& dims);
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims);

}  // namespace tessera
