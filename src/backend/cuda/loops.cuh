#pragma once
// CUDA elementwise loops over a TensorIterator, the counterpart of cpu/loops.h. gpu_kernel(iter,
// f) calls f on each element in a grid-stride loop: f is a TESSERA_HD lambda or functor whose
// parameter types are the input element types and whose return type is the output's. When every
// operand is contiguous each thread moves vectors of up to 16 bytes per operand; otherwise each
// thread turns its linear index into per-operand byte offsets from the iterator's (merged) shape
// and strides, in 32-bit arithmetic with multiply-shift division whenever the offsets fit.
#include <algorithm>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "backend/common/tensor_iterator.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/vectorized.cuh"

namespace tessera::cuda {

template <class F>
struct function_traits : function_traits<decltype(&F::operator())> {};
template <class C, class R, class... A>
struct function_traits<R (C::*)(A...) const> {
  using result_type = R;
  using args = std::tuple<A...>;
  static constexpr int arity = sizeof...(A);
};

inline constexpr int kMaxDims = 16;

// Shape and byte strides of up to kMaxDims dims for N operands, passed to kernels by value;
// Index is uint32_t (with IntDivider division) when every offset fits 31 bits, else int64_t.
template <int N, class Index>
struct OffsetCalculator {
  using Divider = std::conditional_t<std::is_same_v<Index, uint32_t>, IntDivider, int64_t>;
  int ndim = 0;
  Divider sizes[kMaxDims];
  Index strides[kMaxDims][N];

  explicit OffsetCalculator(const TensorIterator& it) {
    ndim = it.ndim();
    TESSERA_CHECK(ndim <= kMaxDims, NotImplementedError, "[", it.op(), "] expected at most ",
                  kMaxDims, " dims after merging on CUDA, got ", ndim);
    for (int d = 0; d < ndim; ++d) {
      sizes[d] = Divider(static_cast<Index>(it.shape()[d]));
      for (int k = 0; k < N; ++k) strides[d][k] = static_cast<Index>(it.byte_strides(k)[d]);
    }
  }
  __device__ void get(Index linear, Index* offsets) const {
    for (int k = 0; k < N; ++k) offsets[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      Index q, idx;
      if constexpr (std::is_same_v<Index, uint32_t>) {
        q = sizes[d].div(linear);
        idx = linear - q * sizes[d].divisor;
      } else {
        q = linear / sizes[d];
        idx = linear - q * sizes[d];
      }
      linear = q;
#pragma unroll
      for (int k = 0; k < N; ++k) offsets[k] += idx * strides[d][k];
    }
  }
};

// Whether every index and byte offset of the iteration fits 31 bits (then 32-bit arithmetic).
inline bool fits_32_bit(const TensorIterator& it) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (it.numel() >= kLimit) return false;
  for (int k = 0; k < it.ntensors(); ++k) {
    int64_t extent = it.tensor(k).element_size();
    for (int d = 0; d < it.ndim(); ++d) {
      if (it.byte_strides(k)[d] < 0) return false;
      extent += (it.shape()[d] - 1) * it.byte_strides(k)[d];
    }
    if (extent >= kLimit) return false;
  }
  return true;
}

template <int N>
struct Pointers {
  char* p[N];
};

