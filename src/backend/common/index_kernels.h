#pragma once
// Kernel keys for gathering and scattering along a dim, plus the fused triangle mask. Ops
// validate shapes, dtypes and index ranges first: kernels assume every index is in range.
// Index tensors are int32 or int64; "[outer, n, inner]" means a contiguous tensor viewed with
// the indexed dim in the middle.
#include <array>

#include "tessera/core/dispatcher.h"
#include "tessera/core/tensor.h"

namespace tessera {

// {min, max} of a non-empty contiguous index tensor.
TESSERA_DECLARE_KERNEL(index_range_kernel, std::array<int64_t, 2>(const Tensor& index));

// out[o, i, r] = x[o, index[i], r]; x [outer, n, inner], index 1-d contiguous,
// out [outer, numel(index), inner].
TESSERA_DECLARE_KERNEL(index_select_kernel,
                       void(const Tensor& out, const Tensor& x, const Tensor& index, int64_t outer,
                            int64_t inner));

// out[o, index[i], r] += alpha * src[o, i, r] for every i with index[i] != skip (skip = -1
// keeps all); out [outer, n, inner], src [outer, numel(index), inner]. Duplicates accumulate.
TESSERA_DECLARE_KERNEL(index_add_kernel,
                       void(const Tensor& out, const Tensor& src, const Tensor& index,
                            int64_t outer, int64_t inner, const Scalar& alpha, int64_t skip));

// out [V, C] row v += the sum of the rows i of grad [numel(index), C] with index[i] == v, except
// v == skip (-1 keeps all): index_add for embedding gradients, where ids repeat many times.
// index contiguous with every value in [0, V); grad contiguous, of out's dtype.
TESSERA_DECLARE_KERNEL(embedding_backward_kernel, void(const Tensor& out, const Tensor& grad,
                                                       const Tensor& index, int64_t skip));

// order [R, n] int64: for each row of rows (contiguous [R, n], any dtype) the positions 0..n-1
// in ascending (or descending) order of its values; ties in index order, NaN above every
// number, -0.0 equal to 0.0 (the host order of ops/sort.cpp, which backends without it use).
TESSERA_DECLARE_KERNEL(sort_rows_kernel,
                       void(const Tensor& order, const Tensor& rows, bool descending));

// For every position p of index's shape: out[p] = x[p with p[dim] = index[p]]. x and index
// have any strides and the same ndim (>= 1); out is contiguous with index's shape.
TESSERA_DECLARE_KERNEL(gather_kernel,
                       void(const Tensor& out, const Tensor& x, const Tensor& index, int64_t dim));

enum class ScatterMode { Assign, Add };
// For every position p of index's shape: out[p with p[dim] = index[p]] = (or +=) src[p], in
// order along dim (the last duplicate wins for Assign). out, index and src have any strides and
// the same ndim (>= 1); src may be a stride-0 expanded scalar.
TESSERA_DECLARE_KERNEL(scatter_kernel, void(const Tensor& out, const Tensor& index,
                                            const Tensor& src, int64_t dim, ScatterMode mode));

// positions (int64, one per true element) = the row-major offsets of the true elements of a
// contiguous bool mask, in increasing order.
TESSERA_DECLARE_KERNEL(mask_positions_kernel, void(const Tensor& positions, const Tensor& mask));

// out = x with elements outside the triangle zeroed; keeps col - row <= k (lower) or
// col - row >= k (upper). x and out contiguous [B, R, C] (any leading dims).
TESSERA_DECLARE_KERNEL(triangle_kernel,
                       void(const Tensor& out, const Tensor& x, int64_t k, bool lower));

}  // namespace tessera
