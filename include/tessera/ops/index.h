#pragma once
// Indexing, gathering and scattering. Index tensors are int64 (int32 accepted); out-of-range
// indices raise IndexError naming the op.
#include <optional>

#include "tessera/core/tensor.h"

namespace tessera {

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Copy of x with out[index[i][j]][j] = src[i][j] (dim 0 case), last writer wins.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// Copy of x with alpha * source added at the rows given by index along dim.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 const Scalar& alpha = 1);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor& masked_fill_(Tensor& x, const Tensor& mask, const Scalar& value);
// 1-d tensor of the elements where mask (broadcast) is true.
Tensor masked_select(const Tensor& x, const Tensor& mask);
// int64 one-hot encoding, num_classes = max + 1 when negative.
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);
// Rows of weight [V, C] picked by index; rows equal to padding_idx get no gradient.
Tensor embedding(const Tensor& weight, const Tensor& index,
                 std::optional<int64_t> padding_idx = std::nullopt);
Tensor take_along_dim(const Tensor& x, const Tensor& index, std::optional<int64_t> dim = std::nullopt);

}  // namespace tessera
