#pragma once
// CUDA elementwise loops over a TensorIterator, the counterpart of cpu/loops.h. gpu_kernel(iter,
// f) calls f on each element in a grid-stride loop: f is a TESSERA_HD lambda or functor whose
// parameter types are the input element types and whose return type is the output's. When every
// operand is contiguous the offsets are plain indices; otherwise each thread turns its linear
// index into per-operand byte offsets from the iterator's (merged) shape and strides.
#include <cstdint>
#include <tuple>
#include <utility>

#include "backend/common/tensor_iterator.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {

template <class F>
struct function_traits : function_traits<decltype(&F::operator())> {};
template <class C, class R, class... A>
struct function_traits<R (C::*)(A...) const> {
  using result_type = R;
  using args = std::tuple<A...>;
  static constexpr int arity = sizeof...(A);
};

// Shape and byte strides of up to kMaxDims dims for N operands, passed to kernels by value.
template <int N>
struct OffsetCalculator {
  static constexpr int kMaxDims = 16;
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims][N];

  explicit OffsetCalculator(const TensorIterator& it) {
    ndim = it.ndim();
    TESSERA_CHECK(ndim <= kMaxDims, NotImplementedError, "[", it.op(), "] expected at most ",
                  kMaxDims, " dims after merging on CUDA, got ", ndim);
    for (int d = 0; d < ndim; ++d) {
      sizes[d] = it.shape()[d];
      for (int k = 0; k < N; ++k) strides[d][k] = it.byte_strides(k)[d];
    }
  }
  __device__ void get(int64_t linear, int64_t* offsets) const {
    for (int k = 0; k < N; ++k) offsets[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t idx = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) offsets[k] += idx * strides[d][k];
    }
  }
};

template <int N>
struct Pointers {
  char* p[N];
};

namespace detail {
template <class F, size_t... I>
__device__ void apply_at(const F& f, const Pointers<sizeof...(I) + 1>& ptrs, const int64_t* off,
                         std::index_sequence<I...>) {
  using traits = function_traits<F>;
  using R = typename traits::result_type;
  *reinterpret_cast<R*>(ptrs.p[0] + off[0]) =
      f(*reinterpret_cast<const std::tuple_element_t<I, typename traits::args>*>(ptrs.p[I + 1] +
                                                                                 off[I + 1])...);
}

template <class F, size_t... I>
__device__ void apply_contiguous(const F& f, const Pointers<sizeof...(I) + 1>& ptrs, int64_t i,
                                 std::index_sequence<I...>) {
  using traits = function_traits<F>;
  using R = typename traits::result_type;
  reinterpret_cast<R*>(ptrs.p[0])[i] =
      f(reinterpret_cast<const std::tuple_element_t<I, typename traits::args>*>(ptrs.p[I + 1])[i]...);
}
}  // namespace detail

template <class F, int N>
__global__ void contiguous_elementwise(int64_t n, F f, Pointers<N> ptrs) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    detail::apply_contiguous(f, ptrs, i, std::make_index_sequence<N - 1>{});
}

template <class F, int N>
__global__ void strided_elementwise(int64_t n, F f, Pointers<N> ptrs, OffsetCalculator<N> calc) {
  int64_t off[N];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    calc.get(i, off);
    detail::apply_at(f, ptrs, off, std::make_index_sequence<N - 1>{});
  }
}

// Applies f elementwise on the current stream: output 0 = f(input 0, input 1, ...).
template <class F>
void gpu_kernel(const TensorIterator& it, const F& f) {
  using traits = function_traits<F>;
  constexpr int N = traits::arity + 1;
  TESSERA_ASSERT(it.ntensors() == N);
  const int64_t n = it.numel();
  if (n == 0) return;
  Pointers<N> ptrs;
  for (int k = 0; k < N; ++k) ptrs.p[k] = it.data(k);
  bool contiguous = it.ndim() == 1;
  if (contiguous) {
    contiguous = it.byte_strides(0)[0] == sizeof(typename traits::result_type);
    [&]<size_t... I>(std::index_sequence<I...>) {
      contiguous = contiguous &&
                   ((it.byte_strides(I + 1)[0] ==
                     sizeof(std::tuple_element_t<I, typename traits::args>)) && ...);
    }(std::make_index_sequence<N - 1>{});
  }
  if (contiguous) {
    contiguous_elementwise<<<grid_size(n), kBlockSize, 0, current_stream()>>>(n, f, ptrs);
  } else {
    strided_elementwise<<<grid_size(n), kBlockSize, 0, current_stream()>>>(
        n, f, ptrs, OffsetCalculator<N>(it));
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
