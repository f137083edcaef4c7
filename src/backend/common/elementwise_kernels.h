#pragma once
// Kernel keys for the elementwise family. Every backend registers one kernel per functor in
// elementwise_functors.h (see cpu/elementwise.cpp); the iterator's first input dtype selects the
// instantiation.
#include <type_traits>

#include "backend/common/elementwise_functors.h"
#include "backend/common/tensor_iterator.h"
#include "tessera/core/dispatcher.h"

namespace tessera {

// out = Fn(in...) over an iterator with one output and Fn's arity inputs.
template <class Fn>
struct ElementwiseKernel {
  using Signature = void(const TensorIterator&);
  static constexpr std::string_view name = Fn::name;
  // out[i] = Fn(in[0][i], ...) over n contiguous elements of one dtype: a recorded graph's
  // fused chains call it tile by tile (the same float ops as the kernel, in the same order).
  static void tile(DType dtype, char* out, const char* const* in, int64_t n) {
    dispatch<Fn::dtypes>(dtype, Fn::name, [&]<class T>() {
      T* o = reinterpret_cast<T*>(out);
      auto at = [&](int k) { return reinterpret_cast<const T*>(in[k]); };
      if constexpr (std::is_invocable_v<Fn, T>) {
        const T* a = at(0);
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(Fn{}(a[i]));
      } else if constexpr (std::is_invocable_v<Fn, T, T>) {
        const T *a = at(0), *b = at(1);
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(Fn{}(a[i], b[i]));
      } else {
        const T *a = at(0), *b = at(1), *c = at(2);
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(Fn{}(a[i], b[i], c[i]));
      }
    });
  }
};

// out = in converted to out's dtype (any pair of dtypes).
TESSERA_DECLARE_KERNEL(copy_kernel, void(const TensorIterator&));
// Every element of t = value.
struct fill_kernel {
  using Signature = void(const Tensor&, const Scalar&);
  static constexpr std::string_view name = "fill_kernel";
  static constexpr size_t kOutputs = 1;  // writes its tensor, reads none (graph capture)
};
// Copies nbytes of contiguous data between two devices, at least one of them not the CPU (that
// backend registers it under its device type). Returns once src may be reused and, when dst is
// on the CPU, once dst holds the data, as torch's non_blocking=False: a pageable host source is
// staged by the driver, a pinned one (host_pinned) is waited for. With async (the host end is
// pinned memory that outlives the copy) it returns once the copy is queued on the current stream.
TESSERA_DECLARE_KERNEL(device_copy_kernel,
                       void(void* dst, Device dst_device, const void* src, Device src_device,
                            size_t nbytes, bool host_pinned, bool async));

}  // namespace tessera