namespace detail {

template <class F, size_t I>
using Arg = std::tuple_element_t<I, typename function_traits<F>::args>;
template <class F>
using Result = typename function_traits<F>::result_type;

template <class F, class Index, size_t... I>
__device__ void apply_at(const F& f, const Pointers<sizeof...(I) + 1>& ptrs, const Index* off,
                         std::index_sequence<I...>) {
  *reinterpret_cast<Result<F>*>(ptrs.p[0] + off[0]) =
      f(*reinterpret_cast<const Arg<F, I>*>(ptrs.p[I + 1] + off[I + 1])...);
}

// Elements [i, i + W) of contiguous operands: one vector load per input, one store.
template <int W, class F, size_t... I>
__device__ void apply_vector(const F& f, const Pointers<sizeof...(I) + 1>& ptrs, int64_t i,
                             std::index_sequence<I...>) {
  const std::tuple<Pack<Arg<F, I>, W>...> in{
      load<W>(reinterpret_cast<const Arg<F, I>*>(ptrs.p[I + 1]) + i)...};
  Pack<Result<F>, W> out;
#pragma unroll
  for (int j = 0; j < W; ++j) out.v[j] = f(std::get<I>(in).v[j]...);
  store<W>(reinterpret_cast<Result<F>*>(ptrs.p[0]) + i, out);
}

// Elements per vector: 16 bytes of the widest operand.
template <class F, size_t... I>
constexpr int vector_width(std::index_sequence<I...>) {
  return static_cast<int>(16 / std::max({sizeof(Result<F>), sizeof(Arg<F, I>)...}));
}

}  // namespace detail

// Contiguous operands: vectors of W elements per thread, then the n % W tail one by one.
template <int W, class F, int N>
__global__ void contiguous_elementwise(int64_t n, F f, Pointers<N> ptrs) {
  const int64_t n_vec = n / W, stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t k = first; k < n_vec; k += stride)
    detail::apply_vector<W>(f, ptrs, k * W, std::make_index_sequence<N - 1>{});
  for (int64_t i = n_vec * W + first; i < n; i += stride)
    detail::apply_vector<1>(f, ptrs, i, std::make_index_sequence<N - 1>{});
}

template <class F, int N, class Index>
__global__ void strided_elementwise(Index n, F f, Pointers<N> ptrs,
                                    OffsetCalculator<N, Index> calc) {
  Index off[N];
  for (Index i = blockIdx.x * Index{blockDim.x} + threadIdx.x; i < n;
       i += Index{gridDim.x} * blockDim.x) {
    calc.get(i, off);
    detail::apply_at(f, ptrs, off, std::make_index_sequence<N - 1>{});
  }
}

// Applies f elementwise on the current stream: output 0 = f(input 0, input 1, ...).
template <class F>
void gpu_kernel(const TensorIterator& it, const F& f) {
  using traits = function_traits<F>;
  constexpr int N = traits::arity + 1;
  using Seq = std::make_index_sequence<N - 1>;
  TESSERA_ASSERT(it.ntensors() == N);
  const int64_t n = it.numel();
  if (n == 0) return;
  Pointers<N> ptrs;
  for (int k = 0; k < N; ++k) ptrs.p[k] = it.data(k);
  bool contiguous = it.ndim() == 1 && it.byte_strides(0)[0] == sizeof(detail::Result<F>);
  [&]<size_t... I>(std::index_sequence<I...>) {
    contiguous = contiguous && ((it.byte_strides(I + 1)[0] == sizeof(detail::Arg<F, I>)) && ...);
  }(Seq{});
  if (contiguous) {
    constexpr int W = detail::vector_width<F>(Seq{});
    bool vectorizable = true;
    for (int k = 0; k < N; ++k)
      vectorizable = vectorizable && reinterpret_cast<uintptr_t>(ptrs.p[k]) %
                                             (W * it.tensor(k).element_size()) == 0;
    if (vectorizable)
      contiguous_elementwise<W><<<grid_size((n + W - 1) / W), kBlockSize, 0, current_stream()>>>(
          n, f, ptrs);
    else
      contiguous_elementwise<1><<<grid_size(n), kBlockSize, 0, current_stream()>>>(n, f, ptrs);
  } else if (fits_32_bit(it)) {
    strided_elementwise<<<grid_size(n), kBlockSize, 0, current_stream()>>>(
        static_cast<uint32_t>(n), f, ptrs, OffsetCalculator<N, uint32_t>(it));
  } else {
    strided_elementwise<<<grid_size(n), kBlockSize, 0, current_stream()>>>(
        n, f, ptrs, OffsetCalculator<N, int64_t>(it));
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
