#pragma once
// CUDA elementwise loops over a TensorIterator, the counterpart of cpu/loops.h. gpu_kernel(iter,
// f) calls f on each element in a grid-stride loop: f is a TESSERA_HD lambda or functor whose
// parameter types are the input element types and whose return type is the output's. When every
// operand is contiguous each thread moves vectors of up to 16 bytes per operand; otherwise each
// thread turns its linear index into per-operand byte offsets from the iterator's (merged) shape
// and strides, in 32-bit arithmetic with multiply-shift division whenever the offsets fit. When
// the innermost dim is contiguous in every operand (a transpose of [B, H, T, D] heads, a slice of
// the last dim), those indices count vectors of that dim instead of elements.
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

  // vector > 1: the innermost dim walked in vectors of that many elements (its size divides).
  explicit OffsetCalculator(const TensorIterator& it, int vector = 1) {
    ndim = it.ndim();
    TESSERA_CHECK(ndim <= kMaxDims, NotImplementedError, "[", it.op(), "] expected at most ",
                  kMaxDims, " dims after merging on CUDA, got ", ndim);
    for (int d = 0; d < ndim; ++d) {
      const int scale = d == ndim - 1 ? vector : 1;
      sizes[d] = Divider(static_cast<Index>(it.shape()[d] / scale));
      for (int k = 0; k < N; ++k)
        strides[d][k] = static_cast<Index>(it.byte_strides(k)[d] * scale);
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

// W elements at byte offsets off of each operand, contiguous within each.
template <int W, class F, class Index, int N>
__device__ void apply_vector_at(const F& f, const Pointers<N>& ptrs, const Index* off) {
  Pointers<N> at;
#pragma unroll
  for (int k = 0; k < N; ++k) at.p[k] = ptrs.p[k] + off[k];
  apply_vector<W>(f, at, 0, std::make_index_sequence<N - 1>{});
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

// Strided operands, n vectors of W elements each (W > 1 only where the innermost dim is
// contiguous in every operand, see inner_vectorizable).
template <int W, class F, int N, class Index>
__global__ void strided_elementwise(Index n, F f, Pointers<N> ptrs,
                                    OffsetCalculator<N, Index> calc) {
  Index off[N];
  for (Index i = blockIdx.x * Index{blockDim.x} + threadIdx.x; i < n;
       i += Index{gridDim.x} * blockDim.x) {
    calc.get(i, off);
    detail::apply_vector_at<W>(f, ptrs, off);
  }
}

// Whether the iteration's innermost dim is contiguous in every operand, its size a multiple of
// W, and every pointer and outer stride aligned to W elements: then it can move in W-vectors.
template <int W>
bool inner_vectorizable(const TensorIterator& it) {
  const int inner = it.ndim() - 1;
  if (W == 1 || inner < 0 || it.shape()[inner] % W != 0) return false;
  for (int k = 0; k < it.ntensors(); ++k) {
    const int64_t es = it.tensor(k).element_size(), bytes = W * es;
    if (it.byte_strides(k)[inner] != es || reinterpret_cast<uintptr_t>(it.data(k)) % bytes != 0)
      return false;
    for (int d = 0; d < inner; ++d)
      if (it.byte_strides(k)[d] % bytes != 0) return false;
  }
  return true;
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
  constexpr int kVector = detail::vector_width<F>(Seq{});
  if (contiguous) {
    constexpr int W = kVector;
    bool vectorizable = true;
    for (int k = 0; k < N; ++k)
      vectorizable = vectorizable && reinterpret_cast<uintptr_t>(ptrs.p[k]) %
                                             (W * it.tensor(k).element_size()) == 0;
    if (vectorizable)
      contiguous_elementwise<W><<<grid_size((n + W - 1) / W), kBlockSize, 0, current_stream()>>>(
          n, f, ptrs);
    else
      contiguous_elementwise<1><<<grid_size(n), kBlockSize, 0, current_stream()>>>(n, f, ptrs);
  } else if (inner_vectorizable<kVector>(it) && fits_32_bit(it)) {
    strided_elementwise<kVector><<<grid_size(n / kVector), kBlockSize, 0, current_stream()>>>(
        static_cast<uint32_t>(n / kVector), f, ptrs, OffsetCalculator<N, uint32_t>(it, kVector));
  } else if (fits_32_bit(it)) {
    strided_elementwise<1><<<grid_size(n), kBlockSize, 0, current_stream()>>>(
        static_cast<uint32_t>(n), f, ptrs, OffsetCalculator<N, uint32_t>(it));
  } else {
    strided_elementwise<1><<<grid_size(n), kBlockSize, 0, current_stream()>>>(
        n, f, ptrs, OffsetCalculator<N, int64_t>(it));
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
