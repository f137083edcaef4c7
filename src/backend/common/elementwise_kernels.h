#pragma once
// Kernel keys for the elementwise family. Every backend registers one kernel per functor in
// elementwise_functors.h (see cpu/elementwise.cpp); the iterator's first input dtype selects the
// instantiation.
#include "backend/common/elementwise_functors.h"
#include "backend/common/tensor_iterator.h"
#include "tessera/core/dispatcher.h"

namespace tessera {

// out = Fn(in...) over an iterator with one output and Fn's arity inputs.
template <class Fn>
struct ElementwiseKernel {
  using Signature = void(const TensorIterator&);
  static constexpr std::string_view name = Fn::name;
};

// out = in converted to out's dtype (any pair of dtypes).
TESSERA_DECLARE_KERNEL(copy_kernel, void(const TensorIterator&));
// Every element of t = value.
TESSERA_DECLARE_KERNEL(fill_kernel, void(const Tensor&, const Scalar&));
// Copies nbytes of contiguous data between two devices, at least one of them not the CPU (that
// backend registers it under its device type). Returns once src may be reused; when dst is on
// the CPU, once dst holds the data.
TESSERA_DECLARE_KERNEL(device_copy_kernel, void(void* dst, Device dst_device, const void* src,
                                                Device src_device, size_t nbytes));

}  // namespace tessera
